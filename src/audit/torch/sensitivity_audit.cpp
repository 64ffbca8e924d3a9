#include "audit/torch/sensitivity_audit.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include "audit/injection.hpp"
#include "core/check.hpp"
#include "core/rng.hpp"
#include "stats/bootstrap.hpp"
#include "stats/kernels.hpp"

namespace arcal {

MlpProbeOptions default_refit_mlp_options() {
  MlpProbeOptions o = ProbeAuditOptions::default_probe_mlp_options();
  o.restarts = 1;
  o.patience = 3;
  return o;
}

namespace {

using Fold2 = std::array<std::vector<double>, 2>;

/// Binary log-loss in nats, estimates clipped to [1e-15, 1 − 1e-15] (as calib/metrics.hpp, whose
/// header cannot be included beside audit/diagnostic.hpp).
double binary_log_loss(const std::vector<double>& p, const std::vector<double>& y) {
  double s = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double q = std::min(std::max(p[i], 1e-15), 1.0 - 1e-15);
    s -= y[i] * std::log(q) + (1.0 - y[i]) * std::log1p(-q);
  }
  return s / double(p.size());
}

std::vector<double> pick(const std::vector<double>& v, const std::vector<std::size_t>& idx) {
  std::vector<double> out(idx.size());
  for (std::size_t r = 0; r < idx.size(); ++r) out[r] = v[idx[r]];
  return out;
}

std::vector<double> bernoulli_draw(const std::vector<double>& p, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<double> y(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) y[i] = rng.uniform() < p[i] ? 1.0 : 0.0;
  return y;
}

/// Warm-start weights: every MLP of the design fitted to the soft labels g[f] (a function of the
/// model outputs only, so the starting point carries no routing information), with an empty entry
/// for the linear probe.
std::vector<std::array<MlpWeights, 2>> soft_warm_start(const ProbeDesign& d, const Fold2& g, const MlpProbeOptions& refit) {
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
std::vector<double> refit_losses(const ProbeDesign& d, const ProbeRefit& fit, const std::array<const std::vector<double>*, 2>& y) {
  std::vector<double> out(fit.names.size(), 0.0);
  for (std::size_t f = 0; f < 2; ++f) {
    const auto ye = pick(*y[f], d.folds[f].evaluation);
    for (std::size_t k = 0; k < fit.names.size(); ++k) out[k] += 0.5 * binary_log_loss(fit.eval[k][f], ye);
  }
  return out;
}

/// 2-D Nadaraya-Watson probe on (logit c, z) with Scott bandwidths (multiple 1) of the fitting rows
/// (the AR-CondCal estimator without the bandwidth search), for many label vectors ys[j] ([n] each) at
/// once: the kernel weights depend on the features only, so they are computed once. Returns [j][m].
std::vector<std::vector<double>> nw2d_predict_many(const std::vector<double>& logit_c, const std::vector<double>& z,
                                                   const std::vector<const std::vector<double>*>& ys,
                                                   const SplitIndices& s) {
  const auto lc = pick(logit_c, s.calibration), zc = pick(z, s.calibration);
  std::vector<double> x(2 * lc.size()), q(2 * s.evaluation.size());
  for (std::size_t i = 0; i < lc.size(); ++i) {
    x[2 * i] = lc[i];
    x[2 * i + 1] = zc[i];
  }
  for (std::size_t i = 0; i < s.evaluation.size(); ++i) {
    q[2 * i] = logit_c[s.evaluation[i]];
    q[2 * i + 1] = z[s.evaluation[i]];
  }
  const std::vector<double> h{scott_bandwidth(lc, 2, 1.0), scott_bandwidth(zc, 2, 1.0)};
  std::vector<std::vector<double>> yc(ys.size());
  std::vector<const std::vector<double>*> yp(ys.size());
  for (std::size_t j = 0; j < ys.size(); ++j) {
    yc[j] = pick(*ys[j], s.calibration);
    yp[j] = &yc[j];
  }
  return NadarayaWatson(x, yc[0], 2, h).predict_many(q, yp);
}

void check_runs(const char* fn, const std::vector<AuditRunInput>& runs, const ProbeAuditOptions& po) {
  if (runs.empty()) throw_input(fn, "no runs given");
  validate_probe_inputs(runs, po);
}

RefitSettings refit_settings(const MlpProbeOptions& m, bool warm_start) {
  return {m.restarts, m.max_epochs, m.patience, m.batch_size, m.lr, warm_start};
}

double quantile_of(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, q);
}

}  // namespace

