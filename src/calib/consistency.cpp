#include "calib/consistency.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "calib/binning.hpp"
#include "core/check.hpp"
#include "stats/bootstrap.hpp"

namespace arcal {

namespace {
constexpr double kNormalVariance = 10.0;  // Σ p(1 − p) from which the cell sum is drawn as a normal
constexpr double kPoissonSquares = 0.01;  // Σ p² (or Σ (1 − p)²) below which it is a Poisson

double monte_carlo_upper_p(double observed, const std::vector<double>& null) {
  std::size_t ge = 0;
  const double threshold = observed - 1e-12 * (1.0 + std::abs(observed));
  for (double v : null) ge += v >= threshold;
  return (1.0 + double(ge)) / (double(null.size()) + 1.0);
}

void check_draws(const char* fn, int bins, int draws) {
  if (bins < 1) throw_input(fn, "bins is " + std::to_string(bins) + ", but must be >= 1");
  if (draws < 1) throw_input(fn, "draws is " + std::to_string(draws) + ", but must be >= 1");
}
}  // namespace

bool BernoulliSumCell::decide() {
  if (n_ == 0)
    mode_ = Mode::empty;
  else if (sum_var_ >= kNormalVariance)
    mode_ = Mode::normal;
  else if (sum_p2_ <= kPoissonSquares)
    mode_ = Mode::poisson_low;
  else if (sum_q2_ <= kPoissonSquares)
    mode_ = Mode::poisson_high;
  else
    mode_ = Mode::exact;
  if (mode_ == Mode::exact) members_.reserve(n_);
  return mode_ == Mode::exact;
}

double DrawRng::normal() {
  if (has_cached_) {
    has_cached_ = false;
    return cached_;
  }
  double u1;
  do {
    u1 = uniform();
  } while (u1 <= 0.0);
  const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * M_PI * uniform();
  cached_ = r * std::sin(a);
  has_cached_ = true;
  return r * std::cos(a);
}

double poisson_draw(DrawRng& rng, double mean) {
  if (mean <= 0) return 0.0;
  if (mean > 100) return std::max(0.0, std::round(mean + std::sqrt(mean) * rng.normal()));
  // Inversion: walk the CDF from 0 (expected mean + 1 steps).
  const double u = rng.uniform();
  double k = 0, pk = std::exp(-mean), cdf = pk;
  while (u > cdf && k < 1000) {
    ++k;
    pk *= mean / k;
    cdf += pk;
  }
  return k;
}

double BernoulliSumCell::sample(DrawRng& rng, double delta) const {
  const double n = static_cast<double>(n_);
  switch (mode_) {
    case Mode::empty: return 0.0;
    case Mode::normal:
    case Mode::poisson_low:
    case Mode::poisson_high: {
      // Successes have mean μ = Σ (p + δ) and variance σ² = Σ (p + δ)(1 − p − δ) = Σ p(1 − p) + δ (n − 2Σp) − nδ².
      const double mu = std::min(std::max(sum_p_ + n * delta, 0.0), n);
      const double var = std::max(0.0, sum_var_ + delta * (n - 2.0 * sum_p_) - n * delta * delta);
      if (var >= kNormalVariance) return mu - sum_p_ + std::sqrt(var) * rng.normal();
      // Few expected successes (or failures): translated Poisson (Röllin 2007), k0 + Poisson(μ − k0) with
      // k0 = floor(μ − σ²): the same mean, a variance within 1 of σ²; plain Poisson when σ² ≈ μ (tiny p).
      if (mu <= n / 2) {
        const double k0 = std::floor(std::max(mu - var, 0.0));
        return k0 + poisson_draw(rng, mu - k0) - sum_p_;
      }
      const double miss = n - mu, k0 = std::floor(std::max(miss - var, 0.0));
      return n - (k0 + poisson_draw(rng, miss - k0)) - sum_p_;
    }
    case Mode::exact: {
      double s = 0;
      for (double p : members_) {
        const double q = std::min(std::max(p + delta, 0.0), 1.0);
        s += (rng.uniform() < q ? 1.0 : 0.0) - p;
      }
      return s;
    }
  }
  return 0.0;
}

double cell_error(const ErrorCells& c, const std::vector<double>& sums, CellError kind) {
  double out = 0.0;
  for (std::size_t j = 0; j < c.cells.size(); ++j) {
    const double n = static_cast<double>(c.cells[j].size());
    if (n == 0) continue;
    const double s = sums[j];
    switch (kind) {
      case CellError::l1: out += std::abs(s); break;
      case CellError::l2: out += s * s / n; break;
      case CellError::debiased_l2:
        if (n >= 2) {
          const double acc = std::min(std::max((s + c.cells[j].sum_p()) / n, 0.0), 1.0);
          out += n * ((s / n) * (s / n) - acc * (1.0 - acc) / (n - 1.0));
        }
        break;
    }
  }
  out /= c.total;
  return kind == CellError::l2 ? std::sqrt(out) : out;
}

namespace {

/// Two passes: statistics of every member, then the members of the cells that need exact draws.
template <class ForEach>
void fill_cells(ErrorCells& out, std::size_t cells, const ForEach& for_each) {
  out.cells.assign(cells, BernoulliSumCell{});
  out.observed.assign(cells, 0.0);
  for_each([&](std::size_t cell, double p, double a) {
    out.cells[cell].add_stats(p);
    out.observed[cell] += a - p;
  });
  bool any_exact = false;
  for (auto& c : out.cells) any_exact = c.decide() || any_exact;
  if (any_exact)
    for_each([&](std::size_t cell, double p, double) {
      if (out.cells[cell].mode() == BernoulliSumCell::Mode::exact) out.cells[cell].add_member(p);
    });
}

}  // namespace

ErrorCells top_label_cells(const std::vector<double>& confidence, const std::vector<double>& correct, int bins,
                           bool equal_mass) {
  const char* fn = "top_label_cells";
  if (bins < 1) throw_input(fn, "bins is " + std::to_string(bins) + ", but must be >= 1");
  check_same_size(fn, "correct", correct.size(), "confidence", confidence.size());
  if (confidence.empty()) throw_input(fn, "no examples (N = 0)");
  const std::vector<int> bin = equal_mass ? equal_mass_bins(confidence, bins) : equal_width_bins(confidence, bins);
  ErrorCells out;
  out.total = static_cast<double>(confidence.size());
  fill_cells(out, static_cast<std::size_t>(bins), [&](const auto& visit) {
    for (std::size_t i = 0; i < confidence.size(); ++i)
      visit(static_cast<std::size_t>(bin[i]), confidence[i], correct[i]);
  });
  return out;
}

ErrorCells classwise_cells(Span<double> probs, std::size_t n, std::size_t k, Span<std::int64_t> labels, int bins) {
  const char* fn = "classwise_cells";
  if (bins < 1) throw_input(fn, "bins is " + std::to_string(bins) + ", but must be >= 1");
  if (n == 0 || k == 0) throw_input(fn, "no examples or classes (N x K = 0)");
  check_same_size(fn, "probs", probs.size(), "N x K", n * k);
  check_same_size(fn, "labels", labels.size(), "N", n);
  const std::size_t B = static_cast<std::size_t>(bins);
  ErrorCells out;
  out.total = static_cast<double>(n) * static_cast<double>(k);
  fill_cells(out, k * B, [&](const auto& visit) {
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < k; ++c) {
        const double p = probs[i * k + c];
        visit(c * B + static_cast<std::size_t>(equal_width_bin(p, bins)), p,
              labels[i] == static_cast<std::int64_t>(c) ? 1.0 : 0.0);
      }
  });
  return out;
}

