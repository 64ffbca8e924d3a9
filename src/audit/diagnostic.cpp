#include "audit/diagnostic.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "stats/multiplicity.hpp"
#include "stats/permutation.hpp"
#include "stats/splits.hpp"

namespace arcal {

MatchedStrata matched_confidence_strata(const std::vector<double>& confidence, const std::vector<double>& correct,
                                        const std::vector<double>& statistic, const DiagnosticOptions& options) {
  const char* fn = "matched_confidence_gap_test";
  const std::size_t n = confidence.size();
  check_same_size(fn, "confidence", n, "correct", correct.size());
  check_same_size(fn, "confidence", n, "statistic", statistic.size());
  if (options.bins == 0) throw_input(fn, "bins is 0, but must be >= 1");
  if (n < options.bins)
    throw_input(fn, "confidence has " + std::to_string(n) + " examples, fewer than the " +
                        std::to_string(options.bins) + " bins");
  bool constant = true;
  for (std::size_t i = 0; i < n; ++i) {
    check_probability(fn, "confidence", i, confidence[i]);
    if (!(correct[i] == 0.0 || correct[i] == 1.0)) throw_index(fn, "correct", i, std::to_string(correct[i]), "0 or 1");
    check_finite(fn, "statistic", i, statistic[i]);
    if (statistic[i] != statistic[0]) constant = false;
  }
  if (constant) throw_input(fn, "statistic is constant (every value is " + std::to_string(statistic[0]) + "); it cannot split tertiles");

  const std::vector<int> bin = options.scheme == BinScheme::equal_width
                                   ? equal_width_bin_index(confidence, options.bins)
                                   : equal_mass_group_index(confidence, options.bins);
  std::vector<std::vector<std::size_t>> members(options.bins);
  for (std::size_t i = 0; i < n; ++i) members[static_cast<std::size_t>(bin[i])].push_back(i);

  MatchedStrata r;
  std::vector<ContrastStratum>& strata = r.strata;
  std::vector<BinGap>& gaps = r.bins;
  for (std::size_t b = 0; b < options.bins; ++b) {
    const auto& idx = members[b];
    if (idx.empty()) continue;
    if (idx.size() < options.min_bin_count) {
      ++r.bins_dropped;
      continue;
    }
    std::vector<double> s(idx.size());
    for (std::size_t k = 0; k < idx.size(); ++k) s[k] = statistic[idx[k]];
    const auto tert = equal_mass_group_index(s, 3);
    ContrastStratum st;
    std::vector<double> top, bottom, middle;
    BinGap g;
    g.bin = b;
    g.n = idx.size();
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const std::size_t i = idx[k];
      const double res = correct[i] - confidence[i];
      if (tert[k] == 2) {
        top.push_back(res);
        g.acc_top += correct[i];
        g.conf_top += confidence[i];
      } else if (tert[k] == 0) {
        bottom.push_back(res);
        g.acc_bottom += correct[i];
        g.conf_bottom += confidence[i];
      } else {
        middle.push_back(res);
      }
    }
    if (top.empty() || bottom.empty()) {
      ++r.bins_dropped;
      continue;
    }
    g.n_top = top.size();
    g.n_bottom = bottom.size();
    g.acc_top /= static_cast<double>(g.n_top);
    g.conf_top /= static_cast<double>(g.n_top);
    g.acc_bottom /= static_cast<double>(g.n_bottom);
    g.conf_bottom /= static_cast<double>(g.n_bottom);
    st.n_top = top.size();
    st.n_bottom = bottom.size();
    st.values = std::move(top);
    st.values.insert(st.values.end(), bottom.begin(), bottom.end());
    st.values.insert(st.values.end(), middle.begin(), middle.end());
    g.gap = stratum_contrast(st);
    r.n_used += idx.size();
    strata.push_back(std::move(st));
    gaps.push_back(g);
  }
  if (strata.empty())
    throw_input(fn, "no confidence bin has >= " + std::to_string(options.min_bin_count) +
                        " examples with non-empty top and bottom tertiles (n = " + std::to_string(n) + ")");
  for (std::size_t k = 0; k < strata.size(); ++k) {
    strata[k].weight = static_cast<double>(gaps[k].n) / static_cast<double>(r.n_used);
    gaps[k].weight = strata[k].weight;
  }
  return r;
}

