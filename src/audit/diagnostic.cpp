#include "audit/diagnostic.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "core/check.hpp"
#include "core/parallel.hpp"
#include "calib/calibrators.hpp"
#include "core/rng.hpp"
#include "stats/multiplicity.hpp"
#include "stats/permutation.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {

/// One kept confidence bin: its members (input order) and each member's tertile of s (0 bottom, 2 top).
struct KeptBin {
  std::size_t bin = 0;
  std::vector<std::size_t> idx;
  std::vector<int> tertile;
};

struct BinnedTertiles {
  std::vector<KeptBin> bins;
  std::size_t n_used = 0, bins_dropped = 0;
};

/// Validation, binning, bin dropping and the tertile rule shared by both protocols.
BinnedTertiles bin_tertiles(const std::vector<double>& confidence, const std::vector<double>& correct,
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
  if (constant)
    throw_input(
        fn, "statistic is constant (every value is " + std::to_string(statistic[0]) + "); it cannot split tertiles");

  const std::vector<int> bin = options.scheme == BinScheme::equal_width
                                   ? equal_width_bin_index(confidence, options.bins)
                                   : equal_mass_group_index(confidence, options.bins);
  std::vector<std::vector<std::size_t>> members(options.bins);
  for (std::size_t i = 0; i < n; ++i) members[static_cast<std::size_t>(bin[i])].push_back(i);
  BinnedTertiles out;
  for (std::size_t b = 0; b < options.bins; ++b) {
    auto& idx = members[b];
    if (idx.empty()) continue;
    if (idx.size() < options.min_bin_count) {
      ++out.bins_dropped;
      continue;
    }
    std::vector<double> s(idx.size());
    for (std::size_t k = 0; k < idx.size(); ++k) s[k] = statistic[idx[k]];
    auto tert = equal_mass_group_index(s, 3);
    const bool has_top = std::find(tert.begin(), tert.end(), 2) != tert.end();
    const bool has_bottom = std::find(tert.begin(), tert.end(), 0) != tert.end();
    if (!has_top || !has_bottom) {
      ++out.bins_dropped;
      continue;
    }
    out.n_used += idx.size();
    out.bins.push_back({b, std::move(idx), std::move(tert)});
  }
  if (out.bins.empty())
    throw_input(fn, "no confidence bin has >= " + std::to_string(options.min_bin_count) +
                        " examples with non-empty top and bottom tertiles (n = " + std::to_string(n) + ")");
  return out;
}

/// Per-bin accuracy and confidence of the top and bottom tertiles (gap and residuals left to the caller).
BinGap bin_summary(const KeptBin& kb, const std::vector<double>& confidence, const std::vector<double>& correct,
                   std::size_t n_used) {
  BinGap g;
  g.bin = kb.bin;
  g.n = kb.idx.size();
  for (std::size_t k = 0; k < kb.idx.size(); ++k) {
    const std::size_t i = kb.idx[k];
    if (kb.tertile[k] == 2) {
      ++g.n_top;
      g.acc_top += correct[i];
      g.conf_top += confidence[i];
    } else if (kb.tertile[k] == 0) {
      ++g.n_bottom;
      g.acc_bottom += correct[i];
      g.conf_bottom += confidence[i];
    }
  }
  g.acc_top /= static_cast<double>(g.n_top);
  g.conf_top /= static_cast<double>(g.n_top);
  g.acc_bottom /= static_cast<double>(g.n_bottom);
  g.conf_bottom /= static_cast<double>(g.n_bottom);
  g.weight = static_cast<double>(g.n) / static_cast<double>(n_used);
  return g;
}

/// The null's histogram for the report (kNullHistogramBins over [-m, m], m = 1.05 max(|G*|, |G|)).
void fill_null_histogram(GapTestResult& r, const std::vector<double>& null) {
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
}

double clipped_logit(double c) {
  const double x = std::min(std::max(c, 1e-12), 1.0 - 1e-12);
  return std::log(x) - std::log1p(-x);
}

}  // namespace

MatchedStrata matched_confidence_strata(const std::vector<double>& confidence, const std::vector<double>& correct,
                                        const std::vector<double>& statistic, const DiagnosticOptions& options) {
  const auto bt = bin_tertiles(confidence, correct, statistic, options);
  MatchedStrata r;
  r.n_used = bt.n_used;
  r.bins_dropped = bt.bins_dropped;
  for (const auto& kb : bt.bins) {
    ContrastStratum st;
    std::vector<double> top, bottom, middle;
    for (std::size_t k = 0; k < kb.idx.size(); ++k) {
      const std::size_t i = kb.idx[k];
      const double res = correct[i] - confidence[i];
      (kb.tertile[k] == 2 ? top : kb.tertile[k] == 0 ? bottom : middle).push_back(res);
    }
    BinGap g = bin_summary(kb, confidence, correct, bt.n_used);
    st.n_top = top.size();
    st.n_bottom = bottom.size();
    st.values = std::move(top);
    st.values.insert(st.values.end(), bottom.begin(), bottom.end());
    st.values.insert(st.values.end(), middle.begin(), middle.end());
    st.weight = g.weight;
    g.gap = stratum_contrast(st);
    r.strata.push_back(std::move(st));
    r.bins.push_back(g);
  }
  return r;
}

