#include "stats/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "core/check.hpp"
#include "core/interrupt.hpp"

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
}

std::vector<double> NadarayaWatson::predict(const std::vector<double>& x) const {
  const char* fn = "NadarayaWatson::predict";
  if (x.size() % dims_ != 0)
    throw_input(fn, "x has " + std::to_string(x.size()) + " values, not a multiple of dims = " + std::to_string(dims_));
  const std::size_t m = x.size() / dims_, n = y_.size();
  const double t = options_.truncate, t2 = t * t;
  std::vector<double> out(m);
  std::vector<double> q(dims_);
  for (std::size_t i = 0; i < m; ++i) {
    if ((i & 1023) == 0) poll_interrupt();  // Ctrl-C from Python within a block of queries
    for (std::size_t d = 0; d < dims_; ++d) {
      check_finite(fn, "x", i * dims_ + d, x[i * dims_ + d]);
      q[d] = x[i * dims_ + d] * inv_h_[d];
    }
    // Window on the sorted first coordinate.
    std::size_t lo = 0, hi = n;
    {
      std::size_t a = 0, b = n;
      while (a < b) {
        const std::size_t mid = (a + b) / 2;
        if (x_[mid * dims_] < q[0] - t) a = mid + 1; else b = mid;
      }
      lo = a;
      b = n;
      while (a < b) {
        const std::size_t mid = (a + b) / 2;
        if (x_[mid * dims_] <= q[0] + t) a = mid + 1; else b = mid;
      }
      hi = a;
    }
    double num = 0.0, den = 0.0;
    for (std::size_t j = lo; j < hi; ++j) {
      const double k = truncated_weight(&x_[j * dims_], q.data(), dims_, t, t2);
      if (k < 0) continue;
      num += k * y_[j];
      den += k;
    }
    const double lambda = options_.pseudo_count;
    double est = (den + lambda) > 0.0 ? (num + lambda * prior_) / (den + lambda) : prior_;
    out[i] = std::clamp(est, options_.clip_low, options_.clip_high);
  }
  return out;
}

std::vector<std::vector<double>> NadarayaWatson::predict_many(const std::vector<double>& x,
                                                              const std::vector<const std::vector<double>*>& ys) const {
  const char* fn = "NadarayaWatson::predict_many";
  if (x.size() % dims_ != 0)
    throw_input(fn, "x has " + std::to_string(x.size()) + " values, not a multiple of dims = " + std::to_string(dims_));
  const std::size_t m = x.size() / dims_, n = y_.size(), T = ys.size();
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
  const double t_ = options_.truncate, t2 = t_ * t_;
  std::vector<std::vector<double>> out(T, std::vector<double>(m));
  std::vector<double> q(dims_), num(T);
  for (std::size_t i = 0; i < m; ++i) {
    if ((i & 1023) == 0) poll_interrupt();  // Ctrl-C from Python within a block of queries
    for (std::size_t d = 0; d < dims_; ++d) {
      check_finite(fn, "x", i * dims_ + d, x[i * dims_ + d]);
      q[d] = x[i * dims_ + d] * inv_h_[d];
    }
    std::size_t a = 0, b = n;
    while (a < b) {
      const std::size_t mid = (a + b) / 2;
      if (x_[mid * dims_] < q[0] - t_) a = mid + 1; else b = mid;
    }
    const std::size_t lo = a;
    b = n;
    while (a < b) {
      const std::size_t mid = (a + b) / 2;
      if (x_[mid * dims_] <= q[0] + t_) a = mid + 1; else b = mid;
    }
    const std::size_t hi = a;
    std::fill(num.begin(), num.end(), 0.0);
    double den = 0.0;
    for (std::size_t j = lo; j < hi; ++j) {
      const double k = truncated_weight(&x_[j * dims_], q.data(), dims_, t_, t2);
      if (k < 0) continue;
      const double* yj = &Y[j * T];
      for (std::size_t t = 0; t < T; ++t) num[t] += k * yj[t];
      den += k;
    }
    const double lambda = options_.pseudo_count;
    for (std::size_t t = 0; t < T; ++t) {
      const double est = (den + lambda) > 0.0 ? (num[t] + lambda * prior[t]) / (den + lambda) : prior[t];
      out[t][i] = std::clamp(est, options_.clip_low, options_.clip_high);
    }
  }
  return out;
}

}  // namespace arcal
