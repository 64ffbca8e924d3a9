#include "stats/splits.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/check.hpp"
#include "core/rng.hpp"

namespace arcal {

std::vector<int> kfold_assignment(std::size_t n, int k, std::uint64_t seed) {
  if (k < 2) throw_input("kfold_assignment", "k is " + std::to_string(k) + ", but must be >= 2");
  if (n < static_cast<std::size_t>(k))
    throw_input("kfold_assignment", "n is " + std::to_string(n) + ", but must be >= k = " + std::to_string(k));
  std::vector<std::size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  Rng rng(seed);
  rng.shuffle(idx);
  std::vector<int> fold(n);
  for (std::size_t pos = 0; pos < n; ++pos) fold[idx[pos]] = static_cast<int>(pos % static_cast<std::size_t>(k));
  return fold;
}

std::vector<int> stratified_halves(const std::vector<std::int64_t>& labels, std::uint64_t seed) {
  const char* fn = "stratified_halves";
  if (labels.size() < 2)
    throw_input(fn, "labels has " + std::to_string(labels.size()) + " elements, but must have >= 2");
  std::map<std::int64_t, std::vector<std::size_t>> by_class;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) throw_index(fn, "labels", i, std::to_string(labels[i]), ">= 0");
    by_class[labels[i]].push_back(i);
  }
  Rng rng(seed);
  std::vector<int> half(labels.size());
  std::size_t pos = 0;
  for (auto& [cls, idx] : by_class) {
    (void)cls;
    rng.shuffle(idx);
    for (std::size_t i : idx) half[i] = static_cast<int>(pos++ % 2);
  }
  return half;
}

std::array<SplitIndices, 2> cross_fit_halves(const std::vector<std::int64_t>& labels, std::uint64_t seed) {
  const auto half = stratified_halves(labels, seed);
  std::array<SplitIndices, 2> folds;
  for (std::size_t i = 0; i < half.size(); ++i) {
    folds[0].calibration.push_back(i);
    folds[1].evaluation.push_back(i);
    if (half[i] == 1) {
      folds[0].calibration.pop_back();
      folds[0].evaluation.push_back(i);
      folds[1].evaluation.pop_back();
      folds[1].calibration.push_back(i);
    }
  }
  return folds;
}

std::vector<int> cluster_kfold_assignment(const std::vector<std::int64_t>& cluster, int k, std::uint64_t seed) {
  const char* fn = "cluster_kfold_assignment";
  if (k < 2) throw_input(fn, "k is " + std::to_string(k) + ", but must be >= 2");
  std::map<std::int64_t, std::vector<std::size_t>> members;
  for (std::size_t i = 0; i < cluster.size(); ++i) {
    if (cluster[i] < 0) throw_index(fn, "cluster", i, std::to_string(cluster[i]), ">= 0");
    members[cluster[i]].push_back(i);
  }
  if (members.size() < static_cast<std::size_t>(k))
    throw_input(fn, "cluster holds " + std::to_string(members.size()) + " distinct ids, but a " + std::to_string(k) +
                        "-fold split of whole clusters needs at least " + std::to_string(k));
  std::vector<const std::vector<std::size_t>*> order;
  for (const auto& kv : members) order.push_back(&kv.second);
  Rng rng(seed);
  rng.shuffle(order);
  std::vector<std::size_t> size(static_cast<std::size_t>(k), 0);
  std::vector<int> fold(cluster.size());
  for (const auto* m : order) {
    const auto f = static_cast<std::size_t>(std::min_element(size.begin(), size.end()) - size.begin());
    for (std::size_t i : *m) fold[i] = static_cast<int>(f);
    size[f] += m->size();
  }
  return fold;
}

std::array<SplitIndices, 2> cross_fit_halves(const std::vector<std::int64_t>& labels,
                                             const std::vector<std::int64_t>& cluster, std::uint64_t seed) {
  if (cluster.empty()) return cross_fit_halves(labels, seed);
  if (cluster.size() != labels.size())
    throw_input("cross_fit_halves", "cluster has " + std::to_string(cluster.size()) + " entries, but labels has " +
                                        std::to_string(labels.size()));
  const auto half = cluster_kfold_assignment(cluster, 2, seed);
  std::array<SplitIndices, 2> folds;
  for (std::size_t i = 0; i < half.size(); ++i) {
    (half[i] == 0 ? folds[0].calibration : folds[0].evaluation).push_back(i);
    (half[i] == 0 ? folds[1].evaluation : folds[1].calibration).push_back(i);
  }
  return folds;
}

std::vector<int> kfold_assignment(std::size_t n, int k, const std::vector<std::int64_t>& cluster, std::uint64_t seed) {
  if (cluster.empty()) return kfold_assignment(n, k, seed);
  if (cluster.size() != n)
    throw_input("kfold_assignment",
                "cluster has " + std::to_string(cluster.size()) + " entries, but n is " + std::to_string(n));
  return cluster_kfold_assignment(cluster, k, seed);
}

std::vector<std::uint32_t> dense_ids(const std::vector<std::int64_t>& ids, std::size_t& distinct) {
  std::map<std::int64_t, std::uint32_t> rank;
  for (auto id : ids) rank.emplace(id, 0);
  std::uint32_t next = 0;
  for (auto& kv : rank) kv.second = next++;
  distinct = rank.size();
  std::vector<std::uint32_t> out(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) out[i] = rank[ids[i]];
  return out;
}

void centre_within(std::vector<double>& x, const std::vector<std::int64_t>& group, std::size_t groups) {
  std::vector<double> sum(groups, 0.0);
  std::vector<std::size_t> count(groups, 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    sum[std::size_t(group[i])] += x[i];
    ++count[std::size_t(group[i])];
  }
  for (std::size_t i = 0; i < x.size(); ++i) x[i] -= sum[std::size_t(group[i])] / double(count[std::size_t(group[i])]);
}

std::vector<int> equal_width_bin_index(const std::vector<double>& values, std::size_t bins) {
  if (bins == 0) throw_input("equal_width_bin_index", "bins is 0, but must be >= 1");
  std::vector<int> bin(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    check_probability("equal_width_bin_index", "values", i, values[i]);
    const std::size_t k = static_cast<std::size_t>(values[i] * static_cast<double>(bins));
    bin[i] = static_cast<int>(std::min(k, bins - 1));
  }
  return bin;
}

std::vector<int> equal_mass_group_index(const std::vector<double>& values, std::size_t groups) {
  if (groups == 0) throw_input("equal_mass_group_index", "groups is 0, but must be >= 1");
  const std::size_t n = values.size();
  for (std::size_t i = 0; i < n; ++i) check_finite("equal_mass_group_index", "values", i, values[i]);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  std::vector<int> group(n);
  const std::size_t base = n / groups, extra = n % groups;
  std::size_t start = 0, nominal_end = 0;
  for (std::size_t g = 0; g < groups; ++g) {
    nominal_end += base + (g < extra ? 1 : 0);
    std::size_t end = std::max(start, nominal_end);
    if (g + 1 == groups) end = n;
    while (end > 0 && end < n && values[order[end]] == values[order[end - 1]]) ++end;
    for (std::size_t r = start; r < end; ++r) group[order[r]] = static_cast<int>(g);
    start = end;
  }
  return group;
}

}  // namespace arcal
