#include "calib/calibrators.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <functional>
#include <numeric>

#include "calib/binning.hpp"
#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/rng.hpp"

namespace arcal {

namespace {

void check_logits(const char* fn, const std::vector<double>& z, std::size_t n, std::size_t k,
                  const std::vector<std::int64_t>& labels) {
  if (n == 0) throw_input(fn, "no examples (N = 0)");
  if (k < 2) throw_input(fn, "K is " + std::to_string(k) + ", but must be >= 2");
  check_same_size(fn, "logits", z.size(), "N*K", n * k);
  check_same_size(fn, "labels", labels.size(), "N", n);
  for (std::size_t i = 0; i < z.size(); ++i) check_finite(fn, "logits", i, z[i]);
  for (std::size_t i = 0; i < n; ++i) check_label(fn, "labels", i, labels[i], static_cast<long long>(k));
}

void check_conf(const char* fn, const std::vector<double>& c, const std::vector<double>& a) {
  check_same_size(fn, "conf", c.size(), "correct", a.size());
  if (c.empty()) throw_input(fn, "no examples (N = 0)");
  for (std::size_t i = 0; i < c.size(); ++i) {
    check_probability(fn, "conf", i, c[i]);
    check_probability(fn, "correct", i, a[i]);
  }
}

// For one row and inverse temperature beta: logsumexp(beta z), E_p[z], Var_p[z].
void row_moments(const double* z, std::size_t k, double beta, double& lse, double& mean, double& var) {
  double m = -INFINITY;
  for (std::size_t j = 0; j < k; ++j) m = std::max(m, beta * z[j]);
  double s = 0, s1 = 0, s2 = 0;
  for (std::size_t j = 0; j < k; ++j) {
    const double e = std::exp(beta * z[j] - m);
    s += e;
    s1 += e * z[j];
    s2 += e * z[j] * z[j];
  }
  lse = m + std::log(s);
  mean = s1 / s;
  var = std::max(s2 / s - mean * mean, 0.0);
}

double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }
double logit_clipped(double c) {
  const double p = std::min(std::max(c, 1e-12), 1.0 - 1e-12);
  return std::log(p / (1.0 - p));
}

// Minimal L-BFGS with backtracking Armijo line search. f returns the value and fills the gradient.
struct LbfgsResult {
  bool converged = false;
  int iterations = 0;
  double value = 0;
};
LbfgsResult lbfgs(std::vector<double>& x,
                  const std::function<double(const std::vector<double>&, std::vector<double>&)>& f, int max_iter,
                  double gtol) {
  const std::size_t d = x.size();
  std::vector<double> g(d), gn(d), xn(d), dir(d);
  double fx = f(x, g);
  std::deque<std::vector<double>> S, Y;
  std::deque<double> rho;
  LbfgsResult r;
  for (int it = 0; it < max_iter; ++it) {
    double gmax = 0;
    for (double v : g) gmax = std::max(gmax, std::fabs(v));
    if (gmax < gtol) {
      r.converged = true;
      r.iterations = it;
      r.value = fx;
      return r;
    }
    // two-loop recursion
    dir = g;
    std::vector<double> alpha(S.size());
    for (std::size_t m = S.size(); m-- > 0;) {
      alpha[m] = rho[m] * std::inner_product(S[m].begin(), S[m].end(), dir.begin(), 0.0);
      for (std::size_t i = 0; i < d; ++i) dir[i] -= alpha[m] * Y[m][i];
    }
    if (!S.empty()) {
      const double gamma = std::inner_product(S.back().begin(), S.back().end(), Y.back().begin(), 0.0) /
                           std::inner_product(Y.back().begin(), Y.back().end(), Y.back().begin(), 0.0);
      for (auto& v : dir) v *= gamma;
    }
    for (std::size_t m = 0; m < S.size(); ++m) {
      const double beta = rho[m] * std::inner_product(Y[m].begin(), Y[m].end(), dir.begin(), 0.0);
      for (std::size_t i = 0; i < d; ++i) dir[i] += S[m][i] * (alpha[m] - beta);
    }
    for (auto& v : dir) v = -v;
    double slope = std::inner_product(g.begin(), g.end(), dir.begin(), 0.0);
    if (slope >= 0) {  // not a descent direction: restart from steepest descent
      for (std::size_t i = 0; i < d; ++i) dir[i] = -g[i];
      slope = -std::inner_product(g.begin(), g.end(), g.begin(), 0.0);
      S.clear();
      Y.clear();
      rho.clear();
    }
    double step = 1.0, fn = 0;
    bool accepted = false;
    for (int ls = 0; ls < 50; ++ls) {
      for (std::size_t i = 0; i < d; ++i) xn[i] = x[i] + step * dir[i];
      fn = f(xn, gn);
      if (std::isfinite(fn) && fn <= fx + 1e-4 * step * slope) {
        accepted = true;
        break;
      }
      step *= 0.5;
    }
    if (!accepted) {
      r.iterations = it;
      r.value = fx;
      return r;  // line search failed: not converged
    }
    std::vector<double> s(d), y(d);
    for (std::size_t i = 0; i < d; ++i) {
      s[i] = xn[i] - x[i];
      y[i] = gn[i] - g[i];
    }
    const double sy = std::inner_product(s.begin(), s.end(), y.begin(), 0.0);
    if (sy > 1e-12) {
      S.push_back(std::move(s));
      Y.push_back(std::move(y));
      rho.push_back(1.0 / sy);
      if (S.size() > 10) {
        S.pop_front();
        Y.pop_front();
        rho.pop_front();
      }
    }
    const bool tiny = std::fabs(fx - fn) <= 1e-15 * std::max(1.0, std::fabs(fx));
    x = xn;
    g = gn;
    fx = fn;
    if (tiny) {
      r.converged = true;
      r.iterations = it + 1;
      r.value = fx;
      return r;
    }
  }
  r.iterations = max_iter;
  r.value = fx;
  return r;
}

}  // namespace

