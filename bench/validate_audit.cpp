// The audit's validation table (docs/audit_validation.md): type-I error and power of every test the
// audit decides with, on every null family of method.md §6 (clean, confounded, misspecified), from
// simulated traces with known truth. Each cell counts rejections at α = 0.05 over independent data
// sets and sets the count beside the 99 % binomial band of the nominal level; power rows plant an
// effect in the part of routing independent of the outputs. Writes the Markdown table (--out) and the
// same rows as CSV (--csv). scripts/audit_validation.sh builds and runs it.

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "audit/diagnostic.hpp"
#include "audit/probe_compare.hpp"
#include "audit/run_input.hpp"
#include "audit/simulate.hpp"
#include "audit/probes.hpp"
#include "audit/exact_null.hpp"
#include "audit/sensitivity_audit.hpp"
#include "core/rng.hpp"
#include "ops/blas.hpp"
#include "stats/paired_tests.hpp"

using namespace arcal;

namespace {

constexpr double kAlpha = 0.05;

/// The null families (method.md §6.1, §6.6). Every family's routing carries nothing beyond what the
/// test conditions on unless an effect is planted (in ε, the part independent of the outputs).
struct Family {
  std::string name, description;
  std::function<void(SimulationOptions&)> apply;
};

const std::vector<Family>& families() {
  static const std::vector<Family> f{
      {"clean", "calibrated, routing independent of the outputs (margin |N(4, 2)|)", [](SimulationOptions&) {}},
      {"confounded", "routing tracks confidence (ρ = 0.9), temperature miscalibration T = 1.3, margin |N(8, 3)|",
       [](SimulationOptions& o) {
         o.confound = 0.9;
         o.reference_slope = 1.0 / 1.3;
         o.margin_mean = 8.0;
         o.margin_sd = 3.0;
       }},
      {"misspecified-c",
       "routing tracks confidence (ρ = 0.9), calibration curve with a wiggle sin(3 logit c) no smooth or "
       "monotone fit of c captures",
       [](SimulationOptions& o) {
         o.confound = 0.9;
         o.wiggle = 1.0;
         o.wiggle_frequency = 3.0;
       }},
      {"misspecified-outputs",
       "routing tracks a nonlinear function of the sorted probabilities (ρ = 0.9) and correctness depends "
       "on it beyond c (a null only for tests that condition on the whole output vector)",
       [](SimulationOptions& o) {
         o.confound = 0.9;
         o.confound_source = "outputs";
         o.output_effect = 1.0;
       }},
      {"class-dependent",
       "routing tracks the predicted class (ρ = 0.9) and calibration differs by class (logit q += 1.5 b_k, b_k "
       "from -1 to 1 over the classes): information beyond confidence, a null for the tests that condition "
       "on the whole output vector",
       [](SimulationOptions& o) {
         o.confound = 0.9;
         o.confound_source = "class";
         o.class_effect = 1.5;
       }},
      {"one-class",
       "clean, but a planted effect acts only on examples predicted as class 0 (a tenth of them; issue 54); "
       "a power family",
       [](SimulationOptions& o) { o.effect_class = 0; }},
      {"saturated",
       "most confidences near 1 (margin |N(14, 4)|), overconfident (T = 2), routing tracks confidence (ρ = 0.9)",
       [](SimulationOptions& o) {
         o.confound = 0.9;
         o.margin_mean = 14.0;
         o.margin_sd = 4.0;
         o.reference_slope = 0.5;
       }},
  };
  return f;
}

const Family& family(const std::string& name) {
  for (const auto& f : families())
    if (f.name == name) return f;
  throw std::runtime_error("unknown family " + name);
}

/// Classes K of every simulated trace (--classes): above kAuditFullOutputClasses the audit reads the
/// outputs in its reduced form (issue 53), so a run at K = 1000 validates that form on the same families.
std::size_t g_classes = 10;

SimulatedTrace simulate(const std::string& fam, std::size_t n, double effect, std::uint64_t seed) {
  SimulationOptions o;
  o.n = n;
  o.classes = g_classes;
  o.effect_nats = effect;
  o.seed = seed;
  family(fam).apply(o);
  return simulate_trace(o);
}

struct Row {
  std::string test, family;
  double effect = 0.0;
  std::size_t datasets = 0, n = 0, rejections = 0;
  double seconds = 0.0;
  std::string note;
  double level = kAlpha;  ///< the rate a valid test stays within on a null (α, or α/2 for one direction)
};

std::string verdict(const Row& r) {
  if (r.effect > 0)
    return "power " + std::to_string(int(100.0 * double(r.rejections) / double(r.datasets) + 0.5)) + " %";
  const auto b = binomial_band_99(r.datasets, r.level);
  if (r.rejections > b.second) return "**above the band**";
  if (r.rejections < b.first) return "below the band";
  return "in band";
}

std::string fmt_effect(double e) {
  if (e == 0) return "0";
  std::ostringstream s;
  s << e;
  return s.str();
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void say(const Row& r) {
  const auto b = binomial_band_99(r.datasets, r.level);
  std::fprintf(stderr, "  %-44s %-22s effect %-6s %3zu / %3zu  band [%zu, %zu]  %s  (%.0f s)\n", r.test.c_str(),
               r.family.c_str(), fmt_effect(r.effect).c_str(), r.rejections, r.datasets, b.first, b.second,
               verdict(r).c_str(), r.seconds);
}

// ---- the diagnostic (§6.1): the paper protocol and the decision test on the same data sets.
void diagnostic_rows(std::vector<Row>& rows, const std::string& fam, double effect, std::size_t datasets, std::size_t n,
                     int permutations, std::uint64_t seed) {
  DiagnosticOptions o;
  o.permutations = permutations;
  Row paper{"diagnostic: paper protocol (reported, not decided on)", fam, effect, datasets, n, 0, 0, "", kAlpha};
  Row decision{"diagnostic: decision (residual, conditional permutation)", fam, effect, datasets, n, 0, 0, "", kAlpha};
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t d = 0; d < datasets; ++d) {
    const auto s = simulate(fam, n, effect, derive_seed(seed, d));
    paper.rejections +=
        matched_confidence_gap_test(s.confidence, s.correct, s.routing_entropy, o, derive_seed(seed + 1, d)).p <=
        kAlpha;
    decision.rejections +=
        residual_gap_test(s.confidence, s.correct, s.routing_entropy, o, derive_seed(seed + 2, d)).p <= kAlpha;
  }
  paper.seconds = decision.seconds = seconds_since(t0);
  for (auto* r : {&paper, &decision}) {
    say(*r);
    rows.push_back(*r);
  }
}

// ---- probes (§6.3-6.4): the per-run split test and the across-run random-effects test.
struct ProbeCell {
  std::string comparison, label;
};

/// The probe rows of one family whose r-th run `make_run(seed of run r, r)` builds.
void probe_rows_of(std::vector<Row>& rows, const std::string& fam, double effect, std::size_t runs, std::size_t n,
                   int repeats, std::size_t group, const std::vector<ProbeCell>& cells, std::uint64_t seed,
                   const std::function<AuditRunInput(std::uint64_t, std::size_t)>& make_run,
                   const std::string& note = "") {
  ProbeAuditOptions o;
  o.repeats = repeats;
  std::vector<RunProbeResult> results;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t r = 0; r < runs; ++r) {
    const auto run = make_run(derive_seed(seed, r), r);
    o.seed = derive_seed(seed + 1, r);
    results.push_back(run_probes(run, 0, o));
    std::fprintf(stderr, "\r    probes %s effect %s: run %zu / %zu", fam.c_str(), fmt_effect(effect).c_str(), r + 1,
                 runs);
  }
  std::fprintf(stderr, "\n");
  const double secs = seconds_since(t0);
  for (const auto& cell : cells) {
    // A false positive of the audit is a *gain* (the probe better, Δ < 0) at p <= α: the two-sided test
    // makes that at most α/2 on a null where the comparison is symmetric. (A probe with extra null inputs
    // is legitimately worse than a correctly specified small control, which is not a routing claim.)
    Row per_run{
        "probes, per run: " + cell.label + " (log-loss gains)", fam, effect, runs, n, 0, secs, note, kAlpha / 2};
    for (const auto& res : results)
      for (const auto& c : res.comparisons)
        if (c.name == cell.comparison) per_run.rejections += c.log_loss.p <= kAlpha && c.log_loss.delta < 0;
    say(per_run);
    rows.push_back(per_run);
    // Across runs: disjoint sets of `group` runs, the Hartung-Knapp test of the comparison's log-loss.
    const std::size_t sets = runs / group;
    if (sets == 0) continue;
    Row across{"probes, across " + std::to_string(group) + " runs (HK): " + cell.label + " (gains)",
               fam,
               effect,
               sets,
               n,
               0,
               secs,
               note,
               kAlpha / 2};
    for (std::size_t g = 0; g < sets; ++g) {
      std::vector<RunProbeResult> set(results.begin() + long(g * group), results.begin() + long((g + 1) * group));
      for (const auto& t : across_run_probe_tests(set, kAlpha))
        if (t.comparison == cell.comparison && t.metric == "log_loss")
          across.rejections += t.p <= kAlpha && t.mean_delta < 0;
    }
    say(across);
    rows.push_back(across);
  }
}

