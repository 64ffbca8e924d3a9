// The CEDAR attention pass (cedar.hpp, method.md §8). Work is split into jobs of one head and one
// tile of up to 32 queries; a job keeps each query's online-softmax state (running maximum m, float64
// normaliser l and float64 output accumulator) and feeds it blocks of terms: exact keys (scores
// from the tile micro-kernels) and chunk summaries (scores from the same micro-kernel over the
// 2d-wide summary rows). Every method runs through the same job:
//   dense    exact blocks over every visible key;
//   others   always-exact chunks (sinks, the causal query's own chunk), then summary scores of every
//            candidate chunk, the per-query selection (topk: by summary score; cedar: by the error
//            bound, optionally until the remaining bound is below the target), the summary terms of
//            the chunks not expanded (cedar, summary; hard top-k drops them), and the exact terms of
//            the expanded chunks, gathered chunk by chunk over the tile's queries that chose them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "cedar/cedar.hpp"
#include "cedar/impl/tile_kernels.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"

namespace arcal::cedar {

namespace {

using impl::exp_nonpos;
using impl::kNegInf;

constexpr int kTile = 32;   // queries per job (lanes of the tile kernels)
constexpr int kBlock = 64;  // keys (or summaries) per online-softmax block
constexpr int kRowGroup = 6;  // a chunk chosen by at most this many of a tile's queries runs per query

struct Context {
  const float *q, *k, *v;
  Shape shape;
  const ChunkLayout* chunks;
  const Summaries* summaries;
  Options options;
  float* out;
  std::int32_t* expanded;
};

/// Online-softmax state of a tile's queries.
struct TileState {
  std::int64_t dim = 0;
  float m[kTile];
  double l[kTile];
  std::vector<double> acc;  // [kTile, dim]

