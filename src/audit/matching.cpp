#include "audit/matching.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/check.hpp"
#include "core/rng.hpp"

namespace arcal {

namespace {

double distance(const std::vector<double>& x, std::size_t dims, std::size_t a, std::size_t b) {
  double s = 0;
  for (std::size_t k = 0; k < dims; ++k) {
    const double d = x[a * dims + k] - x[b * dims + k];
    s += d * d;
  }
  return std::sqrt(s);
}

}  // namespace

MatchedGroups match_groups(const std::vector<double>& x, std::size_t dims, const std::vector<std::size_t>& rows,
                           std::size_t size, std::uint64_t seed) {
  const char* fn = "match_groups";
  if (size < 2) throw_input(fn, "group size is " + std::to_string(size) + ", but must be >= 2");
  if (dims == 0 || x.size() % dims != 0) throw_input(fn, "x must hold n x dims values with dims >= 1");
  const std::size_t n = x.size() / dims;
  if (rows.size() < 2) throw_input(fn, "needs at least 2 rows, got " + std::to_string(rows.size()));
  for (std::size_t k = 0; k < rows.size(); ++k) {
    if (rows[k] >= n) throw_index(fn, "rows", k, std::to_string(rows[k]), "< n = " + std::to_string(n));
    for (std::size_t d = 0; d < dims; ++d) check_finite(fn, "x", rows[k] * dims + d, x[rows[k] * dims + d]);
  }
  // The order of the first coordinate (ties by index, so the result is deterministic).
  std::vector<std::size_t> order = rows;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return x[a * dims] < x[b * dims] || (x[a * dims] == x[b * dims] && a < b);
  });
  MatchedGroups out;
  if (dims == 1) {
    for (std::size_t k = 0; k < order.size(); k += size)
      out.groups.emplace_back(order.begin() + long(k), order.begin() + long(std::min(order.size(), k + size)));
  } else {
    // Doubly linked list over the order of the unassigned points.
    const std::size_t m = order.size();
    std::vector<long> prev(m), next(m);
    for (std::size_t k = 0; k < m; ++k) {
      prev[k] = long(k) - 1;
      next[k] = k + 1 < m ? long(k + 1) : -1;
    }
    long head = 0;
    auto remove = [&](long k) {
      if (prev[k] >= 0)
        next[prev[k]] = next[k];
      else
        head = next[k];
      if (next[k] >= 0) prev[next[k]] = prev[k];
    };
    while (head >= 0) {
      const long a = head;
      // The size - 1 nearest unassigned points: walk outwards in the first coordinate, stopping a side
      // once its first-coordinate gap exceeds the current worst of the best.
      std::vector<std::pair<double, long>> best;  // (distance, position), at most size - 1, sorted
      auto consider = [&](long k) {
        const double d = distance(x, dims, order[std::size_t(a)], order[std::size_t(k)]);
        if (best.size() < size - 1 || d < best.back().first) {
          best.insert(std::upper_bound(best.begin(), best.end(), std::make_pair(d, k)), {d, k});
          if (best.size() > size - 1) best.pop_back();
        }
      };
      const double xa = x[order[std::size_t(a)] * dims];
      for (long k = next[a]; k >= 0; k = next[k]) {
        if (best.size() == size - 1 && x[order[std::size_t(k)] * dims] - xa > best.back().first) break;
        consider(k);
      }
      // Everything before `a` in the list is assigned already (a is the head), so one side suffices.
      std::vector<std::size_t> g{order[std::size_t(a)]};
      remove(a);
      for (const auto& [d, k] : best) {
        g.push_back(order[std::size_t(k)]);
        remove(k);
      }
      out.groups.push_back(std::move(g));
    }
  }
  if (out.groups.size() > 1 && out.groups.back().size() < 2) {
    const auto last = out.groups.back();
    out.groups.pop_back();
    out.groups.back().insert(out.groups.back().end(), last.begin(), last.end());
  }
  // Resolution: mean within-group pairwise distance, and the scale of random pairs.
  double total = 0;
  std::size_t counted = 0;
  for (const auto& g : out.groups) {
    if (g.size() < 2) continue;
    double s = 0;
    for (std::size_t i = 0; i < g.size(); ++i)
      for (std::size_t j = i + 1; j < g.size(); ++j) s += distance(x, dims, g[i], g[j]);
    total += s / double(g.size() * (g.size() - 1) / 2);
    ++counted;
  }
  out.mean_distance = counted ? total / double(counted) : 0.0;
  Rng rng(seed);
  const std::size_t pairs = std::min<std::size_t>(2000, rows.size());
  double rp = 0;
  for (std::size_t k = 0; k < pairs; ++k)
    rp += distance(x, dims, rows[rng.below(rows.size())], rows[rng.below(rows.size())]) / double(pairs);
  out.random_pair_distance = rp;
  return out;
}

