// The expert view of a mixture-of-experts audit (issue 53, item 4): per router (one per layer) the
// experts' load, the router's entropy, and the calibration of the tokens each expert handled with
// cluster-bootstrap intervals (audit/experts.hpp). Expert words only: experts carry no order and no
// "embedding"; heatmaps are discrete cells with integer ticks. Every number comes from results.json.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "report/format.hpp"
#include "report/sections.hpp"

namespace arcal::report {

namespace {

std::string interval(double v, const Interval& i, int digits) {
  if (!std::isfinite(v)) return "n/a";
  const std::string x = fmt::format("{:.{}f}", v, digits);
  return std::isfinite(i.low) ? fmt::format("{} [{:.{}f}, {:.{}f}]", x, i.low, digits, i.high, digits) : x;
}

}  // namespace

Section experts_section(Context& c) {
  Section s{"Experts: load, router entropy and calibration per expert", {}};
  s.p("For a mixture of experts the routing is the router's distribution over experts at each layer. The audit's "
      "routing statistic is this distribution's entropy (a diffuse router: entropy near 1 after dividing by log E). "
      "This section describes the routing itself: which experts carry the tokens, how diffuse each router is, and "
      "whether the tokens an expert handled are calibrated. It is a description, not a test: a badly calibrated expert "
      "may simply receive harder tokens, which the outputs already show (the tests above ask whether routing adds "
      "anything to the outputs).");
  Table layers{{"run", "router (layer)", "experts", "experts per token", "router entropy / log E (95 % CI)",
                "load: min share", "load: max share"},
               {}};
  Table rows{{"run", "router (layer)", "expert", "tokens", "load (share of tokens)", "mean router probability",
              "accuracy (95 % CI)", "mean confidence", "accuracy - confidence (95 % CI)", "ECE (95 % CI)"},
             {}};
  std::vector<HeatPanel> load_panels, router_panels;
  std::string handled;
  int draws = 0;
  for (const auto& r : c.doc.audit.run_summaries) {
    if (!r.experts) continue;
    const ExpertView& v = *r.experts;
    handled = v.handled;
    draws = v.draws;
    const std::string run = run_label(c, r.run);
    const std::size_t P = v.layers.size();
    std::size_t E = 0;
    for (const auto& L : v.layers) E = std::max(E, L.experts);
    HeatPanel load{fmt::format("{}: share of tokens (n = {})", run, v.n),
                   P,
                   E,
                   {},
                   std::vector<double>(P * E, 0.0),
                   "expert",
                   "router (layer index)",
                   "share of tokens (log scale)"};
    HeatPanel router{fmt::format("{}: mean router probability (n = {})", run, v.n),
                     P,
                     E,
                     {},
                     std::vector<double>(P * E, 0.0),
                     "expert",
                     "router (layer index)",
                     "mean router probability (log scale)"};
    for (std::size_t p = 0; p < P; ++p) {
      const auto& L = v.layers[p];
      load.valid_sources.push_back(int(L.experts));
      router.valid_sources.push_back(int(L.experts));
      double lo = 1, hi = 0;
      for (std::size_t e = 0; e < L.experts; ++e) {
        const auto& x = L.rows[e];
        lo = std::min(lo, x.load);
        hi = std::max(hi, x.load);
        load.mean[p * E + e] = x.load;
        router.mean[p * E + e] = x.router_mean;
        rows.rows.push_back({run, L.name, std::to_string(e), std::to_string(x.tokens), f4(x.load), f4(x.router_mean),
                             interval(x.accuracy, x.accuracy_ci, 4), f4(x.mean_confidence),
                             interval(x.gap, x.gap_ci, 4), interval(x.ece, x.ece_ci, 4)});
      }
      layers.rows.push_back({run, L.name, std::to_string(L.experts), fmt::format("{:.2f}", L.experts_per_token),
                             interval(L.router_entropy, L.router_entropy_ci, 3), f4(lo), f4(hi)});
    }
    load_panels.push_back(std::move(load));
    router_panels.push_back(std::move(router));
  }
  s.tab(layers, "One row per router. Load: the share of tokens an expert handled (" +
                    std::string(handled == "selected" ? "the experts the model selected, its top-k"
                                                      : "the router's most probable expert") +
                    "); a balanced router of E experts sending each token to k of them gives every expert k/E.");
  c.csv.push_back({"expert_layers.csv", layers});
  heatmap_figure(c.figures, "expert_load", "Expert load: share of tokens each expert handled", load_panels);
  s.fig("expert_load",
        "Share of tokens each expert handled, per router (rows, layer index) and expert (columns); log "
        "colour scale, shares below 0.001 share the darkest colour. Expert indices carry no order.");
  heatmap_figure(c.figures, "expert_router", "Mean router probability per expert", router_panels);
  s.fig("expert_router",
        "The router's dense distribution averaged over tokens (each row sums to 1), per router and expert.");
  s.tab(rows, fmt::format("Calibration of the tokens each expert handled (a token sent to k experts counts for each). "
                          "Intervals: {} cluster-bootstrap resamples of whole documents (percentile, 95 %). The ECE of "
                          "an expert's share is biased upward, more so for a small share, so compare experts by "
                          "accuracy - confidence (negative: over-confident), whose interval is not.",
                          draws));
  c.csv.push_back({"experts.csv", rows});
  return s;
}

}  // namespace arcal::report
