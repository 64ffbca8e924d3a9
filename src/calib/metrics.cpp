#include "calib/metrics.hpp"

#include <algorithm>
#include <functional>
#include <atomic>
#include <cmath>
#include <sstream>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <utility>

#include "calib/consistency.hpp"
#include "calib/row_scan.hpp"
#include "calib/smooth_reliability.hpp"
#include "core/check.hpp"
#include "core/rng.hpp"
#include "stats/distributions.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {

using namespace metrics_detail;  // the row scan (calib/row_scan.hpp)

const double kNaN = std::numeric_limits<double>::quiet_NaN();

void check_probs(const char* fn, Span<double> probs, std::size_t n, std::size_t k, Span<std::int64_t> labels) {
  check_shape(fn, probs, n, k, labels);
  for (std::size_t i = 0; i < n; ++i)
    if (!row_valid(&probs[i * k], k)) throw_bad_row(fn, &probs[i * k], i, k);
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

struct Binned {
  double ece = 0, mce = 0, rmsce = 0, deb_raw = 0;
};

Binned summarise_bins(const double* cnt, const double* sc, const double* sa, std::size_t bins, double total) {
  Binned r;
  for (std::size_t b = 0; b < bins; ++b) {
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

void fill_table(const double* cnt, const double* sc, const double* sa, std::size_t bins, std::vector<BinRow>& table) {
  table.assign(bins, BinRow{});
  for (std::size_t b = 0; b < bins; ++b)
    if (cnt[b] > 0) table[b] = {static_cast<std::size_t>(cnt[b]), sc[b] / cnt[b], sa[b] / cnt[b]};
}

// ---- Top-label data in confidence order, and the fused weighted evaluation. Bootstrap resamples are
// multiplicities w over sorted positions, so a resample costs one O(N) pass and no re-sorting.
struct Sorted {
  std::size_t n = 0;
  int bins = 15;
  std::vector<double> c, a, nll, brier;  // confidence-sorted (ties keep file order)
  std::vector<std::size_t> order;        // sorted position -> file index
  std::vector<std::uint16_t> wbin;       // equal-width bin of c (bins <= 65535 checked by the caller)
};

Sorted sort_by_confidence(const RowScan& s, int bins) {
  Sorted p;
  const std::size_t n = s.conf.size();
  p.n = n;
  p.bins = bins;
  // LSD radix sort of (bit pattern, index) on 11-bit digits (2048 buckets keep the scatter in cache).
  // It is stable, so tied values keep file order (the order of a stable sort by value); for c >= 0 the
  // IEEE bit pattern orders like the value (-0.0 is mapped to +0.0). Constant digits are skipped.
  std::vector<std::uint64_t> key(n), key_tmp(n);
  std::vector<std::size_t> idx(n), idx_tmp(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double c = s.conf[i] == 0.0 ? 0.0 : s.conf[i];
    std::memcpy(&key[i], &c, sizeof c);
    idx[i] = i;
  }
  constexpr unsigned kDigit = 11;
  constexpr std::uint64_t kMask = (1u << kDigit) - 1;
  std::vector<std::size_t> count(kMask + 1);
  for (unsigned shift = 0; shift < 64; shift += kDigit) {
    std::fill(count.begin(), count.end(), 0);
    for (std::size_t i = 0; i < n; ++i) ++count[(key[i] >> shift) & kMask];
    if (count[(key[0] >> shift) & kMask] == n) continue;
    std::size_t sum = 0;
    for (auto& c : count) {
      const std::size_t here = c;
      c = sum;
      sum += here;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t to = count[(key[i] >> shift) & kMask]++;
      key_tmp[to] = key[i];
      idx_tmp[to] = idx[i];
    }
    key.swap(key_tmp);
    idx.swap(idx_tmp);
  }
  p.c.resize(n);
  p.a.resize(n);
  p.nll.resize(n);
  p.brier.resize(n);
  p.order.resize(n);
  p.wbin.resize(n);
  const auto edges = bin_edges(bins);
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t i = idx[j];
    p.order[j] = i;
    p.c[j] = s.conf[i];
    p.a[j] = s.correct[i];
    p.nll[j] = s.nll[i];
    p.brier[j] = s.brier[i];
    p.wbin[j] = static_cast<std::uint16_t>(equal_width_bin(p.c[j], bins, edges.data()));
  }
  return p;
}

// relplot's smECE: residuals f - y linearly split onto an M-point grid on [0, 1] (mass / total), then
// reflected-Gaussian smoothing and the mean absolute smoothed residual over the grid.
inline void grid_add(double f, double r, double scale, std::size_t m, double* v) {
  const double x = f * scale;
  std::size_t g = static_cast<std::size_t>(x);
  if (g > m - 2) g = m - 2;
  const double frac = x - static_cast<double>(g);
  v[g] += (1.0 - frac) * r;
  v[g + 1] += frac * r;
}

void round_to_grid(const double* f, const double* y, const std::uint32_t* w, std::size_t n, double total, std::size_t m,
                   std::vector<double>& v) {
  v.assign(m, 0.0);
  const double scale = static_cast<double>(m - 1);
  for (std::size_t i = 0; i < n; ++i) {
    const double wi = w ? static_cast<double>(w[i]) : 1.0;
    if (wi == 0) continue;
    grid_add(f[i], wi * (f[i] - y[i]) / total, scale, m, v.data());
  }
}

// sum_i |(K * v)_i| / M with K the reflected (folded) Gaussian on [0, 1]: a grid point s has images at
// s + 2m and -s + 2m for every integer m, so a point at 0 or 1 keeps its full mass (its two images
// coincide, which a single mirror of the interior grid loses: half the mass, smECE 0.051 instead of 0.100
// for c = 1 with 90 % right) and mass that the kernel carries past an end comes back from every further
// reflection (relplot 1.0.3 fixed both). Unfolded onto the integers: position u holds v[fold(u)], twice at
// the ends (u = 0, M - 1 modulo 2(M - 1)). Terms farther than 39 sigma are exactly 0 in double precision
// (exp(-760)), so nothing representable is dropped.
double smooth_on_grid(const std::vector<double>& v, double sigma, double reach = 39.0) {
  const std::size_t m = v.size();
  const long M = static_cast<long>(m), period = 2 * (M - 1);
  const double step = 1.0 / static_cast<double>(m - 1);
  const double norm = 1.0 / (std::sqrt(2.0 * M_PI) * sigma);
  const long R = static_cast<long>(std::ceil(reach * sigma / step));
  std::vector<double> kr(static_cast<std::size_t>(2 * R + 1));  // kr[d + R] = kernel at offset d steps
  for (long d = -R; d <= R; ++d) {
    const double x = static_cast<double>(d) * step;
    kr[static_cast<std::size_t>(d + R)] = norm * std::exp(-x * x / (2.0 * sigma * sigma));
  }
  // ext[u + R] = mass at unfolded position u in [-R, M - 1 + R].
  std::vector<double> ext(static_cast<std::size_t>(M + 2 * R));
  for (long u = -R; u <= M - 1 + R; ++u) {
    long r = u % period;
    if (r < 0) r += period;
    const long j = r <= M - 1 ? r : period - r;
    ext[static_cast<std::size_t>(u + R)] = (r == 0 || r == M - 1 ? 2.0 : 1.0) * v[static_cast<std::size_t>(j)];
  }
  const long L = 2 * R + 1;
  double total = 0.0;
  for (long i = 0; i < M; ++i) {
    const double* e = &ext[static_cast<std::size_t>(i)];  // positions i - R .. i + R
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    long t = 0;
    for (; t + 4 <= L; t += 4) {
      s0 += kr[static_cast<std::size_t>(t)] * e[t];
      s1 += kr[static_cast<std::size_t>(t + 1)] * e[t + 1];
      s2 += kr[static_cast<std::size_t>(t + 2)] * e[t + 2];
      s3 += kr[static_cast<std::size_t>(t + 3)] * e[t + 3];
    }
    for (; t < L; ++t) s0 += kr[static_cast<std::size_t>(t)] * e[t];
    total += std::fabs((s0 + s1) + (s2 + s3));
  }
  return total / static_cast<double>(M);
}

// relplot's search_param: sigma = 1 if it is below its own smECE, else 10 halvings of [0, 1]; the grid
// grows x4 while round(20 / sigma) > M. `v` holds the M = 200 grid on entry (the fused pass fills it).
SmoothEce smooth_search(const double* f, const double* y, const std::uint32_t* w, std::size_t n, double total,
                        std::vector<double>& v, double reach = 39.0) {
  std::size_t m = v.size();
  auto below_fixed_point = [&](double alpha) {
    bool refine = false;
    while (std::nearbyint(20.0 / alpha) > static_cast<double>(m)) {
      m *= 4;
      refine = true;
    }
    if (refine) round_to_grid(f, y, w, n, total, m, v);
    return alpha < 0.001 || alpha < smooth_on_grid(v, alpha, reach);
  };
  double sigma = 1.0;
  if (!below_fixed_point(1.0)) {
    double start = 1.0, end = 0.0;
    for (int it = 0; it < 10; ++it) {
      const double mid = (start + end) / 2.0;
      if (below_fixed_point(mid))
        end = mid;
      else
        start = mid;
    }
    sigma = start;
  }
  return {smooth_on_grid(v, sigma, reach), sigma};
}

SmoothEce smooth_sorted(const double* f, const double* y, const std::uint32_t* w, std::size_t n) {
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) total += w ? static_cast<double>(w[i]) : 1.0;
  std::vector<double> v;
  round_to_grid(f, y, w, n, total, 200, v);  // relplot's smECE_mesh_pts
  return smooth_search(f, y, w, n, total, v);
}

double auroc_sorted(const double* c, const double* a, std::size_t n) {
  double rank = 0, pos = 0, neg = 0, sum_pos_rank = 0;
  std::size_t i = 0;
  while (i < n) {
    std::size_t j = i;
    double rp = 0, rn = 0;
    while (j < n && c[j] == c[i]) {
      rp += a[j];
      rn += 1.0 - a[j];
      ++j;
    }
    sum_pos_rank += rp * (rank + (rp + rn + 1.0) / 2.0);
    rank += rp + rn;
    pos += rp;
    neg += rn;
    i = j;
  }
  if (pos == 0 || neg == 0) return kNaN;
  return (sum_pos_rank - pos * (pos + 1.0) / 2.0) / (pos * neg);
}

/// Resamples that smECE's interval uses (relplot's smooth diagram uses 100 for its own).
constexpr int kSmeceDraws = 100;

enum Metric { kAcc, kEce, kMce, kRmsce, kAda, kDeb, kDebRaw, kSm, kSmSigma, kNll, kBrier, kAuroc, kCount };

struct Tables {
  std::vector<BinRow> width, mass;
  double deb_raw = 0;
};

// Every top-label metric, NLL and Brier in one pass over the sorted data with multiplicities w
// (nullptr = all 1; otherwise any counts, e.g. a cluster bootstrap's): equal-width and equal-mass bin sums, AUROC over
// tied runs, the M = 200 smECE grid; then the O(B) summaries and the smECE bisection.
void evaluate(const Sorted& p, const std::uint32_t* w, double* out, Tables* tables, bool with_smooth = false) {
  const std::size_t n = p.n, B = static_cast<std::size_t>(p.bins);
  std::uint64_t total = n;
  if (w) total = std::accumulate(w, w + n, std::uint64_t{0});
  // First rank of each equal-mass group (nominal_group is monotone in the rank): start[g], g = 0..B.
  std::vector<std::uint64_t> start(B + 1);
  const std::uint64_t q = total / B, rem = total % B;
  for (std::uint64_t g = 0; g <= B; ++g) start[g] = g <= rem ? g * (q + 1) : rem * (q + 1) + (g - rem) * q;
  std::vector<double> acc3(6 * B, 0.0);  // width cnt/sc/sa, mass cnt/sc/sa
  double* wc = acc3.data();
  double* ws = wc + B;
  double* wa = ws + B;
  double* mc = wa + B;
  double* ms = mc + B;
  double* ma = ms + B;
  std::vector<double> v(200, 0.0);
  const double scale = 199.0, dtotal = static_cast<double>(total);
  double acc = 0, nll = 0, brier = 0;
  double run_p = 0, run_n = 0, rank_a = 0, pos = 0, neg = 0, sum_pos_rank = 0;  // AUROC
  std::uint64_t rank = 0;
  std::size_t g = 0;
  double prev = kNaN;
  for (std::size_t j = 0; j < n; ++j) {
    const double wj = w ? static_cast<double>(w[j]) : 1.0;
    if (wj == 0) continue;
    const double cj = p.c[j], aj = p.a[j];
    if (cj != prev) {  // a new tied run: close the AUROC run, find the equal-mass group of its first rank
      sum_pos_rank += run_p * (rank_a + (run_p + run_n + 1.0) / 2.0);
      rank_a += run_p + run_n;
      pos += run_p;
      neg += run_n;
      run_p = run_n = 0;
      while (g + 1 < B && rank >= start[g + 1]) ++g;
      prev = cj;
    }
    rank += w ? w[j] : 1u;
    const std::size_t b = p.wbin[j];
    wc[b] += wj;
    ws[b] += wj * cj;
    wa[b] += wj * aj;
    mc[g] += wj;
    ms[g] += wj * cj;
    ma[g] += wj * aj;
    acc += wj * aj;
    nll += wj * p.nll[j];
    brier += wj * p.brier[j];
    run_p += wj * aj;
    run_n += wj * (1.0 - aj);
    if (!w || with_smooth) grid_add(cj, wj * (cj - aj) / dtotal, scale, 200, v.data());
  }
  sum_pos_rank += run_p * (rank_a + (run_p + run_n + 1.0) / 2.0);
  pos += run_p;
  neg += run_n;
  const Binned eqw = summarise_bins(wc, ws, wa, B, dtotal);
  const Binned eqm = summarise_bins(mc, ms, ma, B, dtotal);
  // smECE, the costliest metric at small sigma, in resamples only where asked (its interval's first
  // kSmeceDraws), with kernel terms past 8 sigma (< 1e-14 of the peak) left out there.
  const SmoothEce sm = !w            ? smooth_search(p.c.data(), p.a.data(), w, n, dtotal, v)
                       : with_smooth ? smooth_search(p.c.data(), p.a.data(), w, n, dtotal, v, 8.0)
                                     : SmoothEce{kNaN, kNaN};
  out[kAcc] = acc / dtotal;
  out[kEce] = eqw.ece;
  out[kMce] = eqw.mce;
  out[kRmsce] = eqw.rmsce;
  out[kAda] = eqm.ece;
  out[kDeb] = std::sqrt(std::max(eqw.deb_raw, 0.0));
  out[kDebRaw] = eqw.deb_raw;
  out[kSm] = sm.value;
  out[kSmSigma] = sm.sigma;
  out[kNll] = nll / dtotal;
  out[kBrier] = brier / dtotal;
  out[kAuroc] = (pos == 0 || neg == 0) ? kNaN : (sum_pos_rank - pos * (pos + 1.0) / 2.0) / (pos * neg);
  if (tables) {
    fill_table(wc, ws, wa, B, tables->width);
    fill_table(mc, ms, ma, B, tables->mass);
    tables->deb_raw = eqw.deb_raw;
  }
}

}  // namespace

