#include "audit/routing_stats.hpp"

#include <cmath>

#include "core/error.hpp"

namespace arcal {

RoutingStats routing_statistics(const Trace& t) {
  if (t.routing.empty() || t.points == 0)
    throw InputError("routing_statistics: " + t.path + ": the trace has no 'routing' array");
  const std::size_t N = t.n, P = t.points, S = t.sources;
  RoutingStats r;
  r.n = N;
  r.points = P;
  r.entropy.assign(N * P, 0.0);
  r.norm_entropy.assign(N * P, 0.0);
  r.depth_mean.assign(N * P, 0.0);
  r.depth_var.assign(N * P, 0.0);
  r.re.assign(N, 0.0);
  r.rdv.assign(N, 0.0);
  for (std::size_t p = 0; p < P; ++p)
    if (t.routing_sources[p] > 1) r.profile_points.push_back(p);
  // Each per-token array is used where it is present (a recorder of MoE gates writes routing_entropy
  // alone, and it used to be ignored unless the depth arrays came with it).
  r.per_token = !t.routing_entropy.empty();
  r.per_token_depth = !t.routing_depth_var.empty() && !t.routing_depth_mean.empty();
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t p = 0; p < P; ++p) {
      const std::size_t Sp = static_cast<std::size_t>(t.routing_sources[p]);
      const std::size_t j = i * P + p;
      // Without the per-token arrays: from the token-mean weights, the entropy/variance of the mean,
      // not the mean of the per-token values: an upper bound on both (entropy is concave; a mixture's
      // variance is at least its components' mean variance); the flags say which arrays were used.
      const float* a = &t.routing[j * S];
      double H = 0.0, mu = 0.0, var = 0.0;
      for (std::size_t s = 0; s < Sp; ++s) {
        const double w = a[s];
        if (w > 0.0) H -= w * std::log(w);
        const double d = Sp > 1 ? static_cast<double>(s) / static_cast<double>(Sp - 1) : 0.0;
        mu += w * d;
      }
      for (std::size_t s = 0; s < Sp; ++s) {
        const double d = Sp > 1 ? static_cast<double>(s) / static_cast<double>(Sp - 1) : 0.0;
        var += a[s] * (d - mu) * (d - mu);
      }
      if (r.per_token) H = t.routing_entropy[j];
      if (r.per_token_depth) {
        mu = t.routing_depth_mean[j];
        var = t.routing_depth_var[j];
      }
      r.entropy[j] = H;
      r.norm_entropy[j] = Sp > 1 ? H / std::log(static_cast<double>(Sp)) : 0.0;
      r.depth_mean[j] = mu;
      r.depth_var[j] = var;
      r.re[i] += r.norm_entropy[j];
      r.rdv[i] += var;
    }
    r.re[i] /= static_cast<double>(P);
    r.rdv[i] /= static_cast<double>(P);
  }
  return r;
}

std::vector<std::string> default_statistics(const Trace& t) {
  if (!t.routing.empty())
    return t.routing_kind == "unordered" ? std::vector<std::string>{"re"} : std::vector<std::string>{"re", "rdv"};
  return t.feature_names;
}

std::vector<double> statistic_column(const Trace& t, const std::string& name) {
  if (!t.routing.empty()) {
    if (name == "re") return routing_statistics(t).re;
    if (name == "rdv") {
      if (t.routing_kind == "unordered")
        throw InputError("statistic_column: " + t.path +
                         ": statistic 'rdv' (depth variance over the source index) "
                         "does not apply: the trace's routing_kind is 'unordered' (experts have no order); use 're'");
      return routing_statistics(t).rdv;
    }
  }
  for (std::size_t f = 0; f < t.feature_names.size(); ++f) {
    if (t.feature_names[f] != name) continue;
    std::vector<double> col(t.n);
    for (std::size_t i = 0; i < t.n; ++i) col[i] = t.features[i * t.num_features + f];
    return col;
  }
  std::string avail = t.routing.empty() ? "" : t.routing_kind == "unordered" ? "re" : "re, rdv";
  for (const auto& f : t.feature_names) avail += (avail.empty() ? "" : ", ") + f;
  throw InputError("statistic_column: " + t.path + ": unknown statistic '" + name +
                   "' (available: " + (avail.empty() ? "none" : avail) + ")");
}

}  // namespace arcal
