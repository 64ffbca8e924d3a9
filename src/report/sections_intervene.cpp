// The report of a routing intervention (`arcal intervene --out F.json`, schema arcal.intervene/1):
// what removing each family of routing sources does to the predictions, per routing point and at all
// points at once, with the seed paper's mass-against-importance comparison. Like the other sections it
// formats what the document holds; every number comes from the JSON.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "report/format.hpp"
#include "report/sections.hpp"

namespace arcal::report {

namespace {

std::string point_name(const InterventionEffect& e) {
  return e.point < 0 ? std::string("all points") + (e.sublayer == "all" ? "" : " feeding " + e.sublayer)
                     : fmt::format("point {} ({})", e.point, e.sublayer);
}

std::string pp(double v) { return std::isfinite(v) ? fmt::format("{:+.2f} pp", 100.0 * v) : std::string("n/a"); }

std::string pp_ci(const Interval& i) {
  return std::isfinite(i.low) ? fmt::format("[{:+.2f}, {:+.2f}]", 100.0 * i.low, 100.0 * i.high) : std::string("-");
}

/// The all-points rows (point -1) that ablate every point, by family.
std::vector<const InterventionEffect*> joint_rows(const InterventionReport& r) {
  std::vector<const InterventionEffect*> out;
  for (const auto& e : r.effects)
    if (e.point < 0 && e.sublayer == "all") out.push_back(&e);
  return out;
}

Section summary(Context& c) {
  const auto& x = c.doc.intervene;
  const auto& r = x.report;
  const bool tokens = r.unit == "token";
  Section s{"What removing routing sources does", {}};
  const auto joint = joint_rows(r);
  std::string first;
  if (!joint.empty()) {
    const auto* big =
        *std::max_element(joint.begin(), joint.end(), [](auto* a, auto* b) { return a->delta_nll < b->delta_nll; });
    const bool shown = std::isfinite(big->delta_nll_ci.low) && big->delta_nll_ci.low > 0;
    first = fmt::format(
        "Removing the {} sources' routing weight at every point {} the loss by {:+.4f} nats per {} "
        "[{:+.4f}, {:+.4f}] (accuracy {}; {} routing mass {:.2f}){}",
        big->family, shown ? "raises" : "changes", big->delta_nll, tokens ? "token" : "image", big->delta_nll_ci.low,
        big->delta_nll_ci.high, pp(big->delta_accuracy), big->family, big->mass,
        shown ? ": the model relies on them." : ": no change detected.");
  }
  for (const auto& m : r.mass_importance)
    if (m.sublayer == "all")
      first += fmt::format(
          " The family with the most routing mass ({}, {:.2f}) is {}the one whose removal matters most "
          "({}, mean KL {:.4g}).",
          m.largest_mass_family, m.largest_mass, m.dissociated ? "not " : "", m.largest_effect_family,
          m.largest_effect_kl);
  s.verdict(first.empty() ? std::string("No intervention rows in the document.") : first);
  s.p(fmt::format(
      "Run {} ({} residual{}), {} split: n = {} {}{}; base accuracy {} and NLL {:.4f} nats. Every interval is a "
      "95 % bootstrap over {} {} ({} resamples, seed {}).",
      x.run, x.residual, x.as_attnres.empty() ? "" : ", loaded as " + x.as_attnres + " AttnRes", x.split, r.n,
      tokens ? "next-token predictions" : "images",
      tokens ? fmt::format(" in {} sequences", r.clusters) : std::string(), f4(r.base_accuracy), r.base_nll, r.clusters,
      tokens ? "whole sequences" : "images", x.bootstrap, x.seed));
  Table t{{"ablated", "family", "routing mass", "Δ accuracy", "95 % CI", "Δ NLL [nats]", "95 % CI", "mean KL [nats]",
           "95 % CI"},
          {}};
  for (const auto& e : r.effects)
    if (e.point < 0)
      t.rows.push_back({point_name(e), e.family, fmt::format("{:.3f}", e.mass), pp(e.delta_accuracy),
                        pp_ci(e.delta_accuracy_ci), sgn(e.delta_nll), ci(e.delta_nll_ci, 5),
                        fmt::format("{:.5f}", e.mean_kl), ci(e.mean_kl_ci, 5)});
  s.tab(t,
        "Every point at once (and every point feeding attention or MLP sublayers): the family's routing weight set "
        "to zero and the rest renormalised (method.md §1). Δ is ablated minus intact; KL from the intact predictions.");
  c.csv.push_back({"intervene_joint.csv", t});
  if (x.has_wrapper_check)
    s.p(fmt::format(
        "The standard-residual run loaded as AttnRes reproduces it: largest relative logit difference {:.2g}, "
        "largest routing deviation from uniform {:.2g} over {} examples (norm eps {:g}).",
        x.wrapper_check.max_rel_logit_diff, x.wrapper_check.max_routing_deviation, x.wrapper_check.examples,
        x.wrapper_check.norm_eps));
  return s;
}

Section per_point(Context& c) {
  const auto& r = c.doc.intervene.report;
  Section s{"Per routing point", {}};
  std::vector<std::string> categories;
  std::vector<int> points;
  std::vector<std::string> families;
  for (const auto& e : r.effects) {
    if (e.point < 0) continue;
    if (std::find(points.begin(), points.end(), e.point) == points.end()) {
      points.push_back(e.point);
      categories.push_back(fmt::format("{}{}", e.point, e.sublayer.empty() ? ' ' : e.sublayer[0]));
    }
    if (std::find(families.begin(), families.end(), e.family) == families.end()) families.push_back(e.family);
  }
  Table t{{"point", "feeds", "family", "routing mass", "Δ accuracy", "Δ NLL [nats]", "95 % CI", "mean KL [nats]"}, {}};
  CategoryPanel nll{"Δ NLL when the family is removed", "Δ NLL [nats]", {}, {}, {}, ""};
  CategoryPanel mass{"routing mass of the family", "mean weight", {}, {}, {}, ""};
  for (const auto& f : families) {
    CurveSeries sn{f, {}, std::vector<double>(points.size(), NAN), {}, {}},
        sm{f, {}, std::vector<double>(points.size(), NAN), {}, {}};
    for (const auto& e : r.effects)
      if (e.point >= 0 && e.family == f) {
        const auto k = std::size_t(std::find(points.begin(), points.end(), e.point) - points.begin());
        sn.y[k] = e.delta_nll;
        sm.y[k] = e.mass;
      }
    nll.series.push_back(sn);
    mass.series.push_back(sm);
  }
  for (const auto& e : r.effects)
    if (e.point >= 0)
      t.rows.push_back({std::to_string(e.point), e.sublayer, e.family, fmt::format("{:.3f}", e.mass),
                        pp(e.delta_accuracy), sgn(e.delta_nll), ci(e.delta_nll_ci, 5),
                        fmt::format("{:.5f}", e.mean_kl)});
  if (!points.empty()) {
    category_figure(c.figures, "intervene_per_point", "Removing one family at one routing point", categories,
                    {nll, mass});
    s.fig("intervene_per_point",
          "Per routing point (x: the point and what it feeds: a attention, m MLP, f the final "
          "aggregation): the change in NLL when "
          "each family's weight is removed there alone (left), and that family's mean routing "
          "weight (right).");
  }
  s.p(fmt::format(
      "Routing mass against effect over the {} (point, family) pairs: Spearman {} with mean KL, {} with Δ NLL.",
      r.pairs, std::isfinite(r.spearman_mass_kl) ? fmt::format("{:+.2f}", r.spearman_mass_kl) : "n/a",
      std::isfinite(r.spearman_mass_nll) ? fmt::format("{:+.2f}", r.spearman_mass_nll) : "n/a"));
  s.tab(t, "One point, one family at a time.");
  c.csv.push_back({"intervene_per_point.csv", t});
  return s;
}

}  // namespace

Document intervention_document(Context& c) {
  Document d;
  d.title = "arcal intervention report: " + std::filesystem::path(c.doc.intervene.run).filename().string();
  d.sections.push_back(summary(c));
  d.sections.push_back(per_point(c));
  return d;
}

}  // namespace arcal::report
