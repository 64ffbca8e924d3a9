#include "stats/multiplicity.hpp"

#include <algorithm>
#include <numeric>

#include "core/check.hpp"

namespace arcal {

namespace {
std::vector<std::size_t> ascending_order(const char* fn, const std::vector<double>& p) {
  for (std::size_t i = 0; i < p.size(); ++i) check_probability(fn, "p", i, p[i]);
  std::vector<std::size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] < p[b]; });
  return order;
}
}  // namespace

std::vector<double> holm_adjust(const std::vector<double>& p) {
  const auto order = ascending_order("holm_adjust", p);
  const std::size_t m = p.size();
  std::vector<double> adj(m);
  double running = 0.0;
  for (std::size_t k = 0; k < m; ++k) {
    const double v = std::min(1.0, static_cast<double>(m - k) * p[order[k]]);
    running = std::max(running, v);
    adj[order[k]] = running;
  }
  return adj;
}

std::vector<double> bh_adjust(const std::vector<double>& p) {
  const auto order = ascending_order("bh_adjust", p);
  const std::size_t m = p.size();
  std::vector<double> adj(m);
  double running = 1.0;
  for (std::size_t k = m; k-- > 0;) {
    const double v = std::min(1.0, static_cast<double>(m) / static_cast<double>(k + 1) * p[order[k]]);
    running = std::min(running, v);
    adj[order[k]] = running;
  }
  return adj;
}

}  // namespace arcal