namespace {
/// The isotonic cross-fit of q̂ over two given halves.
std::vector<double> cross_fit_isotonic(const std::vector<double>& confidence, const std::vector<double>& correct,
                                       const std::array<std::vector<std::size_t>, 2>& half) {
  const std::size_t n = confidence.size();
  std::vector<double> out(n);
  for (std::size_t h = 0; h < 2; ++h) {
    const auto& fit = half[1 - h];
    std::vector<double> x(fit.size()), y(fit.size());
    for (std::size_t k = 0; k < fit.size(); ++k) {
      x[k] = clipped_logit(confidence[fit[k]]);
      y[k] = correct[fit[k]];
    }
    const auto iso = fit_isotonic(x, y);
    std::vector<double> q(half[h].size());
    for (std::size_t k = 0; k < half[h].size(); ++k) q[k] = clipped_logit(confidence[half[h][k]]);
    const auto pred = apply_isotonic(iso, q);
    for (std::size_t k = 0; k < half[h].size(); ++k) out[half[h][k]] = pred[k];
  }
  return out;
}

/// The q̂ cross-fit's two halves of whole clusters (cluster_kfold_assignment, 2 folds).
std::array<std::vector<std::size_t>, 2> cluster_halves(const std::vector<std::int64_t>& cluster, std::uint64_t seed) {
  const auto fold = cluster_kfold_assignment(cluster, 2, seed);
  std::array<std::vector<std::size_t>, 2> half;
  for (std::size_t i = 0; i < cluster.size(); ++i) half[static_cast<std::size_t>(fold[i])].push_back(i);
  return half;
}
}  // namespace

std::vector<double> cross_fitted_accuracy(const std::vector<double>& confidence, const std::vector<double>& correct,
                                          std::uint64_t seed) {
  const char* fn = "cross_fitted_accuracy";
  const std::size_t n = confidence.size();
  check_same_size(fn, "confidence", n, "correct", correct.size());
  if (n < 4) throw_input(fn, "needs at least 4 examples, got " + std::to_string(n));
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  Rng(seed).shuffle(order);
  std::array<std::vector<std::size_t>, 2> half;
  for (std::size_t k = 0; k < n; ++k) half[k % 2].push_back(order[k]);
  return cross_fit_isotonic(confidence, correct, half);
}

std::vector<double> cross_fitted_accuracy(const std::vector<double>& confidence, const std::vector<double>& correct,
                                          const std::vector<std::int64_t>& cluster, std::uint64_t seed) {
  if (cluster.empty()) return cross_fitted_accuracy(confidence, correct, seed);
  const char* fn = "cross_fitted_accuracy";
  const std::size_t n = confidence.size();
  check_same_size(fn, "confidence", n, "correct", correct.size());
  check_same_size(fn, "confidence", n, "cluster", cluster.size());
  if (n < 4) throw_input(fn, "needs at least 4 examples, got " + std::to_string(n));
  return cross_fit_isotonic(confidence, correct, cluster_halves(cluster, seed));
}

