#include "audit/audit.hpp"

#include <chrono>
#include <algorithm>

#include "core/check.hpp"
#include "core/rng.hpp"

namespace arcal {

namespace {
void run_condcal_family(const std::vector<AuditRunInput>& runs, const AuditOptions& options, AuditResults& out);
}

void validate_audit_inputs(const std::vector<AuditRunInput>& runs, const AuditOptions& options) {
  const char* fn = "validate_audit_inputs";
  if (runs.empty()) throw_input(fn, "no runs given; the audit needs at least one trace");
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    const std::string where = "run[" + std::to_string(r) + "] '" + run.run + "': ";
    if (run.classes != runs[0].classes)
      throw_input(fn, where + "has " + std::to_string(run.classes) + " classes but run[0] '" + runs[0].run + "' has " +
                          std::to_string(runs[0].classes) + "; every run must have the same class count");
    const std::size_t n = run.confidence.size();
    if (run.correct.size() != n || run.predictive_entropy.size() != n || run.labels.size() != n)
      throw_input(fn, where + "confidence, correct, predictive_entropy and labels must all have " + std::to_string(n) +
                          " elements");
    if (n < options.diagnostic.bins)
      throw_input(fn, where + "has " + std::to_string(n) + " examples, fewer than the " +
                          std::to_string(options.diagnostic.bins) + " confidence bins");
    if (options.run_condcal && n < 4 * static_cast<std::size_t>(std::max(options.condcal.cv_folds, 2)))
      throw_input(fn, where + "has " + std::to_string(n) + " examples; AR-CondCal needs >= 2 * cv_folds per half");
    for (std::size_t i = 0; i < n; ++i)
      if (run.labels[i] < 0 || run.labels[i] >= static_cast<std::int64_t>(run.classes))
        throw_input(fn, where + "labels[" + std::to_string(i) + "] is " + std::to_string(run.labels[i]) +
                            ", but must be in [0, " + std::to_string(run.classes) + ")");
    if (run.statistics.empty()) throw_input(fn, where + "declares no statistic, so the test family would be empty");
    if (run.statistic_names.size() != run.statistics.size())
      throw_input(fn, where + "statistic_names and statistics differ in length");
    for (std::size_t s = 0; s < run.statistics.size(); ++s) {
      const auto& v = run.statistics[s];
      if (v.size() != n)
        throw_input(fn, where + "statistic '" + run.statistic_names[s] + "' has " + std::to_string(v.size()) +
                            " values, but must have " + std::to_string(n));
      for (std::size_t i = 0; i < n; ++i)
        check_finite(fn, ("statistic '" + run.statistic_names[s] + "'").c_str(), i, v[i]);
      if (std::all_of(v.begin(), v.end(), [&](double x) { return x == v[0]; }))
        throw_input(fn, where + "statistic '" + run.statistic_names[s] +
                            "' is constant; it carries no routing information to test");
    }
  }
}

AuditResults run_audit(const std::vector<AuditRunInput>& runs, const AuditOptions& options) {
  validate_audit_inputs(runs, options);
  AuditResults out;
  out.options = options;
  std::vector<DiagnosticTestSpec> family;
  for (const auto& run : runs)
    for (std::size_t s = 0; s < run.statistics.size(); ++s)
      family.push_back(
          {run.run, run.cell, run.statistic_names[s], run.confidence, run.correct, run.statistics[s], run.cluster});
  const auto t0 = std::chrono::steady_clock::now();
  out.diagnostic = run_diagnostic_family(family, options.diagnostic);
  const auto t1 = std::chrono::steady_clock::now();
  out.diagnostic_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (const auto& run : runs) out.run_summaries.push_back(summarise_run(run, options.diagnostic.bins));
  if (options.run_condcal) {
    const auto t2 = std::chrono::steady_clock::now();
    run_condcal_family(runs, options, out);
    out.condcal_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  }
  out.verdict = make_verdict(out);
  return out;
}

namespace {
void run_condcal_family(const std::vector<AuditRunInput>& runs, const AuditOptions& options, AuditResults& out) {
  std::vector<std::string> cells;
  std::vector<std::vector<CondCalResult>> by_cell;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    for (std::size_t s = 0; s < run.statistics.size(); ++s) {
      CondCalOptions o = options.condcal;
      o.seed = derive_seed(options.condcal.seed, r);  // same splits for every statistic of a run
      o.threads = options.diagnostic.threads;         // the smoother's queries on the diagnostic's workers
      AuditCondCalEntry e{run.run, run.cell, run.statistic_names[s],
                          ar_condcal(run.confidence, run.correct, run.statistics[s], run.predictive_entropy, run.labels,
                                     o, run.cluster)};
      if (s == 0) {
        auto it = std::find(cells.begin(), cells.end(), run.cell);
        if (it == cells.end()) {
          cells.push_back(run.cell);
          by_cell.emplace_back();
          it = cells.end() - 1;
        }
        by_cell[static_cast<std::size_t>(it - cells.begin())].push_back(e.result);
      }
      out.condcal.push_back(std::move(e));
    }
  }
  for (std::size_t c = 0; c < cells.size(); ++c)
    out.seed_bands.push_back({cells[c], seed_variance_band(by_cell[c], false), seed_variance_band(by_cell[c], true)});
}
}  // namespace

}  // namespace arcal
