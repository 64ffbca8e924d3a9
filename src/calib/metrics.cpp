#include "calib/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/check.hpp"

namespace arcal {

namespace {

constexpr double kProbFloor = 1e-15;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_probs(const char* fn, const std::vector<double>& probs, std::size_t n, std::size_t k,
                 const std::vector<std::int64_t>& labels) {
  if (n == 0) throw_input(fn, "no examples (N = 0)");
  if (k < 2) throw_input(fn, "K is " + std::to_string(k) + ", but must be >= 2");
  check_same_size(fn, "probs", probs.size(), "N*K", n * k);
  check_same_size(fn, "labels", labels.size(), "N", n);
  for (std::size_t i = 0; i < probs.size(); ++i) check_probability(fn, "probs", i, probs[i]);
  for (std::size_t i = 0; i < n; ++i) check_label(fn, "labels", i, labels[i], static_cast<long long>(k));
}

void check_pair(const char* fn, const std::vector<double>& conf, const std::vector<double>& target) {
  check_same_size(fn, "conf", conf.size(), "target", target.size());
  if (conf.empty()) throw_input(fn, "no examples (N = 0)");
  for (std::size_t i = 0; i < conf.size(); ++i) {
    check_probability(fn, "conf", i, conf[i]);
    check_probability(fn, "target", i, target[i]);
  }
}

void check_bins(const char* fn, int bins) {
  if (bins < 1) throw_input(fn, "bins is " + std::to_string(bins) + ", but must be >= 1");
}

// ---- Weighted engine. Every metric below takes examples in confidence-sorted order with integer
// weights w (nullptr = all 1): the bootstrap passes resample multiplicities, so one resample costs
// O(N) and needs no re-sorting.
inline double wt(const std::uint32_t* w, std::size_t i) { return w ? static_cast<double>(w[i]) : 1.0; }

struct Binned {
  double ece = 0, mce = 0, rmsce = 0, deb_raw = 0;
};

Binned summarise_bins(const std::vector<double>& cnt, const std::vector<double>& sc, const std::vector<double>& sa,
                      double total) {
  Binned r;
  for (std::size_t b = 0; b < cnt.size(); ++b) {
    if (cnt[b] <= 0) continue;
    const double conf = sc[b] / cnt[b], acc = sa[b] / cnt[b], gap = acc - conf;
    r.ece += cnt[b] / total * std::fabs(gap);
    r.rmsce += cnt[b] / total * gap * gap;
    r.mce = std::max(r.mce, std::fabs(gap));
    if (cnt[b] >= 2) r.deb_raw += cnt[b] / total * (gap * gap - acc * (1 - acc) / (cnt[b] - 1));
  }
  r.rmsce = std::sqrt(r.rmsce);
  return r;
}

// Equal-mass groups over sorted c with weights: a tied run takes the group of its first rank.
Binned equal_mass_sorted(const double* c, const double* a, const std::uint32_t* w, std::size_t n, int bins,
                         std::vector<BinRow>* table) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n; ++i) total += w ? w[i] : 1;
  std::vector<double> cnt(static_cast<std::size_t>(bins), 0.0), sc(cnt), sa(cnt);
  std::uint64_t rank = 0;
  std::size_t g = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i == 0 || c[i] != c[i - 1]) g = nominal_group(rank, total, static_cast<std::uint64_t>(bins));
    const std::uint64_t wi = w ? w[i] : 1;
    rank += wi;
    cnt[g] += static_cast<double>(wi);
    sc[g] += static_cast<double>(wi) * c[i];
    sa[g] += static_cast<double>(wi) * a[i];
  }
  if (table) {
    table->assign(cnt.size(), BinRow{});
    for (std::size_t b = 0; b < cnt.size(); ++b)
      if (cnt[b] > 0) (*table)[b] = {static_cast<std::size_t>(cnt[b]), sc[b] / cnt[b], sa[b] / cnt[b]};
  }
  return summarise_bins(cnt, sc, sa, static_cast<double>(total));
}