std::vector<double> softmax_scaled(const std::vector<double>& z, std::size_t n, std::size_t k, double beta) {
  ARCAL_ASSERT(z.size() == n * k, "softmax_scaled shape");
  std::vector<double> p(n * k);
  for (std::size_t i = 0; i < n; ++i) {
    const double* zi = &z[i * k];
    double m = -INFINITY;
    for (std::size_t j = 0; j < k; ++j) m = std::max(m, beta * zi[j]);
    double s = 0;
    for (std::size_t j = 0; j < k; ++j) s += (p[i * k + j] = std::exp(beta * zi[j] - m));
    for (std::size_t j = 0; j < k; ++j) p[i * k + j] /= s;
  }
  return p;
}

TemperatureFit fit_temperature(const std::vector<double>& z, std::size_t n, std::size_t k,
                               const std::vector<std::int64_t>& labels, int max_iter, double tol) {
  check_logits("fit_temperature", z, n, k, labels);
  auto eval = [&](double beta, double& f, double& g, double& h) {
    f = g = h = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double lse, mean, var;
      row_moments(&z[i * k], k, beta, lse, mean, var);
      const double zy = z[i * k + static_cast<std::size_t>(labels[i])];
      f += lse - beta * zy;
      g += mean - zy;
      h += var;
    }
    f /= static_cast<double>(n);
    g /= static_cast<double>(n);
    h /= static_cast<double>(n);
  };
  TemperatureFit fit;
  double beta = 1.0, f, g, h;
  eval(beta, f, g, h);
  for (int it = 1; it <= max_iter; ++it) {
    fit.iterations = it;
    if (!(h > 0)) break;  // all logits equal per row: the NLL does not depend on beta
    double step = -g / h, fn, gn, hn;
    for (int ls = 0; ls < 60; ++ls) {
      eval(beta + step, fn, gn, hn);
      if (std::isfinite(fn) && fn <= f + 1e-12 * std::fabs(f)) break;
      step *= 0.5;
    }
    beta += step;
    f = fn;
    g = gn;
    h = hn;
    if (std::fabs(g) < tol || std::fabs(step) < 1e-12 * std::max(1.0, std::fabs(beta))) {
      fit.converged = std::fabs(g) < std::sqrt(tol);
      break;
    }
  }
  fit.beta = beta;
  fit.temperature = 1.0 / beta;
  fit.nll = f;
  return fit;
}

PlattFit fit_platt(const std::vector<double>& conf, const std::vector<double>& correct, int max_iter) {
  check_conf("fit_platt", conf, correct);
  std::vector<double> x(conf.size());
  for (std::size_t i = 0; i < conf.size(); ++i) x[i] = logit_clipped(conf[i]);
  return fit_platt_on_logits(x, correct, max_iter);
}

