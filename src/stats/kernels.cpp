#include "stats/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>

#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/parallel.hpp"

namespace arcal {

namespace {

/// Gaussian kernel weight exp(-|row - q|^2 / 2) of a row in bandwidth-scaled coordinates, or -1 when
/// the row lies beyond the truncation radius t in some coordinate (t2 = t * t; the first coordinate
/// is already within t by the caller's sorted search).
inline double truncated_weight(const double* row, const double* q, std::size_t dims, double t, double t2) {
  double u2 = 0.0;
  for (std::size_t d = 0; d < dims; ++d) {
    const double u = row[d] - q[d];
    u2 += u * u;
  }
  if (u2 > t2 && dims > 1)
    for (std::size_t d = 1; d < dims; ++d)
      if (std::abs(row[d] - q[d]) > t) return -1.0;
  return std::exp(-0.5 * u2);
}

}  // namespace

double scott_bandwidth(const std::vector<double>& values, std::size_t dims, double multiple) {
  const char* fn = "scott_bandwidth";
  const std::size_t n = values.size();
  if (n < 2) throw_input(fn, "values has " + std::to_string(n) + " elements, but must have >= 2");
  if (dims == 0) throw_input(fn, "dims is 0, but must be >= 1");
  check_positive(fn, "multiple", multiple);
  double mean = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    check_finite(fn, "values", i, values[i]);
    mean += values[i];
  }
  mean /= static_cast<double>(n);
  double ss = 0.0;
  for (double v : values) ss += (v - mean) * (v - mean);
  const double sd = std::sqrt(ss / static_cast<double>(n - 1));
  if (!(sd > 0.0)) throw_input(fn, "values are constant (sd = 0), but a bandwidth needs spread");
  return multiple * sd * std::pow(static_cast<double>(n), -1.0 / (static_cast<double>(dims) + 4.0));
}

// ---- The fast path: a Hermite-expansion Gauss transform over boxes (Greengard & Strain 1991) ----
//
// In z = x / (sqrt(2) h) the kernel is exp(-|z_q - z_j|^2). Points are grouped in boxes of side 1 in z
// (|z_j - c| <= 1/2 per coordinate around the box centre c). A box of more than kDirectMax points is
// summed through its Hermite expansion,
//   exp(-(t - s)^2) = sum_n ((s - c)^n / n!) h_n(t - c),   h_n(x) = (-1)^n d^n/dx^n exp(-x^2),
// truncated at kTerms terms per coordinate (their product in two dimensions); smaller boxes are summed
// directly with the exact rule. By Cramér's inequality |h_n(x)| <= 1.0865 sqrt(2^n n!) exp(-x^2/2), so
// one point's truncation error is at most E(x) = 1.0865 exp(-x^2/2) sum_{n>=p} (sqrt(2)/2)^n / sqrt(n!)
// in each coordinate, and E1 + E2 + E1 E2 for the product. Each query adds these bounds over its boxes
// (weighted by the box's total |weight|), plus the weight of the points of a visited box that lie
// beyond the truncation window (each below exp(-t^2/2)) and the rounding of the expansion, and turns
// them into a bound on its estimate; a query whose relative bound exceeds kFastTolerance is summed
// exactly. Boxes are visited when they overlap the window (within t h of the query in every
// coordinate), as the exact sum visits points. In two dimensions a target box holding kLocalMin queries
// or more translates every source expansion in reach into one local (Taylor) expansion about its own
// centre, h_a(Δ + v) = sum_g (v^g / g!) (-1)^g h_(a+g)(Δ) (Δ the integer offset of the two centres), and
// each query evaluates that: the bound then covers every omitted pair (a >= p or g >= p), local_tail().

