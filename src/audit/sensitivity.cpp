#include "audit/sensitivity.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/check.hpp"
#include "core/rng.hpp"
#include "stats/kernels.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {
double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

std::array<double, 4> basis(double z) {
  const double u = std::min(std::max(z, -3.0), 3.0) / 3.0;
  return {1.0, u, u * u, u * u * u};
}

/// Solves the 4×4 symmetric positive-definite system A x = b by Gaussian elimination with partial
/// pivoting (A is the penalised Fisher information, so it is well conditioned for ridge > 0).
std::array<double, 4> solve4(std::array<std::array<double, 4>, 4> a, std::array<double, 4> b) {
  for (int c = 0; c < 4; ++c) {
    int piv = c;
    for (int r = c + 1; r < 4; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    std::swap(a[c], a[piv]);
    std::swap(b[c], b[piv]);
    if (a[c][c] == 0.0) return {0, 0, 0, 0};  // singular (ridge 0 and a degenerate z): no step
    for (int r = c + 1; r < 4; ++r) {
      const double f = a[r][c] / a[c][c];
      for (int k = c; k < 4; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  std::array<double, 4> x{};
  for (int r = 3; r >= 0; --r) {
    double s = b[r];
    for (int k = r + 1; k < 4; ++k) s -= a[r][k] * x[k];
    x[r] = s / a[r][r];
  }
  return x;
}
}  // namespace

std::vector<double> nw_confidence_reference(const std::vector<double>& confidence, const std::vector<double>& correct,
                                            const std::vector<std::size_t>& fit) {
  const char* fn = "nw_confidence_reference";
  check_same_size(fn, "correct", correct.size(), "confidence", confidence.size());
  if (fit.size() < 2) throw_input(fn, "fit has " + std::to_string(fit.size()) + " rows, but needs at least 2");
  const std::size_t n = confidence.size();
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    check_probability(fn, "confidence", i, confidence[i]);
    const double c = std::min(std::max(confidence[i], 1e-6), 1.0 - 1e-6);
    x[i] = std::log(c) - std::log1p(-c);
  }
  std::vector<double> xf, yf;
  for (std::size_t k = 0; k < fit.size(); ++k) {
    if (fit[k] >= n) throw_index(fn, "fit", k, std::to_string(fit[k]), "< n = " + std::to_string(n));
    const double y = correct[fit[k]];
    if (y != 0.0 && y != 1.0) throw_index(fn, "correct", fit[k], std::to_string(y), "0 or 1");
    xf.push_back(x[fit[k]]);
    yf.push_back(y);
  }
  const double h = scott_bandwidth(xf, 1, 1.0);
  NadarayaWatsonOptions nw;  // pseudo-count 1 towards the fitted rows' accuracy, clip [1e-4, 1 − 1e-4]
  return NadarayaWatson(xf, yf, 1, {h}, nw).predict(x);
}

std::vector<double> standardise(const std::vector<double>& x, const char* fn, const char* name) {
  if (x.size() < 2) throw_input(fn, std::string(name) + " has fewer than 2 values");
  double m = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    check_finite(fn, name, i, x[i]);
    m += x[i];
  }
  m /= double(x.size());
  double v = 0.0;
  for (double a : x) v += (a - m) * (a - m);
  const double sd = std::sqrt(v / double(x.size() - 1));
  if (!(sd > 0)) throw_input(fn, std::string(name) + " is constant, so it cannot be standardised");
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = (x[i] - m) / sd;
  return out;
}

CorrectionProbe fit_correction_probe(const std::vector<double>& q, const std::vector<double>& z,
                                     const std::vector<double>& y, double ridge) {
  const char* fn = "fit_correction_probe";
  check_same_size(fn, "z", z.size(), "q", q.size());
  check_same_size(fn, "y", y.size(), "q", q.size());
  if (q.empty()) throw_input(fn, "q is empty");
  if (!(ridge >= 0.0) || !std::isfinite(ridge))
    throw_input(fn, "ridge is " + std::to_string(ridge) + ", but must be finite and >= 0");
  std::vector<double> offset(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (!(q[i] > 0.0 && q[i] < 1.0)) throw_index(fn, "q", i, std::to_string(q[i]), "in (0, 1)");
    check_finite(fn, "z", i, z[i]);
    check_probability(fn, "y", i, y[i]);
    offset[i] = std::log(q[i]) - std::log1p(-q[i]);
  }
  CorrectionProbe out;
  for (int it = 0; it < 50; ++it) {
    std::array<std::array<double, 4>, 4> h{};
    std::array<double, 4> g{};
    for (int a = 0; a < 4; ++a) {
      h[a][a] = ridge;
      g[a] = -ridge * out.beta[a];
    }
    for (std::size_t i = 0; i < q.size(); ++i) {
      const auto b = basis(z[i]);
      double eta = offset[i];
      for (int a = 0; a < 4; ++a) eta += out.beta[a] * b[a];
      const double p = sigmoid(eta), w = p * (1.0 - p);
      for (int a = 0; a < 4; ++a) {
        g[a] += (y[i] - p) * b[a];
        for (int c = 0; c < 4; ++c) h[a][c] += w * b[a] * b[c];
      }
    }
    const auto step = solve4(h, g);
    double size = 0.0;
    for (int a = 0; a < 4; ++a) {
      out.beta[a] += step[a];
      size = std::max(size, std::abs(step[a]));
    }
    out.iterations = it + 1;
    if (size < 1e-10) break;
  }
  return out;
}

double choose_correction_ridge(const std::vector<double>& q, const std::vector<double>& z, const std::vector<double>& y,
                               const std::array<double, 6>& ridges, int folds, std::uint64_t seed) {
  const char* fn = "choose_correction_ridge";
  if (folds < 2 || q.size() < std::size_t(folds))
    throw_input(fn, "needs >= 2 folds and at least as many examples (" + std::to_string(q.size()) + ")");
  const auto fold = kfold_assignment(q.size(), folds, seed);
  double best = ridges[0], best_loss = std::numeric_limits<double>::infinity();
  for (double ridge : ridges) {
    double loss = 0;
    for (int f = 0; f < folds; ++f) {
      std::vector<double> qt, zt, yt, qv, zv, yv;
      for (std::size_t i = 0; i < q.size(); ++i) {
        auto [qq, zz, yy] = fold[i] == f ? std::tie(qv, zv, yv) : std::tie(qt, zt, yt);
        qq.push_back(q[i]);
        zz.push_back(z[i]);
        yy.push_back(y[i]);
      }
      const auto p = apply_correction_probe(fit_correction_probe(qt, zt, yt, ridge), qv, zv);
      for (std::size_t i = 0; i < p.size(); ++i) {
        const double pp = std::min(std::max(p[i], 1e-15), 1.0 - 1e-15);
        loss -= yv[i] * std::log(pp) + (1.0 - yv[i]) * std::log1p(-pp);
      }
    }
    if (loss <= best_loss) {
      best_loss = loss;
      best = ridge;
    }
  }
  return best;
}

std::vector<double> apply_correction_probe(const CorrectionProbe& probe, const std::vector<double>& q,
                                           const std::vector<double>& z) {
  const char* fn = "apply_correction_probe";
  check_same_size(fn, "z", z.size(), "q", q.size());
  std::vector<double> out(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (!(q[i] > 0.0 && q[i] < 1.0)) throw_index(fn, "q", i, std::to_string(q[i]), "in (0, 1)");
    check_finite(fn, "z", i, z[i]);
    const auto b = basis(z[i]);
    double eta = std::log(q[i]) - std::log1p(-q[i]);
    for (int a = 0; a < 4; ++a) eta += probe.beta[a] * b[a];
    out[i] = sigmoid(eta);
  }
  return out;
}

std::vector<RecoveryEstimate> summarise_recovery(const RecoveryUnits& u, const std::vector<std::string>& probes,
                                                 double effect_nats, int draws, std::uint64_t seed) {
  const char* fn = "summarise_recovery";
  const std::size_t m = u.loss_reference.size();
  if (m == 0) throw_input(fn, "no units");
  check_same_size(fn, "loss_truth", u.loss_truth.size(), "loss_reference", m);
  check_same_size(fn, "loss_probe", u.loss_probe.size(), "probes", probes.size());
  for (std::size_t k = 0; k < probes.size(); ++k)
    check_same_size(fn, ("loss_probe[" + std::to_string(k) + "]").c_str(), u.loss_probe[k].size(), "units", m);
  if (draws < 1) throw_input(fn, "draws is " + std::to_string(draws) + ", but must be >= 1");
  const bool has_r = effect_nats > 0.0;
  // One shared set of unit resamples for every probe (the same Rng streams as percentile_bootstrap).
  std::vector<std::vector<std::uint32_t>> counts(static_cast<std::size_t>(draws));
  for (int b = 0; b < draws; ++b) bootstrap_counts(m, seed, std::uint64_t(b), counts[std::size_t(b)]);
  std::vector<RecoveryEstimate> out;
  for (std::size_t k = 0; k < probes.size(); ++k) {
    RecoveryEstimate e;
    e.probe = probes[k];
    e.has_recovery = has_r;
    auto stats = [&](const std::vector<std::uint32_t>* w, double& gain, double& rec) {
      double num = 0.0, den = 0.0, tot = 0.0;
      for (std::size_t i = 0; i < m; ++i) {
        const double c = w ? double((*w)[i]) : 1.0;
        num += c * (u.loss_reference[i] - u.loss_probe[k][i]);
        den += c * (u.loss_reference[i] - u.loss_truth[i]);
        tot += c;
      }
      gain = num / tot;
      rec = has_r ? num / den : 0.0;
    };
    stats(nullptr, e.gain, e.recovery);
    std::vector<double> g(static_cast<std::size_t>(draws)), r(static_cast<std::size_t>(draws));
    for (std::size_t b = 0; b < counts.size(); ++b) stats(&counts[b], g[b], r[b]);
    std::sort(g.begin(), g.end());
    std::sort(r.begin(), r.end());
    e.gain_ci = {quantile_sorted(g, 0.025), quantile_sorted(g, 0.975)};
    if (has_r) e.recovery_ci = {quantile_sorted(r, 0.025), quantile_sorted(r, 0.975)};
    out.push_back(std::move(e));
  }
  return out;
}

double monte_carlo_p(double real, const std::vector<double>& null) {
  if (null.empty()) throw_input("monte_carlo_p", "null has no replicates");
  std::size_t ge = 0;
  for (double v : null) ge += v >= real - 1e-12;
  return double(1 + ge) / double(null.size() + 1);
}

double sequential_p(double real, const std::vector<double>& null, std::size_t h) {
  if (h == 0) return monte_carlo_p(real, null);
  if (null.empty()) throw_input("sequential_p", "null has no replicates");
  std::size_t ge = 0;
  for (std::size_t j = 0; j < null.size(); ++j)
    if (null[j] >= real - 1e-12 && ++ge == h) return double(h) / double(j + 1);
  return double(1 + ge) / double(null.size() + 1);
}

std::size_t settling_count(double alpha, std::size_t n) {
  return static_cast<std::size_t>(std::floor(alpha * double(n + 1))) + 1;
}

std::string refit_scope_text(const RefitSettings& r) {
  if (r.subsample == 0 ||
      std::none_of(r.examples.begin(), r.examples.end(), [&](std::size_t e) { return e == r.subsample; }))
    return "";
  std::string list;
  for (std::size_t i = 0; i < r.examples.size(); ++i) list += (i ? ", " : "") + std::to_string(r.examples[i]);
  return "Refits on at most " + std::to_string(r.subsample) +
         " examples per run (a seeded uniform subsample of each larger run, --refit-subsample; examples refitted: " +
         list + "): valid, with the power of that many examples.";
}

}  // namespace arcal
