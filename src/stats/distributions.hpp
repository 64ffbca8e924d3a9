// Distribution functions the tests need, on the standard library: the regularised incomplete beta and
// gamma functions, Student's t (CDF and quantile), the chi-square survival function and the exact
// (Clopper-Pearson) binomial interval.
#pragma once

#include <cstddef>

namespace arcal {

/// Regularised incomplete beta I_x(a, b) (a, b > 0, x in [0, 1]) by Lentz's continued fraction.
double incomplete_beta(double a, double b, double x);

/// P(T <= t) for Student's t with df > 0 degrees of freedom.
double student_t_cdf(double t, double df);

/// The p-quantile of Student's t (0 < p < 1, df > 0), by bisection on student_t_cdf to 1e-12.
double student_t_quantile(double p, double df);

/// Regularised upper incomplete gamma Q(a, x) = Γ(a, x) / Γ(a) (a > 0, x >= 0): series for x < a + 1,
/// Lentz's continued fraction otherwise.
double incomplete_gamma_q(double a, double x);

/// P(X >= x) for X ~ chi-square with df > 0 degrees of freedom.
double chi_square_sf(double x, double df);

/// The exact (Clopper-Pearson) two-sided interval at `level` for a binomial proportion with k successes
/// in n > 0 trials: [B(α/2; k, n-k+1), B(1-α/2; k+1, n-k)], B the beta quantile (by bisection on
/// incomplete_beta to 1e-12), with the ends 0 at k = 0 and 1 at k = n. Its coverage is at least
/// `level` for every n and proportion, where a bootstrap of k = n gives the empty width [1, 1].
struct BinomialInterval {
  double low = 0.0, high = 1.0;
};
BinomialInterval clopper_pearson(std::size_t k, std::size_t n, double level = 0.95);

}  // namespace arcal