namespace {

constexpr int kTerms = 20;
constexpr std::size_t kDirectMax = 24;
constexpr double kFastTolerance = 1e-9;
constexpr std::size_t kFastMinPoints = 2048;
constexpr std::size_t kQueryBlock = 256;

/// Cramér's constant times sum_{n >= kTerms} (sqrt(2) r)^n / sqrt(n!) at r = 1/2.
double hermite_tail() {
  double term = 1.0, s = 0.0;  // (sqrt(2)/2)^n / sqrt(n!)
  for (int n = 0; n < kTerms + 60; ++n) {
    if (n >= kTerms) s += term;
    term *= (std::sqrt(2.0) / 2.0) / std::sqrt(static_cast<double>(n + 1));
  }
  return 1.0865 * s;
}

/// h_0 .. h_{kTerms-1} at x.
inline void hermite_functions(double x, double* h) {
  h[0] = std::exp(-x * x);
  h[1] = 2.0 * x * h[0];
  for (int n = 1; n + 1 < kTerms; ++n) h[n + 1] = 2.0 * x * h[n] - 2.0 * n * h[n - 1];
}

/// d^n / n! for n < kTerms.
inline void scaled_powers(double d, double* a) {
  a[0] = 1.0;
  for (int n = 1; n < kTerms; ++n) a[n] = a[n - 1] * d / n;
}

inline std::int64_t box_index(double z) { return static_cast<std::int64_t>(std::floor(z)); }

}  // namespace

struct NadarayaWatson::Boxes {
  struct Box {
    std::int64_t i1 = 0, i2 = 0;
    std::size_t begin = 0, end = 0;  ///< range in the box-ordered arrays
    double c1 = 0, c2 = 0;           ///< centre in z
  };
  std::size_t dims = 1;
  std::vector<Box> boxes;              ///< sorted by (i1, i2)
  std::vector<std::size_t> row_begin;  ///< boxes[row_begin[r] .. row_begin[r + 1]) share i1 = row_i1[r]
  std::vector<std::int64_t> row_i1;
  std::vector<std::size_t> sorted;  ///< box order -> sorted position (index of x_ / y_)
  std::vector<double> h;            ///< points in box order, [n, dims], bandwidth-scaled (as x_)
  double tail = hermite_tail();
};

namespace {

using Boxes = NadarayaWatson::Boxes;

/// The box index of points xs ([n, dims], bandwidth-scaled).
std::shared_ptr<const Boxes> build_boxes(const std::vector<double>& xs, std::size_t dims) {
  auto b = std::make_shared<Boxes>();
  b->dims = dims;
  const std::size_t n = xs.size() / dims;
  const double s = 1.0 / std::sqrt(2.0);
  std::vector<std::pair<std::int64_t, std::int64_t>> key(n);
  for (std::size_t j = 0; j < n; ++j)
    key[j] = {box_index(xs[j * dims] * s), dims > 1 ? box_index(xs[j * dims + 1] * s) : 0};
  b->sorted.resize(n);
  std::iota(b->sorted.begin(), b->sorted.end(), 0);
  std::stable_sort(b->sorted.begin(), b->sorted.end(), [&](std::size_t p, std::size_t q) { return key[p] < key[q]; });
  b->h.resize(n * dims);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t d = 0; d < dims; ++d) b->h[r * dims + d] = xs[b->sorted[r] * dims + d];
  for (std::size_t r = 0; r < n;) {
    const auto k = key[b->sorted[r]];
    std::size_t e = r;
    while (e < n && key[b->sorted[e]] == k) ++e;
    Boxes::Box box;
    box.i1 = k.first;
    box.i2 = k.second;
    box.begin = r;
    box.end = e;
    box.c1 = static_cast<double>(k.first) + 0.5;
    box.c2 = dims > 1 ? static_cast<double>(k.second) + 0.5 : 0.0;
    if (b->row_i1.empty() || b->row_i1.back() != k.first) {
      b->row_i1.push_back(k.first);
      b->row_begin.push_back(b->boxes.size());
    }
    b->boxes.push_back(box);
    r = e;
  }
  b->row_begin.push_back(b->boxes.size());
  return b;
}

/// Adds one box's exact kernel sums at query q (bandwidth-scaled), with the exact sum's rule: points
/// within t in every coordinate.
void direct_box_sums(const Boxes& b, const Boxes::Box& box, const double* q, const std::vector<double>& Y,
                     std::size_t T, double t, double* num, double& den) {
  const std::size_t dims = b.dims;
  for (std::size_t j = box.begin; j < box.end; ++j) {
    const double* p = &b.h[j * dims];
    double u2 = 0.0;
    bool inside = true;
    for (std::size_t d = 0; d < dims; ++d) {
      const double u = p[d] - q[d];
      inside = inside && std::abs(u) <= t;
      u2 += u * u;
    }
    if (!inside) continue;
    const double k = std::exp(-0.5 * u2);
    const double* yj = &Y[b.sorted[j] * T];
    for (std::size_t c = 0; c < T; ++c) num[c] += k * yj[c];
    den += k;
  }
}