double auroc_sorted(const double* c, const double* a, const std::uint32_t* w, std::size_t n) {
  double rank = 0, pos = 0, neg = 0, sum_pos_rank = 0;
  std::size_t i = 0;
  while (i < n) {
    std::size_t j = i;
    double rp = 0, rn = 0;
    while (j < n && c[j] == c[i]) {
      rp += wt(w, j) * a[j];
      rn += wt(w, j) * (1.0 - a[j]);
      ++j;
    }
    const double run = rp + rn;
    sum_pos_rank += rp * (rank + (run + 1.0) / 2.0);
    rank += run;
    pos += rp;
    neg += rn;
    i = j;
  }
  if (pos == 0 || neg == 0) return kNaN;
  return (sum_pos_rank - pos * (pos + 1.0) / 2.0) / (pos * neg);
}

// relplot's smECE: residuals f - y linearly split onto an M-point grid on [0, 1] (mass / N), then
// reflected-Gaussian smoothing and the mean absolute smoothed residual over the grid.
void round_to_grid(const double* f, const double* y, const std::uint32_t* w, std::size_t n, double total,
                   std::size_t m, std::vector<double>& v) {
  v.assign(m, 0.0);
  const double scale = static_cast<double>(m - 1);
  for (std::size_t i = 0; i < n; ++i) {
    if (w && w[i] == 0) continue;
    const double x = f[i] * scale;
    std::size_t g = static_cast<std::size_t>(x);
    if (g > m - 2) g = m - 2;
    const double frac = x - static_cast<double>(g);
    const double r = wt(w, i) * (f[i] - y[i]) / total;
    v[g] += (1.0 - frac) * r;
    v[g + 1] += frac * r;
  }
}

double smooth_on_grid(const std::vector<double>& v, double sigma) {
  const std::size_t m = v.size();
  const double step = 1.0 / static_cast<double>(m - 1);
  const double norm = 1.0 / (std::sqrt(2.0 * M_PI) * sigma);
  // Kernel sampled at t_j - 1/2, t = linspace(0, 1, M) (as relplot); terms beyond 9 sigma are below
  // exp(-40) of the peak and are skipped.
  const double reach = 9.0 * sigma;
  const long lo = std::max(0L, static_cast<long>(std::ceil((0.5 - reach) / step)));
  const long hi = std::min(static_cast<long>(m) - 1, static_cast<long>(std::floor((0.5 + reach) / step)));
  std::vector<double> ker(static_cast<std::size_t>(hi - lo + 1));
  for (long j = lo; j <= hi; ++j) {
    const double t = (j == static_cast<long>(m) - 1) ? 1.0 : static_cast<double>(j) * step;
    const double d = t - 0.5;
    ker[static_cast<std::size_t>(j - lo)] = norm * std::exp(-d * d / (2.0 * sigma * sigma));
  }
  const long M = static_cast<long>(m), half = M / 2;
  double total = 0.0;
  for (long i = 0; i < M; ++i) {
    double s = 0.0;
    for (long j = lo; j <= hi; ++j) {
      long u = i + half - j;  // grid position, reflected once at each end
      if (u < 0) u = -u;
      else if (u > M - 1) u = 2 * (M - 1) - u;
      s += ker[static_cast<std::size_t>(j - lo)] * v[static_cast<std::size_t>(u)];
    }
    total += std::fabs(s);
  }
  return total / static_cast<double>(M);
}

SmoothEce smooth_sorted(const double* f, const double* y, const std::uint32_t* w, std::size_t n) {
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) total += wt(w, i);
  std::size_t m = 200;  // relplot's smECE_mesh_pts
  std::vector<double> v;
  round_to_grid(f, y, w, n, total, m, v);
  auto ensure_grid = [&](double alpha) {
    bool refine = false;
    while (std::nearbyint(20.0 / alpha) > static_cast<double>(m)) {
      m *= 4;
      refine = true;
    }
    if (refine) round_to_grid(f, y, w, n, total, m, v);
  };
  auto below_fixed_point = [&](double alpha) {
    ensure_grid(alpha);
    return alpha < 0.001 || alpha < smooth_on_grid(v, alpha);
  };
  double sigma = 1.0;
  if (!below_fixed_point(1.0)) {
    double start = 1.0, end = 0.0;
    for (int it = 0; it < 10; ++it) {
      const double mid = (start + end) / 2.0;
      if (below_fixed_point(mid)) end = mid;
      else start = mid;
    }
    sigma = start;
  }
  return {smooth_on_grid(v, sigma), sigma};
}

