#include "audit/audit_pipeline.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "audit/probes.hpp"
#include "audit/exact_null.hpp"
#include "audit/sensitivity_audit.hpp"
#include "audit/run_input.hpp"
#include "core/rng.hpp"
#include "core/progress.hpp"
#include "ops/blas.hpp"

namespace arcal {

namespace {

// One options struct (FullAuditOptions, read by its table) reaches every step. The sensitivity audit
// and the exact null carry it whole and read their options from it; the components below, which are
// also used on their own (the diagnostic, AR-CondCal, the probe design, the refits' MLP recipe), take
// their share here, the one place a shared value (seed, alpha, threads) is handed to each of them.

AuditOptions audit_options(const FullAuditOptions& o) {
  AuditOptions opt;
  opt.diagnostic.permutations = o.permutations;
  opt.diagnostic.seed = o.seed;
  opt.diagnostic.bins = o.bins;
  opt.diagnostic.scheme = o.equal_mass ? BinScheme::equal_mass : BinScheme::equal_width;
  opt.diagnostic.alpha = o.alpha;
  opt.smallest_effect = o.smallest_effect;
  opt.condcal.seed = o.seed;
  opt.run_condcal = o.condcal;
  return opt;
}

int workers(const FullAuditOptions& o) {
  return o.threads > 0 ? o.threads : std::max(1, int(std::thread::hardware_concurrency()));
}

ProbeAuditOptions probe_options(const FullAuditOptions& o) {
  ProbeAuditOptions popt;
  popt.seed = o.seed;
  popt.alpha = o.alpha;
  popt.mlp.restarts = o.probe_restarts;
  popt.repeats = o.probe_repeats;
  popt.mlp.threads = workers(o);
  return popt;
}

/// The refits' training recipe (sensitivity, exact null): the refit defaults with the options' restarts,
/// patience and workers.
MlpProbeOptions refit_options(const FullAuditOptions& o) {
  MlpProbeOptions refit = default_refit_mlp_options();
  refit.restarts = o.refit_restarts;
  refit.patience = o.refit_patience;
  refit.threads = workers(o);
  return refit;
}

void validate_checked(const std::vector<AuditRunInput>& runs, const FullAuditOptions& o) {
  validate_audit_inputs(runs, audit_options(o));
  if (o.probes || o.sensitivity || o.exact_null) validate_probe_inputs(runs, probe_options(o));
}

/// The refits' runs (sensitivity, exact null): each run of more than refit_subsample examples cut to a
/// seeded subsample of that many (a few hundred probe refits per run are out of reach at N = 10^5-10^6;
/// the nulls hold on any subsample drawn without looking at routing or correctness, so only power is
/// lost), the others copied whole. Empty when no run is cut (the caller then refits `runs`).
std::vector<AuditRunInput> runs_for_refits(const std::vector<AuditRunInput>& runs, const FullAuditOptions& o) {
  const std::size_t cap = std::size_t(o.refit_subsample);
  std::vector<AuditRunInput> cut;
  if (cap == 0 ||
      std::none_of(runs.begin(), runs.end(), [&](const AuditRunInput& r) { return r.confidence.size() > cap; }))
    return cut;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    cut.push_back(subsample_run(runs[r], cap, derive_seed(o.seed, 0x5AB5 + r)));
    if (o.progress && runs[r].confidence.size() > cap)
      std::fprintf(stderr, "refits on %zu of %zu examples of %s (--refit-subsample)\n", cap, runs[r].confidence.size(),
                   runs[r].run.c_str());
  }
  return cut;
}

}  // namespace

void validate_full_audit(const std::vector<AuditRunInput>& runs, const FullAuditOptions& o) {
  auto checked = runs;  // the integrity step edits its input (dropped columns, duplicates)
  check_integrity(checked, o.drop_duplicates);
  validate_checked(checked, o);
}