  explicit TileState(std::int64_t d) : dim(d), acc(std::size_t(kTile * d), 0.0) {
    std::fill(m, m + kTile, kNegInf);
    std::fill(l, l + kTile, 0.0);
  }
};

struct Scratch {
  std::vector<float> st, pt, acct, srow, prow, accrow;
  explicit Scratch(std::int64_t d)
      : st(kBlock * kTile), pt(kBlock * kTile), acct(std::size_t(d * kTile)), srow(kBlock), prow(kBlock),
        accrow(std::size_t(d)) {}
};

/// Merges one block of n terms with scores St (n x W, -inf = absent) and values V (n rows) into the
/// states of the tile rows ids[0..r).
template <int W>
ARCAL_CEDAR_INLINE void merge_block(const float* St, const float* V, std::int64_t ldv, int n, int dim, const int* ids,
                                    int r, TileState& ts, Scratch& sc) {
  float mx[W], shift[W], colsum[W];
  for (int t = 0; t < W; ++t) {
    mx[t] = kNegInf;
    colsum[t] = 0.0f;
  }
  for (int j = 0; j < n; ++j) {
#pragma omp simd
    for (int t = 0; t < W; ++t) mx[t] = std::max(mx[t], St[j * W + t]);
  }
  for (int t = 0; t < W; ++t) {
    if (t < r) mx[t] = std::max(mx[t], ts.m[ids[t]]);
    shift[t] = mx[t] == kNegInf ? 0.0f : mx[t];
  }
  float* Pt = sc.pt.data();
  for (int j = 0; j < n; ++j) {
#pragma omp simd
    for (int t = 0; t < W; ++t) {
      const float p = exp_nonpos(St[j * W + t] - shift[t]);
      Pt[j * W + t] = p;
      colsum[t] += p;
    }
  }
  float* acct = sc.acct.data();
  std::fill(acct, acct + dim * W, 0.0f);
  impl::tile_accumulate<W>(Pt, V, ldv, n, dim, acct);
  for (int t = 0; t < r; ++t) {
    if (mx[t] == kNegInf) continue;
    const int row = ids[t];
    const double alpha = ts.m[row] == kNegInf ? 0.0 : std::exp(double(ts.m[row]) - double(mx[t]));
    ts.l[row] = ts.l[row] * alpha + double(colsum[t]);
    double* a = &ts.acc[std::size_t(row * ts.dim)];
    for (int c = 0; c < dim; ++c) a[c] = a[c] * alpha + double(acct[c * W + t]);
    ts.m[row] = mx[t];
  }
}

/// Exact attention of the tile rows ids[0..r) (queries Qt, dim x W, pre-scaled by 1/sqrt(d)) over
/// keys [begin, end); with `limit`, key p is masked for column t when p >= limit[t].
template <int W>
ARCAL_CEDAR_INLINE void exact_tile(const float* Qt, const float* K, const float* V, int dim, std::int64_t begin,
                                   std::int64_t end, const std::int64_t* limit, const int* ids, int r, TileState& ts,
                                   Scratch& sc) {
  std::int64_t min_limit = end;
  if (limit)
    for (int t = 0; t < r; ++t) min_limit = std::min(min_limit, limit[t]);
  float* St = sc.st.data();
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const int n = int(std::min<std::int64_t>(kBlock, end - b));
    impl::tile_scores<W>(Qt, K + b * dim, dim, n, dim, St);
    if (limit && b + n > min_limit)
      for (int j = 0; j < n; ++j)
        for (int t = 0; t < W; ++t)
          if (t >= r || b + j >= limit[t]) St[j * W + t] = kNegInf;
    merge_block<W>(St, V + b * dim, dim, n, dim, ids, r, ts, sc);
  }
}

/// exact_tile for one query q (dim floats, pre-scaled), tile row `row`, keys [begin, min(end, limit)).
ARCAL_CEDAR_INLINE void exact_row(const float* q, const float* K, const float* V, int dim, std::int64_t begin,
                                  std::int64_t end, int row, TileState& ts, Scratch& sc) {
  float* s = sc.srow.data();
  float* p = sc.prow.data();
  float* acc = sc.accrow.data();
  for (std::int64_t b = begin; b < end; b += kBlock) {
    const int n = int(std::min<std::int64_t>(kBlock, end - b));
    impl::row_scores(q, K + b * dim, dim, n, dim, s);
    float mx = ts.m[row];
    for (int j = 0; j < n; ++j) mx = std::max(mx, s[j]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; ++j) {
      p[j] = exp_nonpos(s[j] - mx);
      sum += p[j];
    }
    std::fill(acc, acc + dim, 0.0f);
    impl::row_accumulate(p, V + b * dim, dim, n, dim, acc);
    const double alpha = ts.m[row] == kNegInf ? 0.0 : std::exp(double(ts.m[row]) - double(mx));
    ts.l[row] = ts.l[row] * alpha + double(sum);
    double* a = &ts.acc[std::size_t(row * ts.dim)];
    for (int c = 0; c < dim; ++c) a[c] = a[c] * alpha + double(acc[c]);
    ts.m[row] = mx;
  }
}

/// Exact attention of the tile rows R[0..rr) over keys [begin, end) (row u masked from limit[u] on
/// when limit is given): one query at a time for small groups, else a gathered 16- or 32-wide tile.
ARCAL_CEDAR_INLINE void exact_group(const float* Qt, const float* Qrows, const int* R, int rr, const float* K,
                                    const float* V, int dim, std::int64_t begin, std::int64_t end,
                                    const std::int64_t* limit, TileState& ts, Scratch& sc, std::vector<float>& qsub) {
  if (rr <= kRowGroup) {
    for (int u = 0; u < rr; ++u)
      exact_row(Qrows + R[u] * dim, K, V, dim, begin, limit ? std::min(end, limit[u]) : end, R[u], ts, sc);
    return;
  }
  const int W = rr <= 16 ? 16 : 32;
  qsub.assign(std::size_t(dim * W), 0.0f);
  for (int c = 0; c < dim; ++c)
    for (int u = 0; u < rr; ++u) qsub[std::size_t(c * W + u)] = Qt[c * kTile + R[u]];
  std::int64_t lim[kTile];
  if (limit)
    for (int u = 0; u < W; ++u) lim[u] = u < rr ? limit[u] : end;
  if (W == 16)
    exact_tile<16>(qsub.data(), K, V, dim, begin, end, limit ? lim : nullptr, R, rr, ts, sc);
  else
    exact_tile<32>(qsub.data(), K, V, dim, begin, end, limit ? lim : nullptr, R, rr, ts, sc);
}

/// Merges the summary terms (scores shat, nc x 32; values vbar, nc rows) of the tile rows ids[0..r).
ARCAL_CEDAR_INLINE void merge_summaries(const float* shat, const float* vbar, std::int64_t nc, int d, const int* ids, int r,
                                        TileState& state, Scratch& sc) {
  for (std::int64_t b = 0; b < nc; b += kBlock) {
    const int n = int(std::min<std::int64_t>(kBlock, nc - b));
    merge_block<kTile>(shat + b * kTile, vbar + b * d, d, n, d, ids, r, state, sc);
  }
}

/// One job: head h, queries [t0, t0 + 32). Cloned per ISA so the inlined loops use AVX-512/AVX2.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void run_tile(const Context& cx, std::int64_t h, std::int64_t t0) {
  const Shape& sh = cx.shape;
  const Options& opt = cx.options;
  const ChunkLayout& ch = *cx.chunks;
  const int d = int(sh.dim);
  const std::int64_t N = sh.n_keys, Nq = sh.n_queries, M = ch.chunks();
  const int r = int(std::min<std::int64_t>(kTile, Nq - t0));
  const float* Kh = cx.k + h * N * d;
  const float* Vh = cx.v + h * N * d;
  const float* Qh = cx.q + (h * Nq + t0) * d;
  const float scale = float(1.0 / std::sqrt(double(d)));

