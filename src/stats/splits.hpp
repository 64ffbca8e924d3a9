// Seeded data splits: k-fold assignments, the calibration/evaluation halving stratified by class with
// its 2-fold cross-fit (method.md §6), the same splits over clusters of dependent examples (whole
// clusters to one side, method.md §6.9 "Dependent examples"), and equal-width / equal-mass grouping with the tie rule
// of method.md §4 (a tied run never straddles a group boundary; it goes to the lower group).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace arcal {

/// Fold index in [0, k) for each of n examples; fold sizes differ by at most one; seeded shuffle
/// (Rng(seed)). Throws InputError when k < 2 or n < k.
std::vector<int> kfold_assignment(std::size_t n, int k, std::uint64_t seed);

/// Half (0 or 1) for each example, stratified by class: within each class (in class order) the
/// examples are shuffled (Rng(seed)) and the concatenated list is dealt alternately, so every class
/// and the whole set split within one example. labels [n] must be >= 0 (throws InputError naming the
/// index otherwise, or when n < 2).
std::vector<int> stratified_halves(const std::vector<std::int64_t>& labels, std::uint64_t seed);

struct SplitIndices {
  std::vector<std::size_t> calibration;
  std::vector<std::size_t> evaluation;
};

/// The two cross-fit folds of stratified_halves: fold 0 calibrates on half 0 and evaluates on half 1,
/// fold 1 the reverse. Throws as stratified_halves.
std::array<SplitIndices, 2> cross_fit_halves(const std::vector<std::int64_t>& labels, std::uint64_t seed);

/// Clustered splits (method.md §6.9 "Dependent examples"): every example of a cluster gets the same fold. The distinct
/// cluster ids are shuffled (Rng(seed)) and each is dealt to the fold holding the fewest examples so
/// far (lowest fold on ties), so fold sizes differ by at most the largest cluster. cluster [n] must be
/// >= 0 and hold at least k distinct ids (throws InputError naming the constraint otherwise).
std::vector<int> cluster_kfold_assignment(const std::vector<std::int64_t>& cluster, int k, std::uint64_t seed);

/// cross_fit_halves over clusters when `cluster` is non-empty (halves of cluster_kfold_assignment
/// with k = 2: no cluster is split, labels are not stratified), else cross_fit_halves(labels, seed).
/// Throws InputError when cluster's size differs from labels' or it has fewer than 2 distinct ids.
std::array<SplitIndices, 2> cross_fit_halves(const std::vector<std::int64_t>& labels,
                                             const std::vector<std::int64_t>& cluster, std::uint64_t seed);

/// kfold_assignment(n, k, seed), or cluster_kfold_assignment(cluster, k, seed) when cluster is non-empty.
std::vector<int> kfold_assignment(std::size_t n, int k, const std::vector<std::int64_t>& cluster, std::uint64_t seed);

/// Each id's rank among the distinct ids, in increasing id order (0 .. distinct-1): cluster or class ids
/// of any range as dense indices. `distinct` receives the number of distinct ids.
std::vector<std::uint32_t> dense_ids(const std::vector<std::int64_t>& ids, std::size_t& distinct);

/// x minus the mean of x over the rows of its group (group ids dense in [0, groups), as dense_ids gives);
/// a row alone in its group becomes 0. Each group's sum runs in row order.
void centre_within(std::vector<double>& x, const std::vector<std::int64_t>& group, std::size_t groups);

/// Equal-width bin of each value in [0, 1]: bin k holds k/B <= v < (k+1)/B, v = 1 goes to the last
/// bin. Throws InputError when B == 0 or a value is outside [0, 1] (naming the index).
std::vector<int> equal_width_bin_index(const std::vector<double>& values, std::size_t bins);

/// Equal-mass groups: sort values, split ranks into `groups` nearly equal groups (the first n mod G
/// get one extra), then move every boundary that cuts a tied run to the end of the run (the run
/// joins the lower group). Groups may therefore be smaller than nominal or empty. Returns the group
/// of each value [n]. Throws InputError when groups == 0 or a value is not finite.
std::vector<int> equal_mass_group_index(const std::vector<double>& values, std::size_t groups);

}  // namespace arcal