namespace {

/// `draws` errors of the family member with per-cell shifts delta (common random numbers: Rng(seed)).
std::vector<double> family_draws(const ErrorCells& c, const std::vector<double>& delta, CellError kind, int draws,
                                 std::uint64_t seed) {
  DrawRng rng(seed);
  std::vector<double> sums(c.cells.size()), out(static_cast<std::size_t>(draws));
  for (auto& v : out) {
    for (std::size_t j = 0; j < c.cells.size(); ++j) sums[j] = c.cells[j].sample(rng, delta[j]);
    v = cell_error(c, sums, kind);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

FamilyInterval scaled_family_interval(const ErrorCells& c, CellError kind, double level, int draws,
                                      std::uint64_t seed) {
  const char* fn = "scaled_family_interval";
  if (draws < 1) throw_input(fn, "draws is " + std::to_string(draws) + ", but must be >= 1");
  if (!(level > 0 && level < 1)) throw_input(fn, "level is " + std::to_string(level) + ", but must be in (0, 1)");
  const std::size_t m = c.cells.size();
  const double observed = cell_error(c, c.observed, kind);
  // Shapes: the raw per-cell gap S/n (one standard error per cell if every gap is 0), and the gap shrunk
  // by its sampling noise, sqrt(max(S² − V̂, 0)) with V̂ = n² â(1 − â)/(n − 1) (the debiased squared gap of
  // Kumar et al.; the raw shape if every cell shrinks to 0).
  std::vector<double> shape(m, 0.0), raw(m, 0.0), se(m, 0.0);
  double shape_norm = 0, raw_norm = 0;
  for (std::size_t j = 0; j < m; ++j) {
    const double n = static_cast<double>(c.cells[j].size());
    if (n == 0) continue;
    const double s = c.observed[j];
    const double acc = std::min(std::max((s + c.cells[j].sum_p()) / n, 0.0), 1.0);
    const double v = n >= 2 ? n * n * acc * (1.0 - acc) / (n - 1.0) : 0.0;
    shape[j] = (s < 0 ? -1.0 : 1.0) * std::sqrt(std::max(s * s - v, 0.0)) / n;
    raw[j] = s / n;
    se[j] = std::sqrt(std::max(c.cells[j].variance(), 1e-12)) / n;
    shape_norm += std::abs(shape[j]);
    raw_norm += std::abs(raw[j]);
  }
  if (raw_norm == 0) raw = se;
  if (!(shape_norm > 0)) shape = raw;
  const double alpha = 1.0 - level;
  // Member λ's per-cell gaps, clamped so every cell's accuracy stays in [0, 1].
  auto member = [&](const std::vector<double>& g, double lambda) {
    std::vector<double> delta(m);
    for (std::size_t j = 0; j < m; ++j) {
      const double n = static_cast<double>(c.cells[j].size());
      const double mean_p = n > 0 ? c.cells[j].sum_p() / n : 0.0;
      delta[j] = std::min(std::max(lambda * g[j], -mean_p), 1.0 - mean_p);
    }
    return delta;
  };
  auto quantile_at = [&](const std::vector<double>& g, double lambda, double q) {
    return quantile_sorted(family_draws(c, member(g, lambda), kind, draws, seed), q);
  };
  // The population error of member λ: its clamped gaps' error (λ · unit(g) until a cell's accuracy
  // reaches 0 or 1, then it saturates; scaling the unclamped shape gave upper ends of 1.99e11 at
  // K = 300, N = 200, where no λ reaches the observed error).
  auto population_error = [&](const std::vector<double>& g, double lambda) {
    if (lambda == 0.0) return 0.0;
    const auto delta = member(g, lambda);
    std::vector<double> sums(m);
    for (std::size_t j = 0; j < m; ++j) sums[j] = delta[j] * static_cast<double>(c.cells[j].size());
    return std::min(1.0, cell_error(c, sums, kind == CellError::debiased_l2 ? CellError::l2 : kind));
  };
  FamilyInterval out;
  {
    std::vector<double> zero(m, 0.0);
    const auto null0 = family_draws(c, zero, kind, draws, seed);
    std::size_t ge = 0;
    const double threshold = observed - 1e-12 * (1.0 + std::abs(observed));
    for (double v : null0) ge += v >= threshold;
    out.consistency_p = (1.0 + double(ge)) / (double(null0.size()) + 1.0);
  }
  // Smallest λ at which the q-quantile of the family along shape g reaches the observed error (the
  // quantile increases with λ); the bisection stops at 0.2 % of λ.
  auto solve = [&](const std::vector<double>& g, double q) {
    if (quantile_at(g, 0.0, q) >= observed) return 0.0;
    double a = 0.0, b = 1.0;
    int doublings = 0;
    while (quantile_at(g, b, q) < observed && doublings++ < 40) {
      a = b;
      b *= 2.0;
    }
    for (int it = 0; it < 30 && b - a > 2e-3 * b; ++it) {
      const double mid = 0.5 * (a + b);
      (quantile_at(g, mid, q) < observed ? a : b) = mid;
    }
    return 0.5 * (a + b);
  };
  // Kept: q_{α/2}(λ) <= observed <= q_{1−α/2}(λ). Lower end along the shrunk shape: the smallest λ with
  // q_{1−α/2}(λ) >= observed (0 exactly when the consistency test does not reject at α/2). Upper end
  // along the raw shape, where q_{α/2}(λ) reaches the observed error: the shrunk shape sets the small
  // gaps of noisy cells to 0 and so attributes too much of an L1 error to noise (its upper ends missed
  // the truth from below in 15-25 % of simulated data sets); the raw shape does not.
  out.low = population_error(shape, solve(shape, 1 - alpha / 2));
  out.median_unbiased = population_error(shape, solve(shape, 0.5));
  out.high = std::max(out.low, population_error(raw, solve(raw, alpha / 2)));
  return out;
}

double top_label_consistency_p(const std::vector<double>& confidence, double observed, int bins, int draws,
                               std::uint64_t seed) {
  const char* fn = "top_label_consistency_p";
  check_draws(fn, bins, draws);
  if (confidence.empty()) throw_input(fn, "no examples (N = 0)");
  std::vector<BernoulliSumCell> cells(static_cast<std::size_t>(bins));
  std::vector<int> bin(confidence.size());
  for (std::size_t i = 0; i < confidence.size(); ++i) {
    check_probability(fn, "confidence", i, confidence[i]);
    bin[i] = equal_width_bin(confidence[i], bins);
    cells[static_cast<std::size_t>(bin[i])].add_stats(confidence[i]);
  }
  bool any_exact = false;
  for (auto& c : cells) any_exact = c.decide() || any_exact;
  if (any_exact)
    for (std::size_t i = 0; i < confidence.size(); ++i) {
      auto& c = cells[static_cast<std::size_t>(bin[i])];
      if (c.mode() == BernoulliSumCell::Mode::exact) c.add_member(confidence[i]);
    }
  DrawRng rng(seed);
  const double n = static_cast<double>(confidence.size());
  std::vector<double> null(static_cast<std::size_t>(draws));
  for (auto& v : null) {
    double s = 0;
    for (const auto& c : cells) s += std::abs(c.sample(rng));
    v = s / n;
  }
  return monte_carlo_upper_p(observed, null);
}

double classwise_consistency_p(const std::vector<double>& probs, std::size_t n, std::size_t k, double observed,
                               int bins, int draws, std::uint64_t seed) {
  const char* fn = "classwise_consistency_p";
  check_draws(fn, bins, draws);
  if (n == 0 || k == 0) throw_input(fn, "no examples or classes (N x K = 0)");
  check_same_size(fn, "probs", probs.size(), "N x K", n * k);
  const std::size_t B = static_cast<std::size_t>(bins);
  std::vector<BernoulliSumCell> cells(k * B);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < k; ++c) {
      const double p = probs[i * k + c];
      cells[c * B + static_cast<std::size_t>(equal_width_bin(p, bins))].add_stats(p);
    }
  bool any_exact = false;
  for (auto& c : cells) any_exact = c.decide() || any_exact;
  if (any_exact)
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t c = 0; c < k; ++c) {
        const double p = probs[i * k + c];
        auto& cell = cells[c * B + static_cast<std::size_t>(equal_width_bin(p, bins))];
        if (cell.mode() == BernoulliSumCell::Mode::exact) cell.add_member(p);
      }
  DrawRng rng(seed);
  const double scale = 1.0 / (static_cast<double>(n) * static_cast<double>(k));
  std::vector<double> null(static_cast<std::size_t>(draws));
  for (auto& v : null) {
    double s = 0;
    for (const auto& c : cells) s += std::abs(c.sample(rng));
    v = s * scale;
  }
  return monte_carlo_upper_p(observed, null);
}

}  // namespace arcal
