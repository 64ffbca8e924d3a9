#include "audit/run_summary.hpp"

#include <limits>
#include <map>

#include <cmath>

#include "audit/audit.hpp"
#include "calib/binning.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {

/// Reliability rows (non-empty bins) and the ECE of the examples in `rows` (all when empty).
std::vector<ReliabilityRow> reliability(const std::vector<double>& conf, const std::vector<double>& correct,
                                        const std::vector<int>& bin_of, std::size_t bins,
                                        const std::vector<std::size_t>& rows, double* ece) {
  std::vector<double> c, y;
  std::vector<int> a;
  for (std::size_t i : rows) {
    c.push_back(conf[i]);
    y.push_back(correct[i]);
    a.push_back(bin_of[i]);
  }
  const auto table = bin_table(c, y, a, int(bins));
  std::vector<ReliabilityRow> out;
  double e = 0;
  for (std::size_t b = 0; b < table.size(); ++b) {
    if (table[b].n == 0) continue;
    const auto band = calibrated_accuracy_band(table[b].n, table[b].mean_conf);
    out.push_back({b, table[b].n, table[b].mean_conf, table[b].accuracy, band.low, band.high});
    e += double(table[b].n) / double(rows.size()) * std::abs(table[b].accuracy - table[b].mean_conf);
  }
  *ece = e;
  return out;
}

}  // namespace

namespace {

/// Adjusted eta^2 of the first statistic by the predicted class (RunSummary::class_explained).
double class_explained_share(const AuditRunInput& run) {
  const auto& cls = run.predicted_class.empty() ? run.predicted : run.predicted_class;
  if (run.statistics.empty() || cls.size() != run.statistics[0].size()) return std::numeric_limits<double>::quiet_NaN();
  const auto& s = run.statistics[0];
  const std::size_t n = s.size();
  std::size_t G = 0;
  const auto dense = dense_ids(cls, G);
  if (n <= G || n < 2) return std::numeric_limits<double>::quiet_NaN();
  auto within_class = s;  // s minus its class's mean (the probes' centring of the reduced form)
  centre_within(within_class, std::vector<std::int64_t>(dense.begin(), dense.end()), G);
  double mean = 0;
  for (std::size_t i = 0; i < n; ++i) mean += s[i] / double(n);
  double total = 0, within = 0;
  for (std::size_t i = 0; i < n; ++i) {
    total += (s[i] - mean) * (s[i] - mean);
    within += within_class[i] * within_class[i];
  }
  if (total <= 0) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 - (within / double(n - G)) / (total / double(n - 1));
}

}  // namespace

RunSummary summarise_run(const AuditRunInput& run, std::size_t bins) {
  RunSummary s;
  s.run = run.run;
  s.cell = run.cell;
  s.outputs = run.outputs;
  s.class_explained = class_explained_share(run);
  if (run.experts) s.experts = *run.experts;
  s.n = run.confidence.size();
  s.bins = bins;
  std::vector<std::size_t> all(s.n);
  for (std::size_t i = 0; i < s.n; ++i) {
    all[i] = i;
    s.accuracy += run.correct[i] / double(s.n);
    s.mean_confidence += run.confidence[i] / double(s.n);
  }
  const auto bin_of = equal_width_bin_index(run.confidence, bins);
  s.reliability = reliability(run.confidence, run.correct, bin_of, bins, all, &s.ece);
  if (!run.statistics.empty()) {
    s.tertile_statistic = run.statistic_names[0];
    const auto t = equal_mass_group_index(run.statistics[0], 3);
    std::array<std::vector<std::size_t>, 3> rows;
    for (std::size_t i = 0; i < s.n; ++i) rows[std::size_t(t[i])].push_back(i);
    for (std::size_t g = 0; g < 3; ++g) {
      s.tertile_n[g] = rows[g].size();
      if (rows[g].empty()) continue;
      for (std::size_t i : rows[g]) s.tertile_accuracy[g] += run.correct[i] / double(rows[g].size());
      s.tertile_reliability[g] = reliability(run.confidence, run.correct, bin_of, bins, rows[g], &s.tertile_ece[g]);
    }
  }
  s.points = run.routing_points;
  s.sources = run.routing_max_sources;
  s.routing_sources = run.routing_sources;
  s.routing_mean = run.routing_mean;
  return s;
}

}  // namespace arcal