struct Prepared {
  std::size_t n = 0, k = 0;
  int bins = 15;
  std::vector<double> c, a;            // confidence-sorted
  std::vector<std::size_t> order;      // sorted position -> original index
  std::vector<int> wbin;               // equal-width bin of c
  std::vector<double> nll, brier;      // per-example contributions, sorted order
};

Prepared prepare(const std::vector<double>& probs, std::size_t n, std::size_t k,
                 const std::vector<std::int64_t>& labels, int bins) {
  const TopLabel tl = top_label(probs, n, k, labels);
  Prepared p;
  p.n = n;
  p.k = k;
  p.bins = bins;
  p.order.resize(n);
  std::iota(p.order.begin(), p.order.end(), 0);
  std::stable_sort(p.order.begin(), p.order.end(),
                   [&](std::size_t x, std::size_t y) { return tl.confidence[x] < tl.confidence[y]; });
  p.c.resize(n);
  p.a.resize(n);
  p.wbin.resize(n);
  p.nll.resize(n);
  p.brier.resize(n);
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t i = p.order[j];
    p.c[j] = tl.confidence[i];
    p.a[j] = tl.correct[i];
    p.wbin[j] = equal_width_bin(p.c[j], bins);
    const double* row = &probs[i * k];
    const std::size_t y = static_cast<std::size_t>(labels[i]);
    p.nll[j] = -std::log(std::max(row[y], kProbFloor));
    double b = 0;
    for (std::size_t kk = 0; kk < k; ++kk) {
      const double d = row[kk] - (kk == y ? 1.0 : 0.0);
      b += d * d;
    }
    p.brier[j] = b;
  }
  return p;
}

enum Metric { kAcc, kEce, kMce, kRmsce, kAda, kDeb, kSm, kSmSigma, kNll, kBrier, kAuroc, kCount };

void evaluate(const Prepared& p, const std::uint32_t* w, double* out, BinnedCalibration* width_table,
              std::vector<BinRow>* mass_table, double* deb_raw) {
  const std::size_t n = p.n;
  const auto B = static_cast<std::size_t>(p.bins);
  std::vector<double> cnt(B, 0.0), sc(B, 0.0), sa(B, 0.0);
  double total = 0, acc = 0, nll = 0, brier = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double wj = wt(w, j);
    if (wj == 0) continue;
    const auto b = static_cast<std::size_t>(p.wbin[j]);
    cnt[b] += wj;
    sc[b] += wj * p.c[j];
    sa[b] += wj * p.a[j];
    total += wj;
    acc += wj * p.a[j];
    nll += wj * p.nll[j];
    brier += wj * p.brier[j];
  }
  const Binned eqw = summarise_bins(cnt, sc, sa, total);
  if (width_table) {
    width_table->ece = eqw.ece;
    width_table->mce = eqw.mce;
    width_table->rmsce = eqw.rmsce;
    width_table->table.assign(B, BinRow{});
    for (std::size_t b = 0; b < B; ++b)
      if (cnt[b] > 0) width_table->table[b] = {static_cast<std::size_t>(cnt[b]), sc[b] / cnt[b], sa[b] / cnt[b]};
  }
  const Binned eqm = equal_mass_sorted(p.c.data(), p.a.data(), w, n, p.bins, mass_table);
  const SmoothEce sm = smooth_sorted(p.c.data(), p.a.data(), w, n);
  out[kAcc] = acc / total;
  out[kEce] = eqw.ece;
  out[kMce] = eqw.mce;
  out[kRmsce] = eqw.rmsce;
  out[kAda] = eqm.ece;
  out[kDeb] = std::sqrt(std::max(eqw.deb_raw, 0.0));
  out[kSm] = sm.value;
  out[kSmSigma] = sm.sigma;
  out[kNll] = nll / total;
  out[kBrier] = brier / total;
  out[kAuroc] = auroc_sorted(p.c.data(), p.a.data(), w, n);
  if (deb_raw) *deb_raw = eqw.deb_raw;
}

