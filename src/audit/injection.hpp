// Effect injection (method.md §6.5): a truth p* = σ(logit q + δ·t) built from a reference q and a
// bounded routing signal t (tanh of the standardised statistic), with δ found by bisection so that the
// oracle gain E[KL(Bern p* ‖ Bern q)] equals a requested number of nats. Shared by `arcal simulate`
// and the sensitivity audit.
#pragma once

#include <vector>

namespace arcal {

/// KL(Bern(p) ‖ Bern(q)) in nats; p in [0,1], q in (0,1).
double bernoulli_kl(double p, double q);

/// σ(logit q_i + delta * t_i) for each i. q [n] in (0,1), t [n] finite. Throws InputError on size
/// mismatch or out-of-range values (naming the index).
std::vector<double> injected_probability(const std::vector<double>& q, const std::vector<double>& t, double delta);

/// Mean over i of KL(Bern p*_i ‖ Bern q_i) with p* = injected_probability(q, t, delta).
double injection_gain(const std::vector<double>& q, const std::vector<double>& t, double delta);

/// δ >= 0 with injection_gain(q, t, δ) = nats (to relative tolerance 1e-10 in the gain, or δ within
/// 1e-12). nats == 0 returns exactly 0 (the exact null). Throws InputError when nats < 0 or not
/// finite, when q or t are invalid, or when the gain cannot reach `nats` (e.g. t is all zero).
double solve_injection_delta(const std::vector<double>& q, const std::vector<double>& t, double nats);

}  // namespace arcal