  TileState ts(d);
  Scratch sc(d);
  int ids[kTile];
  std::iota(ids, ids + kTile, 0);
  // Qt (d x 32): the tile's queries scaled by 1/sqrt(d), transposed, zero columns past r;
  // Qrows (32 x d): the same, one query per row.
  std::vector<float> Qt(std::size_t(d * kTile), 0.0f), Qrows(std::size_t(kTile * d), 0.0f), qsub;
  for (int t = 0; t < r; ++t)
    for (int c = 0; c < d; ++c) {
      const float x = Qh[t * d + c] * scale;
      Qt[std::size_t(c * kTile + t)] = x;
      Qrows[std::size_t(t * d + c)] = x;
    }
  std::int64_t pos[kTile], lim[kTile];
  for (int t = 0; t < kTile; ++t) {
    pos[t] = opt.causal ? N - Nq + t0 + std::min(t, r - 1) : N - 1;
    lim[t] = t < r ? pos[t] + 1 : N;
  }
  std::int32_t count[kTile] = {};

  if (opt.method == Method::dense) {
    const std::int64_t end = opt.causal ? pos[r - 1] + 1 : N;
    exact_tile<kTile>(Qt.data(), Kh, Vh, d, 0, end, opt.causal ? lim : nullptr, ids, r, ts, sc);
    for (int t = 0; t < r; ++t) count[t] = std::int32_t(opt.causal ? ch.chunk_of(pos[t]) + 1 : M);
  } else {
    const Summaries& sm = *cx.summaries;
    const std::int64_t S = opt.sink_chunks;
    // 1. Always exact: the sink chunks, then (causal) each query's own chunk up to its position.
    if (S > 0) exact_tile<kTile>(Qt.data(), Kh, Vh, d, 0, ch.begin(S), opt.causal ? lim : nullptr, ids, r, ts, sc);
    std::int64_t cand_end[kTile];  // candidate chunks of row t: [S, cand_end[t])
    for (int t = 0; t < kTile; ++t) cand_end[t] = M;
    if (opt.causal) {
      std::int64_t own[kTile];
      for (int t = 0; t < r; ++t) {
        own[t] = ch.chunk_of(pos[t]);
        cand_end[t] = std::max(S, own[t]);
      }
      // Positions increase with t, so rows sharing an own chunk are consecutive.
      for (int a = 0; a < r;) {
        int b = a + 1;
        while (b < r && own[b] == own[a]) ++b;
        if (own[a] >= S) exact_group(Qt.data(), Qrows.data(), ids + a, b - a, Kh, Vh, d, ch.begin(own[a]), ch.end(own[a]),
                                     lim + a, ts, sc, qsub);
        a = b;
      }
      for (int t = r; t < kTile; ++t) cand_end[t] = S;
    }
    std::int64_t cmax = S;
    for (int t = 0; t < r; ++t) cmax = std::max(cmax, cand_end[t]);
    const std::int64_t nc = cmax - S;
    // 2. Summary scores of the candidate chunks: [q/sqrt(d), q*q/(2d)] . [kbar_j, Var_j(k)] + log n_j.
    std::vector<float> shat(std::size_t(nc * kTile));
    if (nc > 0) {
      std::vector<float> Qs(std::size_t(2 * d * kTile), 0.0f);
      for (int c = 0; c < d; ++c)
        for (int t = 0; t < kTile; ++t) {
          const float x = Qt[std::size_t(c * kTile + t)];
          Qs[std::size_t(c * kTile + t)] = x;
          Qs[std::size_t((d + c) * kTile + t)] = opt.second_order ? 0.5f * x * x : 0.0f;
        }
      const float* rows = &sm.key_row[std::size_t((h * M + S) * 2 * d)];
      for (std::int64_t b = 0; b < nc; b += kBlock) {
        const int n = int(std::min<std::int64_t>(kBlock, nc - b));
        impl::tile_scores<kTile>(Qs.data(), rows + b * 2 * d, 2 * d, n, 2 * d, &shat[std::size_t(b * kTile)]);
      }
      for (std::int64_t j = 0; j < nc; ++j) {
        const float lc = sm.log_count[std::size_t(S + j)];
        float* sj = &shat[std::size_t(j * kTile)];
        for (int t = 0; t < kTile; ++t) sj[t] = S + j < cand_end[t] ? sj[t] + lc : kNegInf;
      }
    }
    const float* vbar = &sm.mean_value[std::size_t((h * M + S) * d)];
    // 3. Selection: chosen[t] lists row t's expanded chunks.
    std::vector<std::vector<std::int64_t>> chosen(static_cast<std::size_t>(r));
    const std::int64_t B = opt.budget;
    if (nc > 0 && B > 0 && opt.method == Method::topk) {
      std::vector<std::pair<float, std::int64_t>> cand;
      for (int t = 0; t < r; ++t) {
        cand.clear();
        for (std::int64_t j = S; j < cand_end[t]; ++j) cand.push_back({shat[std::size_t((j - S) * kTile + t)], j});
        const std::size_t keep = std::min<std::size_t>(std::size_t(B), cand.size());
        std::partial_sort(cand.begin(), cand.begin() + std::ptrdiff_t(keep), cand.end(), [](const auto& x, const auto& y) {
          return x.first > y.first || (x.first == y.first && x.second < y.second);
        });
        for (std::size_t i = 0; i < keep; ++i) chosen[std::size_t(t)].push_back(cand[i].second);
      }
    } else if (nc > 0 && B > 0 && opt.method == Method::cedar) {
      // The remaining-error threshold is relative to the summary-only output o_0 (error target only).
      double threshold[kTile];
      std::fill(threshold, threshold + kTile, -1.0);
      if (opt.error_target > 0) {
        TileState t0state = ts;
        merge_summaries(shat.data(), vbar, nc, d, ids, r, t0state, sc);
        for (int t = 0; t < r; ++t) {
          double n2 = 0;
          const double* a = &t0state.acc[std::size_t(t * d)];
          for (int c = 0; c < d; ++c) n2 += a[c] * a[c];
          threshold[t] = t0state.l[t] > 0 ? opt.error_target * std::sqrt(n2) / t0state.l[t] : 0.0;
        }
      }
      std::vector<double> w;
      std::vector<std::pair<double, std::int64_t>> cand;
      for (int t = 0; t < r; ++t) {
        if (cand_end[t] <= S) continue;
        double qn = 0;
        for (int c = 0; c < d; ++c) qn += double(Qrows[std::size_t(t * d + c)]) * Qrows[std::size_t(t * d + c)];
        qn = std::sqrt(qn);  // |q| / sqrt(d)
        double m_all = ts.m[t];
        for (std::int64_t j = S; j < cand_end[t]; ++j) m_all = std::max(m_all, double(shat[std::size_t((j - S) * kTile + t)]));
        if (m_all == -std::numeric_limits<double>::infinity()) continue;
        double l_all = ts.m[t] == kNegInf ? 0.0 : ts.l[t] * std::exp(double(ts.m[t]) - m_all);
        w.resize(std::size_t(cand_end[t] - S));
        for (std::int64_t j = S; j < cand_end[t]; ++j) {
          const double e = std::exp(double(shat[std::size_t((j - S) * kTile + t)]) - m_all);
          w[std::size_t(j - S)] = e;
          l_all += e;
        }
        // The second-order bound of chunk j's contribution to |o - o_hat| (method.md §8):
        // p_j * b_j * (r_v,j + b_j * rho_j / 2), b_j = |q| r_k,j / sqrt(d), rho_j = |vbar_j - c| + R.
        // rho_j bounds |vbar_j - o_hat| by a ball of radius R around a reference c holding every value
        // the query sees (causal: c = vbar_0 and R over the keys up to the query's position).
        cand.clear();
        double total = 0;
        double R = sm.value_radius[std::size_t(h)];
        const float* offset = &sm.value_offset[sm.at(h, 0)];
        if (opt.causal) {
          const std::int64_t own = cand_end[t];  // >= S >= 0 here; the candidates end at the own chunk
          R = own > 0 ? sm.causal_radius[sm.at(h, own - 1)] : 0.0;
          for (std::int64_t i = ch.begin(own); i <= pos[t]; ++i) R = std::max(R, double(sm.token_radius[std::size_t(h * N + i)]));
          offset = &sm.causal_offset[sm.at(h, 0)];
        }
        for (std::int64_t j = S; j < cand_end[t]; ++j) {
          const std::size_t a = sm.at(h, j);
          const double p = w[std::size_t(j - S)] / l_all;
          const double b = qn * sm.key_rms[a];
          const double e = p * b * (sm.value_rms[a] + 0.5 * b * (offset[j] + R));
          if (e > 0) {
            cand.push_back({e, j});
            total += e;
          }
        }
        const std::size_t keep = std::min<std::size_t>(std::size_t(B), cand.size());
        std::partial_sort(cand.begin(), cand.begin() + std::ptrdiff_t(keep), cand.end(), [](const auto& x, const auto& y) {
          return x.first > y.first || (x.first == y.first && x.second < y.second);
        });
        double remaining = total;
        for (std::size_t i = 0; i < keep; ++i) {
          if (remaining <= threshold[t]) break;
          chosen[std::size_t(t)].push_back(cand[i].second);
          remaining -= cand[i].first;
        }
      }
    }
    // 4. Summary terms of the chunks not expanded (hard top-k drops them).
    if (nc > 0 && opt.method != Method::topk) {
      for (int t = 0; t < r; ++t)
        for (std::int64_t j : chosen[std::size_t(t)]) shat[std::size_t((j - S) * kTile + t)] = kNegInf;
      merge_summaries(shat.data(), vbar, nc, d, ids, r, ts, sc);
    }
    // 5. Exact terms of the expanded chunks, chunk by chunk over the rows that chose each.
    if (nc > 0) {
      std::vector<int> start(std::size_t(nc + 1), 0);
      std::size_t total = 0;
      for (int t = 0; t < r; ++t) {
        count[t] = std::int32_t(chosen[std::size_t(t)].size());
        total += chosen[std::size_t(t)].size();
        for (std::int64_t j : chosen[std::size_t(t)]) ++start[std::size_t(j - S + 1)];
      }
      for (std::int64_t j = 0; j < nc; ++j) start[std::size_t(j + 1)] += start[std::size_t(j)];
      std::vector<int> fill(start.begin(), start.end() - 1), rows(total);
      for (int t = 0; t < r; ++t)
        for (std::int64_t j : chosen[std::size_t(t)]) rows[std::size_t(fill[std::size_t(j - S)]++)] = t;
      for (std::int64_t j = 0; j < nc; ++j) {
        const int a = start[std::size_t(j)], rr = start[std::size_t(j + 1)] - a;
        if (rr == 0) continue;
        exact_group(Qt.data(), Qrows.data(), &rows[std::size_t(a)], rr, Kh, Vh, d, ch.begin(S + j), ch.end(S + j), nullptr,
                    ts, sc, qsub);
      }
    }
  }
  for (int t = 0; t < r; ++t) {
    float* o = cx.out + (h * Nq + t0 + t) * d;
    const double* a = &ts.acc[std::size_t(t * d)];
    const double inv = ts.l[t] > 0 ? 1.0 / ts.l[t] : 0.0;
    for (int c = 0; c < d; ++c) o[c] = float(a[c] * inv);
    cx.expanded[h * Nq + t0 + t] = count[t];
  }
}

}  // namespace