// Classwise ECE over sorted positions with weights; costs N*K.
double classwise_weighted(const Prepared& p, const std::vector<double>& probs, const std::vector<std::int64_t>& labels,
                          const std::uint32_t* w) {
  const std::size_t K = p.k, B = static_cast<std::size_t>(p.bins);
  std::vector<double> cnt(K * B, 0.0), sc(K * B, 0.0), sa(K * B, 0.0), edges(B + 1);
  for (std::size_t b = 0; b <= B; ++b) edges[b] = static_cast<double>(b) / static_cast<double>(p.bins);
  double total = 0;
  for (std::size_t j = 0; j < p.n; ++j) {
    const double wj = wt(w, j);
    if (wj == 0) continue;
    total += wj;
    const std::size_t i = p.order[j];
    const double* row = &probs[i * K];
    const std::size_t y = static_cast<std::size_t>(labels[i]);
    for (std::size_t kk = 0; kk < K; ++kk) {
      const std::size_t cell = kk * B + static_cast<std::size_t>(equal_width_bin(row[kk], p.bins, edges.data()));
      cnt[cell] += wj;
      sc[cell] += wj * row[kk];
    }
    sa[y * B + static_cast<std::size_t>(equal_width_bin(row[y], p.bins, edges.data()))] += wj;
  }
  double sum = 0;
  for (std::size_t c = 0; c < K * B; ++c)
    if (cnt[c] > 0) sum += std::fabs(sa[c] - sc[c]);  // n_b |acc_b - conf_b| = |sum a - sum p|
  return sum / total / static_cast<double>(K);
}

Interval percentile_interval(std::vector<double> v, double level) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return {kNaN, kNaN};
  std::sort(v.begin(), v.end());
  const double alpha = (1.0 - level) / 2.0;
  return {quantile_sorted(v, alpha), quantile_sorted(v, 1.0 - alpha)};
}

}  // namespace

TopLabel top_label(const std::vector<double>& probs, std::size_t n, std::size_t k,
                   const std::vector<std::int64_t>& labels) {
  check_probs("top_label", probs, n, k, labels);
  TopLabel t;
  t.confidence.resize(n);
  t.correct.resize(n);
  t.prediction.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double* row = &probs[i * k];
    std::size_t best = 0;
    for (std::size_t kk = 1; kk < k; ++kk)
      if (row[kk] > row[best]) best = kk;
    t.confidence[i] = row[best];
    t.prediction[i] = static_cast<int>(best);
    t.correct[i] = static_cast<std::int64_t>(best) == labels[i] ? 1.0 : 0.0;
  }
  return t;
}

BinnedCalibration binned_calibration(const std::vector<double>& conf, const std::vector<double>& target, int bins,
                                     BinScheme scheme) {
  check_pair("binned_calibration", conf, target);
  check_bins("binned_calibration", bins);
  const auto assign = scheme == BinScheme::equal_width ? equal_width_bins(conf, bins) : equal_mass_bins(conf, bins);
  BinnedCalibration r;
  r.table = bin_table(conf, target, assign, bins);
  std::vector<double> cnt, sc, sa;
  for (const auto& row : r.table) {
    cnt.push_back(static_cast<double>(row.n));
    sc.push_back(row.mean_conf * static_cast<double>(row.n));
    sa.push_back(row.accuracy * static_cast<double>(row.n));
  }
  const Binned b = summarise_bins(cnt, sc, sa, static_cast<double>(conf.size()));
  r.ece = b.ece;
  r.mce = b.mce;
  r.rmsce = b.rmsce;
  return r;
}

double expected_calibration_error(const std::vector<double>& conf, const std::vector<double>& target, int bins) {
  return binned_calibration(conf, target, bins, BinScheme::equal_width).ece;
}

double adaptive_calibration_error(const std::vector<double>& conf, const std::vector<double>& target, int bins) {
  return binned_calibration(conf, target, bins, BinScheme::equal_mass).ece;
}

