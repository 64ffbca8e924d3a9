// The probe audit of method.md §6.3-6.4 for one or many runs: on the class-stratified 2-fold
// cross-fit halves of AR-CondCal, fits the linear baseline (Platt on logit c), the full-vector MLP on
// (logit c, profile), its capacity-matched confidence-only control, globally and within-bin shuffled
// profile twins, the predictive-entropy MLP, and the full-logit reference on the sorted probabilities
// with its routing-augmented twin; scores out-of-fold P(correct), compares each probe with its matched
// control (audit/probe_compare.hpp) and tests the comparisons across runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "audit/audit.hpp"
#include "audit/probe_compare.hpp"
#include "audit/torch/mlp_probe.hpp"

namespace arcal {

struct ProbeAuditOptions {
  /// Architecture and training of every MLP; mlp.seed is ignored (seeds derive from `seed`).
  MlpProbeOptions mlp = default_probe_mlp_options();
  std::size_t shuffle_bins = 15;  ///< equal-width confidence bins of the within-bin shuffle
  std::size_t ece_bins = 15;
  int bootstrap_draws = 1000;     ///< within-run paired bootstrap and across-run bootstrap
  double alpha = 0.05;            ///< verdict level on Holm-adjusted p
  std::uint64_t seed = 0;         ///< the audit seed: run r uses derive_seed(seed, r), as AR-CondCal
  /// Probes to fit (kProbeNames order is kept); empty = all. Comparisons whose probe or control is
  /// not fitted are skipped (run_probe_family needs all of them).
  std::vector<std::string> only;

  /// The audit's training defaults (docs/method.md §6.7): 5 restarts, lr 3e-3, batch 512, at most
  /// 100 epochs, patience 5.
  static MlpProbeOptions default_probe_mlp_options();
};

/// Probe names in fitting order.
inline constexpr std::array<const char*, 8> kProbeNames{{"linear", "full_vector", "capacity_matched",
                                                         "shuffled_global", "shuffled_within_bins",
                                                         "predictive_entropy", "full_logit", "full_logit_routing"}};

/// Checks every run's probe inputs (the checks of run_probes) before any computation, so the CLI can
/// refuse bad input before the diagnostic runs. Throws InputError naming the run, array and index.
void validate_probe_inputs(const std::vector<AuditRunInput>& runs, const ProbeAuditOptions& options);

/// Probes and within-run comparisons of one run (run_index selects the run's seed stream).
/// Needs run.profile [n, P >= 1] and run.sorted_probs [n, classes]; throws InputError naming the run,
/// array and index on missing or mismatched arrays, non-finite values, a constant profile column, or
/// an unknown name in options.only.
RunProbeResult run_probes(const AuditRunInput& run, std::size_t run_index, const ProbeAuditOptions& options);

/// run_probes for every run, then across_run_probe_tests. Records the options and the wall time.
ProbeFamily run_probe_family(const std::vector<AuditRunInput>& runs, const ProbeAuditOptions& options);

}  // namespace arcal
