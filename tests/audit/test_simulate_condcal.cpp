// Injection bisection, the simulator's construction (consistent labels, RE monotone in z, exact null
// at δ = 0), AR-CondCal's sanity check on a strong injected effect, and the audit's results.json.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "audit/audit.hpp"
#include "results/audit_files.hpp"
#include "audit/condcal.hpp"
#include "audit/injection.hpp"
#include "audit/simulate.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"

using namespace arcal;

TEST(Injection, BisectionHitsRequestedGain) {
  std::vector<double> q, t;
  for (int i = 0; i < 500; ++i) {
    q.push_back(0.3 + 0.69 * (i % 37) / 37.0);
    t.push_back(std::tanh((i % 23 - 11) / 5.0));
  }
  for (double nats : {0.002, 0.005, 0.01, 0.02}) {
    const double d = solve_injection_delta(q, t, nats);
    EXPECT_GT(d, 0.0);
    EXPECT_NEAR(injection_gain(q, t, d), nats, 1e-9 * nats) << nats;
  }
  EXPECT_EQ(solve_injection_delta(q, t, 0.0), 0.0);
  EXPECT_EQ(injected_probability(q, t, 0.0)[5], q[5]);
  // Small-δ check against the quadratic expansion KL ≈ δ² E[t² q(1-q)] / 2.
  double m = 0;
  for (std::size_t i = 0; i < q.size(); ++i) m += t[i] * t[i] * q[i] * (1 - q[i]) / q.size();
  EXPECT_NEAR(injection_gain(q, t, 1e-3), 0.5e-6 * m, 1e-3 * 0.5e-6 * m);
  EXPECT_THROW(solve_injection_delta(q, std::vector<double>(q.size(), 0.0), 0.01), InputError);
  EXPECT_THROW(solve_injection_delta(q, t, -1.0), InputError);
  EXPECT_DOUBLE_EQ(bernoulli_kl(0.5, 0.5), 0.0);
  EXPECT_NEAR(bernoulli_kl(1.0, 0.5), std::log(2.0), 1e-15);
}

TEST(Simulate, ConstructionIsConsistent) {
  SimulationOptions o;
  o.n = 3000;
  o.classes = 7;
  o.effect_nats = 0.01;
  o.seed = 5;
  const auto s = simulate_trace(o);
  const auto& tr = s.trace;
  ASSERT_EQ(tr.logits.size(), o.n * o.classes);
  ASSERT_EQ(tr.routing.size(), o.n * tr.points * tr.sources);
  EXPECT_NEAR(injection_gain(
                  s.reference,
                  [&] {
                    std::vector<double> t;
                    for (double z : s.z) t.push_back(std::tanh(z));
                    return t;
                  }(),
                  s.delta),
              0.01, 1e-9);
  for (std::size_t i = 0; i < o.n; ++i) {
    const double* z = &tr.logits[i * o.classes];
    const std::size_t arg = std::max_element(z, z + o.classes) - z;
    EXPECT_EQ(s.correct[i] == 1.0, tr.labels[i] == static_cast<std::int64_t>(arg)) << i;
    for (std::size_t p = 0; p < tr.points; ++p) {
      double sum = 0;
      for (std::size_t k = 0; k < tr.sources; ++k) sum += tr.routing[(i * tr.points + p) * tr.sources + k];
      EXPECT_NEAR(sum, 1.0, 1e-5);
      EXPECT_EQ(tr.routing[(i * tr.points + p) * tr.sources + tr.sources - 1] == 0.0f, p + 2 < tr.sources);
    }
  }
  // RE is a strictly increasing function of z.
  std::vector<std::size_t> idx(o.n);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return s.z[a] < s.z[b]; });
  for (std::size_t k = 1; k < o.n; ++k) EXPECT_LE(s.routing_entropy[idx[k - 1]], s.routing_entropy[idx[k]]);
  // Seeded.
  EXPECT_EQ(simulate_trace(o).trace.labels, tr.labels);
  // Null: p* is q exactly.
  o.effect_nats = 0.0;
  const auto n0 = simulate_trace(o);
  EXPECT_EQ(n0.delta, 0.0);
  EXPECT_EQ(n0.truth, n0.reference);
  EXPECT_THROW(simulate_trace(SimulationOptions{1, 10}), InputError);
}

// Must-show (c): with a strong injected effect the 2-D probe beats the confidence-only control on
// binary NLL (and the within-bin shuffled control), under both bandwidth rules.
TEST(CondCal, StrongEffectProbeBeatsConfidenceOnly) {
  SimulationOptions o;
  o.n = 4000;
  o.effect_nats = 0.03;
  o.seed = 21;
  const auto s = simulate_trace(o);
  CondCalOptions c;
  c.seed = 3;
  const auto r = ar_condcal(s.confidence, s.correct, s.routing_entropy, s.predictive_entropy, s.trace.labels, c);
  ASSERT_EQ(r.arms.size(), 4u);
  const auto& probe = r.arms[0];
  const auto& conf = r.arms[1];
  const auto& shuf = r.arms[3];
  EXPECT_EQ(probe.name, "probe");
  EXPECT_EQ(conf.dims, 1u);
  EXPECT_LT(probe.cv_nll.nll, conf.cv_nll.nll - 0.01);
  EXPECT_LT(probe.cv_nll.nll, shuf.cv_nll.nll - 0.01);
  EXPECT_LT(probe.oracle_ece.nll, conf.oracle_ece.nll);
  for (double m : probe.multiple_cv) EXPECT_TRUE(m == 0.25 || m == 0.5 || m == 1 || m == 2 || m == 4);
  // Null data: the probe's NLL gain over the confidence-only control is tiny.
  o.effect_nats = 0.0;
  const auto z = simulate_trace(o);
  const auto r0 = ar_condcal(z.confidence, z.correct, z.routing_entropy, z.predictive_entropy, z.trace.labels, c);
  EXPECT_GT(r0.arms[0].cv_nll.nll, r0.arms[1].cv_nll.nll - 0.005);
}