double classwise_calibration_error(const std::vector<double>& probs, std::size_t n, std::size_t k,
                                   const std::vector<std::int64_t>& labels, int bins) {
  check_probs("classwise_calibration_error", probs, n, k, labels);
  check_bins("classwise_calibration_error", bins);
  Prepared p;
  p.n = n;
  p.k = k;
  p.bins = bins;
  p.order.resize(n);
  std::iota(p.order.begin(), p.order.end(), 0);
  return classwise_weighted(p, probs, labels, nullptr);
}

DebiasedL2 debiased_l2_calibration_error(const std::vector<double>& conf, const std::vector<double>& target,
                                         int bins) {
  check_pair("debiased_l2_calibration_error", conf, target);
  check_bins("debiased_l2_calibration_error", bins);
  const auto table = bin_table(conf, target, equal_width_bins(conf, bins), bins);
  DebiasedL2 r;
  const double N = static_cast<double>(conf.size());
  for (const auto& row : table) {
    if (row.n < 2) continue;
    const double nb = static_cast<double>(row.n), gap = row.mean_conf - row.accuracy;
    r.raw += nb / N * (gap * gap - row.accuracy * (1 - row.accuracy) / (nb - 1));
  }
  r.clipped = r.raw < 0;
  r.value = std::sqrt(std::max(r.raw, 0.0));
  return r;
}

SmoothEce smooth_calibration_error(const std::vector<double>& f, const std::vector<double>& y) {
  check_pair("smooth_calibration_error", f, y);
  return smooth_sorted(f.data(), y.data(), nullptr, f.size());
}

double smooth_calibration_error_at(const std::vector<double>& f, const std::vector<double>& y, double sigma,
                                   std::size_t grid) {
  check_pair("smooth_calibration_error_at", f, y);
  check_positive("smooth_calibration_error_at", "sigma", sigma);
  if (grid < 2) throw_input("smooth_calibration_error_at", "grid is " + std::to_string(grid) + ", but must be >= 2");
  std::vector<double> v;
  round_to_grid(f.data(), y.data(), nullptr, f.size(), static_cast<double>(f.size()), grid, v);
  return smooth_on_grid(v, sigma);
}

double negative_log_likelihood(const std::vector<double>& probs, std::size_t n, std::size_t k,
                               const std::vector<std::int64_t>& labels) {
  check_probs("negative_log_likelihood", probs, n, k, labels);
  double s = 0;
  for (std::size_t i = 0; i < n; ++i)
    s -= std::log(std::max(probs[i * k + static_cast<std::size_t>(labels[i])], kProbFloor));
  return s / static_cast<double>(n);
}

double brier_score(const std::vector<double>& probs, std::size_t n, std::size_t k,
                   const std::vector<std::int64_t>& labels) {
  check_probs("brier_score", probs, n, k, labels);
  double s = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t kk = 0; kk < k; ++kk) {
      const double d = probs[i * k + kk] - (static_cast<std::int64_t>(kk) == labels[i] ? 1.0 : 0.0);
      s += d * d;
    }
  return s / static_cast<double>(n);
}

double auroc(const std::vector<double>& score, const std::vector<double>& target) {
  check_same_size("auroc", "score", score.size(), "target", target.size());
  if (score.empty()) throw_input("auroc", "no examples (N = 0)");
  for (std::size_t i = 0; i < score.size(); ++i) {
    check_finite("auroc", "score", i, score[i]);
    if (target[i] != 0.0 && target[i] != 1.0) throw_index("auroc", "target", i, std::to_string(target[i]), "0 or 1");
  }
  std::vector<std::size_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return score[x] < score[y]; });
  std::vector<double> s(score.size()), t(score.size());
  for (std::size_t j = 0; j < order.size(); ++j) {
    s[j] = score[order[j]];
    t[j] = target[order[j]];
  }
  return auroc_sorted(s.data(), t.data(), nullptr, s.size());
}

double binary_log_loss(const std::vector<double>& q, const std::vector<double>& a) {
  check_pair("binary_log_loss", q, a);
  double s = 0;
  for (std::size_t i = 0; i < q.size(); ++i) {
    const double p = std::min(std::max(q[i], kProbFloor), 1.0 - kProbFloor);
    s -= a[i] * std::log(p) + (1.0 - a[i]) * std::log1p(-p);
  }
  return s / static_cast<double>(q.size());
}

