// Large vocabularies (issue 53, item 3): the top-k output form of a trace and what reads it. Every
// check compares the top-k path with the whole-vector path on the same logits (a second implementation
// of each number): the trace round trip and its refusals, every metric but classwise ECE, the audit's
// reduced output form (a K > 256 trace and its top-k form give the audit the same inputs), and the
// expert view against calibration_report on each expert's tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "audit/audit_pipeline.hpp"
#include "audit/experts.hpp"
#include "audit/probes.hpp"
#include "audit/verdict.hpp"
#include "audit/run_input.hpp"
#include "calib/metrics.hpp"
#include "calib/trace_metrics.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/trace.hpp"
#include "test_util.hpp"

using namespace arcal;

namespace {

/// A token trace of n tokens over K classes with unordered routing (E experts, top-2 selected) and
/// documents of 20 tokens; the full form (logits) and its top-k form from the same logits.
struct Pair {
  Trace full, topk;
};

Pair make_pair(std::size_t n, std::size_t K, std::size_t k, std::uint64_t seed = 1) {
  Rng rng(seed);
  Pair p;
  Trace& t = p.full;
  t.n = n;
  t.classes = K;
  t.logits.resize(n * K);
  t.labels.resize(n);
  t.cluster.resize(n);
  const std::size_t P = 2, E = 6;
  t.points = P;
  t.sources = E;
  t.routing_kind = "unordered";
  t.routing_sources.assign(P, int(E));
  t.routing.assign(n * P * E, 0.0f);
  t.routing_selected.assign(n * P * E, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    double* z = &t.logits[i * K];
    for (std::size_t c = 0; c < K; ++c) z[c] = 2.0 * rng.normal() + (c < 20 ? 2.5 : 0.0);
    // a label drawn from the model's own softmax, so accuracy and confidence are comparable
    const double m = *std::max_element(z, z + K);
    std::vector<double> w(K);
    double s = 0;
    for (std::size_t c = 0; c < K; ++c) s += (w[c] = std::exp(z[c] - m));
    double u = rng.uniform() * s;
    std::size_t y = 0;
    while (y + 1 < K && (u -= w[y]) > 0) ++y;
    t.labels[i] = std::int64_t(y);
    t.cluster[i] = std::int64_t(i / 20);
    for (std::size_t q = 0; q < P; ++q) {
      float* r = &t.routing[(i * P + q) * E];
      double rs = 0;
      for (std::size_t e = 0; e < E; ++e) rs += (r[e] = float(std::exp(rng.normal())));
      for (std::size_t e = 0; e < E; ++e) r[e] = float(r[e] / rs);
      std::vector<std::size_t> order(E);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::sort(order.begin(), order.end(), [&](auto a, auto b) { return r[a] > r[b]; });
      for (int j = 0; j < 2; ++j)
        t.routing_selected[(i * P + q) * E + order[std::size_t(j)]] = r[order[std::size_t(j)]];
    }
  }
  t.meta_json = R"({"routing_points": ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]})";
  Trace& u = p.topk;
  u = t;
  u.logits.clear();
  u.topk = k;
  u.topk_logprobs.resize(n * k);
  u.topk_indices.resize(n * k);
  u.label_logprob.resize(n);
  u.log_normalizer.resize(n);
  u.predictive_entropy.resize(n);
  u.prob_sq_sum.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double* z = &t.logits[i * K];
    const double m = *std::max_element(z, z + K);
    double s = 0;
    for (std::size_t c = 0; c < K; ++c) s += std::exp(z[c] - m);
    const double lse = m + std::log(s);
    std::vector<std::size_t> order(K);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return z[a] > z[b]; });
    double h = 0, q = 0;
    for (std::size_t c = 0; c < K; ++c) {
      const double lp = z[c] - lse;
      h -= std::exp(lp) * lp;
      q += std::exp(2 * lp);
    }
    for (std::size_t j = 0; j < k; ++j) {
      u.topk_logprobs[i * k + j] = float(z[order[j]] - lse);
      u.topk_indices[i * k + j] = std::int32_t(order[j]);
    }
    u.label_logprob[i] = float(z[t.labels[i]] - lse);
    u.log_normalizer[i] = float(lse);
    u.predictive_entropy[i] = float(h);
    u.prob_sq_sum[i] = float(q);
  }
  return p;
}