/// The Hermite expansions of the boxes of more than `min_points` points (index[box]: its row, -1 for a
/// box summed directly) for weight columns W = [1, Y_0 .. Y_{T-1}]: coef [expanded][T + 1][kTerms^dims]
/// and the total |weight| mass [expanded][T + 1]. query_index is the same for the boxes of more than
/// kDirectMax points, which box_sums expands per query (it sums smaller boxes directly), so one set
/// of expansions serves the local expansions (min_points = kLocalDirectMax) and box_sums.
struct Expansions {
  std::size_t per = 0, cols = 0;
  std::vector<std::ptrdiff_t> index, query_index;
  std::vector<std::size_t> boxes;
  std::vector<double> coef, mass;
};

Expansions expansions(const Boxes& b, const std::vector<double>& Y, std::size_t T, std::size_t min_points) {
  Expansions ex;
  ex.per = b.dims == 1 ? kTerms : kTerms * kTerms;
  ex.cols = T + 1;
  ex.index.assign(b.boxes.size(), -1);
  ex.query_index.assign(b.boxes.size(), -1);
  for (std::size_t k = 0; k < b.boxes.size(); ++k) {
    const std::size_t points = b.boxes[k].end - b.boxes[k].begin;
    if (points <= std::min(min_points, kDirectMax)) continue;
    ex.index[k] = static_cast<std::ptrdiff_t>(ex.boxes.size());
    if (points > kDirectMax) ex.query_index[k] = ex.index[k];
    ex.boxes.push_back(k);
  }
  ex.coef.assign(ex.boxes.size() * ex.cols * ex.per, 0.0);
  ex.mass.assign(ex.boxes.size() * ex.cols, 0.0);
  const double s = 1.0 / std::sqrt(2.0);
  double a1[kTerms], a2[kTerms], outer[kTerms * kTerms];
  for (std::size_t e = 0; e < ex.boxes.size(); ++e) {
    if ((e & 255) == 0) poll_interrupt();
    const auto& box = b.boxes[ex.boxes[e]];
    double* coef = &ex.coef[e * ex.cols * ex.per];
    double* mass = &ex.mass[e * ex.cols];
    for (std::size_t r = box.begin; r < box.end; ++r) {
      scaled_powers(b.h[r * b.dims] * s - box.c1, a1);
      const double* base = a1;
      if (b.dims > 1) {
        scaled_powers(b.h[r * b.dims + 1] * s - box.c2, a2);
        for (int i = 0; i < kTerms; ++i)
          for (int j = 0; j < kTerms; ++j) outer[i * kTerms + j] = a1[i] * a2[j];
        base = outer;
      }
      const double* yr = &Y[b.sorted[r] * T];
      for (std::size_t c = 0; c < ex.cols; ++c) {
        const double w = c == 0 ? 1.0 : yr[c - 1];
        double* dst = coef + c * ex.per;
        for (std::size_t k = 0; k < ex.per; ++k) dst[k] += w * base[k];
        mass[c] += std::abs(w);
      }
    }
  }
  return ex;
}

