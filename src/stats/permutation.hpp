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
  int exceed = 0;          ///< #{|G*| >= |G|} (with a 1e-9 relative tolerance for rounding)
};

/// mean(top) - mean(bottom) of one stratum. Throws InputError when a group is empty or the
/// group sizes exceed values.size().
double stratum_contrast(const ContrastStratum& stratum);

/// Sum over strata of weight * contrast. Throws as stratum_contrast (naming the stratum index).
double weighted_contrast(const std::vector<ContrastStratum>& strata);

/// Null distribution [permutations] of weighted_contrast with group labels shuffled independently
/// within every stratum. Uses FastRng(seed) (wyrand); strata are processed in order and each
/// consumes its draws for all permutations before the next, so results depend only on the seed.
/// Throws InputError when permutations < 1 or a stratum is malformed.
std::vector<double> within_stratum_permutation_null(const std::vector<ContrastStratum>& strata,
                                                    int permutations, std::uint64_t seed);

/// Two-sided Monte-Carlo p-value (1 + #{|null| >= |observed|}) / (R + 1). A null value counts when
/// |null| >= |observed| - 1e-9 (1 + |observed|), so that label arrangements equal to the observed one
/// count despite summation-order rounding. Throws InputError on an empty null.
double permutation_p_value(double observed, const std::vector<double>& null, int* exceed = nullptr);

/// weighted_contrast + within_stratum_permutation_null + permutation_p_value.
PermutationTestResult within_stratum_permutation_test(const std::vector<ContrastStratum>& strata,
                                                      int permutations, std::uint64_t seed);

}  // namespace arcal