std::string error_of(const Trace& t) {
  try {
    validate_trace(t);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LargeVocabulary, TopkTraceRoundTripsAndRefusesInconsistentArrays) {
  const auto p = make_pair(200, 300, 16);
  const std::string dir = arcal::testing::fresh_dir("large_vocab_roundtrip");
  save_trace(p.topk, dir + "/t.npz");
  const Trace back = load_trace(dir + "/t.npz");
  EXPECT_EQ(back.topk, 16u);
  EXPECT_EQ(back.classes, 300u);
  EXPECT_EQ(back.topk_logprobs, p.topk.topk_logprobs);
  EXPECT_EQ(back.topk_indices, p.topk.topk_indices);
  EXPECT_EQ(back.prob_sq_sum, p.topk.prob_sq_sum);
  EXPECT_EQ(back.routing_selected, p.topk.routing_selected);
  EXPECT_EQ(error_of(p.topk), "");

  auto broken = [&](auto edit) {
    Trace t = p.topk;
    t.path = "t.npz";
    edit(t);
    return error_of(t);
  };
  EXPECT_NE(broken([](Trace& t) { std::swap(t.topk_logprobs[0], t.topk_logprobs[3]); }).find("descending"),
            std::string::npos);
  EXPECT_NE(broken([](Trace& t) { t.topk_indices[1] = t.topk_indices[0]; }).find("twice"), std::string::npos);
  EXPECT_NE(broken([](Trace& t) { t.topk_indices[2] = 300; }).find("topk_indices[0, 2]"), std::string::npos);
  EXPECT_NE(broken([](Trace& t) { t.label_logprob[5] = 0.0f; }).find("label_logprob[5]"), std::string::npos);
  EXPECT_NE(broken([](Trace& t) { t.prob_sq_sum[7] = 1e-9f; }).find("prob_sq_sum[7]"), std::string::npos);
  EXPECT_NE(broken([](Trace& t) { t.predictive_entropy[3] = 7.0f; }).find("predictive_entropy[3]"), std::string::npos);
  EXPECT_NE(broken([](Trace& t) { t.log_normalizer.pop_back(); }).find("log_normalizer"), std::string::npos);
  EXPECT_NE(broken([](Trace& t) { t.logits.assign(t.n * t.classes, 0.0); }).find("exactly one of"), std::string::npos);
  EXPECT_NE(broken([](Trace& t) { t.topk = 301; }).find("k = 301"), std::string::npos);
  // What needs every class names itself, the file and the form.
  try {
    (void)trace_probabilities(p.topk, "calibrate");
    FAIL() << "top-k probabilities";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("calibrate needs every class's probability"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("top 16 of 300"), std::string::npos) << e.what();
  }
}

TEST(LargeVocabulary, MetricsFromTheTopkFormEqualTheWholeVector) {
  const auto p = make_pair(600, 400, 8);
  ReportOptions o;
  o.draws = 200;
  o.consistency_draws = 200;
  o.cluster = p.full.cluster;
  const auto a = trace_calibration_report(p.full, o);
  const auto b = trace_calibration_report(p.topk, o);
  auto same = [](const Estimate& x, const Estimate& y, const char* name) {
    EXPECT_NEAR(x.value, y.value, 1e-6) << name;
    if (std::isfinite(x.ci.low)) {
      EXPECT_NEAR(x.ci.low, y.ci.low, 1e-5) << name;
      EXPECT_NEAR(x.ci.high, y.ci.high, 1e-5) << name;
    }
  };
  same(a.accuracy, b.accuracy, "accuracy");
  same(a.ece, b.ece, "ece");
  same(a.mce, b.mce, "mce");
  same(a.rmsce, b.rmsce, "rmsce");
  same(a.ada_ece, b.ada_ece, "ada_ece");
  same(a.debiased_ece, b.debiased_ece, "debiased_ece");
  same(a.smece, b.smece, "smece");
  same(a.nll, b.nll, "nll");
  same(a.brier, b.brier, "brier");
  same(a.auroc, b.auroc, "auroc");
  EXPECT_TRUE(std::isfinite(a.classwise_ece.value));
  EXPECT_TRUE(std::isnan(b.classwise_ece.value));  // needs every class
  EXPECT_EQ(a.clusters, b.clusters);
}

TEST(LargeVocabulary, AuditReadsAWholeLargeVectorAndItsTopkFormAlike) {
  const auto p = make_pair(500, 300, 40);
  const auto a = make_audit_run_input(p.full, "full", {"re"});
  const auto b = make_audit_run_input(p.topk, "topk", {"re"});
  ASSERT_TRUE(a.log_probs.empty());
  ASSERT_TRUE(b.log_probs.empty());
  EXPECT_EQ(a.classes, kAuditClassGroups);
  EXPECT_EQ(a.vocabulary, 300u);
  EXPECT_EQ(a.sorted_width, kAuditTopLogProbs + 1);
  EXPECT_EQ(b.sorted_width, kAuditTopLogProbs + 1);
  EXPECT_EQ(a.predicted, b.predicted);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.group_classes, b.group_classes);
  EXPECT_EQ(a.group_classes.back(), -1);
  for (std::size_t j = 0; j < a.sorted_log_probs.size(); ++j)
    EXPECT_NEAR(a.sorted_log_probs[j], b.sorted_log_probs[j], 1e-4);
  for (std::size_t i = 0; i < a.confidence.size(); ++i) {
    EXPECT_NEAR(a.confidence[i], b.confidence[i], 1e-6);
    EXPECT_NEAR(a.predictive_entropy[i], b.predictive_entropy[i], 1e-4);
    // the last column is the log of every other class's mass
    double head = 0;
    for (std::size_t j = 0; j < kAuditTopLogProbs; ++j) head += std::exp(a.sorted_log_probs[i * a.sorted_width + j]);
    EXPECT_NEAR(std::exp(a.sorted_log_probs[i * a.sorted_width + kAuditTopLogProbs]), 1.0 - head, 1e-9);
  }
  // Group 0 is the most-predicted class; group g's class is group_classes[g].
  std::vector<std::size_t> count(300, 0);
  for (std::size_t i = 0; i < p.full.n; ++i) {
    const double* z = &p.full.logits[i * 300];
    ++count[std::size_t(std::max_element(z, z + 300) - z)];
  }
  EXPECT_EQ(count[std::size_t(a.group_classes[0])], *std::max_element(count.begin(), count.end()));
  EXPECT_NE(a.outputs.find("reduced"), std::string::npos);
  // At or below kAuditFullOutputClasses the whole vector is read as before.
  const auto small = make_pair(300, kAuditFullOutputClasses, 8);
  const auto c = make_audit_run_input(small.full, "small", {"re"});
  EXPECT_EQ(c.log_probs.size(), 300 * kAuditFullOutputClasses);
  EXPECT_EQ(c.classes, kAuditFullOutputClasses);
}

