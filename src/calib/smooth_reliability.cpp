#include "calib/smooth_reliability.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/check.hpp"
#include "core/rng.hpp"
#include "stats/bootstrap.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {

/// relplot's grid size for bandwidth sigma: floor(max(2000, round(20 / sigma)) / 2) + 1.
std::size_t grid_points(double sigma) {
  const double x = std::max(2000.0, std::nearbyint(20.0 / sigma));
  return static_cast<std::size_t>(x) / 2 + 1;
}

/// relplot's smooth_round_to_grid: v[floor(f (P - 1))] += (1 - frac) y, the next point += frac y
/// (the last cell closed), each example weighted by w (1 when w is empty).
void round_to_grid(const std::vector<double>& f, const std::vector<double>* y, const std::vector<double>& w,
                   std::size_t P, std::vector<double>& v) {
  v.assign(P, 0.0);
  const double scale = static_cast<double>(P - 1);
  for (std::size_t i = 0; i < f.size(); ++i) {
    const double wi = (w.empty() ? 1.0 : w[i]) * (y ? (*y)[i] : 1.0);
    if (wi == 0) continue;
    const double x = f[i] * scale;
    std::size_t g = static_cast<std::size_t>(x);
    if (g > P - 2) g = P - 2;
    const double frac = x - static_cast<double>(g);
    v[g] += (1.0 - frac) * wi;
    v[g + 1] += frac * wi;
  }
}

/// The kernel of relplot's ReflectedGaussianKernel.convolve as offsets: smoothed[i] =
/// sum_d v[reflect(i + d)] k[d], k[d] the N(0, sigma^2) density at (P/2 - d)/(P - 1) - 1/2 (integer P/2:
/// for even P the kernel sits half a step off the grid, as in relplot), d over the 'valid' range.
struct GridKernel {
  long lo = 0;  ///< first offset
  std::vector<double> k;
};

GridKernel grid_kernel(std::size_t P, double sigma, double reach) {
  const long Pl = static_cast<long>(P), half = Pl / 2;
  const double step = 1.0 / static_cast<double>(P - 1), norm = 1.0 / (std::sqrt(2.0 * M_PI) * sigma);
  GridKernel g;
  long first = half - (Pl - 1), last = half;
  // Terms beyond `reach` sigma left out (39: exactly 0 in double precision; 8: below 1e-14 of the peak).
  auto offset = [&](long d) { return static_cast<double>(half - d) * step - 0.5; };
  while (first < last && std::fabs(offset(first)) > reach * sigma) ++first;
  while (last > first && std::fabs(offset(last)) > reach * sigma) --last;
  g.lo = first;
  for (long d = first; d <= last; ++d) {
    const double x = offset(d);
    g.k.push_back(norm * std::exp(-x * x / (2.0 * sigma * sigma)));
  }
  return g;
}

/// The grid mirrored once at each end (relplot: flip(v)[:-1], v, flip(v)[1:]), smoothed.
std::vector<double> convolve_reflected(const std::vector<double>& v, const GridKernel& g) {
  const long P = static_cast<long>(v.size());
  std::vector<double> out(v.size(), 0.0);
  for (long i = 0; i < P; ++i) {
    double s = 0.0;
    for (std::size_t j = 0; j < g.k.size(); ++j) {
      long u = i + g.lo + static_cast<long>(j);
      if (u < 0)
        u = -u;
      else if (u > P - 1)
        u = 2 * (P - 1) - u;
      s += v[static_cast<std::size_t>(u)] * g.k[j];
    }
    out[static_cast<std::size_t>(i)] = s;
  }
  return out;
}

/// relplot's interpolate: the piecewise-linear function through (i / (P - 1), y[i]) at each t.
std::vector<double> interpolate(const std::vector<double>& grid, const std::vector<double>& t) {
  const std::size_t P = grid.size();
  const double scale = static_cast<double>(P - 1);
  std::vector<double> out(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) {
    const double x = t[i] * scale;
    std::size_t g = x <= 0 ? 0 : static_cast<std::size_t>(x);
    if (g > P - 2) g = P - 2;
    const double r = x - static_cast<double>(g);
    out[i] = grid[g] * (1.0 - r) + grid[g + 1] * r;
  }
  return out;
}

void check_inputs(const char* fn, const std::vector<double>& f, const std::vector<double>* y, double sigma) {
  if (f.empty()) throw_input(fn, "f is empty");
  if (y) check_same_size(fn, "f", f.size(), "y", y->size());
  if (!(sigma > 0) || !std::isfinite(sigma)) throw_input(fn, "sigma is " + std::to_string(sigma) + ", but must be > 0");
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (!(f[i] >= 0 && f[i] <= 1)) throw_index(fn, "f", i, std::to_string(f[i]), "in [0, 1]");
    if (y && !((*y)[i] >= 0 && (*y)[i] <= 1)) throw_index(fn, "y", i, std::to_string((*y)[i]), "in [0, 1]");
  }
}