PlattFit fit_platt_on_logits(const std::vector<double>& x, const std::vector<double>& correct, int max_iter,
                             double ridge, const PlattFit& prior) {
  const std::size_t n = x.size();
  PlattFit fit;
  if (n == 0) return prior;
  const double a0 = prior.a, b0 = prior.b;
  double a = a0, b = b0;
  auto nll = [&](double aa, double bb) {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double t = aa * x[i] + bb;
      // -[y log s(t) + (1-y) log(1 - s(t))] = log(1 + e^t) - y t, stably
      s += (t > 0 ? t + std::log1p(std::exp(-t)) : std::log1p(std::exp(t))) - correct[i] * t;
    }
    return (s + 0.5 * ridge * ((aa - a0) * (aa - a0) + (bb - b0) * (bb - b0))) / static_cast<double>(n);
  };
  double f = nll(a, b);
  for (int it = 1; it <= max_iter; ++it) {
    fit.iterations = it;
    double ga = ridge * (a - a0), gb = ridge * (b - b0), haa = 1e-12 + ridge, hab = 0, hbb = 1e-12 + ridge;
    for (std::size_t i = 0; i < n; ++i) {
      const double p = sigmoid(a * x[i] + b), r = p - correct[i], w = p * (1 - p);
      ga += r * x[i];
      gb += r;
      haa += w * x[i] * x[i];
      hab += w * x[i];
      hbb += w;
    }
    const double det = haa * hbb - hab * hab;
    if (!(det > 0)) break;
    double da = -(hbb * ga - hab * gb) / det, db = -(haa * gb - hab * ga) / det, fn = f;
    for (int ls = 0; ls < 60; ++ls) {
      fn = nll(a + da, b + db);
      if (fn <= f + 1e-15) break;
      da *= 0.5;
      db *= 0.5;
    }
    a += da;
    b += db;
    const bool small = std::fabs(da) + std::fabs(db) < 1e-10;
    f = fn;
    if (small || std::max(std::fabs(ga), std::fabs(gb)) / static_cast<double>(n) < 1e-12) {
      fit.converged = true;
      break;
    }
  }
  fit.a = a;
  fit.b = b;
  return fit;
}

std::vector<double> apply_platt(const PlattFit& fit, const std::vector<double>& conf) {
  std::vector<double> q(conf.size());
  for (std::size_t i = 0; i < conf.size(); ++i) q[i] = sigmoid(fit.a * logit_clipped(conf[i]) + fit.b);
  return q;
}

std::vector<double> pool_adjacent_violators(const std::vector<double>& y, const std::vector<double>& weights) {
  if (!weights.empty()) check_same_size("pool_adjacent_violators", "y", y.size(), "weights", weights.size());
  std::vector<double> val, wt;
  std::vector<std::size_t> len;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    if (!(w > 0)) throw_index("pool_adjacent_violators", "weights", i, std::to_string(w), "positive");
    val.push_back(y[i]);
    wt.push_back(w);
    len.push_back(1);
    while (val.size() > 1 && val[val.size() - 2] > val.back()) {  // merge violating neighbours
      const std::size_t t = val.size() - 1;
      const double wsum = wt[t - 1] + wt[t];
      val[t - 1] = (val[t - 1] * wt[t - 1] + val[t] * wt[t]) / wsum;
      wt[t - 1] = wsum;
      len[t - 1] += len[t];
      val.pop_back();
      wt.pop_back();
      len.pop_back();
    }
  }
  std::vector<double> out;
  out.reserve(y.size());
  for (std::size_t b = 0; b < val.size(); ++b) out.insert(out.end(), len[b], val[b]);
  return out;
}

IsotonicFit fit_isotonic(const std::vector<double>& x, const std::vector<double>& y,
                         const std::vector<double>& weights) {
  check_same_size("fit_isotonic", "x", x.size(), "y", y.size());
  if (x.empty()) throw_input("fit_isotonic", "no examples (N = 0)");
  for (std::size_t i = 0; i < x.size(); ++i) {
    check_finite("fit_isotonic", "x", i, x[i]);
    check_finite("fit_isotonic", "y", i, y[i]);
  }
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  IsotonicFit fit;
  std::vector<double> ys, ws;
  for (std::size_t j = 0; j < order.size(); ++j) {  // pool tied x into their weighted mean
    const std::size_t i = order[j];
    const double w = weights.empty() ? 1.0 : weights[i];
    if (!fit.x.empty() && x[i] == fit.x.back()) {
      ys.back() = (ys.back() * ws.back() + y[i] * w) / (ws.back() + w);
      ws.back() += w;
    } else {
      fit.x.push_back(x[i]);
      ys.push_back(y[i]);
      ws.push_back(w);
    }
  }
  fit.y = pool_adjacent_violators(ys, ws);
  return fit;
}

