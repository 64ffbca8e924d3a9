// Matched groups for the conditional permutation null of method.md §6.6 (a): examples whose model
// outputs are nearly identical are grouped (2-10 per group), and the routing profile is permuted
// within groups, so the null keeps the dependence of routing on the outputs and breaks only what
// routing says beyond them. One dimension (logit c) is matched exactly by sorting; several (the
// standardised sorted log-probabilities) by greedy nearest neighbours. The matching resolution (the
// mean within-group distance, against the mean distance of random pairs) is what the null's validity
// rests on, and is reported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace arcal {

struct MatchedGroups {
  std::vector<std::vector<std::size_t>> groups;  ///< indices into the rows given
  double mean_distance = 0.0;                    ///< mean over groups of the mean pairwise distance within the group
  double random_pair_distance = 0.0;             ///< mean distance of random pairs of the same rows (the scale)
};

/// Groups the rows `rows` of points x [n, dims] (row-major) into groups of `size` (>= 2) nearest
/// neighbours: with dims = 1 by sorting and cutting consecutive runs; otherwise greedily, in order of
/// the first coordinate, each unassigned point with its size - 1 nearest unassigned neighbours
/// (Euclidean; exact search by scanning the first-coordinate order outwards with pruning). A final
/// group smaller than 2 joins the group before it. Throws InputError on size < 2, fewer than 2 rows,
/// a row index out of range or non-finite coordinates.
MatchedGroups match_groups(const std::vector<double>& x, std::size_t dims, const std::vector<std::size_t>& rows,
                           std::size_t size, std::uint64_t seed);

/// Principal-component scores of the rows of x [n, dims] (centred, not rescaled): the leading
/// components whose cumulative share of the variance first reaches `share`, at most max_components.
/// Returns [n, c] row-major and sets `components` = c. Jacobi eigen-decomposition of the dims x dims
/// covariance. Throws InputError on n < 2 or non-finite values.
std::vector<double> principal_scores(const std::vector<double>& x, std::size_t dims, std::size_t max_components,
                                     double share, std::size_t& components);

/// A permutation of 0..n-1 that shuffles indices within each group (Fisher-Yates, Rng(seed)) and keeps
/// every index outside the groups in place.
std::vector<std::size_t> permute_within_groups(std::size_t n, const std::vector<std::vector<std::size_t>>& groups,
                                               std::uint64_t seed);

}  // namespace arcal