std::vector<double> principal_scores(const std::vector<double>& x, std::size_t dims, std::size_t max_components,
                                     double share, std::size_t& components) {
  const char* fn = "principal_scores";
  if (dims == 0 || x.size() % dims != 0) throw_input(fn, "x must hold n x dims values with dims >= 1");
  const std::size_t n = x.size() / dims;
  if (n < 2) throw_input(fn, "needs at least 2 rows");
  for (std::size_t i = 0; i < x.size(); ++i) check_finite(fn, "x", i, x[i]);
  std::vector<double> mean(dims, 0.0), cov(dims * dims, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t a = 0; a < dims; ++a) mean[a] += x[i * dims + a] / double(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t a = 0; a < dims; ++a)
      for (std::size_t b = 0; b < dims; ++b)
        cov[a * dims + b] += (x[i * dims + a] - mean[a]) * (x[i * dims + b] - mean[b]) / double(n - 1);
  // Cyclic Jacobi rotations: cov -> diag(eigenvalues), vec accumulates the eigenvectors (columns).
  std::vector<double> vec(dims * dims, 0.0);
  for (std::size_t a = 0; a < dims; ++a) vec[a * dims + a] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (std::size_t a = 0; a < dims; ++a)
      for (std::size_t b = a + 1; b < dims; ++b) off += cov[a * dims + b] * cov[a * dims + b];
    if (off < 1e-24) break;
    for (std::size_t p = 0; p < dims; ++p)
      for (std::size_t q = p + 1; q < dims; ++q) {
        const double apq = cov[p * dims + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (cov[q * dims + q] - cov[p * dims + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (std::size_t k = 0; k < dims; ++k) {  // columns p, q
          const double akp = cov[k * dims + p], akq = cov[k * dims + q];
          cov[k * dims + p] = c * akp - s * akq;
          cov[k * dims + q] = s * akp + c * akq;
        }
        for (std::size_t k = 0; k < dims; ++k) {  // rows p, q
          const double apk = cov[p * dims + k], aqk = cov[q * dims + k];
          cov[p * dims + k] = c * apk - s * aqk;
          cov[q * dims + k] = s * apk + c * aqk;
        }
        for (std::size_t k = 0; k < dims; ++k) {
          const double vkp = vec[k * dims + p], vkq = vec[k * dims + q];
          vec[k * dims + p] = c * vkp - s * vkq;
          vec[k * dims + q] = s * vkp + c * vkq;
        }
      }
  }
  std::vector<std::size_t> order(dims);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return cov[a * dims + a] > cov[b * dims + b]; });
  double total = 0;
  for (std::size_t a = 0; a < dims; ++a) total += std::max(cov[a * dims + a], 0.0);
  components = 0;
  double acc = 0;
  while (components < std::min(max_components, dims)) {
    acc += std::max(cov[order[components] * dims + order[components]], 0.0);
    ++components;
    if (total <= 0 || acc >= share * total) break;
  }
  std::vector<double> out(n * components, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < components; ++c)
      for (std::size_t a = 0; a < dims; ++a)
        out[i * components + c] += (x[i * dims + a] - mean[a]) * vec[a * dims + order[c]];
  return out;
}

std::vector<std::size_t> permute_within_groups(std::size_t n, const std::vector<std::vector<std::size_t>>& groups,
                                               std::uint64_t seed) {
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  Rng rng(seed);
  for (const auto& g : groups) {
    std::vector<std::size_t> src = g;
    rng.shuffle(src);
    for (std::size_t k = 0; k < g.size(); ++k) {
      ARCAL_ASSERT(g[k] < n, "permute_within_groups: index out of range");
      perm[g[k]] = src[k];
    }
  }
  return perm;
}

}  // namespace arcal