std::vector<double> apply_isotonic(const IsotonicFit& fit, const std::vector<double>& x) {
  ARCAL_ASSERT(!fit.x.empty(), "apply_isotonic on an empty fit");
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] <= fit.x.front())
      out[i] = fit.y.front();
    else if (x[i] >= fit.x.back())
      out[i] = fit.y.back();
    else {
      const std::size_t hi =
          static_cast<std::size_t>(std::upper_bound(fit.x.begin(), fit.x.end(), x[i]) - fit.x.begin());
      const std::size_t lo = hi - 1;
      const double t = (x[i] - fit.x[lo]) / (fit.x[hi] - fit.x[lo]);
      out[i] = fit.y[lo] + t * (fit.y[hi] - fit.y[lo]);
    }
  }
  return out;
}

HistogramFit fit_histogram(const std::vector<double>& conf, const std::vector<double>& correct, int bins) {
  check_conf("fit_histogram", conf, correct);
  if (bins < 1) throw_input("fit_histogram", "bins is " + std::to_string(bins) + ", but must be >= 1");
  HistogramFit fit;
  fit.bins = bins;
  std::vector<double> cnt(static_cast<std::size_t>(bins), 0), sum(cnt);
  for (std::size_t i = 0; i < conf.size(); ++i) {
    const auto b = static_cast<std::size_t>(equal_width_bin(conf[i], bins));
    cnt[b] += 1;
    sum[b] += correct[i];
  }
  fit.value.resize(cnt.size());
  for (std::size_t b = 0; b < cnt.size(); ++b)
    fit.value[b] = cnt[b] > 0 ? sum[b] / cnt[b] : (static_cast<double>(b) + 0.5) / bins;
  return fit;
}

std::vector<double> apply_histogram(const HistogramFit& fit, const std::vector<double>& conf) {
  std::vector<double> q(conf.size());
  for (std::size_t i = 0; i < conf.size(); ++i)
    q[i] = fit.value[static_cast<std::size_t>(equal_width_bin(conf[i], fit.bins))];
  return q;
}

std::vector<double> nadaraya_watson(const std::vector<double>& train, const std::vector<double>& targets,
                                    std::size_t dims, const std::vector<double>& h, const std::vector<double>& query,
                                    const NadarayaWatsonOptions& opt) {
  const char* fn = "nadaraya_watson";
  if (dims == 0) throw_input(fn, "dims must be >= 1");
  check_same_size(fn, "bandwidths", h.size(), "dims", dims);
  if (train.size() % dims != 0 || query.size() % dims != 0)
    throw_input(fn, "train and query sizes must be multiples of dims = " + std::to_string(dims));
  const std::size_t m = train.size() / dims, q = query.size() / dims;
  check_same_size(fn, "targets", targets.size(), "train rows", m);
  if (m == 0) throw_input(fn, "no training examples");
  for (std::size_t d = 0; d < dims; ++d)
    if (!(h[d] > 0) || !std::isfinite(h[d]))
      throw_index(fn, "bandwidths", d, std::to_string(h[d]), "positive and finite");
  for (std::size_t i = 0; i < train.size(); ++i) check_finite(fn, "train", i, train[i]);
  for (std::size_t i = 0; i < query.size(); ++i) check_finite(fn, "query", i, query[i]);
  for (std::size_t i = 0; i < m; ++i) check_probability(fn, "targets", i, targets[i]);
  const double tbar = std::accumulate(targets.begin(), targets.end(), 0.0) / static_cast<double>(m);
  std::vector<double> inv(dims);
  for (std::size_t d = 0; d < dims; ++d) inv[d] = 1.0 / (2.0 * h[d] * h[d]);
  std::vector<double> out(q);
  for (std::size_t a = 0; a < q; ++a) {
    double num = opt.pseudo_count * tbar, den = opt.pseudo_count;
    for (std::size_t j = 0; j < m; ++j) {
      double e = 0;
      for (std::size_t d = 0; d < dims; ++d) {
        const double diff = query[a * dims + d] - train[j * dims + d];
        e += diff * diff * inv[d];
      }
      const double kv = std::exp(-e);
      num += kv * targets[j];
      den += kv;
    }
    out[a] = std::min(std::max(num / den, opt.clip_low), opt.clip_high);
  }
  return out;
}