void probe_rows(std::vector<Row>& rows, const std::string& fam, double effect, std::size_t runs, std::size_t n,
                int repeats, std::size_t group, const std::vector<ProbeCell>& cells, std::uint64_t seed) {
  probe_rows_of(rows, fam, effect, runs, n, repeats, group, cells, seed, [&](std::uint64_t s, std::size_t r) {
    return make_audit_run_input(simulate(fam, n, effect, s).trace, "sim" + std::to_string(r), {"re"});
  });
}

/// Token traces of a vocabulary (issue 53; method.md §6.3, §6.9): 150 documents of log-normal length
/// (median 64, log-sd 0.5) with the dependence of "Dependent tokens", predicted classes Zipf(1) over the
/// --classes classes, calibration that differs by class (logit a += 1.5 b_k) and routing that tracks the
/// class (s += 1.5 b_k standardised) — a null for every test that conditions on the predicted class —
/// plus, for power, `effect` logits of a per unit of the token-level part of s.
AuditRunInput vocabulary_tokens(double effect, std::uint64_t seed, std::size_t r, std::size_t* n_out = nullptr) {
  TokenSimulationOptions t;
  t.sequences = 150;
  t.length = 64;
  t.length_log_sd = 0.5;
  t.classes = g_classes;
  t.zipf = 1.0;
  t.class_effect = 1.5;
  t.class_routing = 1.5;
  t.effect = effect;
  t.seed = seed;
  const auto sim = simulate_tokens(t);
  if (n_out) *n_out = sim.trace.n;
  return make_audit_run_input(sim.trace, "tokens" + std::to_string(r), {"routing_s"});
}

