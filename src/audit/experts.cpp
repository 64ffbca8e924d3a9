#include "audit/experts.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/check.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/trace.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Weighted accuracy, mean confidence and equal-width ECE of the tokens `members` (bin[i]: token i's
/// equal-width confidence bin) with multiplicities w[unit of token] (w empty: every token once).
struct Cal {
  double accuracy = kNaN, confidence = kNaN, ece = kNaN;
};

Cal calibration_of(const std::vector<std::size_t>& members, const std::vector<double>& conf,
                   const std::vector<double>& correct, const std::vector<int>& bin,
                   const std::vector<std::uint32_t>& unit, const std::vector<std::uint32_t>& w, int bins) {
  std::vector<double> bn(std::size_t(bins), 0.0), bc(std::size_t(bins), 0.0), ba(std::size_t(bins), 0.0);
  double total = 0, acc = 0, cf = 0;
  for (auto i : members) {
    const double wi = w.empty() ? 1.0 : double(w[unit[i]]);
    if (wi == 0) continue;
    const auto b = std::size_t(bin[i]);
    bn[b] += wi;
    bc[b] += wi * conf[i];
    ba[b] += wi * correct[i];
    total += wi;
    acc += wi * correct[i];
    cf += wi * conf[i];
  }
  Cal c;
  if (total == 0) return c;
  c.accuracy = acc / total;
  c.confidence = cf / total;
  double e = 0;
  for (std::size_t b = 0; b < bn.size(); ++b) e += std::fabs(ba[b] - bc[b]) / total;
  c.ece = e;
  return c;
}

/// percentile_interval, none from fewer than two defined resamples.
Interval percentile(const std::vector<double>& v, double level) {
  const auto defined = std::count_if(v.begin(), v.end(), [](double x) { return !std::isnan(x); });
  return defined < 2 ? Interval{kNaN, kNaN} : percentile_interval(v, level);
}

}  // namespace

ExpertView expert_view(const Trace& t, int bins, int draws, std::uint64_t seed, double level) {
  const char* fn = "expert_view";
  if (t.routing.empty()) throw_input(fn, t.path + ": the trace has no routing");
  if (t.routing_kind != "unordered")
    throw_input(fn, t.path + ": routing_kind is '" + t.routing_kind +
                        "'; the expert view is for mixture-of-experts (unordered) routing");
  if (bins < 1) throw_input(fn, "bins is " + std::to_string(bins) + ", but must be >= 1");
  if (draws < 0) throw_input(fn, "draws is " + std::to_string(draws) + ", but must be >= 0");
  const std::size_t n = t.n, P = t.points, S = t.sources;
  ExpertView v;
  v.n = n;
  v.bins = bins;
  v.draws = draws;
  v.seed = seed;
  v.level = level;
  v.handled = t.routing_selected.empty() ? "argmax" : "selected";
  const TraceTopLabel top = trace_top_label(t);
  const std::vector<int> bin = equal_width_bin_index(top.confidence, std::size_t(bins));
  // Units of the bootstrap: documents (clusters), else tokens.
  std::vector<std::uint32_t> unit;
  if (t.cluster.empty()) {
    unit.resize(n);
    std::iota(unit.begin(), unit.end(), 0u);
    v.clusters = n;
  } else {
    unit = dense_ids(t.cluster, v.clusters);
  }
  std::vector<std::string> names;
  {
    const auto meta = nlohmann::json::parse(t.meta_json.empty() ? "{}" : t.meta_json, nullptr, false);
    if (!meta.is_discarded() && meta.is_object() && meta.contains("routing_points") &&
        meta["routing_points"].is_array() && meta["routing_points"].size() == P)
      for (const auto& x : meta["routing_points"]) names.push_back(x.is_string() ? x.get<std::string>() : x.dump());
  }
  // Resample multiplicities, shared by every layer and expert (one resample of documents for all).
  std::vector<std::vector<std::uint32_t>> weights(static_cast<std::size_t>(draws));
  for (int b = 0; b < draws; ++b) {
    auto& w = weights[std::size_t(b)];
    w.assign(v.clusters, 0);
    Rng rng(derive_seed(seed, 0xE0u << 20 | std::uint64_t(b)));
    for (std::size_t g = 0; g < v.clusters; ++g) ++w[rng.below(v.clusters)];
  }
  for (std::size_t p = 0; p < P; ++p) {
    ExpertLayer L;
    L.name = names.empty() ? "point " + std::to_string(p) : names[p];
    const std::size_t E = std::size_t(t.routing_sources[p]);
    L.experts = E;
    L.rows.resize(E);
    std::vector<std::vector<std::size_t>> members(E);
    std::vector<double> entropy(n, 0.0);
    double sends = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float* r = &t.routing[(i * P + p) * S];
      double h = 0;
      std::size_t arg = 0;
      for (std::size_t e = 0; e < E; ++e) {
        if (r[e] > 0) h -= double(r[e]) * std::log(double(r[e]));
        if (r[e] > r[arg]) arg = e;
        L.rows[e].router_mean += double(r[e]) / double(n);
      }
      entropy[i] = E > 1 ? h / std::log(double(E)) : 0.0;
      if (t.routing_selected.empty()) {
        members[arg].push_back(i);
        sends += 1;
      } else {
        const float* sel = &t.routing_selected[(i * P + p) * S];
        for (std::size_t e = 0; e < E; ++e)
          if (sel[e] > 0) {
            members[e].push_back(i);
            sends += 1;
          }
      }
    }
    L.experts_per_token = sends / double(n);
    auto mean_entropy = [&](const std::vector<std::uint32_t>& w) {
      double s = 0, c = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double wi = w.empty() ? 1.0 : double(w[unit[i]]);
        s += wi * entropy[i];
        c += wi;
      }
      return c > 0 ? s / c : kNaN;
    };
    L.router_entropy = mean_entropy({});
    std::vector<double> ent_draws;
    for (const auto& w : weights) ent_draws.push_back(mean_entropy(w));
    L.router_entropy_ci = draws > 0 ? percentile(ent_draws, level) : Interval{kNaN, kNaN};
    for (std::size_t e = 0; e < E; ++e) {
      auto& row = L.rows[e];
      row.tokens = members[e].size();
      row.load = double(row.tokens) / double(n);
      const Cal c = calibration_of(members[e], top.confidence, top.correct, bin, unit, {}, bins);
      row.accuracy = c.accuracy;
      row.mean_confidence = c.confidence;
      row.ece = c.ece;
      row.gap = c.accuracy - c.confidence;
      std::vector<double> acc_draws, ece_draws, gap_draws;
      for (const auto& w : weights) {
        const Cal d = calibration_of(members[e], top.confidence, top.correct, bin, unit, w, bins);
        acc_draws.push_back(d.accuracy);
        ece_draws.push_back(d.ece);
        gap_draws.push_back(d.accuracy - d.confidence);
      }
      row.gap_ci = draws > 0 && row.tokens > 0 ? percentile(gap_draws, level) : Interval{kNaN, kNaN};
      row.accuracy_ci = draws > 0 && row.tokens > 0 ? percentile(acc_draws, level) : Interval{kNaN, kNaN};
      row.ece_ci = draws > 0 && row.tokens > 0 ? percentile(ece_draws, level) : Interval{kNaN, kNaN};
    }
    v.layers.push_back(std::move(L));
  }
  return v;
}

}  // namespace arcal
