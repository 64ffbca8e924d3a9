// Within-stratum permutation tests of a weighted top-minus-bottom contrast (the matched-confidence
// diagnostic's null, method.md §6.1). Permuting the grouping statistic within a stratum is the same
// as shuffling the group labels within it, so a permutation is a partial Fisher-Yates draw of the two
// smallest groups from the stratum's values; nothing else about the statistic matters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace arcal {

/// One stratum (e.g. one confidence bin). values is [n]: the first n_top entries form the top group,
/// the next n_bottom the bottom group, the rest the middle group. Its contrast is
/// mean(top) - mean(bottom); strata enter the total with `weight`.
struct ContrastStratum {
  std::vector<double> values;
  std::size_t n_top = 0;
  std::size_t n_bottom = 0;
  double weight = 0.0;
};

struct PermutationTestResult {
  double statistic = 0.0;  ///< observed weighted contrast G
  double p = 1.0;          ///< (1 + exceed) / (permutations + 1), two-sided on |G|
  int permutations = 0;
  int exceed = 0;  ///< #{|G*| >= |G|} (with a 1e-9 relative tolerance for rounding)
};

/// A stratum of a permutation test whose groups carry their own coefficients: the contrast adds
/// coef_top * sum(top values) + coef_bottom * sum(bottom values); the rest (middle) count 0. values is
/// [n], top group first, then bottom, then the rest; any group may be empty. Permuting the grouping
/// statistic within the stratum shuffles which values fall in which group (sizes fixed). The
/// conditional permutation test of method.md §6.1 uses many small strata nested inside confidence
/// bins, whose group coefficients are the bin's weight over the bin's (not the stratum's) group size.
struct GroupedStratum {
  std::vector<double> values;
  std::size_t n_top = 0;
  std::size_t n_bottom = 0;
  double coef_top = 0.0;
  double coef_bottom = 0.0;
};

/// Sum over strata of coef_top * sum(top) + coef_bottom * sum(bottom). Throws InputError when the
/// groups do not fit in a stratum's values or a value or coefficient is not finite.
double grouped_contrast(const std::vector<GroupedStratum>& strata);

/// Null distribution [permutations] of grouped_contrast with the group labels shuffled independently
/// within every stratum (the same kernel and stream layout as within_stratum_permutation_null, which
/// is this function on strata with coef_top = weight / n_top, coef_bottom = -weight / n_bottom).
/// Strata whose values cannot change under permutation (one non-empty group) consume no draws.
/// Throws InputError when permutations < 1 or a stratum is malformed.
std::vector<double> grouped_permutation_null(const std::vector<GroupedStratum>& strata, int permutations,
                                             std::uint64_t seed);

/// mean(top) - mean(bottom) of one stratum. Throws InputError when a group is empty or the
/// group sizes exceed values.size().
double stratum_contrast(const ContrastStratum& stratum);

/// Sum over strata of weight * contrast. Throws as stratum_contrast (naming the stratum index).
double weighted_contrast(const std::vector<ContrastStratum>& strata);

/// Null distribution [permutations] of weighted_contrast with group labels shuffled independently
/// within every stratum. Uses FastRng(seed) (wyrand); strata are processed in order and each
/// consumes its draws for all permutations before the next, so results depend only on the seed.
/// Throws InputError when permutations < 1 or a stratum is malformed.
std::vector<double> within_stratum_permutation_null(const std::vector<ContrastStratum>& strata, int permutations,
                                                    std::uint64_t seed);

/// Two-sided Monte-Carlo p-value (1 + #{|null| >= |observed|}) / (R + 1). A null value counts when
/// |null| >= |observed| - 1e-9 (1 + |observed|), so that label arrangements equal to the observed one
/// count despite summation-order rounding. Throws InputError on an empty null.
double permutation_p_value(double observed, const std::vector<double>& null, int* exceed = nullptr);

/// weighted_contrast + within_stratum_permutation_null + permutation_p_value.
PermutationTestResult within_stratum_permutation_test(const std::vector<ContrastStratum>& strata, int permutations,
                                                      std::uint64_t seed);

}  // namespace arcal