// ---- the exact null (§6.6): the conditional permutation (decision) and the model-based null.
void exact_null_rows(std::vector<Row>& rows, const std::string& fam, const std::string& variant, double effect,
                     std::size_t runs, std::size_t n, int replicates, std::uint64_t seed) {
  ExactNullAuditOptions o;
  o.probes.only = variant == "full_logit" ? std::vector<std::string>{"full_logit", "full_logit_routing"}
                                          : std::vector<std::string>{"full_vector", "capacity_matched"};
  o.audit.null_replicates = replicates;
  o.audit.null_variants = {variant};
  o.audit.null_sequential = false;  // every replicate (the level and power tables of the fixed-count test)
  Row cond{"exact null (" + variant + "): conditional permutation (decision)", fam, effect, runs, n, 0, 0, "", kAlpha};
  Row model{"exact null (" + variant + "): model-based (reported)", fam, effect, runs, n, 0, 0, "", kAlpha};
  const double floor = 1.0 / double(replicates + 1);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t r = 0; r < runs; ++r) {
    const auto s = simulate(fam, n, effect, derive_seed(seed, r));
    o.probes.seed = derive_seed(seed + 1, r);
    const auto res = run_exact_null_audit({make_audit_run_input(s.trace, "sim" + std::to_string(r), {"re"})}, o);
    cond.rejections += res.runs[0].comparisons[0].p <= kAlpha + 1e-12;
    model.rejections += res.model_runs[0].comparisons[0].p <= kAlpha + 1e-12;
    std::fprintf(stderr, "\r    exact null %s %s effect %s: run %zu / %zu", variant.c_str(), fam.c_str(),
                 fmt_effect(effect).c_str(), r + 1, runs);
  }
  std::fprintf(stderr, "\n");
  cond.seconds = model.seconds = seconds_since(t0);
  const std::string note =
      std::to_string(replicates) + " replicates (p floor " + std::to_string(floor).substr(0, 5) + ")";
  cond.note = model.note = note;
  for (auto* r : {&cond, &model}) {
    say(*r);
    rows.push_back(*r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Type-I error and power of the audit's tests on simulated null families (docs/audit_validation.md)"};
  std::size_t diag_sets = 200, diag_n = 10000, probe_runs = 40, probe_n = 2000, power_runs = 12, null_runs = 20,
              null_n = 2000, group = 4;
  int permutations = 999, repeats = 5, replicates = 19;
  std::uint64_t seed = 2026;
  std::string out, csv, only;
  app.add_option("--diagnostic-datasets", diag_sets, "data sets per diagnostic cell")->check(CLI::Range(1, 100000));
  app.add_option("--diagnostic-n", diag_n, "examples per diagnostic data set")->check(CLI::Range(100, 10000000));
  app.add_option("--permutations", permutations, "permutations per diagnostic test")->check(CLI::Range(19, 1000000));
  app.add_option("--probe-runs", probe_runs, "simulated runs per probe null cell")->check(CLI::Range(1, 10000));
  app.add_option("--probe-n", probe_n, "examples per probe run")->check(CLI::Range(200, 1000000));
  app.add_option("--probe-repeats", repeats, "repeated 2-fold cross-fits per run")->check(CLI::Range(1, 50));
  app.add_option("--power-runs", power_runs, "runs per power cell (probes and exact null)")
      ->check(CLI::Range(1, 10000));
  app.add_option("--across-group", group, "runs per across-run test")->check(CLI::Range(2, 100));
  app.add_option("--null-runs", null_runs, "runs per exact-null cell")->check(CLI::Range(1, 10000));
  app.add_option("--null-n", null_n, "examples per exact-null run")->check(CLI::Range(200, 1000000));
  app.add_option("--replicates", replicates, "exact-null permutation replicates")->check(CLI::Range(1, 100000));
  app.add_option("--seed", seed, "master seed");
  app.add_option("--classes", g_classes,
                 "classes K of the simulated traces (above 256 the audit reads its reduced output form)")
      ->check(CLI::Range(2, 100000));
  app.add_option("--only", only,
                 "run one part: diagnostic, probes, exact-null or tokens (the probes on clustered token traces of a "
                 "vocabulary with class-dependent calibration; default: all)")
      ->check(CLI::IsMember({"", "diagnostic", "probes", "exact-null", "tokens"}));
  app.add_option("--out", out, "Markdown table to write (default: stdout)");
  app.add_option("--csv", csv, "CSV rows to write");
  CLI11_PARSE(app, argc, argv);
  arcal::set_blas_threads(1);
  const auto t_all = std::chrono::steady_clock::now();
  std::vector<Row> rows;
  if (only.empty() || only == "diagnostic") {
    std::fprintf(stderr, "diagnostic (%zu data sets x N = %zu, %d permutations)\n", diag_sets, diag_n, permutations);
    for (const char* f : {"clean", "confounded", "misspecified-c"})
      diagnostic_rows(rows, f, 0.0, diag_sets, diag_n, permutations, derive_seed(seed, 100 + rows.size()));
    diagnostic_rows(rows, "clean", 0.002, power_runs * 5, diag_n, permutations, derive_seed(seed, 150));
    diagnostic_rows(rows, "confounded", 0.002, power_runs * 5, diag_n, permutations, derive_seed(seed, 151));
  }
  if (only.empty() || only == "probes") {
    std::fprintf(stderr, "probes (%zu runs x N = %zu, %d repeats)\n", probe_runs, probe_n, repeats);
    const std::vector<ProbeCell> routing{
        {"full_vector_vs_capacity_matched", "full vector vs capacity-matched"},
        {"full_vector_vs_shuffled_within_bins", "full vector vs shuffled within bins"}};
    const std::vector<ProbeCell> linear{{"full_vector_vs_linear", "full vector vs linear"}};
    const std::vector<ProbeCell> logit{{"full_logit_routing_vs_full_logit", "full logit + routing vs full logit"}};
    auto cat = [](std::vector<ProbeCell> a, const std::vector<ProbeCell>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    // Linear (Platt on logit c) is correctly specified on clean and temperature-miscalibrated data only.
    probe_rows(rows, "clean", 0.0, probe_runs, probe_n, repeats, group, cat(cat(routing, linear), logit),
               derive_seed(seed, 200));
    probe_rows(rows, "confounded", 0.0, probe_runs, probe_n, repeats, group, cat(cat(routing, linear), logit),
               derive_seed(seed, 201));
    probe_rows(rows, "misspecified-c", 0.0, probe_runs, probe_n, repeats, group, cat(routing, logit),
               derive_seed(seed, 202));
    probe_rows(rows, "misspecified-outputs", 0.0, probe_runs, probe_n, repeats, group, logit, derive_seed(seed, 203));
    // Routing tracks the predicted class, whose calibration differs by class: a null for the primary
    // probes since they read the class (issue 54), and for the full-logit comparison.
    probe_rows(rows, "class-dependent", 0.0, probe_runs, probe_n, repeats, group, cat(routing, logit),
               derive_seed(seed, 204));
    probe_rows(rows, "clean", 0.02, power_runs, probe_n, repeats, group, cat(routing, logit), derive_seed(seed, 250));
    probe_rows(rows, "confounded", 0.02, power_runs, probe_n, repeats, group, cat(routing, logit),
               derive_seed(seed, 251));
    // One class of a large vocabulary holds a few examples, too few to carry the planted gain.
    if (g_classes <= kAuditFullOutputClasses) {
      probe_rows(rows, "one-class", 0.02, power_runs, probe_n, repeats, group, cat(routing, logit),
                 derive_seed(seed, 252));
      probe_rows(rows, "one-class", 0.02, power_runs, probe_n * 5, repeats, group, cat(routing, logit),
                 derive_seed(seed, 253));
    }
  }
  if (only.empty() || only == "exact-null") {
    std::fprintf(stderr, "exact null (%zu runs x N = %zu, %d replicates)\n", null_runs, null_n, replicates);
    for (const char* f : {"clean", "confounded", "misspecified-c"})
      exact_null_rows(rows, f, "confidence", 0.0, null_runs, null_n, replicates, derive_seed(seed, 300 + rows.size()));
    for (const char* f : {"clean", "misspecified-c", "misspecified-outputs"})
      exact_null_rows(rows, f, "full_logit", 0.0, null_runs, null_n, replicates, derive_seed(seed, 320 + rows.size()));
    // Routing that tracks the predicted class (with class-dependent calibration): the within-class
    // permutation keeps it a null at any K, the reduced output form of a large vocabulary included.
    if (g_classes > kAuditFullOutputClasses)
      exact_null_rows(rows, "class-dependent", "full_logit", 0.0, null_runs, null_n, replicates,
                      derive_seed(seed, 340));
    exact_null_rows(rows, "misspecified-c", "confidence", 0.03, power_runs / 2, null_n, replicates,
                    derive_seed(seed, 350));
    exact_null_rows(rows, "misspecified-outputs", "full_logit", 0.03, power_runs / 2, null_n, replicates,
                    derive_seed(seed, 351));
  }
  if (only.empty() || only == "tokens") {
    std::size_t n_tokens = 0;
    vocabulary_tokens(0.0, derive_seed(seed, 400), 0, &n_tokens);
    std::fprintf(stderr, "token traces of a vocabulary (%zu runs x ~%zu tokens in 150 documents, K = %zu)\n",
                 probe_runs, n_tokens, g_classes);
    const std::vector<ProbeCell> cells{{"full_vector_vs_capacity_matched", "full vector vs capacity-matched"},
                                       {"full_vector_vs_shuffled_within_bins", "full vector vs shuffled within bins"},
                                       {"full_logit_routing_vs_full_logit", "full logit + routing vs full logit"}};
    auto make = [](double effect) {
      return [effect](std::uint64_t s, std::size_t r) { return vocabulary_tokens(effect, s, r); };
    };
    probe_rows_of(rows, "tokens-class-dependent", 0.0, probe_runs, n_tokens, repeats, group, cells,
                  derive_seed(seed, 400), make(0.0));
    probe_rows_of(rows, "tokens-class-dependent", 0.5, power_runs, n_tokens, repeats, group, cells,
                  derive_seed(seed, 450), make(0.5), "planted effect in logits per unit of token-level routing");
  }
  const double total = seconds_since(t_all);

  std::ostringstream md;
  md << "| test | family | planted effect (nats) | data sets | N | rejections | 99 % band of the nominal rate | result "
        "|\n"
     << "|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const auto b = binomial_band_99(r.datasets, r.level);
    md << "| " << r.test << (r.note.empty() ? "" : ", " + r.note) << " | " << r.family << " | " << fmt_effect(r.effect)
       << " | " << r.datasets << " | " << r.n << " | " << r.rejections << " / " << r.datasets << " | "
       << (r.effect > 0 ? std::string("—")
                        : "[" + std::to_string(b.first) + ", " + std::to_string(b.second) + "] of " +
                              (r.level < kAlpha ? "2.5 %" : "5 %"))
       << " | " << verdict(r) << " |\n";
  }
  if (only.empty()) {
    md << "\nFamilies:\n\n";
    for (const auto& f : families()) md << "- `" << f.name << "`: " << f.description << ".\n";
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "\nProduced by `bench/validate_audit` (seed %llu, K = %zu classes) in %.0f s.\n",
                static_cast<unsigned long long>(seed), g_classes, total);
  md << buf;
  if (out.empty()) {
    std::cout << md.str();
  } else {
    std::ofstream f(out);
    f << md.str();
    if (!f) {
      std::fprintf(stderr, "validate_audit: cannot write %s\n", out.c_str());
      return 1;
    }
  }
  if (!csv.empty()) {
    std::ofstream f(csv);
    f << "test,family,effect,datasets,n,rejections,band_low,band_high,result,seconds\n";
    for (const auto& r : rows) {
      const auto b = binomial_band_99(r.datasets, r.level);
      f << '"' << r.test << "\"," << r.family << ',' << r.effect << ',' << r.datasets << ',' << r.n << ','
        << r.rejections << ',' << b.first << ',' << b.second << ",\"" << verdict(r) << "\"," << r.seconds << '\n';
    }
  }
  return 0;
}