AuditResults run_full_audit(std::vector<AuditRunInput> runs, const FullAuditOptions& o) {
  IntegrityResult integrity = check_integrity(runs, o.drop_duplicates);
  if (o.progress)
    for (const auto& note : integrity.notes) std::fprintf(stderr, "integrity: %s\n", note.c_str());
  validate_checked(runs, o);
  const ProbeAuditOptions popt = probe_options(o);
  const MlpProbeOptions refit = refit_options(o);
  if (o.progress)
    std::fprintf(stderr, "auditing %zu runs x %zu statistics (R = %d)\n", runs.size(),
                 runs.empty() ? std::size_t{0} : runs[0].statistics.size(), o.permutations);
  AuditResults res = run_audit(runs, audit_options(o));
  // Small MLPs gain nothing from the BLAS's own threads: the parallelism is one fit per worker thread.
  // The guard restores the BLAS's thread count on the way out (the Python module runs inside a user's
  // process, whose settings the audit must not change).
  BlasThreadsGuard threads_guard(1);
  if (o.probes) {
    if (o.progress)
      std::fprintf(stderr, "probes: %zu runs x 9 MLPs x %d repeated 2-fold cross-fits x %d restarts\n", runs.size(),
                   o.probe_repeats, o.probe_restarts);
    res.probes = run_probe_family(runs, popt);
    res.has_probes = true;
  }
  const std::vector<AuditRunInput> cut =
      (o.sensitivity || o.exact_null) ? runs_for_refits(runs, o) : std::vector<AuditRunInput>{};
  const std::vector<AuditRunInput>& refit_runs = cut.empty() ? runs : cut;
  std::vector<std::size_t> examples;
  for (const auto& r : refit_runs) examples.push_back(r.confidence.size());
  auto record = [&](RefitSettings& r) {
    r.subsample = std::size_t(o.refit_subsample);
    r.examples = examples;
  };
  if (o.sensitivity) {
    SensitivityAuditOptions so;
    so.probes = popt;
    so.refit = refit;
    so.audit = o;
    if (o.progress)
      std::fprintf(stderr, "sensitivity: %zu runs x %zu effects x %d draws, every probe refitted\n", runs.size(),
                   o.sensitivity_effects.size(), o.sensitivity_draws);
    ProgressBar bar("sensitivity (runs)", static_cast<long long>(runs.size()), o.progress, stderr);
    so.progress = [&](std::size_t done, std::size_t) { bar.update(static_cast<long long>(done)); };
    res.sensitivity = run_sensitivity_audit(refit_runs, so);
    record(res.sensitivity.refit);
    bar.finish();
    res.has_sensitivity = true;
  }
  // The exact null permutes routing between single examples of matched groups: with clustered
  // (dependent) examples that null is too narrow, as the diagnostic's token-level permutation is
  // (docs/audit_validation.md), and there is no cluster-level version of it; it does not run, and
  // the verdict's dependence step is the clustered diagnostic.
  const bool clustered =
      std::any_of(runs.begin(), runs.end(), [](const AuditRunInput& r) { return !r.cluster.empty(); });
  if (o.exact_null && clustered)
    integrity.notes.push_back(
        "exact null not run: the runs carry cluster ids (dependent examples, method.md §6.9) and its "
        "permutation moves single examples; dependence is decided by the clustered diagnostic");
  if (o.exact_null && !clustered) {
    ExactNullAuditOptions xo;
    xo.probes = popt;
    xo.refit = refit;
    xo.audit = o;
    if (o.progress)
      std::fprintf(stderr, "exact null: %zu runs x %zu variants x %d replicates, every probe refitted\n", runs.size(),
                   o.null_variants.size(), o.null_replicates);
    ProgressBar bar("exact null (runs x variants x nulls)",
                    static_cast<long long>(runs.size() * o.null_variants.size() * (o.null_model_based ? 2 : 1)),
                    o.progress, stderr);
    xo.progress = [&](std::size_t done, std::size_t) { bar.update(static_cast<long long>(done)); };
    res.exact_null = run_exact_null_audit(refit_runs, xo);
    record(res.exact_null.refit);
    bar.finish();
    res.has_exact_null = true;
  }
  res.integrity = std::move(integrity);
  res.settings = o;
  res.has_settings = true;
  res.verdict = make_verdict(res);
  return res;
}

}  // namespace arcal