GapTestResult matched_confidence_gap_test(const std::vector<double>& confidence, const std::vector<double>& correct,
                                          const std::vector<double>& statistic, const DiagnosticOptions& options,
                                          std::uint64_t seed) {
  auto m = matched_confidence_strata(confidence, correct, statistic, options);
  GapTestResult r;
  r.n = confidence.size();
  r.n_used = m.n_used;
  r.bins_dropped = m.bins_dropped;
  // within_stratum_permutation_test's steps, keeping the null for its histogram.
  r.gap = weighted_contrast(m.strata);
  const auto null = within_stratum_permutation_null(m.strata, options.permutations, seed);
  r.permutations = options.permutations;
  r.p = permutation_p_value(r.gap, null, &r.exceed);
  double half = std::abs(r.gap);
  for (double v : null) half = std::max(half, std::abs(v));
  half = half > 0 ? 1.05 * half : 1.0;
  r.null_edges.resize(kNullHistogramBins + 1);
  for (std::size_t b = 0; b <= kNullHistogramBins; ++b)
    r.null_edges[b] = -half + 2.0 * half * double(b) / double(kNullHistogramBins);
  r.null_counts.assign(kNullHistogramBins, 0);
  for (double v : null) {
    const auto b = static_cast<std::size_t>((v + half) / (2.0 * half) * double(kNullHistogramBins));
    ++r.null_counts[std::min(b, kNullHistogramBins - 1)];
  }
  r.bins = std::move(m.bins);
  return r;
}

DiagnosticFamily run_diagnostic_family(const std::vector<DiagnosticTestSpec>& family, const DiagnosticOptions& options) {
  const char* fn = "run_diagnostic_family";
  if (family.empty()) throw_input(fn, "the declared test family is empty; declare at least one (run, statistic) test");
  if (!(options.alpha > 0.0 && options.alpha < 1.0)) throw_input(fn, "alpha is " + std::to_string(options.alpha) + ", but must be in (0, 1)");
  DiagnosticFamily out;
  out.options = options;
  out.family_size = family.size();
  // Tests are independent (test t uses seed derive_seed(seed, t)): run them on worker threads.
  out.tests.resize(family.size());
  parallel_for_index(family.size(), options.threads, [&](std::size_t t) {
    const auto& spec = family[t];
    DiagnosticTest& test = out.tests[t];
    test.run = spec.run;
    test.cell = spec.cell;
    test.statistic = spec.statistic;
    test.seed = derive_seed(options.seed, t);
    try {
      test.result = matched_confidence_gap_test(spec.confidence, spec.correct, spec.values, options, test.seed);
    } catch (const InputError& e) {
      throw InputError(std::string(fn) + ": test[" + std::to_string(t) + "] (run '" + spec.run + "', statistic '" +
                       spec.statistic + "'): " + e.what());
    }
  });
  std::vector<double> p;
  for (const auto& test : out.tests) p.push_back(test.result.p);
  const auto holm = holm_adjust(p);
  const auto bh = bh_adjust(p);
  for (std::size_t t = 0; t < out.tests.size(); ++t) {
    out.tests[t].p_holm = holm[t];
    out.tests[t].p_bh = bh[t];
  }
  for (const auto& test : out.tests) {
    auto it = std::find_if(out.verdicts.begin(), out.verdicts.end(), [&](const StabilityVerdict& v) {
      return v.cell == test.cell && v.statistic == test.statistic;
    });
    if (it == out.verdicts.end()) {
      out.verdicts.push_back({test.cell, test.statistic});
      it = out.verdicts.end() - 1;
    }
    ++it->seeds;
    if (test.result.p <= options.alpha) {
      ++it->rejections;
      if (test.result.gap > 0) ++it->rejections_positive;
      if (test.result.gap < 0) ++it->rejections_negative;
    }
  }
  for (auto& v : out.verdicts)
    v.stable = 3 * std::max(v.rejections_positive, v.rejections_negative) >= 2 * v.seeds;
  return out;
}

}  // namespace arcal