/// Kernel sums at one query q (bandwidth-scaled) through the boxes, with the bound `bound` on the
/// error of den (and, per unit of max|y|, of every num).
void box_sums(const Boxes& b, const Expansions& ex, const double* q, const std::vector<double>& Y, std::size_t T,
              double t, double* num, double& den, double& bound) {
  const std::size_t dims = b.dims;
  const double s = 1.0 / std::sqrt(2.0), tz = t * s, beyond = std::exp(-0.5 * t * t);
  const double z1 = q[0] * s, z2 = dims > 1 ? q[1] * s : 0.0;
  const std::int64_t lo1 = box_index(z1 - tz), hi1 = box_index(z1 + tz);
  const std::int64_t lo2 = dims > 1 ? box_index(z2 - tz) : 0, hi2 = dims > 1 ? box_index(z2 + tz) : 0;
  std::fill(num, num + T, 0.0);
  den = 0.0;
  bound = 0.0;
  double hx[kTerms], hy[kTerms], v[kTerms];
  auto row = std::lower_bound(b.row_i1.begin(), b.row_i1.end(), lo1);
  for (; row != b.row_i1.end() && *row <= hi1; ++row) {
    const std::size_t r = static_cast<std::size_t>(row - b.row_i1.begin());
    auto first = b.boxes.begin() + static_cast<std::ptrdiff_t>(b.row_begin[r]);
    auto last = b.boxes.begin() + static_cast<std::ptrdiff_t>(b.row_begin[r + 1]);
    if (dims > 1)
      first = std::lower_bound(first, last, lo2, [](const Boxes::Box& x, std::int64_t k) { return x.i2 < k; });
    for (auto it = first; it != last && it->i2 <= hi2; ++it) {
      const auto& box = *it;
      const std::ptrdiff_t id = ex.query_index[static_cast<std::size_t>(it - b.boxes.begin())];
      if (id < 0) {
        direct_box_sums(b, box, q, Y, T, t, num, den);
        continue;
      }
      const std::size_t e = static_cast<std::size_t>(id);
      const double* coef = &ex.coef[e * ex.cols * ex.per];
      const double mass = ex.mass[e * ex.cols];
      const double d1 = z1 - box.c1, d2 = z2 - box.c2;
      hermite_functions(d1, hx);
      const double g1 = std::exp(-0.5 * d1 * d1), E1 = b.tail * g1;
      double per_point;
      if (dims == 1) {
        per_point = E1 + 1e-14 * g1;
        for (std::size_t c = 0; c < ex.cols; ++c) {
          const double* a = coef + c * ex.per;
          double acc = 0.0;
          for (int i = 0; i < kTerms; ++i) acc += a[i] * hx[i];
          (c == 0 ? den : num[c - 1]) += acc;
        }
      } else {
        hermite_functions(d2, hy);
        const double g2 = std::exp(-0.5 * d2 * d2), E2 = b.tail * g2;
        per_point = E1 + E2 + E1 * E2 + 1e-13 * g1 * g2;
        for (std::size_t c = 0; c < ex.cols; ++c) {
          const double* a = coef + c * ex.per;
          for (int i = 0; i < kTerms; ++i) {
            double acc = 0.0;
            const double* ai = a + i * kTerms;
            for (int j = 0; j < kTerms; ++j) acc += ai[j] * hy[j];
            v[i] = acc;
          }
          double acc = 0.0;
          for (int i = 0; i < kTerms; ++i) acc += v[i] * hx[i];
          (c == 0 ? den : num[c - 1]) += acc;
        }
      }
      // Points of the box beyond the window: the exact sum leaves them out; a box wholly inside has none.
      bool whole = static_cast<double>(box.i1) >= z1 - tz && static_cast<double>(box.i1) + 1.0 <= z1 + tz;
      if (dims > 1)
        whole = whole && static_cast<double>(box.i2) >= z2 - tz && static_cast<double>(box.i2) + 1.0 <= z2 + tz;
      bound += mass * (per_point + (whole ? 0.0 : beyond));
    }
  }
}

/// Queries per target box from which the box's local (Taylor) expansion is formed (2-D).
constexpr std::size_t kLocalMin = 32;
/// In the local expansions, boxes of at most this many points are summed directly.
constexpr std::size_t kLocalDirectMax = 4;
constexpr std::int64_t kHermiteReach = 7;  // |source box - target box| <= 6 within the window; a margin
constexpr int kLocalTerms = 2 * kTerms - 1;

/// The local expansion's bound per unit mass and coordinate, before the factor exp(-Δ²/2): Cramér's
/// constant times the sum over the omitted pairs (α >= p or γ >= p) of (1/√2)^(α+γ) √((α+γ)!)/(α! γ!),
/// the bound on |u^α/α!| |v^γ/γ!| |h_(α+γ)(Δ)| e^(Δ²/2) for |u|, |v| <= 1/2.
double local_tail() {
  double s = 0.0;
  for (int a = 0; a < kTerms + 80; ++a)
    for (int g = 0; g < kTerms + 80; ++g) {
      if (a < kTerms && g < kTerms) continue;
      const int n = a + g;
      s +=
          std::exp(-0.5 * n * std::log(2.0) + 0.5 * std::lgamma(n + 1.0) - std::lgamma(a + 1.0) - std::lgamma(g + 1.0));
    }
  return 1.0865 * s;
}