TEST(LargeVocabulary, ExpertViewEqualsTheMetricsOfEachExpertsTokens) {
  const auto p = make_pair(400, 300, 16);
  const ExpertView v = expert_view(p.topk, 15, 100, 3);
  ASSERT_EQ(v.layers.size(), 2u);
  EXPECT_EQ(v.handled, "selected");
  EXPECT_EQ(v.clusters, 20u);
  EXPECT_EQ(v.layers[1].name, "model.layers.1.mlp.gate");
  const TraceTopLabel top = trace_top_label(p.full);
  for (std::size_t q = 0; q < 2; ++q) {
    const auto& L = v.layers[q];
    EXPECT_NEAR(L.experts_per_token, 2.0, 1e-12);
    double load = 0, mass = 0, ent = 0;
    for (const auto& r : L.rows) {
      load += r.load;
      mass += r.router_mean;
    }
    EXPECT_NEAR(load, 2.0, 1e-12);
    EXPECT_NEAR(mass, 1.0, 1e-5);
    for (std::size_t i = 0; i < p.topk.n; ++i) {
      double h = 0;
      for (std::size_t e = 0; e < 6; ++e) {
        const double r = p.topk.routing[(i * 2 + q) * 6 + e];
        h -= r * std::log(r);
      }
      ent += h / std::log(6.0) / double(p.topk.n);
    }
    EXPECT_NEAR(L.router_entropy, ent, 1e-6);
    EXPECT_LE(L.router_entropy_ci.low, L.router_entropy_ci.high);
    for (std::size_t e = 0; e < 6; ++e) {
      // the tokens this expert handled, through calibration_report (a second implementation of the ECE)
      TopLabelRows rows;
      for (std::size_t i = 0; i < p.topk.n; ++i)
        if (p.topk.routing_selected[(i * 2 + q) * 6 + e] > 0) {
          rows.confidence.push_back(top.confidence[i]);
          rows.correct.push_back(top.correct[i]);
          rows.nll.push_back(top.nll[i]);
          rows.brier.push_back(top.brier[i]);
        }
      const auto& r = L.rows[e];
      ASSERT_EQ(r.tokens, rows.confidence.size());
      ReportOptions o;
      o.draws = 0;
      o.consistency_draws = 0;
      const auto ref = calibration_report_top_label(rows, 300, o);
      EXPECT_NEAR(r.accuracy, ref.accuracy.value, 1e-12);
      EXPECT_NEAR(r.ece, ref.ece.value, 1e-6);
      EXPECT_NEAR(
          r.gap,
          ref.accuracy.value - std::accumulate(rows.confidence.begin(), rows.confidence.end(), 0.0) / double(r.tokens),
          1e-6);
      EXPECT_LE(r.gap_ci.low, r.gap_ci.high);
      EXPECT_LE(r.accuracy_ci.low, r.accuracy_ci.high);
    }
  }
  Trace depth = p.topk;
  depth.routing_kind = "depth";
  EXPECT_THROW(expert_view(depth), InputError);
}

