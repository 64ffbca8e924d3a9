// The smooth reliability diagram (Błasiok & Nakkiran 2023, relplot's `prepare_rel_diagram`): the kernel
// regression of correctness on confidence with a Gaussian kernel reflected at 0 and 1, at smECE's
// bandwidth sigma*, on a mesh of [0, 1], with a percentile bootstrap band and the kernel density of the
// confidences. Standard library only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace arcal {

struct SmoothReliability {
  double sigma = 0.0;             ///< kernel bandwidth (smECE's sigma*)
  std::vector<double> t;          ///< [M] mesh, M points from 0 to 1
  std::vector<double> accuracy;   ///< [M] the smoothed E[correct | confidence = t]
  std::vector<double> low, high;  ///< [M] percentile band over bootstrap resamples (empty when draws = 0)
  std::vector<double> density;    ///< [M] kernel density of the confidences (a density on [0, 1])
  int draws = 0;                  ///< bootstrap resamples of the band
  double level = 0.95;
  std::uint64_t seed = 0;
};

/// relplot's KernelSmoother(ReflectedGaussianKernel(sigma)).predict(t) (relplot 1.0.3, estimators.py and
/// kernels.py): y and 1 are split linearly onto P = floor(max(2000, round(20 / sigma)) / 2) + 1 grid
/// points of [0, 1] (weights w, all 1 when empty), each grid convolved with the N(0, sigma^2) density
/// sampled at the grid spacing over the grid mirrored once at each end, and the two are divided
/// (1e-4 added to the denominator) and interpolated linearly at t. f in [0, 1], y in [0, 1], [N] each;
/// sigma > 0. Kernel terms beyond 39 sigma (exactly 0 in double precision) are left out. Throws InputError on
/// mismatched sizes, values outside [0, 1], an empty input or sigma <= 0.
std::vector<double> smooth_reliability_curve(const std::vector<double>& f, const std::vector<double>& y, double sigma,
                                             const std::vector<double>& t, const std::vector<double>& w = {});

/// relplot's ReflectedGaussianKernel(sigma).kde(f, t): the same smoothing of mass 1/N per example.
std::vector<double> smooth_confidence_density(const std::vector<double>& f, double sigma, const std::vector<double>& t);

/// The diagram at bandwidth sigma on an M-point mesh (M >= 2), with a band from `draws` bootstrap
/// resamples of the examples (Rng(derive_seed(seed, b)); the curve refitted at the same sigma, as
/// relplot's bagged band, with kernel terms past 8 sigma left out) and percentiles (1 - level)/2 and (1 + level)/2 per
/// mesh point. With `cluster` ([N], or empty) whole clusters are resampled. Throws as smooth_reliability_curve, or on
/// M < 2, draws < 0, level outside (0, 1).
SmoothReliability smooth_reliability_diagram(const std::vector<double>& f, const std::vector<double>& y, double sigma,
                                             std::size_t mesh = 200, int draws = 200, std::uint64_t seed = 0,
                                             double level = 0.95, const std::vector<std::int64_t>& cluster = {});

}  // namespace arcal