/// h_0 .. h_{kLocalTerms-1} at the integer box offsets -kHermiteReach .. kHermiteReach.
struct OffsetHermite {
  double h[2 * kHermiteReach + 1][kLocalTerms];
  OffsetHermite() {
    for (std::int64_t d = -kHermiteReach; d <= kHermiteReach; ++d) {
      double* row = h[d + kHermiteReach];
      const double x = static_cast<double>(d);
      row[0] = std::exp(-x * x);
      row[1] = 2.0 * x * row[0];
      for (int n = 1; n + 1 < kLocalTerms; ++n) row[n + 1] = 2.0 * x * row[n] - 2.0 * n * row[n - 1];
    }
  }
  const double* at(std::int64_t d) const { return h[d + kHermiteReach]; }
};

/// The local expansion about the centre of target box (i1, i2) of every expanded source box in reach,
/// L[c][γ][δ] (cols x kTerms x kTerms), the boxes summed directly, and the bound on the error of den
/// (per unit of max|y| for num) that holds for every query inside the target box.
struct LocalExpansion {
  std::vector<double> L;
  std::vector<const NadarayaWatson::Boxes::Box*> direct;
  double bound = 0.0;
};

LocalExpansion local_expansion(const Boxes& b, const Expansions& ex, std::int64_t i1, std::int64_t i2, double t) {
  static const OffsetHermite H;
  static const double tail = local_tail();
  const double tz = t / std::sqrt(2.0), beyond = std::exp(-0.5 * t * t);
  const std::size_t P = kTerms * kTerms, cols = ex.cols;
  LocalExpansion le;
  le.L.assign(cols * P, 0.0);
  std::vector<double> U(cols * P);
  // Source boxes meeting the window of some query of the box: queries lie in [i, i + 1) in z.
  const std::int64_t lo1 = box_index(static_cast<double>(i1) - tz), hi1 = box_index(static_cast<double>(i1) + 1.0 + tz);
  const std::int64_t lo2 = box_index(static_cast<double>(i2) - tz), hi2 = box_index(static_cast<double>(i2) + 1.0 + tz);
  auto row = std::lower_bound(b.row_i1.begin(), b.row_i1.end(), lo1);
  for (; row != b.row_i1.end() && *row <= hi1; ++row) {
    const std::size_t r = static_cast<std::size_t>(row - b.row_i1.begin());
    auto first = b.boxes.begin() + static_cast<std::ptrdiff_t>(b.row_begin[r]);
    auto last = b.boxes.begin() + static_cast<std::ptrdiff_t>(b.row_begin[r + 1]);
    first = std::lower_bound(first, last, lo2, [](const Boxes::Box& x, std::int64_t k) { return x.i2 < k; });
    std::fill(U.begin(), U.end(), 0.0);
    bool any = false;
    const std::int64_t d1 = i1 - *row;  // centre offset, target minus source
    for (auto it = first; it != last && it->i2 <= hi2; ++it) {
      const std::ptrdiff_t id = ex.index[static_cast<std::size_t>(it - b.boxes.begin())];
      if (id < 0) {
        le.direct.push_back(&*it);
        continue;
      }
      any = true;
      const std::int64_t d2 = i2 - it->i2;
      const double* h2 = H.at(d2);
      const std::size_t e = static_cast<std::size_t>(id);
      for (std::size_t c = 0; c < cols; ++c) {
        const double* M = &ex.coef[(e * cols + c) * P];
        double* u = &U[c * P];
        for (int a = 0; a < kTerms; ++a)
          for (int bb = 0; bb < kTerms; ++bb) {
            const double m = M[a * kTerms + bb];
            if (m == 0.0) continue;
            const double* hh = h2 + bb;
            double* ua = u + a * kTerms;
            for (int dl = 0; dl < kTerms; ++dl) ua[dl] += m * hh[dl];
          }
      }
      const double g1 = std::exp(-0.5 * double(d1 * d1)), g2 = std::exp(-0.5 * double(d2 * d2));
      const double E1 = tail * g1, E2 = tail * g2;
      const bool whole = static_cast<double>(*row) >= static_cast<double>(i1) + 1.0 - tz &&
                         static_cast<double>(*row) + 1.0 <= static_cast<double>(i1) + tz &&
                         static_cast<double>(it->i2) >= static_cast<double>(i2) + 1.0 - tz &&
                         static_cast<double>(it->i2) + 1.0 <= static_cast<double>(i2) + tz;
      le.bound += ex.mass[e * cols] * (E1 + E2 + E1 * E2 + 1e-13 * g1 * g2 + (whole ? 0.0 : beyond));
    }
    if (!any) continue;
    const double* h1 = H.at(d1);
    for (std::size_t c = 0; c < cols; ++c) {
      const double* u = &U[c * P];
      double* L = &le.L[c * P];
      for (int g = 0; g < kTerms; ++g)
        for (int a = 0; a < kTerms; ++a) {
          const double f = h1[a + g];
          const double* ua = u + a * kTerms;
          double* lg = L + g * kTerms;
          for (int dl = 0; dl < kTerms; ++dl) lg[dl] += f * ua[dl];
        }
    }
  }
  // (-1)^(γ+δ) / (γ! δ!)
  double inv_fact[kTerms];
  inv_fact[0] = 1.0;
  for (int k = 1; k < kTerms; ++k) inv_fact[k] = inv_fact[k - 1] / k;
  for (std::size_t c = 0; c < cols; ++c)
    for (int g = 0; g < kTerms; ++g)
      for (int dl = 0; dl < kTerms; ++dl)
        le.L[c * P + g * kTerms + dl] *= ((g + dl) % 2 ? -1.0 : 1.0) * inv_fact[g] * inv_fact[dl];
  return le;
}