GapTestResult residual_gap_test(const std::vector<double>& confidence, const std::vector<double>& correct,
                                const std::vector<double>& statistic, const DiagnosticOptions& options,
                                std::uint64_t seed) {
  const char* fn = "residual_gap_test";
  if (options.strata_size == 0) throw_input(fn, "strata_size is 0, but must be >= 1");
  const auto bt = bin_tertiles(confidence, correct, statistic, options);
  const auto qhat = cross_fitted_accuracy(confidence, correct, derive_seed(seed, 1));
  GapTestResult r;
  r.n = confidence.size();
  r.n_used = bt.n_used;
  r.bins_dropped = bt.bins_dropped;
  std::vector<GroupedStratum> strata;
  for (const auto& kb : bt.bins) {
    BinGap g = bin_summary(kb, confidence, correct, bt.n_used);
    const double ct = g.weight / static_cast<double>(g.n_top), cb = -g.weight / static_cast<double>(g.n_bottom);
    // Strata: equal-mass groups of the bin's examples by confidence (ties never straddle).
    std::vector<double> cb_conf(kb.idx.size());
    for (std::size_t k = 0; k < kb.idx.size(); ++k) cb_conf[k] = confidence[kb.idx[k]];
    const std::size_t groups = std::max<std::size_t>(
        1, static_cast<std::size_t>(std::llround(double(kb.idx.size()) / double(options.strata_size))));
    const auto stratum = equal_mass_group_index(cb_conf, groups);
    std::vector<std::array<std::vector<double>, 3>> parts(groups);  // [stratum][bottom, middle, top]
    for (std::size_t k = 0; k < kb.idx.size(); ++k) {
      const std::size_t i = kb.idx[k];
      const double res = correct[i] - qhat[i];
      parts[static_cast<std::size_t>(stratum[k])][static_cast<std::size_t>(kb.tertile[k])].push_back(res);
      if (kb.tertile[k] == 2) g.resid_top += res;
      if (kb.tertile[k] == 0) g.resid_bottom += res;
    }
    g.resid_top /= static_cast<double>(g.n_top);
    g.resid_bottom /= static_cast<double>(g.n_bottom);
    g.gap = g.resid_top - g.resid_bottom;
    for (auto& p : parts) {
      if (p[0].empty() && p[1].empty() && p[2].empty()) continue;  // a group emptied by a tie run
      GroupedStratum st;
      st.n_top = p[2].size();
      st.n_bottom = p[0].size();
      st.coef_top = ct;
      st.coef_bottom = cb;
      st.values = std::move(p[2]);
      st.values.insert(st.values.end(), p[0].begin(), p[0].end());
      st.values.insert(st.values.end(), p[1].begin(), p[1].end());
      strata.push_back(std::move(st));
    }
    r.bins.push_back(g);
  }
  r.strata = strata.size();
  r.gap = grouped_contrast(strata);
  const auto null = grouped_permutation_null(strata, options.permutations, seed);
  r.permutations = options.permutations;
  r.p = permutation_p_value(r.gap, null, &r.exceed);
  fill_null_histogram(r, null);
  return r;
}

GapTestResult clustered_residual_gap_test(const std::vector<double>& confidence, const std::vector<double>& correct,
                                          const std::vector<double>& statistic,
                                          const std::vector<std::int64_t>& cluster, const DiagnosticOptions& options,
                                          std::uint64_t seed) {
  const char* fn = "clustered_residual_gap_test";
  if (options.strata_size == 0) throw_input(fn, "strata_size is 0, but must be >= 1");
  check_same_size(fn, "confidence", confidence.size(), "cluster", cluster.size());
  const auto bt = bin_tertiles(confidence, correct, statistic, options);
  if (confidence.size() < 4) throw_input(fn, "needs at least 4 examples, got " + std::to_string(confidence.size()));
  const auto half = cluster_halves(cluster, derive_seed(seed, 1));
  const auto qhat = cross_fit_isotonic(confidence, correct, half);
  std::vector<std::uint8_t> in_half(confidence.size(), 0);
  for (std::size_t i : half[1]) in_half[i] = 1;
  GapTestResult r;
  r.n = confidence.size();
  r.n_used = bt.n_used;
  r.bins_dropped = bt.bins_dropped;
  std::map<std::int64_t, double> contribution;  // T_g, by cluster id (ordered: the null's draws are reproducible)
  for (const auto& kb : bt.bins) {
    BinGap g = bin_summary(kb, confidence, correct, bt.n_used);
    const double ct = g.weight / static_cast<double>(g.n_top), cb = -g.weight / static_cast<double>(g.n_bottom);
    std::vector<double> cb_conf(kb.idx.size());
    for (std::size_t k = 0; k < kb.idx.size(); ++k) cb_conf[k] = confidence[kb.idx[k]];
    const std::size_t groups = std::max<std::size_t>(
        1, static_cast<std::size_t>(std::llround(double(kb.idx.size()) / double(options.strata_size))));
    const auto stratum = equal_mass_group_index(cb_conf, groups);
    // Cells: (stratum, q̂ half). Centring phi within each cell removes a residual shift that a half's
    // q̂ shares across every cluster of the other half (a dominant cluster's accuracy, issue 54).
    std::vector<double> phi(kb.idx.size()), phi_sum(2 * groups, 0.0);
    std::vector<std::size_t> count(2 * groups, 0), cell(kb.idx.size());
    for (std::size_t k = 0; k < kb.idx.size(); ++k) {
      phi[k] = kb.tertile[k] == 2 ? ct : kb.tertile[k] == 0 ? cb : 0.0;
      cell[k] = 2 * static_cast<std::size_t>(stratum[k]) + in_half[kb.idx[k]];
      phi_sum[cell[k]] += phi[k];
      ++count[cell[k]];
    }
    for (std::size_t k = 0; k < kb.idx.size(); ++k) {
      const std::size_t i = kb.idx[k], st = cell[k];
      const double res = correct[i] - qhat[i];
      contribution[cluster[i]] += (phi[k] - phi_sum[st] / double(count[st])) * res;
      if (kb.tertile[k] == 2) g.resid_top += res;
      if (kb.tertile[k] == 0) g.resid_bottom += res;
    }
    for (std::size_t st = 0; st < groups; ++st) r.strata += count[2 * st] + count[2 * st + 1] > 0;
    g.resid_top /= static_cast<double>(g.n_top);
    g.resid_bottom /= static_cast<double>(g.n_bottom);
    g.gap = g.resid_top - g.resid_bottom;
    r.bins.push_back(g);
  }
  std::vector<double> t;
  t.reserve(contribution.size());
  for (const auto& kv : contribution) t.push_back(kv.second);
  if (t.size() < 2)
    throw_input(fn,
                "the kept bins hold " + std::to_string(t.size()) + " cluster(s); a sign-flip null needs at least 2");
  r.clusters = t.size();
  r.gap = 0;
  for (double v : t) r.gap += v;
  std::vector<double> null(static_cast<std::size_t>(std::max(0, options.permutations)));
  Rng rng(seed);
  for (auto& x : null) {
    double sum = 0;
    std::uint64_t bits = 0;
    for (std::size_t g = 0; g < t.size(); ++g) {
      if (g % 64 == 0) bits = rng.next_u64();
      sum += (bits >> (g % 64)) & 1U ? t[g] : -t[g];
    }
    x = sum;
  }
  r.permutations = options.permutations;
  r.p = permutation_p_value(r.gap, null, &r.exceed);
  fill_null_histogram(r, null);
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
  fill_null_histogram(r, null);
  r.bins = std::move(m.bins);
  return r;
}