std::vector<double> scott_bandwidths(const std::vector<double>& x, std::size_t dims) {
  if (dims == 0 || x.size() % dims != 0 || x.size() < 2 * dims)
    throw_input("scott_bandwidths", "need at least 2 rows of " + std::to_string(dims) + " features");
  const std::size_t m = x.size() / dims;
  std::vector<double> h(dims);
  for (std::size_t d = 0; d < dims; ++d) {
    double mean = 0, ss = 0;
    for (std::size_t i = 0; i < m; ++i) mean += x[i * dims + d];
    mean /= static_cast<double>(m);
    for (std::size_t i = 0; i < m; ++i) ss += (x[i * dims + d] - mean) * (x[i * dims + d] - mean);
    const double sd = std::sqrt(ss / static_cast<double>(m - 1));
    h[d] = std::max(sd, 1e-12) * std::pow(static_cast<double>(m), -1.0 / (static_cast<double>(dims) + 4.0));
  }
  return h;
}

LinearScalingFit fit_linear_scaling(const std::vector<double>& z, std::size_t n, std::size_t k,
                                    const std::vector<std::int64_t>& labels, bool diagonal, double l2, int max_iter) {
  check_logits(diagonal ? "fit_vector_scaling" : "fit_matrix_scaling", z, n, k, labels);
  const std::size_t nw = diagonal ? k : k * k;
  std::vector<double> x(nw + k, 0.0);  // W then b
  for (std::size_t j = 0; j < k; ++j) x[diagonal ? j : j * k + j] = 1.0;
  std::vector<double> s(k);
  auto f = [&](const std::vector<double>& p, std::vector<double>& g) {
    std::fill(g.begin(), g.end(), 0.0);
    double val = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double* zi = &z[i * k];
      for (std::size_t r = 0; r < k; ++r) {
        double v = p[nw + r];
        if (diagonal)
          v += p[r] * zi[r];
        else
          for (std::size_t c = 0; c < k; ++c) v += p[r * k + c] * zi[c];
        s[r] = v;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (std::size_t r = 0; r < k; ++r) sum += std::exp(s[r] - m);
      const std::size_t y = static_cast<std::size_t>(labels[i]);
      val += m + std::log(sum) - s[y];
      for (std::size_t r = 0; r < k; ++r) {
        const double d = std::exp(s[r] - m) / sum - (r == y ? 1.0 : 0.0);  // dNLL/ds_r
        g[nw + r] += d;
        if (diagonal)
          g[r] += d * zi[r];
        else
          for (std::size_t c = 0; c < k; ++c) g[r * k + c] += d * zi[c];
      }
    }
    const double inv = 1.0 / static_cast<double>(n);
    val *= inv;
    for (auto& v : g) v *= inv;
    for (std::size_t j = 0; j < nw + k; ++j) {
      const bool on_diag = j < nw && (diagonal || j / k == j % k);
      const double dev = p[j] - (on_diag ? 1.0 : 0.0);
      val += 0.5 * l2 * dev * dev;
      g[j] += l2 * dev;
    }
    return val;
  };
  const LbfgsResult r = lbfgs(x, f, max_iter, 1e-7);
  LinearScalingFit fit;
  fit.diagonal = diagonal;
  fit.k = k;
  fit.w.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(nw));
  fit.b.assign(x.begin() + static_cast<std::ptrdiff_t>(nw), x.end());
  fit.converged = r.converged;
  fit.iterations = r.iterations;
  fit.nll = r.value;
  return fit;
}

std::vector<double> apply_linear_scaling(const LinearScalingFit& fit, const std::vector<double>& z, std::size_t n) {
  const std::size_t k = fit.k;
  ARCAL_ASSERT(z.size() == n * k, "apply_linear_scaling shape");
  std::vector<double> s(n * k);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t r = 0; r < k; ++r) {
      double v = fit.b[r];
      if (fit.diagonal)
        v += fit.w[r] * z[i * k + r];
      else
        for (std::size_t c = 0; c < k; ++c) v += fit.w[r * k + c] * z[i * k + c];
      s[i * k + r] = v;
    }
  return softmax_scaled(s, n, k, 1.0);
}