/// The sums at one query q (bandwidth-scaled) of target box (i1, i2) from its local expansion and its
/// directly summed boxes.
void local_sums(const Boxes& b, const LocalExpansion& le, std::size_t cols, std::int64_t i1, std::int64_t i2,
                const double* q, const std::vector<double>& Y, std::size_t T, double t, double* num, double& den) {
  const double s = 1.0 / std::sqrt(2.0);
  const double v1 = q[0] * s - (static_cast<double>(i1) + 0.5), v2 = q[1] * s - (static_cast<double>(i2) + 0.5);
  double p1[kTerms], p2[kTerms];
  p1[0] = p2[0] = 1.0;
  for (int k = 1; k < kTerms; ++k) p1[k] = p1[k - 1] * v1, p2[k] = p2[k - 1] * v2;
  const std::size_t P = kTerms * kTerms;
  std::fill(num, num + T, 0.0);
  den = 0.0;
  for (std::size_t c = 0; c < cols; ++c) {
    const double* L = &le.L[c * P];
    double acc = 0.0;
    for (int g = 0; g < kTerms; ++g) {
      double r = 0.0;
      for (int dl = 0; dl < kTerms; ++dl) r += L[g * kTerms + dl] * p2[dl];
      acc += p1[g] * r;
    }
    (c == 0 ? den : num[c - 1]) += acc;
  }
  for (const auto* box : le.direct) direct_box_sums(b, *box, q, Y, T, t, num, den);
}

}  // namespace

NadarayaWatson::NadarayaWatson(const std::vector<double>& x, const std::vector<double>& y, std::size_t dims,
                               const std::vector<double>& bandwidth, const NadarayaWatsonOptions& options)
    : dims_(dims), options_(options) {
  const char* fn = "NadarayaWatson";
  if (dims == 0) throw_input(fn, "dims is 0, but must be >= 1");
  if (y.empty()) throw_input(fn, "y is empty, but the estimator needs data");
  check_same_size(fn, "x", x.size(), "y * dims", y.size() * dims);
  check_same_size(fn, "bandwidth", bandwidth.size(), "dims", dims);
  if (!(options.pseudo_count >= 0.0)) throw_input(fn, "pseudo_count is negative");
  if (!(options.clip_low <= options.clip_high)) throw_input(fn, "clip_low > clip_high");
  const std::size_t n = y.size();
  inv_h_.resize(dims);
  for (std::size_t d = 0; d < dims; ++d) {
    if (!(bandwidth[d] > 0.0) || !std::isfinite(bandwidth[d]))
      throw_index(fn, "bandwidth", d, std::to_string(bandwidth[d]), "positive and finite");
    inv_h_[d] = 1.0 / bandwidth[d];
  }
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    check_finite(fn, "y", i, y[i]);
    sum += y[i];
  }
  for (std::size_t i = 0; i < x.size(); ++i) check_finite(fn, "x", i, x[i]);
  prior_ = std::isnan(options.prior) ? sum / static_cast<double>(n) : options.prior;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a * dims] < x[b * dims]; });
  x_.resize(n * dims);
  y_.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t d = 0; d < dims; ++d) x_[r * dims + d] = x[order[r] * dims + d] * inv_h_[d];
    y_[r] = y[order[r]];
  }
  order_ = std::move(order);
  if (options.fast && dims <= 2 && n >= kFastMinPoints) boxes_ = build_boxes(x_, dims);
}

