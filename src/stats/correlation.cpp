#include "stats/correlation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.hpp"

namespace arcal {

std::vector<double> average_ranks(const std::vector<double>& x) {
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a] < x[b]; });
  std::vector<double> ranks(x.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    const double r = 0.5 * double(i + j) + 1.0;
    for (std::size_t k = i; k <= j; ++k) ranks[order[k]] = r;
    i = j + 1;
  }
  return ranks;
}

double pearson_correlation(const std::vector<double>& x, const std::vector<double>& y) {
  check_same_size("pearson_correlation", "x", x.size(), "y", y.size());
  if (x.size() < 2) throw_input("pearson_correlation", "needs at least 2 pairs, got " + std::to_string(x.size()));
  const double n = double(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
  return sxy / std::sqrt(sxx * syy);
}

double spearman_correlation(const std::vector<double>& x, const std::vector<double>& y) {
  check_same_size("spearman_correlation", "x", x.size(), "y", y.size());
  return pearson_correlation(average_ranks(x), average_ranks(y));
}

}  // namespace arcal