SensitivityResult run_sensitivity_audit(const std::vector<AuditRunInput>& runs, const SensitivityAuditOptions& o) {
  const char* fn = "run_sensitivity_audit";
  check_runs(fn, runs, o.probes);
  if (o.draws < 1) throw_input(fn, "draws is " + std::to_string(o.draws) + ", but must be >= 1");
  if (o.effects.empty()) throw_input(fn, "effects is empty");
  for (std::size_t e = 0; e < o.effects.size(); ++e)
    if (!(o.effects[e] >= 0.0) || !std::isfinite(o.effects[e]))
      throw_index(fn, "effects", e, std::to_string(o.effects[e]), "finite and >= 0");
  const auto te = std::find(o.effects.begin(), o.effects.end(), o.threshold_effect);
  if (te == o.effects.end() || o.threshold_effect <= 0.0)
    throw_input(fn, "threshold_effect " + std::to_string(o.threshold_effect) + " must be one of the (positive) effects");
  for (std::size_t r = 0; r < runs.size(); ++r)
    if (o.statistic >= runs[r].statistics.size())
      throw_input(fn, "run[" + std::to_string(r) + "] '" + runs[r].run + "' has " + std::to_string(runs[r].statistics.size()) +
                          " statistics; statistic index " + std::to_string(o.statistic) + " is out of range");
  const auto t0 = std::chrono::steady_clock::now();

  SensitivityResult res;
  res.statistic = runs[0].statistic_names[o.statistic];
  res.effects = o.effects;
  res.draws = o.draws;
  res.bootstrap_draws = o.bootstrap_draws;
  res.threshold = o.threshold;
  res.threshold_effect = o.threshold_effect;
  res.correction_ridge = o.correction_ridge;
  res.seed = o.probes.seed;
  res.refit = refit_settings(o.refit, o.warm_start);

  std::vector<std::string> names;
  std::vector<RecoveryUnits> units(o.effects.size());
  std::vector<std::vector<double>> epochs(o.effects.size());
  res.by_effect.resize(o.effects.size());
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    res.runs.push_back(run.run);
    const auto d = make_probe_design(run, r, o.probes);
    const auto z = standardise(run.statistics[o.statistic], fn, "statistic");
    std::vector<double> t(z.size());
    for (std::size_t i = 0; i < z.size(); ++i) t[i] = std::tanh(z[i]);
    Fold2 q;
    for (std::size_t f = 0; f < 2; ++f) q[f] = nw_confidence_reference(run.confidence, run.correct, d.folds[f].calibration);
    const auto warm = o.warm_start ? soft_warm_start(d, q, o.refit) : std::vector<std::array<MlpWeights, 2>>{};
    const std::uint64_t sens_seed = derive_seed(d.run_seed, 0x5E45);
    std::vector<Fold2> truth(o.effects.size());
    for (std::size_t e = 0; e < o.effects.size(); ++e) {
      auto& eff = res.by_effect[e];
      eff.effect_nats = o.effects[e];
      for (std::size_t f = 0; f < 2; ++f) {
        // δ is solved on the evaluation half, where the oracle gain is scored, and applied everywhere.
        const auto qe = pick(q[f], d.folds[f].evaluation), tev = pick(t, d.folds[f].evaluation);
        const double delta = solve_injection_delta(qe, tev, o.effects[e]);
        eff.delta.push_back(delta);
        eff.oracle_gain.push_back(injection_gain(qe, tev, delta));
        truth[e][f] = injected_probability(q[f], t, delta);
      }
    }
    // Every (effect, draw) label set of the run is refitted in one stacked fit per probe and fold:
    // all share the run's refit seeds (inner split, batch order) and the warm start.
    std::vector<Fold2> ys;
    for (std::size_t e = 0; e < o.effects.size(); ++e)
      for (int draw = 0; draw < o.draws; ++draw) {
        const std::uint64_t s = derive_seed(derive_seed(sens_seed, e), std::uint64_t(draw));
        ys.push_back({bernoulli_draw(truth[e][0], derive_seed(s, 0)), bernoulli_draw(truth[e][1], derive_seed(s, 1))});
      }
    std::vector<std::array<const std::vector<double>*, 2>> yp;
    for (const auto& y : ys) yp.push_back({&y[0], &y[1]});
    const auto fits = fit_probe_design_replicates(d, yp, o.refit, {derive_seed(sens_seed, 10), derive_seed(sens_seed, 11)},
                                                  o.warm_start ? &warm : nullptr);
    std::array<std::vector<std::vector<double>>, 2> nw;  // [fold][label set] 2-D NW on the evaluation half
    for (std::size_t f = 0; f < 2; ++f) {
      std::vector<const std::vector<double>*> yf;
      for (const auto& y : ys) yf.push_back(&y[f]);
      nw[f] = nw2d_predict_many(d.columns[0], z, yf, d.folds[f]);
    }
    for (std::size_t e = 0; e < o.effects.size(); ++e) {
      for (int draw = 0; draw < o.draws; ++draw) {
        const std::size_t j = e * std::size_t(o.draws) + std::size_t(draw);
        const auto& y = ys[j];
        const auto& fit = fits[j];
        auto losses = refit_losses(d, fit, {&y[0], &y[1]});
        double lq = 0, ls = 0, lnw = 0, lcorr = 0;
        for (std::size_t f = 0; f < 2; ++f) {
          const auto& sp = d.folds[f];
          const auto ye = pick(y[f], sp.evaluation);
          lq += 0.5 * binary_log_loss(pick(q[f], sp.evaluation), ye);
          ls += 0.5 * binary_log_loss(pick(truth[e][f], sp.evaluation), ye);
          lnw += 0.5 * binary_log_loss(nw[f][j], ye);
          const auto cp = fit_correction_probe(pick(q[f], sp.calibration), pick(z, sp.calibration),
                                               pick(y[f], sp.calibration), o.correction_ridge);
          lcorr += 0.5 * binary_log_loss(apply_correction_probe(cp, pick(q[f], sp.evaluation), pick(z, sp.evaluation)), ye);
        }
        losses.push_back(lnw);
        losses.push_back(lcorr);
        losses.push_back(ls);  // the oracle: p* itself
        if (names.empty()) {
          names = fit.names;
          for (const char* extra : {"nw_2d", "correction", "oracle"}) names.push_back(extra);
          for (auto& u : units) u.loss_probe.assign(names.size(), {});
          for (auto& ep : epochs) ep.assign(names.size(), 0.0);
        }
        auto& u = units[e];
        u.loss_reference.push_back(lq);
        u.loss_truth.push_back(ls);
        for (std::size_t k = 0; k < names.size(); ++k) u.loss_probe[k].push_back(losses[k]);
        for (std::size_t k = 0; k < fit.mean_epochs.size(); ++k) epochs[e][k] += fit.mean_epochs[k];
      }
    }
    if (o.progress) o.progress(r + 1, runs.size());
  }
  const double units_n = double(runs.size()) * o.draws;
  for (std::size_t e = 0; e < o.effects.size(); ++e) {
    auto& eff = res.by_effect[e];
    eff.probes = summarise_recovery(units[e], names, o.effects[e], o.bootstrap_draws,
                                    derive_seed(derive_seed(o.probes.seed, 0x5E45B), e));
    for (std::size_t k = 0; k < names.size(); ++k) eff.probes[k].mean_epochs = epochs[e][k] / units_n;
    double g = 0;
    for (std::size_t i = 0; i < units[e].loss_reference.size(); ++i) g += units[e].loss_reference[i] - units[e].loss_truth[i];
    eff.mean_oracle_loss_gain = g / units_n;
  }
  const auto& at = res.by_effect[std::size_t(te - o.effects.begin())];
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", o.threshold_effect);
  for (const auto& p : at.probes) {
    if (p.probe == "oracle") continue;
    res.verdicts.push_back({p.probe, p.recovery, p.recovery_ci,
                            p.recovery >= o.threshold ? std::string("absent (the audit would have seen ") + buf + " nats)"
                                                      : std::string("not detected (underpowered)")});
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

ExactNullResult run_exact_null_audit(const std::vector<AuditRunInput>& runs, const ExactNullAuditOptions& o) {
  const char* fn = "run_exact_null_audit";
  check_runs(fn, runs, o.probes);
  if (o.replicates < 1) throw_input(fn, "replicates is " + std::to_string(o.replicates) + ", but must be >= 1");
  if (o.variants.empty()) throw_input(fn, "variants is empty");
  for (std::size_t v = 0; v < o.variants.size(); ++v)
    if (o.variants[v] != "confidence" && o.variants[v] != "full_logit")
      throw_index(fn, "variants", v, "'" + o.variants[v] + "'", "\"confidence\" or \"full_logit\"");
  const auto t0 = std::chrono::steady_clock::now();
  ExactNullResult res;
  res.variants = o.variants;
  res.replicates = o.replicates;
  res.seed = o.probes.seed;
  res.refit = refit_settings(o.refit, o.warm_start);

  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    const auto d = make_probe_design(run, r, o.probes);
    for (std::size_t v = 0; v < o.variants.size(); ++v) {
      const auto& variant = o.variants[v];
      Fold2 g;
      if (variant == "confidence") {
        for (std::size_t f = 0; f < 2; ++f) g[f] = nw_confidence_reference(run.confidence, run.correct, d.folds[f].calibration);
      } else {
        const auto it = std::find_if(d.mlps.begin(), d.mlps.end(), [](const ProbeDesign::Spec& s) { return s.name == "full_logit"; });
        if (it == d.mlps.end()) throw_input(fn, "variant \"full_logit\" needs the full_logit probe, which options.probes.only leaves out");
        std::vector<std::size_t> all(d.n);
        for (std::size_t i = 0; i < d.n; ++i) all[i] = i;
        for (std::size_t f = 0; f < 2; ++f) {
          const auto& cal = d.folds[f].calibration;
          std::vector<double> xc(cal.size() * it->cols.size()), xa(d.n * it->cols.size());
          for (std::size_t i = 0; i < cal.size(); ++i)
            for (std::size_t k = 0; k < it->cols.size(); ++k) xc[i * it->cols.size() + k] = d.columns[it->cols[k]][cal[i]];
          for (std::size_t i = 0; i < d.n; ++i)
            for (std::size_t k = 0; k < it->cols.size(); ++k) xa[i * it->cols.size() + k] = d.columns[it->cols[k]][i];
          MlpProbeOptions mo = o.probes.mlp;
          mo.hidden1 = it->hidden1;
          mo.hidden2 = it->hidden2;
          mo.seed = derive_seed(d.run_seed, 1000 + f);  // the probe audit's own full-logit fit
          g[f] = fit_predict_mlp_probe(xc, cal.size(), it->cols.size(), pick(run.correct, cal), xa, d.n, mo);
          // The MLP's float32 sigmoid can reach 0 or 1; the null's truth stays strictly inside.
          for (auto& p : g[f]) p = std::min(std::max(p, 1e-6), 1.0 - 1e-6);
        }
      }
      const auto warm = o.warm_start ? soft_warm_start(d, g, o.refit) : std::vector<std::array<MlpWeights, 2>>{};
      const auto* wp = o.warm_start ? &warm : nullptr;
      const std::uint64_t vseed = derive_seed(derive_seed(d.run_seed, 0x0E11), v);
      auto gains = [&](const std::vector<std::string>& names, const std::vector<double>& loss) {
        std::vector<double> out;
        for (const auto& c : kProbeComparisons) {
          const auto a = std::find(names.begin(), names.end(), c.probe), b = std::find(names.begin(), names.end(), c.control);
          if (a == names.end() || b == names.end()) continue;
          out.push_back(loss[std::size_t(b - names.begin())] - loss[std::size_t(a - names.begin())]);
        }
        return out;
      };
      // The real labels are fitted in the same stacked fit as the null replicates (the last member):
      // the very procedure, seeds, split, batch order and warm start, so real and null gains are
      // exchangeable under the null.
      std::vector<Fold2> ys;
      for (int j = 0; j < o.replicates; ++j) {
        const std::uint64_t s = derive_seed(vseed, std::uint64_t(j));
        ys.push_back({bernoulli_draw(g[0], derive_seed(s, 0)), bernoulli_draw(g[1], derive_seed(s, 1))});
      }
      std::vector<std::array<const std::vector<double>*, 2>> yp;
      for (const auto& y : ys) yp.push_back({&y[0], &y[1]});
      yp.push_back({&run.correct, &run.correct});
      const auto fits = fit_probe_design_replicates(d, yp, o.refit, {derive_seed(vseed, 10), derive_seed(vseed, 11)}, wp);
      const auto& real_fit = fits.back();
      const auto real = gains(real_fit.names, refit_losses(d, real_fit, {&run.correct, &run.correct}));
      ExactNullRun out;
      out.run = run.run;
      out.variant = variant;
      for (const auto& c : kProbeComparisons) {
        const auto& nm = real_fit.names;
        if (std::find(nm.begin(), nm.end(), c.probe) == nm.end() || std::find(nm.begin(), nm.end(), c.control) == nm.end()) continue;
        ExactNullComparison ec;
        ec.comparison = c.name;
        ec.probe = c.probe;
        ec.control = c.control;
        ec.real_gain = real[out.comparisons.size()];
        out.comparisons.push_back(std::move(ec));
      }
      for (int j = 0; j < o.replicates; ++j) {
        const auto& y = ys[std::size_t(j)];
        const auto& fit = fits[std::size_t(j)];
        const auto ng = gains(fit.names, refit_losses(d, fit, {&y[0], &y[1]}));
        for (std::size_t c = 0; c < out.comparisons.size(); ++c) out.comparisons[c].null_gain.push_back(ng[c]);
      }
      for (auto& c : out.comparisons) {
        double m = 0;
        for (double x : c.null_gain) m += x;
        c.null_mean = m / double(c.null_gain.size());
        c.null_q95 = quantile_of(c.null_gain, 0.95);
        c.p = monte_carlo_p(c.real_gain, c.null_gain);
      }
      res.runs.push_back(std::move(out));
      if (o.progress) o.progress(r * o.variants.size() + v + 1, runs.size() * o.variants.size());
    }
  }
  // Pooled over runs: replicate j's mean over runs is one draw of the null of the mean gain.
  for (const auto& variant : o.variants) {
    std::vector<const ExactNullRun*> rs;
    for (const auto& r : res.runs)
      if (r.variant == variant) rs.push_back(&r);
    for (std::size_t c = 0; c < rs[0]->comparisons.size(); ++c) {
      ExactNullPooled p;
      p.variant = variant;
      p.comparison = rs[0]->comparisons[c].comparison;
      p.runs = rs.size();
      std::vector<double> null(std::size_t(o.replicates), 0.0);
      for (const auto* r : rs) {
        p.real_mean_gain += r->comparisons[c].real_gain / double(rs.size());
        for (int j = 0; j < o.replicates; ++j) null[std::size_t(j)] += r->comparisons[c].null_gain[std::size_t(j)] / double(rs.size());
      }
      double m = 0;
      for (double x : null) m += x;
      p.null_mean = m / double(null.size());
      p.null_q95 = quantile_of(null, 0.95);
      p.p = monte_carlo_p(p.real_mean_gain, null);
      res.pooled.push_back(std::move(p));
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace arcal