Stats attention(const float* q, const float* k, const float* v, const Shape& shape, const ChunkLayout& chunks,
                const Options& options, float* out, std::int32_t* expanded, const Summaries* summaries) {
  check_options(options, shape, chunks);
  Stats stats;
  using clock = std::chrono::steady_clock;
  Summaries local;
  if (options.method != Method::dense && !summaries) {
    const auto t0 = clock::now();
    local = summarize(k, v, shape, chunks, options.threads);
    stats.summary_seconds = std::chrono::duration<double>(clock::now() - t0).count();
    summaries = &local;
  }
  if (summaries && (summaries->heads != shape.heads || summaries->dim != shape.dim ||
                    summaries->chunks.bounds != chunks.bounds))
    throw_input("cedar", "the chunk summaries were built for another key/value shape or chunk layout");
  std::vector<std::int32_t> own_expanded;
  if (!expanded) {
    own_expanded.resize(std::size_t(shape.heads * shape.n_queries));
    expanded = own_expanded.data();
  }
  const Context cx{q, k, v, shape, &chunks, summaries, options, out, expanded};
  const std::int64_t tiles = (shape.n_queries + kTile - 1) / kTile;
  const auto t0 = clock::now();
  parallel_for_index(std::size_t(shape.heads * tiles), options.threads,
                     [&](std::size_t job) { run_tile(cx, std::int64_t(job) / tiles, std::int64_t(job) % tiles * kTile); });
  stats.kernel_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  const std::size_t n = std::size_t(shape.heads * shape.n_queries);
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += expanded[i];
    stats.max_expanded = std::max<std::int64_t>(stats.max_expanded, expanded[i]);
  }
  stats.mean_expanded = sum / double(n);
  return stats;
}

}  // namespace arcal::cedar