namespace {
// Piecewise-linear interpolation weights of u in [0, 1] on J equally spaced knots.
void knot_weights(double u, std::size_t J, std::size_t& lo, double& t) {
  const double pos = std::min(std::max(u, 0.0), 1.0) * static_cast<double>(J - 1);
  lo = std::min(static_cast<std::size_t>(pos), J - 2);
  t = pos - static_cast<double>(lo);
}
std::vector<double> row_confidence(const std::vector<double>& z, std::size_t n, std::size_t k) {
  std::vector<double> c(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double* zi = &z[i * k];
    const double m = *std::max_element(zi, zi + k);
    double s = 0;
    for (std::size_t j = 0; j < k; ++j) s += std::exp(zi[j] - m);
    c[i] = 1.0 / s;
  }
  return c;
}
double quantile_of(const std::vector<double>& sorted, double c) {
  return static_cast<double>(std::upper_bound(sorted.begin(), sorted.end(), c) - sorted.begin()) /
         static_cast<double>(sorted.size());
}
}  // namespace

namespace {

constexpr int kQatsAnchors = 15;
constexpr double kQatsMembershipTemperature = 0.01, kQatsNllWeight = 0.1, kQatsMinTemperature = 0.05;

/// Data of one QaTS objective: rows of z with their u, label and the fixed soft-bin memberships.
struct QatsData {
  const std::vector<double>* z = nullptr;
  std::size_t k = 0;
  std::vector<std::size_t> rows;
  std::vector<double> u;        ///< [rows]
  std::vector<std::int64_t> y;  ///< [rows]
  std::vector<double> correct;  ///< [rows] 1[argmax = y] (temperature never changes the argmax)
  std::vector<double> member;   ///< [rows, M] memberships
  std::vector<double> mass;     ///< [M] S_j
};

QatsData qats_data(const std::vector<double>& z, std::size_t k, const std::vector<std::int64_t>& labels,
                   const std::vector<std::size_t>& rows, const std::vector<double>& sorted_conf) {
  QatsData d;
  d.z = &z;
  d.k = k;
  d.rows = rows;
  d.member.assign(rows.size() * kQatsAnchors, 0.0);
  d.mass.assign(kQatsAnchors, 0.0);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const double* zi = &z[rows[r] * k];
    const std::size_t arg = static_cast<std::size_t>(std::max_element(zi, zi + k) - zi);
    const double m = zi[arg];
    double s = 0;
    for (std::size_t j = 0; j < k; ++j) s += std::exp(zi[j] - m);
    const double c = 1.0 / s;
    const double u = quantile_of(sorted_conf, c);
    d.u.push_back(u);
    d.y.push_back(labels[rows[r]]);
    d.correct.push_back(static_cast<std::int64_t>(arg) == labels[rows[r]] ? 1.0 : 0.0);
    double mx = -INFINITY;
    std::array<double, kQatsAnchors> e{};
    for (int j = 0; j < kQatsAnchors; ++j) {
      const double zeta = (j + 0.5) / kQatsAnchors;
      e[std::size_t(j)] = -(u - zeta) * (u - zeta) / kQatsMembershipTemperature;
      mx = std::max(mx, e[std::size_t(j)]);
    }
    double t = 0;
    for (auto& v : e) t += (v = std::exp(v - mx));
    for (int j = 0; j < kQatsAnchors; ++j) {
      d.member[r * kQatsAnchors + std::size_t(j)] = e[std::size_t(j)] / t;
      d.mass[std::size_t(j)] += e[std::size_t(j)] / t;
    }
  }
  return d;
}

