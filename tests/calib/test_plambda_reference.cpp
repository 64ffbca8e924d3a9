// Reference values ported from the unit tests of p-lambda/verified_calibration (Kumar, Liang & Ma
// 2019), calibration/util_test.py at commit 861d0779d8e1ef9d1d325f8f99e699caaddf967e, with the bin
// conventions of its calibration/utils.py (commit bdd60a77). Each case names its source test. Where that
// library's conventions differ from ours (method.md §4) the case says so and checks what ours give.
//
// Conventions compared:
// - get_ece: equal-width edges [1/B, ..., 1], bin = searchsorted(edges, c) (bisect_left), so bins are
//   (k/B, (k+1)/B] and an interior edge belongs to the LOWER bin. Ours: [k/B, (k+1)/B), edge to the
//   UPPER bin. Cases below with a value on an edge (0.8 = 12/15, 0.6 = 9/15) have it alone in its bin,
//   so the value agrees; BinningEdgeConventionDiffers shows a case where it does not.
// - get_ece_em / get_equal_bins: np.array_split of the sorted values (the first N mod B groups one
//   larger), edges at midpoints between groups, deduplicated, bisect_left. A tied run straddling a
//   split lands wholly in the lower group and later groups keep their nominal ends: the same
//   partition as our equal_mass_bins (a tied run takes the group of its first rank).
// - _get_ce with get_discrete_bins (one bin per distinct value) is not one of ours; the cases using it
//   are ported where our 15 equal-width bins also put every distinct value in its own bin.
// - p = 1 is our ECE, p = 2 our RMSCE; marginal p = 1 is our classwise ECE; debias=True at p = 2 is
//   Kumar et al.'s estimator, our debiased_l2_calibration_error. Their p = 3 and debiased p != 2 have
//   no counterpart here and are not ported.
// Tolerance 1e-12 absolute everywhere: the expected values are short exact sums of fractions, and
// util_test.py itself asserts 7 decimal places.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "calib/binning.hpp"
#include "calib/metrics.hpp"

using namespace arcal;

namespace {
constexpr double kTol = 1e-12;

struct Top {
  std::vector<double> conf, correct;
};
Top top(const std::vector<std::vector<double>>& rows, const std::vector<std::int64_t>& labels) {
  std::vector<double> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const auto t = top_label(flat, rows.size(), rows[0].size(), labels);
  return {t.confidence, t.correct};
}
std::vector<double> flatten(const std::vector<std::vector<double>>& rows) {
  std::vector<double> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return flat;
}
}  // namespace

// util_test.py test_ece, first half: top-label, 3 equal-width bins (get_ece, num_bins=3).
TEST(PLambdaReference, TopLabelEceThreeBins) {
  const std::vector<std::vector<double>> probs = {{0.8, 0.1, 0.1}, {0.6, 0.2, 0.2}, {0.0, 0.9, 0.1},
                                                  {0.0, 1.0, 0.0}, {0.3, 0.3, 0.4}, {0.2, 0.0, 0.85}};
  const std::vector<std::int64_t> labels = {0, 0, 1, 1, 0, 2};
  const double want = 4 / 6.0 * (1 - (0.8 + 0.85 + 0.9 + 1.0) / 4);
  const auto t = top(probs, labels);
  EXPECT_NEAR(expected_calibration_error(t.conf, t.correct, 3), want, kTol);
  // util_test.py permutes the rows; the value must not depend on order.
  std::vector<double> rc(t.conf.rbegin(), t.conf.rend()), ra(t.correct.rbegin(), t.correct.rend());
  EXPECT_NEAR(expected_calibration_error(rc, ra, 3), want, kTol);
  ReportOptions o;
  o.bins = 3;
  o.draws = 0;
  EXPECT_NEAR(calibration_report(flatten(probs), 6, 3, labels, o).ece.value, want, kTol);
}

// util_test.py test_ece, second half: a 1-D (binary) input is the probability of label 1, calibrated
// against the label itself; 2 bins.
TEST(PLambdaReference, BinaryEceTwoBins) {
  EXPECT_NEAR(expected_calibration_error({0.6, 0.7, 0.8, 0.9}, {0, 0, 1, 1}, 2), 0.25, kTol);
}

