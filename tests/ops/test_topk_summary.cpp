// ops/topk_summary.hpp against a plain double-precision reference (std::exp, a stable sort of the whole
// row): the top k with the earlier class first among equal values, the log-normaliser, entropy and Σp²,
// on rows of every length around the kernel's blocks, with masked (−inf) classes, ties, NaN and +inf.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "ops/topk_summary.hpp"

namespace {

struct Summaries {
  std::vector<float> top, lz, ent, sq;
  std::vector<std::int64_t> idx;
};

Summaries run(const std::vector<float>& z, std::size_t K, std::size_t k, const std::vector<std::int64_t>& rows,
              int threads) {
  const std::size_t n = rows.empty() ? z.size() / K : rows.size();
  Summaries s;
  s.top.resize(n * k);
  s.idx.resize(n * k);
  s.lz.resize(n);
  s.ent.resize(n);
  s.sq.resize(n);
  arcal::softmax_topk_summaries(z.data(), K, K, rows.empty() ? nullptr : rows.data(), n, k,
                                {s.top.data(), s.idx.data(), s.lz.data(), s.ent.data(), s.sq.data()}, threads);
  return s;
}

/// The reference of one row, in double.
void reference(const float* z, std::size_t K, std::size_t k, std::vector<std::int64_t>& idx, std::vector<double>& top,
               double& lz, double& ent, double& sq) {
  std::vector<std::int64_t> order(K);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return z[a] > z[b]; });
  const double m = z[order[0]];
  double s = 0;
  for (std::size_t i = 0; i < K; ++i) s += std::exp(double(z[i]) - m);
  lz = m + std::log(s);
  ent = 0;
  sq = 0;
  for (std::size_t i = 0; i < K; ++i) {
    const double p = std::exp(double(z[i]) - lz);
    if (p > 0) ent -= p * (double(z[i]) - lz);
    sq += p * p;
  }
  idx.assign(order.begin(), order.begin() + long(k));
  top.resize(k);
  for (std::size_t r = 0; r < k; ++r) top[r] = double(z[order[r]]) - lz;
}

void expect_matches(const std::vector<float>& z, std::size_t K, std::size_t k, const Summaries& s,
                    const std::vector<std::int64_t>& rows) {
  const std::size_t n = rows.empty() ? z.size() / K : rows.size();
  for (std::size_t j = 0; j < n; ++j) {
    const float* row = &z[std::size_t(rows.empty() ? std::int64_t(j) : rows[j]) * K];
    std::vector<std::int64_t> idx;
    std::vector<double> top;
    double lz, ent, sq;
    reference(row, K, k, idx, top, lz, ent, sq);
    SCOPED_TRACE("K = " + std::to_string(K) + ", k = " + std::to_string(k) + ", row " + std::to_string(j));
    EXPECT_NEAR(s.lz[j], lz, 2e-6 * std::max(1.0, std::abs(lz)));
    EXPECT_NEAR(s.ent[j], ent, 2e-6 * std::max(1.0, ent));
    EXPECT_NEAR(s.sq[j], sq, 2e-6 * sq + 1e-12);
    for (std::size_t r = 0; r < k; ++r) {
      EXPECT_EQ(s.idx[j * k + r], idx[r]) << "rank " << r;
      if (std::isfinite(top[r]))
        EXPECT_NEAR(s.top[j * k + r], top[r], 2e-6 * std::max(1.0, std::abs(top[r])));
      else
        EXPECT_EQ(s.top[j * k + r], -std::numeric_limits<float>::infinity());
    }
  }
}

TEST(TopkSummary, MatchesADoublePrecisionReferenceOnEveryRowLength) {
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (std::size_t K : {1u, 2u, 3u, 15u, 16u, 17u, 31u, 33u, 100u, 255u, 257u, 1000u, 4096u, 5003u}) {
    std::vector<float> z(6 * K);
    for (auto& v : z) v = nd(g);
    for (std::size_t k : {std::size_t{1}, std::min<std::size_t>(K, 5), std::min<std::size_t>(K, 32), K}) {
      if (k > 64 && k != K) continue;
      if (K > 300 && k == K) continue;  // the whole sorted row: covered at small K
      expect_matches(z, K, k, run(z, K, k, {}, 1), {});
    }
  }
}

TEST(TopkSummary, EqualValuesKeepTheEarlierClassFirst) {
  // Few distinct values: many ties at every rank, and at the cut between the kept and the rest.
  std::mt19937 g(3);
  std::uniform_int_distribution<int> u(0, 4);
  const std::size_t K = 777;
  std::vector<float> z(8 * K);
  for (auto& v : z) v = float(u(g));
  for (std::size_t k : {1u, 7u, 32u, 200u}) expect_matches(z, K, k, run(z, K, k, {}, 2), {});
}

TEST(TopkSummary, MaskedClassesCountAsZeroProbability) {
  std::mt19937 g(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const std::size_t K = 600;
  std::vector<float> z(4 * K);
  for (auto& v : z) v = nd(g);
  for (std::size_t i = 0; i < z.size(); i += 3) z[i] = -std::numeric_limits<float>::infinity();  // a third masked
  // Row 3: all but 4 classes masked, so the top 8 reaches into the masked ones (-inf, in class order).
  std::fill(z.begin() + 3 * K, z.end(), -std::numeric_limits<float>::infinity());
  for (std::size_t c : {5u, 100u, 101u, 599u}) z[3 * K + c] = float(c) / 100.0f;
  const auto s = run(z, K, 8, {}, 1);
  expect_matches(z, K, 8, s, {});
  for (std::size_t j = 0; j < 4; ++j) EXPECT_TRUE(std::isfinite(s.ent[j])) << j;
}

TEST(TopkSummary, NanAndInfiniteRowsGiveNonFiniteNormalisers) {
  const std::size_t K = 50;
  std::vector<float> z(4 * K, 0.5f);
  z[1 * K + 33] = std::numeric_limits<float>::quiet_NaN();  // NaN in a later stride of the row
  z[2 * K + 0] = std::numeric_limits<float>::quiet_NaN();   // NaN in the row's first stride
  z[3 * K + 7] = std::numeric_limits<float>::infinity();    // +inf
  const auto s = run(z, K, 4, {}, 1);
  EXPECT_TRUE(std::isfinite(s.lz[0]));
  EXPECT_NEAR(s.lz[0], 0.5 + std::log(50.0), 1e-6);
  EXPECT_TRUE(std::isnan(s.lz[1]));
  EXPECT_TRUE(std::isnan(s.lz[2]));
  EXPECT_FALSE(std::isfinite(s.lz[3]));
  std::vector<float> masked(K, -std::numeric_limits<float>::infinity());  // every class masked: no softmax
  EXPECT_FALSE(std::isfinite(run(masked, K, 3, {}, 1).lz[0]));
}

TEST(TopkSummary, SelectedRowsAndThreadsGiveTheSameValues) {
  std::mt19937 g(5);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  const std::size_t K = 1500, N = 300;
  std::vector<float> z(N * K);
  for (auto& v : z) v = nd(g);
  std::vector<std::int64_t> rows;
  for (std::size_t r = 0; r < N; r += 3) rows.push_back(std::int64_t(N - 1 - r));
  const auto one = run(z, K, 32, rows, 1), two = run(z, K, 32, rows, 2);
  EXPECT_EQ(one.top, two.top);
  EXPECT_EQ(one.idx, two.idx);
  EXPECT_EQ(one.ent, two.ent);
  expect_matches(z, K, 32, one, rows);
}

}  // namespace
