#include "stats/paired_tests.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.hpp"

namespace arcal {

double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

double binomial_cdf(std::size_t k, std::size_t n, double p) {
  if (k >= n) return 1.0;
  if (p <= 0.0) return 1.0;
  if (p >= 1.0) return 0.0;
  const double lp = std::log(p), lq = std::log1p(-p);
  const double ln_fact_n = std::lgamma(static_cast<double>(n) + 1.0);
  double sum = 0.0;
  for (std::size_t i = 0; i <= k; ++i) {
    const double li = ln_fact_n - std::lgamma(static_cast<double>(i) + 1.0) -
                      std::lgamma(static_cast<double>(n - i) + 1.0) + static_cast<double>(i) * lp +
                      static_cast<double>(n - i) * lq;
    sum += std::exp(li);
  }
  return std::min(1.0, sum);
}

std::pair<std::size_t, std::size_t> binomial_band_99(std::size_t n, double p) {
  std::size_t lo = 0;
  while (lo < n && binomial_cdf(lo, n, p) <= 0.005) ++lo;  // P(X <= lo - 1) <= 0.005 stays true below
  std::size_t hi = n;
  while (hi > 0 && 1.0 - binomial_cdf(hi - 1, n, p) <= 0.005) --hi;
  return {lo, hi};
}

WilcoxonResult wilcoxon_signed_rank(const std::vector<double>& d, bool continuity, std::size_t exact_max) {
  const char* fn = "wilcoxon_signed_rank";
  WilcoxonResult r;
  std::vector<double> nz;
  for (std::size_t i = 0; i < d.size(); ++i) {
    check_finite(fn, "d", i, d[i]);
    if (d[i] == 0.0)
      ++r.zeros;
    else
      nz.push_back(d[i]);
  }
  const std::size_t n = nz.size();
  if (n == 0) throw_input(fn, "all " + std::to_string(d.size()) + " differences are zero (or d is empty)");
  r.n = n;
  // Average ranks of |d|.
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return std::abs(nz[a]) < std::abs(nz[b]); });
  std::vector<double> rank(n);
  bool ties = false;
  double tie_term = 0.0;  // sum of t^3 - t over tied groups
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && std::abs(nz[order[j + 1]]) == std::abs(nz[order[i]])) ++j;
    const double avg = 0.5 * static_cast<double>(i + j) + 1.0;
    for (std::size_t k = i; k <= j; ++k) rank[order[k]] = avg;
    const double t = static_cast<double>(j - i + 1);
    if (t > 1) {
      ties = true;
      tie_term += t * t * t - t;
    }
    i = j + 1;
  }
  double wp = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    if (nz[i] > 0) wp += rank[i];
  const double total = static_cast<double>(n) * static_cast<double>(n + 1) / 2.0;
  r.w_plus = wp;
  r.statistic = std::min(wp, total - wp);
  if (!ties && n <= exact_max) {
    // Exact null: number of subsets of {1..n} with each rank sum (counts fit in uint64 for n <= 63).
    const std::size_t max_sum = n * (n + 1) / 2;
    std::vector<double> count(max_sum + 1, 0.0);
    count[0] = 1.0;
    for (std::size_t k = 1; k <= n; ++k)
      for (std::size_t s = max_sum; s >= k; --s) count[s] += count[s - k];
    const std::size_t t = static_cast<std::size_t>(r.statistic);
    double tail = 0.0;
    for (std::size_t s = 0; s <= t; ++s) tail += count[s];
    r.p = std::min(1.0, 2.0 * tail / std::ldexp(1.0, static_cast<int>(n)));
    r.exact = true;
    return r;
  }
  const double nd = static_cast<double>(n);
  const double mean = nd * (nd + 1.0) / 4.0;
  const double var = nd * (nd + 1.0) * (2.0 * nd + 1.0) / 24.0 - tie_term / 48.0;
  double diff = r.statistic - mean;
  if (continuity && diff != 0.0) diff -= 0.5 * (diff > 0 ? 1.0 : -1.0);
  r.z = var > 0 ? diff / std::sqrt(var) : 0.0;
  r.p = std::min(1.0, 2.0 * normal_cdf(-std::abs(r.z)));
  return r;
}

SignTestResult sign_test(const std::vector<double>& d) {
  SignTestResult r;
  for (std::size_t i = 0; i < d.size(); ++i) {
    check_finite("sign_test", "d", i, d[i]);
    if (d[i] > 0)
      ++r.positive;
    else if (d[i] < 0)
      ++r.negative;
    else
      ++r.zeros;
  }
  const std::size_t n = r.positive + r.negative;
  if (n == 0) throw_input("sign_test", "all " + std::to_string(d.size()) + " differences are zero (or d is empty)");
  r.p = std::min(1.0, 2.0 * binomial_cdf(std::min(r.positive, r.negative), n, 0.5));
  return r;
}

}  // namespace arcal