// util_test.py test_1d_ece_em (get_ece_em: equal-mass bins); with one bin also get_ece.
TEST(PLambdaReference, EqualMassEceTable) {
  struct Case {
    std::vector<double> probs, correct;
    int bins;
    double want;
  };
  const std::vector<Case> cases = {
      {{0.1}, {1}, 1, 0.9},
      {{0.1}, {0}, 1, 0.1},
      {{0.1, 0.7}, {0, 1}, 1, 0.1},
      {{0.7, 0.1}, {1, 0}, 1, 0.1},
      {{0.1, 0.7, 0.4}, {0, 0, 0}, 1, 0.4},
      {{0.1, 0.9}, {0, 1}, 1, 0.0},
      {{0.1, 0.7}, {0, 1}, 2, 0.2},
      {{0.1, 0.1, 0.7}, {0, 1, 1}, 2, 0.4 * 2 / 3 + 0.3 * 1 / 3},
      {{0.1, 0.1, 0.1, 0.1, 0.7}, {0, 1, 0, 0, 1}, 2, 0.15 * 4 / 5 + 0.3 * 1 / 5},  // a tied run spans a split
      {{0.1, 0.7, 0.5, 0.9}, {0, 1, 0, 1}, 2, 0.25},
      {{0.1, 0.7, 0.5, 0.9}, {0, 1, 0, 1}, 4, 0.25},
      {{0.6, 0.7, 0.8, 0.9}, {0, 0, 1, 1}, 2, 0.4},
      {{0.1, 0.7, 0.5, 0.9}, {0, 1, 1, 1}, 2, 0.2},
      {{0.1, 0.7, 0.5, 0.9}, {0, 1, 1, 1}, 4, 0.25},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    EXPECT_NEAR(adaptive_calibration_error(c.probs, c.correct, c.bins), c.want, kTol) << "case " << i;
    if (c.bins == 1) {
      EXPECT_NEAR(expected_calibration_error(c.probs, c.correct, 1), c.want, kTol) << "case " << i;
    }
  }
}

// util_test.py test_missing_classes_ece: top-label, default 15 bins. 0.8 = 12/15 exactly (as doubles):
// p-lambda puts it in bin 11 ((11/15, 12/15]), we put it in bin 12; alone either way, same ECE.
TEST(PLambdaReference, MissingClassesEce) {
  const auto t = top({{0.9, 0.1}, {0.8, 0.2}}, {0, 0});
  EXPECT_NEAR(expected_calibration_error(t.conf, t.correct, 15), 0.15, kTol);
  EXPECT_EQ(equal_width_bin(0.8, 15), 12);
}

// util_test.py test_missing_class_binary_ece: one bin, binary input.
TEST(PLambdaReference, MissingClassBinaryEce) {
  EXPECT_NEAR(expected_calibration_error({0.9, 0.1, 0.3}, {0, 0, 0}, 1), 1.3 / 3, kTol);
  EXPECT_NEAR(expected_calibration_error({0.9, 0.1, 0.3}, {1, 1, 1}, 1), 1.7 / 3, kTol);
}

// util_test.py test_get_binary_ce and test_get_two_label_ce, p = 1 and p = 2 (discrete bins there; our
// 15 equal-width bins also separate 0.4, 0.5 and 0.6). Debiased (p = 2): their assertLess; here both
// bins' corrections cancel their squared gaps exactly (0.25^2 = 0.25*0.75/3, 0.2^2 = 0.8*0.2/4).
TEST(PLambdaReference, BinaryAndTwoLabelCe) {
  const std::vector<double> probs = {0.5, 0.5, 0.5, 0.6, 0.5, 0.6, 0.6, 0.6, 0.6};
  const std::vector<double> labels = {0, 1, 0, 1, 0, 1, 1, 1, 0};
  const double l1 = 4 / 9.0 * 0.25 + 5 / 9.0 * 0.2;
  const double l2 = std::sqrt(4 / 9.0 * 0.25 * 0.25 + 5 / 9.0 * 0.2 * 0.2);
  const auto b = binned_calibration(probs, labels, 15);
  EXPECT_NEAR(b.ece, l1, kTol);
  EXPECT_NEAR(b.rmsce, l2, kTol);
  const auto d = debiased_l2_calibration_error(probs, labels, 15);
  EXPECT_LT(d.value, l2);
  EXPECT_NEAR(d.raw, 0.0, 1e-15);

  // Two labels: rows (1 - p, p), labels as classes; marginal (classwise) and top-label agree.
  std::vector<double> two;
  std::vector<std::int64_t> y;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    two.push_back(probs[i] == 0.5 ? 0.5 : 0.4);
    two.push_back(probs[i]);
    y.push_back(static_cast<std::int64_t>(labels[i]));
  }
  EXPECT_NEAR(classwise_calibration_error(two, 9, 2, y, 15), l1, kTol);
  const auto t = top_label(two, 9, 2, y);  // ties (0.5, 0.5) predict class 0, as np.argmax
  const auto tb = binned_calibration(t.confidence, t.correct, 15);
  EXPECT_NEAR(tb.ece, l1, kTol);
  EXPECT_NEAR(tb.rmsce, l2, kTol);
  EXPECT_LT(debiased_l2_calibration_error(t.confidence, t.correct, 15).value, l2);
}

