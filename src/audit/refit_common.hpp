// Helpers shared by the two refitting audits (sensitivity_audit.cpp, exact_null.cpp): fold-wise label
// sets, the binary log-loss of the refits, seeded Bernoulli draws, the soft-reference warm start, the
// refits' fold-mean losses, input checks and the recorded refit settings. Internal to the probe refits of src/audit.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "audit/audit.hpp"
#include "audit/sensitivity.hpp"
#include "audit/probes.hpp"
#include "core/check.hpp"
#include "core/rng.hpp"
#include "stats/bootstrap.hpp"

namespace arcal::refit_detail {

using Fold2 = std::array<std::vector<double>, 2>;

/// Binary log-loss in nats, estimates clipped to [1e-15, 1 − 1e-15] (as calib/metrics.hpp, whose
/// header cannot be included beside audit/diagnostic.hpp).
inline double binary_log_loss(const std::vector<double>& p, const std::vector<double>& y) {
  double s = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double q = std::min(std::max(p[i], 1e-15), 1.0 - 1e-15);
    s -= y[i] * std::log(q) + (1.0 - y[i]) * std::log1p(-q);
  }
  return s / double(p.size());
}

inline std::vector<double> pick(const std::vector<double>& v, const std::vector<std::size_t>& idx) {
  std::vector<double> out(idx.size());
  for (std::size_t r = 0; r < idx.size(); ++r) out[r] = v[idx[r]];
  return out;
}

inline std::vector<double> bernoulli_draw(const std::vector<double>& p, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<double> y(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) y[i] = rng.uniform() < p[i] ? 1.0 : 0.0;
  return y;
}

/// Warm-start weights: every MLP of the design fitted to the soft labels g[f] (a function of the
/// model outputs only, so the starting point carries no routing information), with an empty entry
/// for the linear probe.
inline std::vector<std::array<MlpWeights, 2>> soft_warm_start(const ProbeDesign& d, const Fold2& g,
                                                              const MlpProbeOptions& refit) {
  MlpProbeOptions soft = refit;
  soft.soft_labels = true;
  soft.warm_start = nullptr;
  auto fit = fit_probe_design(d, {&g[0], &g[1]}, soft, {derive_seed(d.run_seed, 3000), derive_seed(d.run_seed, 3001)});
  std::vector<std::array<MlpWeights, 2>> warm;
  if (d.linear) warm.emplace_back();
  for (auto& w : fit.weights) warm.push_back(std::move(w));
  return warm;
}

/// Fold-mean log-loss of each refitted probe on its evaluation halves against labels y[f].
inline std::vector<double> refit_losses(const ProbeDesign& d, const ProbeRefit& fit,
                                        const std::array<const std::vector<double>*, 2>& y) {
  std::vector<double> out(fit.names.size(), 0.0);
  for (std::size_t f = 0; f < 2; ++f) {
    const auto ye = pick(*y[f], d.folds[f].evaluation);
    for (std::size_t k = 0; k < fit.names.size(); ++k) out[k] += 0.5 * binary_log_loss(fit.eval[k][f], ye);
  }
  return out;
}

inline void check_runs(const char* fn, const std::vector<AuditRunInput>& runs, const ProbeAuditOptions& po) {
  if (runs.empty()) throw_input(fn, "no runs given");
  validate_probe_inputs(runs, po);
}

/// The refits' training settings (the subsample fields are set by the pipeline: audit_pipeline.cpp).
inline RefitSettings refit_settings(const MlpProbeOptions& m, bool warm_start) {
  return {m.restarts, m.max_epochs, m.patience, m.batch_size, m.lr, warm_start, 0, {}};
}

inline double quantile_of(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, q);
}

}  // namespace arcal::refit_detail