double binary_brier(const std::vector<double>& q, const std::vector<double>& a) {
  check_pair("binary_brier", q, a);
  double s = 0;
  for (std::size_t i = 0; i < q.size(); ++i) s += (q[i] - a[i]) * (q[i] - a[i]);
  return s / static_cast<double>(q.size());
}

CalibrationReport calibration_report(const std::vector<double>& probs, std::size_t n, std::size_t k,
                                     const std::vector<std::int64_t>& labels, const ReportOptions& opt) {
  check_bins("calibration_report", opt.bins);
  if (opt.draws < 0) throw_input("calibration_report", "draws is " + std::to_string(opt.draws) + ", but must be >= 0");
  if (!(opt.level > 0 && opt.level < 1))
    throw_input("calibration_report", "level is " + std::to_string(opt.level) + ", but must be in (0, 1)");
  const Prepared p = prepare(probs, n, k, labels, opt.bins);
  CalibrationReport r;
  r.n = n;
  r.classes = k;
  r.bins = opt.bins;
  r.draws = opt.draws;
  r.seed = opt.seed;
  r.level = opt.level;
  double point[kCount];
  BinnedCalibration width;
  double deb_raw = 0;
  evaluate(p, nullptr, point, &width, &r.reliability_equal_mass, &deb_raw);
  r.reliability = width.table;
  r.debiased_clipped = deb_raw < 0;
  const double cw_point = classwise_weighted(p, probs, labels, nullptr);

  std::vector<std::vector<double>> draws(kCount);
  std::vector<double> cw_draws;
  std::vector<std::uint32_t> w(n);
  auto to_counts = [&](const std::vector<std::size_t>& idx) {
    std::fill(w.begin(), w.end(), 0u);
    for (auto i : idx) ++w[i];
  };
  if (opt.draws > 0) {
    for (auto& d : draws) d.reserve(static_cast<std::size_t>(opt.draws));
    bool first = true;  // percentile_bootstrap first evaluates the original sample
    percentile_bootstrap(
        n,
        [&](const std::vector<std::size_t>& idx) {
          if (first) {
            first = false;
            return point[kEce];
          }
          to_counts(idx);
          double v[kCount];
          evaluate(p, w.data(), v, nullptr, nullptr, nullptr);
          for (int m = 0; m < kCount; ++m) draws[static_cast<std::size_t>(m)].push_back(v[m]);
          return v[kEce];
        },
        opt.draws, opt.seed, opt.level);
    int cw = opt.classwise_draws;
    if (cw < 0) {
      const double budget = 2e9 / (static_cast<double>(n) * static_cast<double>(k));
      cw = std::min(opt.draws, std::max(100, static_cast<int>(std::min(budget, 1e9))));
    }
    cw = std::min(cw, opt.draws);
    r.classwise_draws = cw;
    if (cw > 0) {
      first = true;
      // Same seed, so classwise resample b is main resample b.
      percentile_bootstrap(
          n,
          [&](const std::vector<std::size_t>& idx) {
            if (first) {
              first = false;
              return cw_point;
            }
            to_counts(idx);
            cw_draws.push_back(classwise_weighted(p, probs, labels, w.data()));
            return cw_draws.back();
          },
          cw, opt.seed, opt.level);
    }
  }
  auto est = [&](int m) {
    Estimate e;
    e.value = point[m];
    e.ci = opt.draws > 0 ? percentile_interval(draws[static_cast<std::size_t>(m)], opt.level) : Interval{kNaN, kNaN};
    return e;
  };
  r.accuracy = est(kAcc);
  r.ece = est(kEce);
  r.mce = est(kMce);
  r.rmsce = est(kRmsce);
  r.ada_ece = est(kAda);
  r.debiased_ece = est(kDeb);
  r.smece = est(kSm);
  r.smece_sigma = est(kSmSigma);
  r.nll = est(kNll);
  r.brier = est(kBrier);
  r.auroc = est(kAuroc);
  r.classwise_ece.value = cw_point;
  r.classwise_ece.ci = cw_draws.empty() ? Interval{kNaN, kNaN} : percentile_interval(cw_draws, opt.level);
  return r;
}

}  // namespace arcal
