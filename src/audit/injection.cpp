#include "audit/injection.hpp"

#include <cmath>

#include "core/check.hpp"

namespace arcal {

namespace {
double sigmoid(double x) { return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x)); }

void check_inputs(const char* fn, const std::vector<double>& q, const std::vector<double>& t) {
  check_same_size(fn, "q", q.size(), "t", t.size());
  if (q.empty()) throw_input(fn, "q is empty");
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (!(q[i] > 0.0 && q[i] < 1.0)) throw_index(fn, "q", i, std::to_string(q[i]), "in (0, 1)");
    check_finite(fn, "t", i, t[i]);
  }
}
}  // namespace

double bernoulli_kl(double p, double q) {
  double kl = 0.0;
  if (p > 0.0) kl += p * std::log(p / q);
  if (p < 1.0) kl += (1.0 - p) * std::log((1.0 - p) / (1.0 - q));
  return kl;
}

std::vector<double> injected_probability(const std::vector<double>& q, const std::vector<double>& t, double delta) {
  check_inputs("injected_probability", q, t);
  if (!std::isfinite(delta)) throw_input("injected_probability", "delta is not finite");
  // δ = 0 returns q itself (not σ(logit q), which differs in the last bit): the exact null.
  if (delta == 0.0) return q;
  std::vector<double> p(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) p[i] = sigmoid(std::log(q[i] / (1.0 - q[i])) + delta * t[i]);
  return p;
}

double injection_gain(const std::vector<double>& q, const std::vector<double>& t, double delta) {
  const auto p = injected_probability(q, t, delta);
  double s = 0.0;
  for (std::size_t i = 0; i < q.size(); ++i) s += bernoulli_kl(p[i], q[i]);
  return s / static_cast<double>(q.size());
}

double solve_injection_delta(const std::vector<double>& q, const std::vector<double>& t, double nats) {
  const char* fn = "solve_injection_delta";
  check_inputs(fn, q, t);
  if (!(nats >= 0.0) || !std::isfinite(nats))
    throw_input(fn, "nats is " + std::to_string(nats) + ", but must be finite and >= 0");
  if (nats == 0.0) return 0.0;
  // The gain is 0 at δ = 0 and increasing in δ > 0 (each term is convex in δ with its minimum at 0).
  double lo = 0.0, hi = 1.0;
  while (injection_gain(q, t, hi) < nats) {
    lo = hi;
    hi *= 2.0;
    if (hi > 1e3)
      throw_input(fn, "the injected gain cannot reach " + std::to_string(nats) + " nats (t carries no signal?)");
  }
  for (int it = 0; it < 200; ++it) {
    const double mid = 0.5 * (lo + hi);
    const double g = injection_gain(q, t, mid);
    if (std::abs(g - nats) <= 1e-10 * nats) return mid;
    if (g < nats)
      lo = mid;
    else
      hi = mid;
    if (hi - lo < 1e-12) break;
  }
  return 0.5 * (lo + hi);
}

}  // namespace arcal
