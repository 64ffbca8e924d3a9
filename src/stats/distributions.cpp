#include "stats/distributions.hpp"

#include <cmath>
#include <string>

#include "core/check.hpp"

namespace arcal {

namespace {

/// Continued fraction of the incomplete beta (modified Lentz), valid for x < (a + 1) / (a + b + 2).
double beta_fraction(double a, double b, double x) {
  constexpr double tiny = 1e-300, eps = 1e-16;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::abs(d) < tiny) d = tiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + num * d;
    if (std::abs(d) < tiny) d = tiny;
    c = 1.0 + num / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + num * d;
    if (std::abs(d) < tiny) d = tiny;
    c = 1.0 + num / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < eps) break;
  }
  return h;
}

}  // namespace

double incomplete_beta(double a, double b, double x) {
  const char* fn = "incomplete_beta";
  if (!(a > 0 && b > 0)) throw_input(fn, "a and b must be > 0");
  if (!(x >= 0 && x <= 1)) throw_input(fn, "x is " + std::to_string(x) + ", but must be in [0, 1]");
  if (x == 0.0 || x == 1.0) return x;
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1.0) / (a + b + 2.0)) return std::exp(log_front) * beta_fraction(a, b, x) / a;
  return 1.0 - std::exp(log_front) * beta_fraction(b, a, 1.0 - x) / b;
}

double student_t_cdf(double t, double df) {
  if (!(df > 0)) throw_input("student_t_cdf", "df is " + std::to_string(df) + ", but must be > 0");
  if (std::isnan(t)) return t;
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  const double tail = 0.5 * incomplete_beta(0.5 * df, 0.5, df / (df + t * t));  // P(T > |t|)
  return t > 0 ? 1.0 - tail : tail;
}

double student_t_quantile(double p, double df) {
  const char* fn = "student_t_quantile";
  if (!(p > 0 && p < 1)) throw_input(fn, "p is " + std::to_string(p) + ", but must be in (0, 1)");
  if (!(df > 0)) throw_input(fn, "df is " + std::to_string(df) + ", but must be > 0");
  double lo = -1.0, hi = 1.0;
  while (student_t_cdf(lo, df) > p) lo *= 2.0;
  while (student_t_cdf(hi, df) < p) hi *= 2.0;
  for (int it = 0; it < 200 && hi - lo > 1e-12 * (1.0 + std::abs(lo)); ++it) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double incomplete_gamma_q(double a, double x) {
  const char* fn = "incomplete_gamma_q";
  if (!(a > 0)) throw_input(fn, "a is " + std::to_string(a) + ", but must be > 0");
  if (!(x >= 0)) throw_input(fn, "x is " + std::to_string(x) + ", but must be >= 0");
  if (x == 0) return 1.0;
  const double log_front = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {  // P by its series, Q = 1 - P
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 100000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * 1e-16) break;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_front));
  }
  constexpr double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::abs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_front) * h;
}

double chi_square_sf(double x, double df) {
  if (!(df > 0)) throw_input("chi_square_sf", "df is " + std::to_string(df) + ", but must be > 0");
  if (!(x > 0)) return 1.0;
  return incomplete_gamma_q(0.5 * df, 0.5 * x);
}

namespace {

/// x with I_x(a, b) = p, by bisection (I_x is increasing in x).
double beta_quantile(double p, double a, double b) {
  double lo = 0.0, hi = 1.0;
  for (int it = 0; it < 200 && hi - lo > 1e-12; ++it) {
    const double mid = 0.5 * (lo + hi);
    (incomplete_beta(a, b, mid) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace

BinomialInterval clopper_pearson(std::size_t k, std::size_t n, double level) {
  const char* fn = "clopper_pearson";
  if (n == 0) throw_input(fn, "n must be > 0");
  if (k > n) throw_input(fn, "k is " + std::to_string(k) + ", but must be <= n = " + std::to_string(n));
  if (!(level > 0 && level < 1)) throw_input(fn, "level must be in (0, 1)");
  const double alpha = 1.0 - level, kd = static_cast<double>(k), nd = static_cast<double>(n);
  BinomialInterval r;
  r.low = k == 0 ? 0.0 : beta_quantile(alpha / 2, kd, nd - kd + 1);
  r.high = k == n ? 1.0 : beta_quantile(1 - alpha / 2, kd + 1, nd - kd);
  return r;
}

}  // namespace arcal