void NadarayaWatson::exact_sums(const double* q, const double* Y, std::size_t T, double* num, double& den) const {
  const std::size_t n = y_.size();
  const double t = options_.truncate, t2 = t * t;
  // Window on the sorted first coordinate.
  std::size_t a = 0, b = n;
  while (a < b) {
    const std::size_t mid = (a + b) / 2;
    if (x_[mid * dims_] < q[0] - t)
      a = mid + 1;
    else
      b = mid;
  }
  const std::size_t lo = a;
  b = n;
  while (a < b) {
    const std::size_t mid = (a + b) / 2;
    if (x_[mid * dims_] <= q[0] + t)
      a = mid + 1;
    else
      b = mid;
  }
  const std::size_t hi = a;
  std::fill(num, num + T, 0.0);
  den = 0.0;
  for (std::size_t j = lo; j < hi; ++j) {
    const double k = truncated_weight(&x_[j * dims_], q, dims_, t, t2);
    if (k < 0) continue;
    const double* yj = &Y[j * T];
    for (std::size_t c = 0; c < T; ++c) num[c] += k * yj[c];
    den += k;
  }
}

std::vector<std::vector<double>> NadarayaWatson::estimate(const std::vector<double>& x, const std::vector<double>& Y,
                                                          std::size_t T, const std::vector<double>& prior,
                                                          const char* fn) const {
  if (x.size() % dims_ != 0)
    throw_input(fn, "x has " + std::to_string(x.size()) + " values, not a multiple of dims = " + std::to_string(dims_));
  const std::size_t m = x.size() / dims_;
  for (std::size_t i = 0; i < x.size(); ++i) check_finite(fn, "x", i, x[i]);
  std::vector<std::vector<double>> out(T, std::vector<double>(m));
  // The local expansions' offset table reaches kHermiteReach boxes (truncate <= 8.4 bandwidths).
  const bool local_reach = std::ceil(options_.truncate / std::sqrt(2.0)) + 1.0 <= static_cast<double>(kHermiteReach);
  const bool local = boxes_ && dims_ == 2 && local_reach;
  // The local expansions take every box of more than kLocalDirectMax points (a box enters once per
  // target box there, not once per query); box_sums those of more than kDirectMax.
  const Expansions ex = boxes_ ? expansions(*boxes_, Y, T, local ? kLocalDirectMax : kDirectMax) : Expansions{};
  const double lambda = options_.pseudo_count;
  // One query's estimates from its sums, after the bound test: |error of num_c| <= ymax * bound and
  // |error of den| <= bound, so every estimate is within (ymax + |estimate|) * bound / (den + lambda -
  // bound); one test for all targets, so a target's estimate does not depend on the other targets.
  auto finish = [&](std::size_t i, const double* q, double* num, double den, double bound, bool fast_sums) {
    const double room = den + lambda - bound;
    if (!fast_sums || !(room > 0.0) || bound > kFastTolerance * room) exact_sums(q, Y.data(), T, num, den);
    for (std::size_t c = 0; c < T; ++c) {
      const double est = (den + lambda) > 0.0 ? (num[c] + lambda * prior[c]) / (den + lambda) : prior[c];
      out[c][i] = std::clamp(est, options_.clip_low, options_.clip_high);
    }
  };
  auto one_query = [&](std::size_t i, std::vector<double>& q, std::vector<double>& num) {
    for (std::size_t d = 0; d < dims_; ++d) q[d] = x[i * dims_ + d] * inv_h_[d];
    double den = 0.0, bound = 0.0;
    if (boxes_) box_sums(*boxes_, ex, q.data(), Y, T, options_.truncate, num.data(), den, bound);
    finish(i, q.data(), num.data(), den, bound, boxes_ != nullptr);
  };
  if (local) {
    // Queries grouped by target box: a box with kLocalMin or more queries forms one local expansion of
    // every source box in reach and evaluates it per query (kTerms^2 per target); smaller groups sum
    // the source expansions per query (box_sums).
    const double s = 1.0 / std::sqrt(2.0);
    std::vector<std::pair<std::pair<std::int64_t, std::int64_t>, std::size_t>> keyed(m);
    for (std::size_t i = 0; i < m; ++i)
      keyed[i] = {{box_index(x[i * 2] * inv_h_[0] * s), box_index(x[i * 2 + 1] * inv_h_[1] * s)}, i};
    std::sort(keyed.begin(), keyed.end());
    std::vector<std::size_t> group{0};
    for (std::size_t i = 1; i < m; ++i)
      if (keyed[i].first != keyed[i - 1].first) group.push_back(i);
    group.push_back(m);
    parallel_for_index(group.size() - 1, options_.threads, [&](std::size_t g) {
      std::vector<double> q(2), num(T);
      const std::size_t a = group[g], e = group[g + 1];
      if (e - a < kLocalMin) {
        for (std::size_t k = a; k < e; ++k) one_query(keyed[k].second, q, num);
        return;
      }
      const auto [i1, i2] = keyed[a].first;
      const LocalExpansion le = local_expansion(*boxes_, ex, i1, i2, options_.truncate);
      for (std::size_t k = a; k < e; ++k) {
        const std::size_t i = keyed[k].second;
        q[0] = x[i * 2] * inv_h_[0];
        q[1] = x[i * 2 + 1] * inv_h_[1];
        double den = 0.0;
        local_sums(*boxes_, le, ex.cols, i1, i2, q.data(), Y, T, options_.truncate, num.data(), den);
        const double room = den + lambda - le.bound;
        if (room > 0.0 && le.bound <= kFastTolerance * room) {
          finish(i, q.data(), num.data(), den, le.bound, true);
          continue;
        }
        // The local bound is looser than the per-query one (both truncations): try that before the exact sum.
        one_query(i, q, num);
      }
    });
    return out;
  }
  const std::size_t blocks = (m + kQueryBlock - 1) / kQueryBlock;
  parallel_for_index(blocks, options_.threads, [&](std::size_t blk) {
    std::vector<double> q(dims_), num(T);
    const std::size_t end = std::min(m, (blk + 1) * kQueryBlock);
    for (std::size_t i = blk * kQueryBlock; i < end; ++i) one_query(i, q, num);
  });
  return out;
}

