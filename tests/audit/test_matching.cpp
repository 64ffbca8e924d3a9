// Matched groups of the conditional permutation null (audit/matching.hpp): one dimension groups
// consecutive sorted values, several dimensions find each head's true nearest neighbours (checked
// against brute force), every row lands in exactly one group of 2-(2 size - 1), and the within-group
// permutation only moves indices inside their group.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "audit/matching.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

using namespace arcal;

TEST(Matching, OneDimensionIsConsecutiveSortedRuns) {
  std::vector<double> x{5, 1, 4, 2, 3, 0, 9};
  const auto m = match_groups(x, 1, {0, 1, 2, 3, 4, 5, 6}, 3, 1);
  ASSERT_EQ(m.groups.size(), 2u);  // 0,1,2 | 3,4,5 + the lone 9 joins the last group
  EXPECT_EQ(m.groups[0], (std::vector<std::size_t>{5, 1, 3}));
  EXPECT_EQ(m.groups[1], (std::vector<std::size_t>{4, 2, 0, 6}));
}

TEST(Matching, SeveralDimensionsFindTrueNearestNeighbours) {
  Rng rng(3);
  const std::size_t n = 400, dims = 3, size = 4;
  std::vector<double> x(n * dims);
  for (auto& v : x) v = rng.normal();
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < n; i += 2) rows.push_back(i);  // a subset, as a cross-fit half
  const auto m = match_groups(x, dims, rows, size, 1);
  std::set<std::size_t> seen;
  std::vector<bool> assigned(n, false);
  auto dist = [&](std::size_t a, std::size_t b) {
    double s = 0;
    for (std::size_t k = 0; k < dims; ++k)
      s += (x[a * dims + k] - x[b * dims + k]) * (x[a * dims + k] - x[b * dims + k]);
    return s;
  };
  for (const auto& g : m.groups) {
    EXPECT_GE(g.size(), 2u);
    EXPECT_LE(g.size(), 2 * size - 1);
    // The head (first member) took the nearest unassigned points: brute force over the rows left.
    if (g.size() == size) {
      std::vector<std::pair<double, std::size_t>> cand;
      for (auto r : rows)
        if (!assigned[r] && r != g[0]) cand.push_back({dist(g[0], r), r});
      std::sort(cand.begin(), cand.end());
      for (std::size_t k = 1; k < size; ++k) EXPECT_EQ(g[k], cand[k - 1].second);
    }
    for (auto i : g) {
      EXPECT_TRUE(seen.insert(i).second) << "row in two groups";
      assigned[i] = true;
    }
  }
  EXPECT_EQ(seen.size(), rows.size());
  EXPECT_LT(m.mean_distance, m.random_pair_distance);
}

TEST(Matching, PermutationStaysInsideGroups) {
  const std::vector<std::vector<std::size_t>> groups{{0, 3, 5}, {1, 6}};
  const auto p = permute_within_groups(8, groups, 11);
  EXPECT_EQ(p[2], 2u);
  EXPECT_EQ(p[4], 4u);
  EXPECT_EQ(p[7], 7u);
  EXPECT_EQ((std::set<std::size_t>{p[0], p[3], p[5]}), (std::set<std::size_t>{0, 3, 5}));
  EXPECT_EQ((std::set<std::size_t>{p[1], p[6]}), (std::set<std::size_t>{1, 6}));
  EXPECT_THROW(match_groups({1, 2, 3}, 1, {0, 1, 2}, 1, 0), InputError);
  EXPECT_THROW(match_groups({1, 2, 3}, 1, {0, 7}, 2, 0), InputError);
}
