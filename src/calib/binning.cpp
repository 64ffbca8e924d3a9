#include "calib/binning.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/check.hpp"

namespace arcal {

namespace {
void check_inputs(const char* fn, const std::vector<double>& conf, int bins) {
  if (bins < 1) throw_input(fn, "bins is " + std::to_string(bins) + ", but must be >= 1");
  for (std::size_t i = 0; i < conf.size(); ++i) check_probability(fn, "conf", i, conf[i]);
}
}  // namespace

std::vector<int> equal_width_bins(const std::vector<double>& conf, int bins) {
  check_inputs("equal_width_bins", conf, bins);
  std::vector<int> out(conf.size());
  for (std::size_t i = 0; i < conf.size(); ++i) out[i] = equal_width_bin(conf[i], bins);
  return out;
}

std::vector<int> equal_mass_bins(const std::vector<double>& conf, int bins) {
  check_inputs("equal_mass_bins", conf, bins);
  const std::size_t n = conf.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return conf[a] < conf[b]; });
  std::vector<int> out(n);
  std::size_t group = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (r == 0 || conf[order[r]] != conf[order[r - 1]]) group = nominal_group(r, n, static_cast<std::uint64_t>(bins));
    out[order[r]] = static_cast<int>(group);
  }
  return out;
}

std::vector<BinRow> bin_table(const std::vector<double>& conf, const std::vector<double>& target,
                              const std::vector<int>& assign, int bins) {
  check_same_size("bin_table", "conf", conf.size(), "target", target.size());
  check_same_size("bin_table", "conf", conf.size(), "assign", assign.size());
  if (bins < 1) throw_input("bin_table", "bins is " + std::to_string(bins) + ", but must be >= 1");
  std::vector<BinRow> rows(static_cast<std::size_t>(bins));
  std::vector<double> sc(rows.size(), 0.0), sa(rows.size(), 0.0);
  for (std::size_t i = 0; i < conf.size(); ++i) {
    if (assign[i] < 0 || assign[i] >= bins)
      throw_index("bin_table", "assign", i, std::to_string(assign[i]), "in [0, " + std::to_string(bins - 1) + "]");
    const auto b = static_cast<std::size_t>(assign[i]);
    rows[b].n++;
    sc[b] += conf[i];
    sa[b] += target[i];
  }
  for (std::size_t b = 0; b < rows.size(); ++b)
    if (rows[b].n) {
      rows[b].mean_conf = sc[b] / static_cast<double>(rows[b].n);
      rows[b].accuracy = sa[b] / static_cast<double>(rows[b].n);
    }
  return rows;
}

AccuracyBand calibrated_accuracy_band(std::size_t n, double c, double level) {
  const double nan = std::nan("");
  if (n == 0 || !(c >= 0.0 && c <= 1.0) || !(level > 0.0 && level < 1.0)) return {nan, nan};
  if (c == 0.0) return {0.0, 0.0};
  if (c == 1.0) return {1.0, 1.0};
  const double lo_q = 0.5 * (1.0 - level), hi_q = 1.0 - lo_q;
  const double lp = std::log(c), lq = std::log1p(-c), dn = double(n);
  double log_pmf = dn * lq, cdf = 0.0;
  std::size_t lo = n, hi = n;
  bool have_lo = false;
  for (std::size_t k = 0; k <= n; ++k) {
    if (k > 0) log_pmf += std::log((dn - double(k) + 1.0) / double(k)) + lp - lq;
    cdf += std::exp(log_pmf);
    if (!have_lo && cdf >= lo_q) {
      lo = k;
      have_lo = true;
    }
    if (cdf >= hi_q) {
      hi = k;
      break;
    }
  }
  return {double(lo) / dn, double(hi) / dn};
}

}  // namespace arcal