std::vector<double> curve_unchecked(const std::vector<double>& f, const std::vector<double>& y, const GridKernel& g,
                                    std::size_t P, const std::vector<double>& t, const std::vector<double>& w) {
  std::vector<double> vy, v1;
  round_to_grid(f, &y, w, P, vy);
  round_to_grid(f, nullptr, w, P, v1);
  const auto ys = interpolate(convolve_reflected(vy, g), t), dens = interpolate(convolve_reflected(v1, g), t);
  std::vector<double> out(t.size());
  for (std::size_t i = 0; i < t.size(); ++i) out[i] = ys[i] / (dens[i] + 1e-4);
  return out;
}

}  // namespace

std::vector<double> smooth_reliability_curve(const std::vector<double>& f, const std::vector<double>& y, double sigma,
                                             const std::vector<double>& t, const std::vector<double>& w) {
  const char* fn = "smooth_reliability_curve";
  check_inputs(fn, f, &y, sigma);
  if (!w.empty()) check_same_size(fn, "f", f.size(), "w", w.size());
  const std::size_t P = grid_points(sigma);
  return curve_unchecked(f, y, grid_kernel(P, sigma, 39.0), P, t, w);
}

std::vector<double> smooth_confidence_density(const std::vector<double>& f, double sigma,
                                              const std::vector<double>& t) {
  check_inputs("smooth_confidence_density", f, nullptr, sigma);
  const std::size_t P = grid_points(sigma);
  const std::vector<double> w(f.size(), 1.0 / static_cast<double>(f.size()));
  std::vector<double> v;
  round_to_grid(f, nullptr, w, P, v);
  return interpolate(convolve_reflected(v, grid_kernel(P, sigma, 39.0)), t);
}

SmoothReliability smooth_reliability_diagram(const std::vector<double>& f, const std::vector<double>& y, double sigma,
                                             std::size_t mesh, int draws, std::uint64_t seed, double level,
                                             const std::vector<std::int64_t>& cluster) {
  const char* fn = "smooth_reliability_diagram";
  check_inputs(fn, f, &y, sigma);
  if (mesh < 2) throw_input(fn, "mesh is " + std::to_string(mesh) + ", but must be >= 2");
  if (draws < 0) throw_input(fn, "draws is " + std::to_string(draws) + ", but must be >= 0");
  if (!(level > 0 && level < 1)) throw_input(fn, "level is " + std::to_string(level) + ", but must be in (0, 1)");
  if (!cluster.empty()) check_same_size(fn, "f", f.size(), "cluster", cluster.size());
  SmoothReliability r;
  r.sigma = sigma;
  r.draws = draws;
  r.level = level;
  r.seed = seed;
  r.t.resize(mesh);
  for (std::size_t i = 0; i < mesh; ++i) r.t[i] = static_cast<double>(i) / static_cast<double>(mesh - 1);
  const std::size_t P = grid_points(sigma);
  r.accuracy = curve_unchecked(f, y, grid_kernel(P, sigma, 39.0), P, r.t, {});
  // The band's curves: kernel terms past 8 sigma left out (they move a curve only where no example is
  // near, by < 1e-6 there), which makes the 200 refits several times cheaper at large sigma.
  const GridKernel g = grid_kernel(P, sigma, 8.0);
  r.density = smooth_confidence_density(f, sigma, r.t);
  if (draws == 0) return r;
  // Resamples: examples (stats/bootstrap_counts, the metrics' resample b) or whole clusters.
  std::vector<std::uint32_t> group;
  std::size_t groups = 0;
  if (!cluster.empty()) {
    group = dense_ids(cluster, groups);
  }
  std::vector<std::vector<double>> at(mesh, std::vector<double>(static_cast<std::size_t>(draws)));
  std::vector<std::uint32_t> counts, per_group;
  std::vector<double> w(f.size());
  for (int b = 0; b < draws; ++b) {
    if (groups > 0) {
      per_group.assign(groups, 0);
      Rng rng(derive_seed(seed, 0x5A0u << 20 | static_cast<std::uint64_t>(b)));
      for (std::size_t k = 0; k < groups; ++k) ++per_group[rng.below(groups)];
      for (std::size_t i = 0; i < f.size(); ++i) w[i] = per_group[group[i]];
    } else {
      bootstrap_counts(f.size(), seed, static_cast<std::uint64_t>(b), counts);
      for (std::size_t i = 0; i < f.size(); ++i) w[i] = counts[i];
    }
    const auto c = curve_unchecked(f, y, g, P, r.t, w);
    for (std::size_t i = 0; i < mesh; ++i) at[i][static_cast<std::size_t>(b)] = c[i];
  }
  r.low.resize(mesh);
  r.high.resize(mesh);
  const double a = (1.0 - level) / 2.0;
  for (std::size_t i = 0; i < mesh; ++i) {
    std::sort(at[i].begin(), at[i].end());
    r.low[i] = quantile_sorted(at[i], a);
    r.high[i] = quantile_sorted(at[i], 1.0 - a);
  }
  return r;
}

}  // namespace arcal