DiagnosticFamily run_diagnostic_family(const std::vector<DiagnosticTestSpec>& family,
                                       const DiagnosticOptions& options) {
  const char* fn = "run_diagnostic_family";
  if (family.empty()) throw_input(fn, "the declared test family is empty; declare at least one (run, statistic) test");
  if (!(options.alpha > 0.0 && options.alpha < 1.0))
    throw_input(fn, "alpha is " + std::to_string(options.alpha) + ", but must be in (0, 1)");
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
      test.paper = matched_confidence_gap_test(spec.confidence, spec.correct, spec.values, options, test.seed);
      test.result =
          spec.cluster.empty()
              ? residual_gap_test(spec.confidence, spec.correct, spec.values, options, derive_seed(test.seed, 0xD1A6))
              : clustered_residual_gap_test(spec.confidence, spec.correct, spec.values, spec.cluster, options,
                                            derive_seed(test.seed, 0xD1A6));
    } catch (const InputError& e) {
      throw InputError(std::string(fn) + ": test[" + std::to_string(t) + "] (run '" + spec.run + "', statistic '" +
                       spec.statistic + "'): " + e.what());
    }
  });
  std::vector<double> p, pp;
  for (const auto& test : out.tests) {
    p.push_back(test.result.p);
    pp.push_back(test.paper.p);
  }
  const auto holm = holm_adjust(p), bh = bh_adjust(p), paper_holm = holm_adjust(pp), paper_bh = bh_adjust(pp);
  for (std::size_t t = 0; t < out.tests.size(); ++t) {
    out.tests[t].p_holm = holm[t];
    out.tests[t].p_bh = bh[t];
    out.tests[t].paper_p_holm = paper_holm[t];
    out.tests[t].paper_p_bh = paper_bh[t];
  }
  for (const auto& test : out.tests) {
    auto it = std::find_if(out.verdicts.begin(), out.verdicts.end(), [&](const StabilityVerdict& v) {
      return v.cell == test.cell && v.statistic == test.statistic;
    });
    if (it == out.verdicts.end()) {
      StabilityVerdict v;
      v.cell = test.cell;
      v.statistic = test.statistic;
      out.verdicts.push_back(std::move(v));
      it = out.verdicts.end() - 1;
    }
    ++it->seeds;
    if (test.result.p <= options.alpha) {
      ++it->rejections;
      if (test.result.gap > 0) ++it->rejections_positive;
      if (test.result.gap < 0) ++it->rejections_negative;
    }
  }
  for (auto& v : out.verdicts) {
    v.assessable = v.seeds >= 2;
    const std::size_t same = std::max(v.rejections_positive, v.rejections_negative);
    v.stable = v.assessable && same > 0 && 3 * same >= 2 * v.seeds;
    if (!v.assessable)
      v.verdict = "not assessable (1 seed)";
    else if (v.stable)
      v.verdict = v.rejections_positive >= v.rejections_negative ? "stable positive" : "stable negative";
    else if (v.rejections == 0)
      v.verdict = "no seed rejects";  // consistent, not unstable: "not stable" would suggest mixed results
    else
      v.verdict = "not stable";
  }
  return out;
}

}  // namespace arcal
