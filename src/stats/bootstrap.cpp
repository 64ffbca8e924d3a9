#include "stats/bootstrap.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/rng.hpp"

namespace arcal {

double quantile_sorted(const std::vector<double>& sorted, double q) {
  ARCAL_ASSERT(!sorted.empty(), "quantile of empty data");
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

void bootstrap_counts(std::size_t n, std::uint64_t seed, std::uint64_t b, std::vector<std::uint32_t>& counts) {
  if (n == 0) throw_input("bootstrap_counts", "sample is empty (n = 0)");
  poll_interrupt();  // once per draw: 100,000 draws at N = 200k take minutes
  counts.assign(n, 0u);
  Rng rng(derive_seed(seed, b));
  // Rng::below(n) inlined with its rejection limit hoisted: identical draws, one division fewer each.
  const std::uint64_t m = n, limit = UINT64_MAX - UINT64_MAX % m;
  auto& engine = rng.engine();
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t x;
    do {
      x = engine();
    } while (x >= limit);
    ++counts[static_cast<std::size_t>(x % m)];
  }
}

BootstrapResult percentile_bootstrap(std::size_t n,
                                     const std::function<double(const std::vector<std::size_t>&)>& statistic, int draws,
                                     std::uint64_t seed, double level) {
  if (n == 0) throw_input("percentile_bootstrap", "sample is empty (n = 0)");
  if (draws < 1) throw_input("percentile_bootstrap", "draws is " + std::to_string(draws) + ", but must be >= 1");
  if (!(level > 0.0 && level < 1.0))
    throw_input("percentile_bootstrap", "level is " + std::to_string(level) + ", but must be in (0, 1)");
  BootstrapResult result;
  std::vector<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = i;
  result.estimate = statistic(idx);
  result.draws.resize(static_cast<std::size_t>(draws));
  for (int b = 0; b < draws; ++b) {
    poll_interrupt();
    Rng rng(derive_seed(seed, static_cast<std::uint64_t>(b)));
    for (std::size_t i = 0; i < n; ++i) idx[i] = rng.below(n);
    result.draws[static_cast<std::size_t>(b)] = statistic(idx);
  }
  std::vector<double> sorted = result.draws;
  std::sort(sorted.begin(), sorted.end());
  const double alpha = (1.0 - level) / 2.0;
  result.ci = {quantile_sorted(sorted, alpha), quantile_sorted(sorted, 1.0 - alpha)};
  return result;
}

Interval percentile_interval(std::vector<double> v, double level) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return {std::nan(""), std::nan("")};
  std::sort(v.begin(), v.end());
  const double alpha = (1.0 - level) / 2.0;
  return {quantile_sorted(v, alpha), quantile_sorted(v, 1.0 - alpha)};
}

}  // namespace arcal