// util_test.py test_get_three_label_ce, p = 1 (marginal and top-label) and p = 2 (top-label).
TEST(PLambdaReference, ThreeLabelCe) {
  const std::vector<double> l0 = {0.6, 0.3, 0.1}, l1 = {0.1, 0.8, 0.1}, l2 = {0.1, 0.0, 0.9};
  const std::vector<std::vector<double>> rows = {l0, l0, l0, l0, l0, l0, l1, l1, l1, l1, l2, l2, l2, l2};
  const std::vector<std::int64_t> labels = {0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2};
  const double marginal =
      4 / 42.0 * 0.1 + 6 / 42.0 * (5 / 6.0 - 0.6) + 8 / 42.0 * 0.1 + 4 / 42.0 * 0.05 + 6 / 42.0 * (0.3 - 1 / 6.0);
  const double top1 = 6 / 14.0 * (5 / 6.0 - 0.6) + 4 / 14.0 * 0.05 + 4 / 14.0 * 0.1;
  const double top2 = std::sqrt(6 / 14.0 * std::pow(5 / 6.0 - 0.6, 2) + 4 / 14.0 * 0.05 * 0.05 + 4 / 14.0 * 0.1 * 0.1);
  EXPECT_NEAR(classwise_calibration_error(flatten(rows), 14, 3, labels, 15), marginal, kTol);
  const auto t = top(rows, labels);
  const auto b = binned_calibration(t.conf, t.correct, 15);
  EXPECT_NEAR(b.ece, top1, kTol);
  EXPECT_NEAR(b.rmsce, top2, kTol);
  EXPECT_LT(debiased_l2_calibration_error(t.conf, t.correct, 15).value, top2);
}

// util_test.py test_three_label_top_ce_lower_bound: top-label, 2 equal-mass bins, p = 1 and 2.
TEST(PLambdaReference, ThreeLabelTopEqualMass) {
  const auto t =
      top({{0.8, 0.1, 0.1}, {0.6, 0.2, 0.2}, {0.0, 0.9, 0.1}, {0.0, 1.0, 0.0}, {0.3, 0.3, 0.4}, {0.2, 0.0, 0.85}},
          {0, 0, 1, 1, 0, 2});
  const auto b = binned_calibration(t.conf, t.correct, 2, BinScheme::equal_mass);
  EXPECT_NEAR(b.ece, 0.5 * (2 / 3.0 - 0.6) + 0.5 * (1 - 2.75 / 3), kTol);
  EXPECT_NEAR(b.rmsce, std::sqrt(0.5 * std::pow(2 / 3.0 - 0.6, 2) + 0.5 * std::pow(1 - 2.75 / 3, 2)), kTol);
}

// util_test.py test_get_{1,2,3}_equal_bins, _lots_of_1s, _uneven_sizes, test_equal_bins_more_bins_points,
// test_bin_all_same: their edges, restated as the partition they induce (values <= edge go low).
TEST(PLambdaReference, EqualMassPartitions) {
  const std::vector<double> p = {0.3, 0.5, 0.2, 0.3, 0.5, 0.7};
  EXPECT_EQ(equal_mass_bins(p, 1), (std::vector<int>{0, 0, 0, 0, 0, 0}));  // edges [1.0]
  EXPECT_EQ(equal_mass_bins(p, 2), (std::vector<int>{0, 1, 0, 0, 1, 1}));  // edges [0.4, 1.0]
  EXPECT_EQ(equal_mass_bins(p, 3), (std::vector<int>{0, 1, 0, 0, 1, 2}));  // edges [0.3, 0.5, 1.0]
  // edges [0.75, 1.0]: the four 1.0s share one group and the third group is empty.
  EXPECT_EQ(equal_mass_bins({0.3, 0.5, 1.0, 1.0, 1.0, 1.0}, 3), (std::vector<int>{0, 0, 1, 1, 1, 1}));
  // edges [0.55, 0.75, 1.0]: array_split sizes 3, 2, 2.
  EXPECT_EQ(equal_mass_bins({0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}, 3), (std::vector<int>{0, 0, 0, 1, 1, 2, 2}));
  // More bins than points: p-lambda caps the bins at N; we leave the extra groups empty.
  EXPECT_EQ(equal_mass_bins({0.3}, 5), (std::vector<int>{0}));
  EXPECT_EQ(equal_mass_bins({0.3, 0.5}, 5), (std::vector<int>{0, 1}));  // edges [0.4, 1.0]
  for (int n = 1; n < 10; ++n)
    for (int b = 1; b < std::min(3, n); ++b)
      EXPECT_EQ(equal_mass_bins(std::vector<double>(static_cast<std::size_t>(n), 0.5), b),
                std::vector<int>(static_cast<std::size_t>(n), 0));
}

// Not from util_test.py: where the edge conventions give different ECEs. c = {0.8, 0.85}, a = {1, 0},
// 15 bins. p-lambda's bisect_left puts 0.8 (= 12/15) in (11/15, 12/15] and 0.85 in (12/15, 13/15]:
// ECE = (0.2 + 0.85) / 2 = 0.525 (derived by hand from utils.py, not run). Ours puts both in
// [12/15, 13/15): one bin with conf 0.825 and accuracy 0.5, ECE 0.325.
TEST(PLambdaReference, BinningEdgeConventionDiffers) {
  EXPECT_EQ(equal_width_bin(0.8, 15), 12);
  EXPECT_EQ(equal_width_bin(0.85, 15), 12);
  EXPECT_NEAR(expected_calibration_error({0.8, 0.85}, {1, 0}, 15), 0.325, kTol);
}