std::vector<double> NadarayaWatson::predict(const std::vector<double>& x) const {
  return std::move(estimate(x, y_, 1, {prior_}, "NadarayaWatson::predict")[0]);
}

std::vector<std::vector<double>> NadarayaWatson::predict_many(const std::vector<double>& x,
                                                              const std::vector<const std::vector<double>*>& ys) const {
  const char* fn = "NadarayaWatson::predict_many";
  const std::size_t n = y_.size(), T = ys.size();
  // Targets in sorted order, interleaved [n][T] so the inner loop runs over targets; priors as the
  // constructor computes them (sum in input order, divided by n).
  std::vector<double> Y(n * T), prior(T);
  for (std::size_t t = 0; t < T; ++t) {
    const std::string name = "ys[" + std::to_string(t) + "]";
    if (!ys[t]) throw_input(fn, name + " is null");
    check_same_size(fn, name.c_str(), ys[t]->size(), "n", n);
    double sum = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      check_finite(fn, name.c_str(), i, (*ys[t])[i]);
      sum += (*ys[t])[i];
    }
    prior[t] = std::isnan(options_.prior) ? sum / static_cast<double>(n) : options_.prior;
    for (std::size_t r = 0; r < n; ++r) Y[r * T + t] = (*ys[t])[order_[r]];
  }
  return estimate(x, Y, T, prior, fn);
}

}  // namespace arcal