TEST(LargeVocabulary, BrierTermOfACertainTokenStaysAtZeroAfterFloat32Rounding) {
  // A trained model's trace (examples/moe_study.py, token 462): p_y ~ 1 and prob_sq_sum, both float32,
  // gave sum p^2 - p_y^2 + (p_y - 1)^2 = -1e-6 and `arcal metrics` refused its own brier row.
  auto p = make_pair(40, 300, 4);
  Trace& t = p.topk;
  t.topk_logprobs[0] = -1e-7f;
  t.topk_logprobs[1] = -18.0f;
  t.topk_logprobs[2] = -19.0f;
  t.topk_logprobs[3] = -20.0f;
  t.labels[0] = t.topk_indices[0];
  t.label_logprob[0] = -1e-7f;
  t.prob_sq_sum[0] = 0.9999996f;  // below p_y^2 = 0.9999998 after rounding
  t.predictive_entropy[0] = 1e-5f;
  validate_trace(t);
  const TraceTopLabel r = trace_top_label(t);
  EXPECT_GE(r.brier[0], 0.0);
  EXPECT_LT(r.brier[0], 1e-12);
  ReportOptions o;
  o.draws = 0;
  o.consistency_draws = 0;
  EXPECT_NO_THROW(trace_calibration_report(t, o));
}

TEST(LargeVocabulary, ReducedFormProbesReadRoutingCentredWithinThePredictedClass) {
  // method.md §6.3: in the reduced form each profile column is the raw profile minus its mean over the
  // examples of the same predicted (vocabulary) class, computed here on its own; a class met once reads 0.
  // At or below kAuditFullOutputClasses the probes read the raw profile.
  const auto p = make_pair(600, 300, 40, 9);
  const auto run = make_audit_run_input(p.topk, "topk", {"re"});
  ASSERT_TRUE(run.log_probs.empty());
  const auto d = make_probe_design(run, 0, ProbeAuditOptions{});
  const std::size_t n = run.confidence.size(), P = run.profile_names.size();
  ASSERT_GE(P, 1u);
  std::map<std::int64_t, std::vector<std::size_t>> by_class;
  for (std::size_t i = 0; i < n; ++i) by_class[run.predicted_class[i]].push_back(i);
  ASSERT_GT(by_class.size(), kAuditClassGroups);  // rare classes share the pooled group
  std::size_t singletons = 0;
  for (std::size_t j = 0; j < P; ++j)
    for (const auto& [cls, rows] : by_class) {
      double mean = 0;
      for (auto i : rows) mean += run.profile[i * P + j] / double(rows.size());
      for (auto i : rows) EXPECT_NEAR(d.columns[2 + j][i], run.profile[i * P + j] - mean, 1e-12) << "class " << cls;
      if (rows.size() == 1) {
        EXPECT_EQ(d.columns[2 + j][rows[0]], 0.0);
        ++singletons;
      }
    }
  EXPECT_GT(singletons, 0u);
  const auto small = make_pair(300, 40, 8, 9);
  const auto full = make_audit_run_input(small.full, "small", {"re"});
  const auto dfull = make_probe_design(full, 0, ProbeAuditOptions{});
  for (std::size_t j = 0; j < full.profile_names.size(); ++j)
    for (std::size_t i = 0; i < full.confidence.size(); ++i)
      EXPECT_EQ(dfull.columns[2 + j][i], full.profile[i * full.profile_names.size() + j]);
}

TEST(LargeVocabulary, VerdictOfAReducedFormAuditSaysRoutingWasCentred) {
  const auto p = make_pair(800, 300, 40, 4);
  FullAuditOptions o;
  o.permutations = 199;
  o.probe_repeats = 1;
  o.condcal = false;
  const auto r = run_full_audit({make_audit_run_input(p.topk, "topk", {"re"})}, o);
  const auto v = make_verdict(r);
  EXPECT_NE(v.summary.find("centred within each predicted class"), std::string::npos) << v.summary;
  const auto small = make_pair(400, 40, 8, 4);
  const auto v10 = make_verdict(run_full_audit({make_audit_run_input(small.full, "small", {"re"})}, o));
  EXPECT_EQ(v10.summary.find("centred within each predicted class"), std::string::npos) << v10.summary;
}