/// SB-ECE (over the fixed memberships) + 0.1 mean NLL of z / T(u) with knot temperatures `temp`, and
/// its gradient with respect to the knots.
double qats_objective(const QatsData& d, const std::vector<double>& temp, std::vector<double>* grad) {
  const std::size_t J = temp.size(), n = d.rows.size();
  std::vector<double> conf(n), dconf(n), dnll(n), tt(n);
  std::vector<std::size_t> lo(n);
  std::vector<double> frac(n);
  double nll = 0;
  for (std::size_t r = 0; r < n; ++r) {
    knot_weights(d.u[r], J, lo[r], frac[r]);
    const double T = (1 - frac[r]) * temp[lo[r]] + frac[r] * temp[lo[r] + 1];
    tt[r] = T;
    const double* zi = &(*d.z)[d.rows[r] * d.k];
    double lse, mean, var;
    row_moments(zi, d.k, 1.0 / T, lse, mean, var);
    const double zmax = *std::max_element(zi, zi + d.k);
    const double zy = zi[static_cast<std::size_t>(d.y[r])];
    conf[r] = std::exp(zmax / T - lse);
    nll += lse - zy / T;
    // d log p_k / dT = (E_p[z] − z_k) / T².
    dconf[r] = conf[r] * (mean - zmax) / (T * T);
    dnll[r] = (zy - mean) / (T * T);
  }
  nll /= double(n);
  std::vector<double> cbar(kQatsAnchors, 0.0), abar(kQatsAnchors, 0.0);
  double total = 0;
  for (int j = 0; j < kQatsAnchors; ++j) total += d.mass[std::size_t(j)];
  for (std::size_t r = 0; r < n; ++r)
    for (int j = 0; j < kQatsAnchors; ++j) {
      const double m = d.member[r * kQatsAnchors + std::size_t(j)];
      cbar[std::size_t(j)] += m * conf[r];
      abar[std::size_t(j)] += m * d.correct[r];
    }
  double e2 = 0;
  std::vector<double> gap(kQatsAnchors, 0.0);
  for (int j = 0; j < kQatsAnchors; ++j) {
    const double S = std::max(d.mass[std::size_t(j)], 1e-12);
    gap[std::size_t(j)] = (cbar[std::size_t(j)] - abar[std::size_t(j)]) / S;
    e2 += (S / total) * gap[std::size_t(j)] * gap[std::size_t(j)];
  }
  const double sbece = std::sqrt(std::max(e2, 1e-12));
  if (grad) {
    grad->assign(J, 0.0);
    for (std::size_t r = 0; r < n; ++r) {
      // dE/dc_r = Σ_j (S_j/Σ S) 2 gap_j m_rj / S_j = Σ_j 2 gap_j m_rj / Σ S.
      double de = 0;
      for (int j = 0; j < kQatsAnchors; ++j)
        de += 2.0 * gap[std::size_t(j)] * d.member[r * kQatsAnchors + std::size_t(j)];
      de /= total;
      const double dT = de / (2.0 * sbece) * dconf[r] + kQatsNllWeight * dnll[r] / double(n);
      (*grad)[lo[r]] += (1 - frac[r]) * dT;
      (*grad)[lo[r] + 1] += frac[r] * dT;
    }
  }
  return sbece + kQatsNllWeight * nll;
}

/// Minimises the objective over monotone knot temperatures by L-BFGS in an unconstrained
/// parameterisation: in the direction's order, T_first = Tmin + e^{a_0} and each next knot adds
/// e^{a_j} (so T >= Tmin and monotone by construction; a flat segment is a_j -> -inf, where the
/// gradient vanishes). Projected gradient descent on T itself converged too slowly (the objective is
/// ill-conditioned along the knots: > 500 iterations on 6000 rows) to report convergence honestly.
std::vector<double> qats_minimise(const QatsData& d, double t0, std::size_t J, int direction, int max_iter,
                                  bool& converged, int& iterations, double& value) {
  auto order = [&](std::size_t j) { return direction > 0 ? j : J - 1 - j; };
  auto temps = [&](const std::vector<double>& a) {
    std::vector<double> t(J);
    double acc = kQatsMinTemperature;
    for (std::size_t j = 0; j < J; ++j) {
      acc += std::exp(a[j]);
      t[order(j)] = acc;
    }
    return t;
  };
  std::vector<double> a(J, std::log(1e-3 * t0));
  a[0] = std::log(std::max(t0 - kQatsMinTemperature - 1e-3 * t0 * double(J - 1), 1e-3));
  const auto f = [&](const std::vector<double>& x, std::vector<double>& g) {
    poll_interrupt();  // one evaluation is O(N + J): with many knots or rows the fit runs for minutes
    std::vector<double> gt;
    const double v = qats_objective(d, temps(x), &gt);
    g.assign(J, 0.0);
    double tail = 0;  // dF/dT summed over the knots at or after j in the direction's order
    for (std::size_t j = J; j-- > 0;) {
      tail += gt[order(j)];
      g[j] = std::exp(x[j]) * tail;
    }
    return v;
  };
  const LbfgsResult r = lbfgs(a, f, max_iter, 1e-7);
  converged = r.converged;
  iterations = r.iterations;
  value = r.value;
  return temps(a);
}

}  // namespace

