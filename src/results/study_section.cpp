#include "results/study_section.hpp"

#include <cmath>

namespace arcal {

std::vector<StudyGroup> summarise_groups(const std::vector<StudyRunResult>& runs) {
  std::vector<StudyGroup> out;
  std::vector<std::vector<const StudyRunResult*>> members;
  for (const auto& r : runs) {
    std::size_t k = 0;
    while (k < out.size() && !(out[k].model == r.model && out[k].residual == r.residual)) ++k;
    if (k == out.size()) {
      out.push_back({r.model, r.residual, 0, 0, 0, 0, 0});
      members.emplace_back();
    }
    members[k].push_back(&r);
  }
  for (std::size_t k = 0; k < out.size(); ++k) {
    auto& g = out[k];
    const double n = double(members[k].size());
    g.seeds = members[k].size();
    for (const auto* r : members[k]) {
      g.accuracy_mean += r->metrics.accuracy.value / n;
      g.ece_mean += r->metrics.ece.value / n;
    }
    double va = 0, ve = 0;
    for (const auto* r : members[k]) {
      va += (r->metrics.accuracy.value - g.accuracy_mean) * (r->metrics.accuracy.value - g.accuracy_mean);
      ve += (r->metrics.ece.value - g.ece_mean) * (r->metrics.ece.value - g.ece_mean);
    }
    g.accuracy_sd = g.seeds > 1 ? std::sqrt(va / (n - 1)) : std::nan("");
    g.ece_sd = g.seeds > 1 ? std::sqrt(ve / (n - 1)) : std::nan("");
  }
  return out;
}

}  // namespace arcal