TopLabel top_label(const std::vector<double>& probs, std::size_t n, std::size_t k,
                   const std::vector<std::int64_t>& labels) {
  RowScan s;
  scan_rows("top_label", probs, n, k, labels, s, nullptr, true);
  TopLabel t;
  t.confidence = std::move(s.conf);
  t.correct = std::move(s.correct);
  t.prediction = std::move(s.prediction);
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
  const Binned b = summarise_bins(cnt.data(), sc.data(), sa.data(), cnt.size(), static_cast<double>(conf.size()));
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
  const char* fn = "classwise_calibration_error";
  check_bins(fn, bins);
  check_shape(fn, probs, n, k, labels);
  ClasswiseCells cw(k, bins);
  for (std::size_t i = 0; i < n; ++i) {
    const double* row = &probs[i * k];
    if (!row_valid(row, k)) throw_bad_row(fn, row, i, k);
    cw.add(row, static_cast<std::size_t>(labels[i]), 1.0);
  }
  return cw.finish();
}

DebiasedL2 debiased_l2_calibration_error(const std::vector<double>& conf, const std::vector<double>& target, int bins) {
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
  return auroc_sorted(s.data(), t.data(), s.size());
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

namespace {

void check_report_options(const char* fn, const ReportOptions& opt) {
  check_bins(fn, opt.bins);
  if (opt.bins > 65535) throw_input(fn, "bins is " + std::to_string(opt.bins) + ", but must be <= 65535");
  if (opt.draws < 0) throw_input(fn, "draws is " + std::to_string(opt.draws) + ", but must be >= 0");
  if (!(opt.level > 0 && opt.level < 1))
    throw_input(fn, "level is " + std::to_string(opt.level) + ", but must be in (0, 1)");
  if (!(opt.row_sum_tolerance >= 0))
    throw_input(fn, "row_sum_tolerance is " + std::to_string(opt.row_sum_tolerance) + ", but must be >= 0");
}

/// Everything after the row scan: the sort, the point values, the bootstrap and the intervals.
/// `classwise` makes the classwise cells for the consistency test (null: classwise ECE is not known,
/// value and interval NaN).
CalibrationReport report_from_rows(const char* fn, RowScan scan, double cw_point,
                                   const std::function<ErrorCells()>& classwise, std::size_t n, std::size_t k,
                                   const ReportOptions& opt) {
  const Sorted p = sort_by_confidence(scan, opt.bins);
  scan = RowScan{};

  CalibrationReport r;
  r.n = n;
  r.classes = k;
  r.bins = opt.bins;
  r.draws = opt.draws;
  r.seed = opt.seed;
  r.level = opt.level;
  double point[kCount];
  Tables tables;
  evaluate(p, nullptr, point, &tables);
  r.reliability = std::move(tables.width);
  r.reliability_equal_mass = std::move(tables.mass);
  r.debiased_clipped = tables.deb_raw < 0;

  // Clustered examples (method.md §6.9 "Dependent examples"): resample whole clusters; cluster_of[pos] is the cluster
  // (0..G-1, in id order) of the example at sorted position pos.
  std::vector<std::uint32_t> cluster_of;
  std::size_t clusters = 0;
  if (!opt.cluster.empty()) {
    if (opt.cluster.size() != n)
      throw_input(fn, "cluster has " + std::to_string(opt.cluster.size()) + " entries, but there are " +
                          std::to_string(n) + " examples");
    for (std::size_t i = 0; i < n; ++i)
      if (opt.cluster[i] < 0) throw_index(fn, "cluster", i, std::to_string(opt.cluster[i]), ">= 0");
    const auto dense = dense_ids(opt.cluster, clusters);
    if (clusters < 2) throw_input(fn, "cluster holds 1 distinct id; a cluster bootstrap needs at least 2 clusters");
    cluster_of.resize(n);
    for (std::size_t j = 0; j < n; ++j) cluster_of[j] = dense[p.order[j]];
  }
  r.clusters = clusters;
  if (opt.smooth_diagram && n >= 2) {
    // relplot's smooth reliability diagram at smECE's sigma*, its band from resamples of the same units.
    std::vector<std::int64_t> sorted_cluster;
    if (clusters > 0) {
      sorted_cluster.resize(n);
      for (std::size_t j = 0; j < n; ++j) sorted_cluster[j] = cluster_of[j];
    }
    r.smooth = smooth_reliability_diagram(p.c, p.a, point[kSmSigma], 200, opt.draws > 0 ? opt.smooth_draws : 0,
                                          derive_seed(opt.seed, 0x5300), opt.level, sorted_cluster);
    r.has_smooth = true;
  }
  std::vector<std::vector<double>> draws(kCount);
  if (opt.draws > 0) {
    for (auto& d : draws) d.reserve(static_cast<std::size_t>(opt.draws));
    std::vector<std::uint32_t> w, per_cluster;  // multiplicities over sorted positions / clusters
    for (int b = 0; b < opt.draws; ++b) {
      if (clusters > 0) {  // G clusters drawn with replacement; each member gets its cluster's count
        per_cluster.assign(clusters, 0);
        Rng rng(derive_seed(opt.seed, 0xC1u << 20 | static_cast<std::uint64_t>(b)));
        for (std::size_t g = 0; g < clusters; ++g) ++per_cluster[rng.below(clusters)];
        w.resize(n);
        for (std::size_t j = 0; j < n; ++j) w[j] = per_cluster[cluster_of[j]];
      } else {
        // Resample b = percentile_bootstrap's resample b over sorted positions (stats/bootstrap.hpp).
        bootstrap_counts(n, opt.seed, static_cast<std::uint64_t>(b), w);
      }
      double v[kCount];
      evaluate(p, w.data(), v, nullptr, b < kSmeceDraws);  // smECE (sigma* searched again) on the first kSmeceDraws
      for (int m = 0; m < kCount; ++m) draws[static_cast<std::size_t>(m)].push_back(v[m]);
    }
  }
  auto percentile = [&](int m) {
    Estimate e;
    e.value = point[m];
    e.ci = opt.draws > 0 ? percentile_interval(draws[static_cast<std::size_t>(m)], opt.level) : Interval{kNaN, kNaN};
    return e;
  };
  auto none = [&](double value) {
    Estimate e;
    e.value = value;
    e.ci = {kNaN, kNaN};
    return e;
  };
  r.accuracy = percentile(kAcc);
  // Where the bootstrap degenerates (every example right or every one wrong: all resamples agree, and
  // 20/20 used to give [1, 1]), the exact binomial interval over the independent units (examples, or
  // clusters when whole clusters are resampled).
  if (opt.draws > 0 && n > 0 && r.accuracy.ci.low == r.accuracy.ci.high) {
    const std::size_t units = clusters > 0 ? clusters : n;
    const auto hits = static_cast<std::size_t>(std::llround(point[kAcc] * static_cast<double>(units)));
    const BinomialInterval cp = clopper_pearson(std::min(hits, units), units, opt.level);
    r.accuracy.ci = {cp.low, cp.high};
  }
  r.nll = percentile(kNll);
  r.brier = percentile(kBrier);
  r.auroc = percentile(kAuroc);
  r.mce = none(point[kMce]);
  // smECE: the basic bootstrap over the first kSmeceDraws resamples (relplot's interval): smECE, like
  // every calibration error, is biased upward by sampling noise and more so in a resample, so the
  // percentile interval lies above the plug-in value; 2 smECE - the percentiles, clipped at 0, does not.
  r.smece = percentile(kSm);
  if (std::isfinite(r.smece.ci.low))
    r.smece.ci = {std::max(0.0, 2.0 * r.smece.value - r.smece.ci.high),
                  std::max(0.0, 2.0 * r.smece.value - r.smece.ci.low)};
  r.smece_sigma = none(point[kSmSigma]);
  r.ece = none(point[kEce]);
  r.rmsce = none(point[kRmsce]);
  r.ada_ece = none(point[kAda]);
  r.debiased_ece = none(point[kDeb]);
  r.classwise_ece = none(cw_point);
  // One example: every resample is that example and every label redraw one label, so each interval
  // would have zero width ([0, 0] for the ECE); no interval is honest there but accuracy's exact one.
  auto none_at_one_example = [&] {
    if (n >= 2) return;
    for (Estimate* e : {&r.nll, &r.brier, &r.auroc, &r.ece, &r.rmsce, &r.ada_ece, &r.debiased_ece, &r.classwise_ece}) {
      e->ci = {kNaN, kNaN};
      e->bias_corrected = kNaN;  // the median-unbiased estimate comes from the same degenerate redraws
    }
  };
  if (clusters > 0) {
    // The label redraws of the test-inversion intervals treat examples as independent given their
    // probabilities; with clusters the top-label errors get the cluster bootstrap's percentile
    // interval instead (around the plug-in value, which is biased upward), classwise ECE none.
    r.ece = percentile(kEce);
    r.rmsce = percentile(kRmsce);
    r.ada_ece = percentile(kAda);
    r.debiased_ece = percentile(kDeb);
    r.consistency_draws = 0;
    none_at_one_example();
    return r;
  }
  // Calibration errors: test inversion along the scaled-gap family (calib/consistency.hpp), whose
  // consistency test (labels redrawn from the model's own probabilities) decides the zero lower end.
  r.consistency_draws = opt.consistency_draws;
  if (opt.consistency_draws > 0) {
    std::vector<double> conf(n), correct(n);
    for (std::size_t j = 0; j < n; ++j) {
      conf[j] = p.c[j];
      correct[j] = p.a[j];
    }
    const auto width = top_label_cells(conf, correct, opt.bins, false);
    const auto mass = top_label_cells(conf, correct, opt.bins, true);
    auto inverted = [&](Estimate& e, const ErrorCells& cells, CellError kind, std::uint64_t stream) {
      const auto fi =
          scaled_family_interval(cells, kind, opt.level, opt.consistency_draws, derive_seed(opt.seed, stream));
      e.ci = {fi.low, fi.high};
      e.bias_corrected = fi.median_unbiased;
      return fi.consistency_p;
    };
    r.consistency_p = inverted(r.ece, width, CellError::l1, 0xC0);
    inverted(r.rmsce, width, CellError::l2, 0xC1);
    inverted(r.ada_ece, mass, CellError::l1, 0xC2);
    inverted(r.debiased_ece, width, CellError::debiased_l2, 0xC3);
    if (classwise) r.classwise_consistency_p = inverted(r.classwise_ece, classwise(), CellError::l1, 0xC4);
  }
  none_at_one_example();
  return r;
}

}  // namespace

CalibrationReport calibration_report(Span<double> probs, std::size_t n, std::size_t k, Span<std::int64_t> labels,
                                     const ReportOptions& opt) {
  const char* fn = "calibration_report";
  check_report_options(fn, opt);
  // The one scan of the [N, K] matrix; everything after it is O(N) or O(N log N) (one sort).
  RowScan scan;
  ClasswiseCells cells(k < 2 ? 2 : k, opt.bins);
  scan_rows(fn, probs, n, k, labels, scan, &cells, false, opt.row_sum_tolerance);
  const double cw_point = cells.finish();
  return report_from_rows(
      fn, std::move(scan), cw_point, [&] { return classwise_cells(probs, n, k, labels, opt.bins); }, n, k, opt);
}

CalibrationReport calibration_report_top_label(const TopLabelRows& rows, std::size_t k, const ReportOptions& opt) {
  const char* fn = "calibration_report_top_label";
  check_report_options(fn, opt);
  const std::size_t n = rows.confidence.size();
  if (n == 0) throw_input(fn, "no examples");
  for (auto [name, v] : {std::pair<const char*, const std::vector<double>*>{"correct", &rows.correct},
                         {"nll", &rows.nll},
                         {"brier", &rows.brier}})
    if (v->size() != n)
      throw_input(fn, std::string(name) + " has " + std::to_string(v->size()) + " entries, but confidence has " +
                          std::to_string(n));
  for (std::size_t i = 0; i < n; ++i) {
    if (!(rows.confidence[i] >= 0.0 && rows.confidence[i] <= 1.0))
      throw_index(fn, "confidence", i, std::to_string(rows.confidence[i]), "in [0, 1]");
    if (rows.correct[i] != 0.0 && rows.correct[i] != 1.0)
      throw_index(fn, "correct", i, std::to_string(rows.correct[i]), "0 or 1");
    if (!(rows.nll[i] >= 0.0) || !std::isfinite(rows.nll[i]))
      throw_index(fn, "nll", i, std::to_string(rows.nll[i]), "finite and >= 0");
    if (!(rows.brier[i] >= -1e-9 && rows.brier[i] <= 2.0 + 1e-9))
      throw_index(fn, "brier", i, std::to_string(rows.brier[i]), "in [0, 2]");
  }
  RowScan scan;
  scan.conf = rows.confidence;
  scan.correct = rows.correct;
  scan.nll = rows.nll;
  scan.brier = rows.brier;
  return report_from_rows(fn, std::move(scan), kNaN, nullptr, n, k, opt);
}

}  // namespace arcal