QatsFit fit_qats(const std::vector<double>& z, std::size_t n, std::size_t k, const std::vector<std::int64_t>& labels,
                 int knots, int max_iter, std::uint64_t seed) {
  check_logits("fit_qats", z, n, k, labels);
  if (knots < 2) throw_input("fit_qats", "knots is " + std::to_string(knots) + ", but must be >= 2");
  if (n < 10) throw_input("fit_qats", "needs at least 10 examples, got " + std::to_string(n));
  const std::size_t J = static_cast<std::size_t>(knots);
  QatsFit fit;
  fit.calib_confidence = row_confidence(z, n, k);
  std::sort(fit.calib_confidence.begin(), fit.calib_confidence.end());
  const TemperatureFit t0 = fit_temperature(z, n, k, labels);
  const double start = t0.ok() ? std::max(t0.temperature, 2 * kQatsMinTemperature) : 1.0;
  // Inner split: 80 % to fit each direction, 20 % to choose.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  Rng(seed).shuffle(order);
  const std::size_t n_val = std::max<std::size_t>(1, n / 5);
  std::vector<std::size_t> val(order.begin(), order.begin() + long(n_val)),
      fitrows(order.begin() + long(n_val), order.end());
  std::sort(val.begin(), val.end());
  std::sort(fitrows.begin(), fitrows.end());
  const auto dfit = qats_data(z, k, labels, fitrows, fit.calib_confidence);
  const auto dval = qats_data(z, k, labels, val, fit.calib_confidence);
  for (int dir : {1, -1}) {
    bool conv;
    int its;
    double v;
    const auto t = qats_minimise(dfit, start, J, dir, max_iter, conv, its, v);
    fit.inner_objective[dir > 0 ? 0 : 1] = qats_objective(dval, t, nullptr);
  }
  fit.direction = fit.inner_objective[0] <= fit.inner_objective[1] ? 1 : -1;
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  const auto dall = qats_data(z, k, labels, all, fit.calib_confidence);
  fit.temperature =
      qats_minimise(dall, start, J, fit.direction, max_iter, fit.converged, fit.iterations, fit.objective);
  return fit;
}

std::vector<double> apply_qats(const QatsFit& fit, const std::vector<double>& z, std::size_t n, std::size_t k) {
  ARCAL_ASSERT(z.size() == n * k && fit.temperature.size() >= 2, "apply_qats shape");
  const auto conf = row_confidence(z, n, k);
  std::vector<double> p(n * k);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t lo;
    double t;
    knot_weights(quantile_of(fit.calib_confidence, conf[i]), fit.temperature.size(), lo, t);
    const double beta = 1.0 / ((1 - t) * fit.temperature[lo] + t * fit.temperature[lo + 1]);
    const std::vector<double> row(z.begin() + static_cast<std::ptrdiff_t>(i * k),
                                  z.begin() + static_cast<std::ptrdiff_t>((i + 1) * k));
    const auto pr = softmax_scaled(row, 1, k, beta);
    std::copy(pr.begin(), pr.end(), p.begin() + static_cast<std::ptrdiff_t>(i * k));
  }
  return p;
}

std::vector<double> set_top_probability(const std::vector<double>& probs, std::size_t n, std::size_t k,
                                        const std::vector<double>& q) {
  check_same_size("set_top_probability", "probs", probs.size(), "N*K", n * k);
  check_same_size("set_top_probability", "q", q.size(), "N", n);
  std::vector<double> out(probs);
  for (std::size_t i = 0; i < n; ++i) {
    double* row = &out[i * k];
    const std::size_t top = static_cast<std::size_t>(std::max_element(row, row + k) - row);
    // The others' own sum, not 1 - top: where the top probability rounds near 1, 1 - top can be
    // smaller than the others' sum, and the rescaled row left [0, 1] (found by fuzz_calibrator_json:
    // Platt with b = -2.6e12 gave a probability of 2.7).
    double rest = 0.0, second = 0.0;
    for (std::size_t j = 0; j < k; ++j)
      if (j != top) {
        rest += row[j];
        second = std::max(second, row[j]);
      }
    // The predicted class never changes (method.md §5): a calibrated top probability q below the
    // value at which the largest other class, rescaled to share 1 - q, would overtake it is raised to
    // that value (the top class and the runner-up then tie at r / (1 + r), r = second / rest, with the
    // top class kept above by one ulp-scale step so argmax's lowest-index tie rule cannot flip it).
    // Platt, isotonic and histogram changed the prediction of 2-3 % of examples before.
    double qi = q[i];
    if (k > 1) {
      const double r = rest > 0 ? second / rest : 1.0 / static_cast<double>(k - 1);
      const double floor_q = r / (1.0 + r);
      if (qi <= floor_q) qi = std::min(1.0, floor_q * (1.0 + 1e-12) + 1e-300);
    }
    for (std::size_t j = 0; j < k; ++j) {
      if (j == top) continue;
      row[j] = rest > 0 ? row[j] / rest * (1.0 - qi) : (1.0 - qi) / static_cast<double>(k - 1);
    }
    row[top] = qi;
  }
  return out;
}

}  // namespace arcal