TEST(CondCal, BinaryEceAndBand) {
  // Two bins: {0.1, 0.1} with accuracy 0 and {0.9, 0.9} with accuracy 1: ECE = 0.1.
  EXPECT_NEAR(binary_ece({0.1, 0.1, 0.9, 0.9}, {0, 0, 1, 1}, 15), 0.1, 1e-15);
  CondCalResult a, b;
  a.arms.push_back({"confidence_only", 1, {0.1, 0.2, 0.3, 0.4}, {}, {}, {}, {}});
  b.arms.push_back({"confidence_only", 1, {0.3, 0.2, 0.5, 0.4}, {}, {}, {}, {}});
  const auto band = seed_variance_band({a, b});
  EXPECT_NEAR(band.ece.mean, 0.2, 1e-15);
  EXPECT_NEAR(band.ece.sd, std::sqrt(0.02), 1e-15);
  EXPECT_EQ(band.nll.runs, 2u);
  EXPECT_THROW(seed_variance_band({}), InputError);
  EXPECT_THROW(seed_variance_band({a}, false, "probe"), InputError);
}

namespace {
AuditRunInput run_input(const SimulatedTrace& s, const std::string& name, const std::string& cell) {
  AuditRunInput in;
  in.run = name;
  in.cell = cell;
  in.classes = s.trace.classes;
  in.confidence = s.confidence;
  in.correct = s.correct;
  in.predictive_entropy = s.predictive_entropy;
  in.labels = s.trace.labels;
  in.statistic_names = {"re", "routing_z"};
  in.statistics = {s.routing_entropy, s.z};
  return in;
}
std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("arcal_audit_test_" + name);
  std::filesystem::remove_all(d);
  return d.string();
}
}  // namespace

TEST(Audit, WritesResultsJsonAndCsv) {
  std::vector<AuditRunInput> runs;
  for (int k = 0; k < 3; ++k) {
    SimulationOptions o;
    o.n = 1500;
    o.seed = 40 + k;
    runs.push_back(run_input(simulate_trace(o), "sim" + std::to_string(k), "synthetic"));
  }
  AuditOptions opt;
  opt.diagnostic.permutations = 99;
  const auto res = run_audit(runs, opt);
  const auto dir = temp_dir("ok");
  write_audit_results(res, dir);
  const auto j = nlohmann::json::parse(read_file(dir + "/results.json"));
  EXPECT_EQ(j["schema"], "arcal.audit/3");
  EXPECT_EQ(j["diagnostic"]["family_size"], 6);
  ASSERT_EQ(j["diagnostic"]["tests"].size(), 6u);
  for (const char* key : {"run", "statistic", "gap", "p", "p_holm", "p_bh", "n"})
    EXPECT_TRUE(j["diagnostic"]["tests"][0].contains(key)) << key;
  EXPECT_EQ(j["condcal"]["runs"].size(), 6u);
  EXPECT_TRUE(j["condcal"]["runs"][0]["rules"]["cv_nll"]["probe"].contains("worst_tertile_ece"));
  EXPECT_EQ(j["condcal"]["seed_band"][0]["cv_nll"]["nll"]["runs"], 3);
  EXPECT_TRUE(std::filesystem::exists(dir + "/diagnostic.csv"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/condcal.csv"));
  std::filesystem::remove_all(dir);
}

TEST(Audit, InvalidInputsThrowBeforeWriting) {
  SimulationOptions o;
  o.n = 600;
  const auto s = simulate_trace(o);
  AuditOptions opt;
  opt.diagnostic.permutations = 9;
  auto check = [&](std::vector<AuditRunInput> runs, const std::string& needle) {
    const auto dir = temp_dir("bad");
    try {
      write_audit_results(run_audit(runs, opt), dir);
      ADD_FAILURE() << "no InputError for " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(dir + "/results.json"));
  };
  auto few = run_input(s, "few", "c");
  few.confidence.resize(10);
  few.correct.resize(10);
  few.predictive_entropy.resize(10);
  few.labels.resize(10);
  for (auto& v : few.statistics) v.resize(10);
  check({few}, "fewer than the 15");
  auto flat = run_input(s, "flat", "c");
  flat.statistics[1].assign(o.n, 0.25);
  check({flat}, "'routing_z' is constant");
  auto empty = run_input(s, "empty", "c");
  empty.statistic_names.clear();
  empty.statistics.clear();
  check({empty}, "family would be empty");
  auto other = run_input(s, "other", "c");
  other.classes = 5;
  check({run_input(s, "a", "c"), other}, "same class count");
  check({}, "no runs");
}
