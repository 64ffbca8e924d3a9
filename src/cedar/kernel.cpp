// The CEDAR attention pass (cedar.hpp, method.md §8). Each query keeps an online-softmax state
// (running maximum m, float64 normaliser l and float64 output accumulator) fed by blocks of terms:
// exact keys (scores from the tile micro-kernels) and chunk summaries (scores from the same
// micro-kernel over the 2d-wide summary rows).
//   dense   one job per head and tile of 32 queries: exact blocks over every visible key.
//   others  phase A, per head and tile: always-exact chunks (sinks, the causal query's own chunk),
//           summary scores of every candidate chunk, the per-query selection (topk: by summary
//           score; cedar: by the error bound, optionally until the remaining bound is below the
//           target) and the summary terms of the chunks not expanded (hard top-k drops them);
//           phase B, per head and chunk: exact attention over the chunk for every query of the head
//           that expanded it, so each chunk's keys and values are read once and its queries share
//           the tile kernel; phase C, per head and tile: each query merges its chunks' partial
//           states in chunk order. Every job writes only its own slots, so results do not depend on
//           the number of threads.
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

using arcal::exp_nonpos;
using impl::kNegInf;

constexpr int kTile = 32;     // queries per job (lanes of the tile kernels)
constexpr int kBlock = 64;    // keys (or summaries) per online-softmax block
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
  std::vector<float> st, pt, acct, srow, prow, accrow, kt;
  explicit Scratch(std::int64_t d)
      : st(kBlock * kTile),
        pt(kBlock * kTile),
        acct(std::size_t((kTile + 4) * d)),
        srow(kBlock),
        prow(kBlock),
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
  float* acc = sc.acct.data();  // [W, dim]
  impl::tile_accumulate<W>(Pt, V, ldv, n, r, dim, acc);
  for (int t = 0; t < r; ++t) {
    if (mx[t] == kNegInf) continue;
    const int row = ids[t];
    const double alpha = ts.m[row] == kNegInf ? 0.0 : std::exp(double(ts.m[row]) - double(mx[t]));
    ts.l[row] = ts.l[row] * alpha + double(colsum[t]);
    double* a = &ts.acc[std::size_t(row * ts.dim)];
    const float* b = acc + t * dim;
#pragma omp simd
    for (int c = 0; c < dim; ++c) a[c] = a[c] * alpha + double(b[c]);
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

/// Exact attention of one query q (dim floats, pre-scaled), tile row `row`, over the first `count`
/// keys of a chunk whose keys are Kt (transposed, dim x ldt) and values V (count rows).
ARCAL_CEDAR_INLINE void exact_row(const float* q, const float* Kt, std::int64_t ldt, const float* V, int dim,
                                  std::int64_t count, int row, TileState& ts, Scratch& sc) {
  float* s = sc.srow.data();
  float* p = sc.prow.data();
  float* acc = sc.accrow.data();
  for (std::int64_t b = 0; b < count; b += kBlock) {
    const int n = int(std::min<std::int64_t>(kBlock, count - b));
    impl::row_scores(q, Kt + b, ldt, n, dim, s);
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
#pragma omp simd
    for (int c = 0; c < dim; ++c) a[c] = a[c] * alpha + double(acc[c]);
    ts.m[row] = mx;
  }
}

/// Exact attention of the tile rows R[0..rr) over chunk j (keys Kh, values Vh of one head), row u up to key limit[u]
/// (exclusive) when limit is given: one query at a time for small groups, else a gathered 16- or
/// 32-wide tile.
ARCAL_CEDAR_INLINE void exact_group(const float* Qt, const float* Qrows, const int* R, int rr, const Summaries& sm,
                                    std::int64_t j, const float* Kh, const float* Vh, int dim,
                                    const std::int64_t* limit, TileState& ts, Scratch& sc, std::vector<float>& qsub) {
  const ChunkLayout& ch = sm.chunks;
  const std::int64_t begin = ch.begin(j), end = ch.end(j), n = end - begin;
  if (rr <= kRowGroup) {
    // The chunk's keys transposed once (dim x n), so each query's scores run over contiguous keys.
    std::int64_t count = 0;
    for (int u = 0; u < rr; ++u) count = std::max(count, limit ? std::min(end, limit[u]) - begin : n);
    sc.kt.resize(std::size_t(dim * count));
    const float* kb = Kh + begin * dim;
    for (std::int64_t i = 0; i < count; ++i)
      for (int c = 0; c < dim; ++c) sc.kt[std::size_t(c * count + i)] = kb[i * dim + c];
    for (int u = 0; u < rr; ++u)
      exact_row(Qrows + R[u] * dim, sc.kt.data(), count, Vh + begin * dim, dim,
                limit ? std::min(end, limit[u]) - begin : n, R[u], ts, sc);
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
    exact_tile<16>(qsub.data(), Kh, Vh, dim, begin, end, limit ? lim : nullptr, R, rr, ts, sc);
  else
    exact_tile<32>(qsub.data(), Kh, Vh, dim, begin, end, limit ? lim : nullptr, R, rr, ts, sc);
}

/// Merges the summary terms (scores shat, nc x 32; values vbar, nc rows) of the tile rows ids[0..r).
ARCAL_CEDAR_INLINE void merge_summaries(const float* shat, const float* vbar, std::int64_t nc, int d, const int* ids,
                                        int r, TileState& state, Scratch& sc) {
  for (std::int64_t b = 0; b < nc; b += kBlock) {
    const int n = int(std::min<std::int64_t>(kBlock, nc - b));
    merge_block<kTile>(shat + b * kTile, vbar + b * d, d, n, d, ids, r, state, sc);
  }
}

/// What the phases of the non-dense methods hand each other (all heads).
struct Work {
  std::int64_t cap = 0;              // most chunks a query expands: min(B, M)
  std::vector<float> m;              // [H*Nq] online-softmax state after phase A
  std::vector<double> l, acc;        // [H*Nq], [H*Nq, d]
  std::vector<std::int64_t> chosen;  // [H*Nq, cap] expanded chunks, ascending
  std::vector<std::int32_t> count;   // [H*Nq]
  std::vector<std::int64_t> start;   // [H*(M+1)] pairs of (h, chunk j) at [start[h*(M+1)+j], start[h*(M+1)+j+1])
  std::vector<std::int32_t> query;   // [pairs] query index within its head, by (head, chunk, query)
  std::vector<std::int64_t> slot;    // [H*Nq, cap] the pair of a query's k-th expanded chunk
  std::vector<float> pm;             // [pairs] partial state of one query over one chunk
  std::vector<double> pl;            // [pairs]
  std::vector<float> pacc;           // [pairs, d] (one chunk's weighted value sum; merged in float64)
};

/// Loads one tile's queries: Qt (d x 32, scaled by 1/sqrt(d), zero columns past the tile) and
/// Qrows (32 x d, the same, one query per row) from the rows idx[0..r) of head h.
ARCAL_CEDAR_INLINE void load_queries(const Context& cx, std::int64_t h, const std::int64_t* idx, int r, float* Qt,
                                     float* Qrows) {
  const int d = int(cx.shape.dim);
  const float scale = float(1.0 / std::sqrt(double(d)));
  std::fill(Qt, Qt + d * kTile, 0.0f);
  std::fill(Qrows, Qrows + kTile * d, 0.0f);
  for (int t = 0; t < r; ++t) {
    const float* q = cx.q + (h * cx.shape.n_queries + idx[t]) * d;
    for (int c = 0; c < d; ++c) {
      Qt[c * kTile + t] = q[c] * scale;
      Qrows[t * d + c] = q[c] * scale;
    }
  }
}

/// The `keep` largest of v[0..n) (only those > 0 when positive_only) as (value, index), largest first,
/// ties by lower index. A sorted buffer of `keep` when keep is small against n (one comparison per
/// element once it is full: most chunks' weights are exponentially small), a full sort otherwise.
template <class T>
void top_values(const T* v, std::int64_t n, std::int64_t keep, bool positive_only,
                std::vector<std::pair<T, std::int64_t>>& out) {
  out.clear();
  if (keep <= 0) return;
  auto better = [](const std::pair<T, std::int64_t>& x, const std::pair<T, std::int64_t>& y) {
    return x.first > y.first || (x.first == y.first && x.second < y.second);
  };
  if (keep * 4 >= n) {
    for (std::int64_t j = 0; j < n; ++j)
      if (!positive_only || v[j] > 0) out.push_back({v[j], j});
    std::sort(out.begin(), out.end(), better);
    if (std::int64_t(out.size()) > keep) out.resize(std::size_t(keep));
    return;
  }
  for (std::int64_t j = 0; j < n; ++j) {
    const T x = v[j];
    if (positive_only && !(x > 0)) continue;
    if (std::int64_t(out.size()) == keep) {
      if (!(x > out.back().first)) continue;  // equal values keep the earlier index
      out.pop_back();
    }
    std::size_t p = out.size();
    out.push_back({x, j});
    while (p > 0 && out[p - 1].first < x) {
      out[p] = out[p - 1];
      --p;
    }
    out[p] = {x, j};
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#ifdef ARCAL_NO_TARGET_CLONES  // ThreadSanitizer builds: an instrumented ifunc resolver runs before TSan's runtime
                               // exists
#define ARCAL_CEDAR_CLONES
#else
#define ARCAL_CEDAR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#else
#define ARCAL_CEDAR_CLONES
#endif

/// Dense: head h, tiles [tile0, tile0 + tiles) of 32 queries, every visible key in blocks of 64. Keys
/// stream in spans of kSpan that every tile of the job uses while the span is in cache, so K and V
/// are read from memory once per job rather than once per tile; each tile still sees its blocks in
/// key order, so the result is the same for any grouping.
ARCAL_CEDAR_CLONES void run_dense(const Context& cx, std::int64_t h, std::int64_t tile0, std::int64_t tiles) {
  constexpr std::int64_t kSpan = 512;
  const Shape& sh = cx.shape;
  const ChunkLayout& ch = *cx.chunks;
  const int d = int(sh.dim);
  const std::int64_t N = sh.n_keys, Nq = sh.n_queries;
  const bool causal = cx.options.causal;
  const float* Kh = cx.k + h * N * d;
  const float* Vh = cx.v + h * N * d;
  struct Tile {
    std::int64_t t0;
    int r;
    std::vector<float> Qt;
    std::int64_t lim[kTile];
    TileState ts;
    explicit Tile(std::int64_t dim) : Qt(static_cast<std::size_t>(dim * kTile)), ts(dim) {}
  };
  std::vector<Tile> tl;
  tl.reserve(std::size_t(tiles));
  Scratch sc(d);
  std::vector<float> Qrows(static_cast<std::size_t>(kTile * d));
  int ids[kTile];
  std::iota(ids, ids + kTile, 0);
  std::int64_t end = 0;  // keys any tile of the job sees
  for (std::int64_t i = 0; i < tiles; ++i) {
    tl.emplace_back(d);
    Tile& t = tl.back();
    t.t0 = (tile0 + i) * kTile;
    t.r = int(std::min<std::int64_t>(kTile, Nq - t.t0));
    std::int64_t idx[kTile];
    for (int u = 0; u < t.r; ++u) idx[u] = t.t0 + u;
    load_queries(cx, h, idx, t.r, t.Qt.data(), Qrows.data());
    for (int u = 0; u < kTile; ++u) t.lim[u] = causal && u < t.r ? N - Nq + t.t0 + u + 1 : N;
    end = std::max(end, causal ? t.lim[t.r - 1] : N);
  }
  for (std::int64_t b = 0; b < end; b += kSpan)
    for (Tile& t : tl) {
      const std::int64_t e = std::min(b + kSpan, causal ? t.lim[t.r - 1] : N);
      if (b < e) exact_tile<kTile>(t.Qt.data(), Kh, Vh, d, b, e, causal ? t.lim : nullptr, ids, t.r, t.ts, sc);
    }
  for (const Tile& t : tl)
    for (int u = 0; u < t.r; ++u) {
      float* o = cx.out + (h * Nq + t.t0 + u) * d;
      const double* a = &t.ts.acc[std::size_t(u * d)];
      const double inv = t.ts.l[u] > 0 ? 1.0 / t.ts.l[u] : 0.0;
      for (int c = 0; c < d; ++c) o[c] = float(a[c] * inv);
      cx.expanded[h * Nq + t.t0 + u] = std::int32_t(causal ? ch.chunk_of(t.lim[u] - 1) + 1 : ch.chunks());
    }
}

/// Phase A state of one tile of 32 queries.
struct Prep {
  std::int64_t t0 = 0;
  int r = 0;
  std::vector<float> Qt, Qrows, Qs, qsub;
  TileState ts;
  std::int64_t pos[kTile], lim[kTile];
  std::int64_t cand_end[kTile];  // candidate chunks of row t: [S, cand_end[t])
  std::int64_t nc = 0;           // candidate chunks of the tile: [S, S + nc)
  std::vector<float> shat;       // [nc, 32] summary scores, -inf where not a candidate
  std::vector<std::vector<std::int64_t>> chosen;
  explicit Prep(std::int64_t d) : ts(d) {}
};

/// Phase A, step 1 for one tile: queries, always-exact chunks (sinks, then the causal query's own
/// chunk up to its position), the candidate ranges and the summary-score query rows
/// [q/sqrt(d), q*q/(2d)].
ARCAL_CEDAR_INLINE void prep_begin(const Context& cx, std::int64_t h, Prep& P, Scratch& sc, const int* ids) {
  const Options& opt = cx.options;
  const ChunkLayout& ch = *cx.chunks;
  const int d = int(cx.shape.dim);
  const std::int64_t N = cx.shape.n_keys, Nq = cx.shape.n_queries, M = ch.chunks(), S = opt.sink_chunks;
  const float* Kh = cx.k + h * N * d;
  const float* Vh = cx.v + h * N * d;
  const int r = P.r;
  P.Qt.resize(std::size_t(d * kTile));
  P.Qrows.resize(P.Qt.size());
  std::int64_t idx[kTile];
  for (int t = 0; t < r; ++t) idx[t] = P.t0 + t;
  load_queries(cx, h, idx, r, P.Qt.data(), P.Qrows.data());
  for (int t = 0; t < kTile; ++t) {
    P.pos[t] = opt.causal ? N - Nq + P.t0 + std::min(t, r - 1) : N - 1;
    P.lim[t] = t < r ? P.pos[t] + 1 : N;
    P.cand_end[t] = M;
  }
  if (S > 0) exact_tile<kTile>(P.Qt.data(), Kh, Vh, d, 0, ch.begin(S), opt.causal ? P.lim : nullptr, ids, r, P.ts, sc);
  if (opt.causal) {
    std::int64_t own[kTile];
    for (int t = 0; t < r; ++t) {
      own[t] = ch.chunk_of(P.pos[t]);
      P.cand_end[t] = std::max(S, own[t]);
    }
    // Positions increase with t, so rows sharing an own chunk are consecutive.
    for (int a = 0; a < r;) {
      int b = a + 1;
      while (b < r && own[b] == own[a]) ++b;
      if (own[a] >= S)
        exact_group(P.Qt.data(), P.Qrows.data(), ids + a, b - a, *cx.summaries, own[a], Kh, Vh, d, P.lim + a, P.ts, sc,
                    P.qsub);
      a = b;
    }
    for (int t = r; t < kTile; ++t) P.cand_end[t] = S;
  }
  std::int64_t cmax = S;
  for (int t = 0; t < r; ++t) cmax = std::max(cmax, P.cand_end[t]);
  P.nc = cmax - S;
  P.shat.resize(std::size_t(P.nc * kTile));
  P.Qs.assign(std::size_t(2 * d * kTile), 0.0f);
  for (int c = 0; c < d; ++c)
    for (int t = 0; t < kTile; ++t) {
      const float x = P.Qt[std::size_t(c * kTile + t)];
      P.Qs[std::size_t(c * kTile + t)] = x;
      P.Qs[std::size_t((d + c) * kTile + t)] = opt.second_order ? 0.5f * x * x : 0.0f;
    }
  P.chosen.assign(std::size_t(r), {});
}

/// Phase A, step 3 for one tile: the selection (topk: by summary score; cedar: by the error bound,
/// until the remaining bound is below the target when there is one), then the expanded chunks'
/// summary scores are masked so step 4 merges only the others.
ARCAL_CEDAR_INLINE void prep_select(const Context& cx, std::int64_t h, Prep& P, Scratch& sc, const int* ids) {
  const Options& opt = cx.options;
  const ChunkLayout& ch = *cx.chunks;
  const Summaries& sm = *cx.summaries;
  const int d = int(cx.shape.dim);
  const std::int64_t N = cx.shape.n_keys, M = ch.chunks(), S = opt.sink_chunks, nc = P.nc, B = opt.budget;
  const int r = P.r;
  const float* shat = P.shat.data();
  const float* vbar = &sm.mean_value[std::size_t((h * M + S) * d)];
  TileState& ts = P.ts;
  if (nc > 0 && B > 0 && opt.method == Method::topk) {
    std::vector<float> col(static_cast<std::size_t>(nc));
    std::vector<std::pair<float, std::int64_t>> top;
    for (int t = 0; t < r; ++t) {
      const std::int64_t nt = P.cand_end[t] - S;
      for (std::int64_t j = 0; j < nt; ++j) col[std::size_t(j)] = shat[std::size_t(j * kTile + t)];
      top_values(col.data(), nt, B, false, top);
      for (const auto& x : top) P.chosen[std::size_t(t)].push_back(S + x.second);
    }
  } else if (nc > 0 && B > 0 && opt.method == Method::cedar) {
    // The remaining-error threshold is relative to the summary-only output o_0 (error target only).
    double threshold[kTile];
    std::fill(threshold, threshold + kTile, -1.0);
    if (opt.error_target > 0) {
      TileState t0state = ts;
      merge_summaries(shat, vbar, nc, d, ids, r, t0state, sc);
      for (int t = 0; t < r; ++t) {
        double n2 = 0;
        const double* a = &t0state.acc[std::size_t(t * d)];
        for (int c = 0; c < d; ++c) n2 += a[c] * a[c];
        threshold[t] = t0state.l[t] > 0 ? opt.error_target * std::sqrt(n2) / t0state.l[t] : 0.0;
      }
    }
    std::vector<float> wexp(static_cast<std::size_t>(nc));
    std::vector<std::pair<float, std::int64_t>> cand;
    for (int t = 0; t < r; ++t) {
      if (P.cand_end[t] <= S) continue;
      const std::int64_t nt = P.cand_end[t] - S;
      double qn = 0;
      for (int c = 0; c < d; ++c) qn += double(P.Qrows[std::size_t(t * d + c)]) * P.Qrows[std::size_t(t * d + c)];
      qn = std::sqrt(qn);  // |q| / sqrt(d)
      float m_all = ts.m[t];
      for (std::int64_t j = 0; j < nt; ++j) m_all = std::max(m_all, shat[std::size_t(j * kTile + t)]);
      if (m_all == kNegInf) continue;
      // Normalised summary weights p_j = exp(s_j - m) / (sum of every term's exp(. - m)).
      double l_all = ts.m[t] == kNegInf ? 0.0 : ts.l[t] * std::exp(double(ts.m[t]) - double(m_all));
      float* we = wexp.data();
      float wsum = 0.0f;
#pragma omp simd reduction(+ : wsum)
      for (std::int64_t j = 0; j < nt; ++j) {
        we[j] = exp_nonpos(shat[std::size_t(j * kTile + t)] - m_all);
        wsum += we[j];
      }
      l_all += double(wsum);
      // The second-order bound of chunk j's contribution to |o - o_hat| (method.md §8):
      // p_j * b_j * (r_v,j + b_j * rho_j / 2), b_j = |q| r_k,j / sqrt(d), rho_j = |vbar_j - c| + R,
      // R bounding |v - c| over every value the query sees (causal: c = vbar_0, keys up to its position).
      double R = sm.value_radius[std::size_t(h)];
      const float* offset = &sm.value_offset[sm.at(h, S)];
      if (opt.causal) {
        const std::int64_t own = P.cand_end[t];  // the candidates end at the query's own chunk
        R = own > 0 ? sm.causal_radius[sm.at(h, own - 1)] : 0.0;
        for (std::int64_t i = ch.begin(own); i <= P.pos[t]; ++i)
          R = std::max(R, double(sm.token_radius[std::size_t(h * N + i)]));
        offset = &sm.causal_offset[sm.at(h, S)];
      }
      const float* krms = &sm.key_rms[sm.at(h, S)];
      const float* vrms = &sm.value_rms[sm.at(h, S)];
      const float inv_l = float(1.0 / l_all), fqn = float(qn), fR = float(R);
#pragma omp simd
      for (std::int64_t j = 0; j < nt; ++j) {
        const float b = fqn * krms[j];
        we[j] = we[j] * inv_l * b * (vrms[j] + 0.5f * b * (offset[j] + fR));
      }
      double total = 0;
      for (std::int64_t j = 0; j < nt; ++j) total += we[j];
      top_values(we, nt, B, true, cand);
      double remaining = total;
      for (const auto& x : cand) {
        if (remaining <= threshold[t]) break;
        P.chosen[std::size_t(t)].push_back(S + x.second);
        remaining -= x.first;
      }
    }
  }
  for (int t = 0; t < r; ++t)
    for (std::int64_t j : P.chosen[std::size_t(t)]) P.shat[std::size_t((j - S) * kTile + t)] = kNegInf;
}

/// Phase A of cedar / topk / summary for head h, tiles [tile0, tile0 + tiles): step 1 per tile;
/// step 2, the summary scores of every candidate chunk, and step 4, the summary terms of the chunks
/// not expanded (hard top-k drops them), run block by block over all the job's tiles so the summary
/// rows are read from memory once per job; step 3 (selection) per tile. Leaves each query's state
/// and expanded chunks (ascending) in `w`.
ARCAL_CEDAR_CLONES void run_prepare(const Context& cx, Work& w, std::int64_t h, std::int64_t tile0,
                                    std::int64_t tiles) {
  const Options& opt = cx.options;
  const Summaries& sm = *cx.summaries;
  const int d = int(cx.shape.dim);
  const std::int64_t Nq = cx.shape.n_queries, M = cx.chunks->chunks(), S = opt.sink_chunks;
  Scratch sc(d);
  int ids[kTile];
  std::iota(ids, ids + kTile, 0);
  std::vector<Prep> tl;
  tl.reserve(std::size_t(tiles));
  std::int64_t ncmax = 0;
  for (std::int64_t i = 0; i < tiles; ++i) {
    tl.emplace_back(d);
    Prep& P = tl.back();
    P.t0 = (tile0 + i) * kTile;
    P.r = int(std::min<std::int64_t>(kTile, Nq - P.t0));
    prep_begin(cx, h, P, sc, ids);
    ncmax = std::max(ncmax, P.nc);
  }
  const float* rows = &sm.key_row[std::size_t((h * M + S) * 2 * d)];
  for (std::int64_t b = 0; b < ncmax; b += kBlock)
    for (Prep& P : tl) {
      if (b >= P.nc) continue;
      const int n = int(std::min<std::int64_t>(kBlock, P.nc - b));
      float* sb = &P.shat[std::size_t(b * kTile)];
      impl::tile_scores<kTile>(P.Qs.data(), rows + b * 2 * d, 2 * d, n, 2 * d, sb);
      for (int j = 0; j < n; ++j) {
        const float lc = sm.log_count[std::size_t(S + b + j)];
        for (int t = 0; t < kTile; ++t)
          sb[j * kTile + t] = S + b + j < P.cand_end[t] ? sb[j * kTile + t] + lc : kNegInf;
      }
    }
  for (Prep& P : tl) prep_select(cx, h, P, sc, ids);
  if (opt.method != Method::topk) {
    const float* vbar = &sm.mean_value[std::size_t((h * M + S) * d)];
    for (std::int64_t b = 0; b < ncmax; b += kBlock)
      for (Prep& P : tl) {
        if (b >= P.nc) continue;
        const int n = int(std::min<std::int64_t>(kBlock, P.nc - b));
        merge_block<kTile>(&P.shat[std::size_t(b * kTile)], vbar + b * d, d, n, d, ids, P.r, P.ts, sc);
      }
  }
  // Hand over: the state and the expanded chunks (ascending: phase C merges them in that order).
  for (Prep& P : tl)
    for (int t = 0; t < P.r; ++t) {
      const std::size_t q = std::size_t(h * Nq + P.t0 + t);
      w.m[q] = P.ts.m[t];
      w.l[q] = P.ts.l[t];
      std::copy(&P.ts.acc[std::size_t(t * d)], &P.ts.acc[std::size_t(t * d)] + d, &w.acc[q * std::size_t(d)]);
      auto& c = P.chosen[std::size_t(t)];
      std::sort(c.begin(), c.end());
      w.count[q] = std::int32_t(c.size());
      // Only when there is something to copy: with cap 0 (summary-only) w.chosen is empty, and
      // w.chosen[0] would bind a reference past its end (UBSan: reference binding to null pointer).
      if (!c.empty()) std::copy(c.begin(), c.end(), &w.chosen[q * std::size_t(w.cap)]);
    }
}

/// Phase B: exact attention over chunk j of head h for every query of the head that expanded it,
/// in groups of up to 32 (one query at a time for small groups), into the pairs' partial states.
ARCAL_CEDAR_CLONES void run_expand(const Context& cx, Work& w, std::int64_t h, std::int64_t j) {
  const std::int64_t M = cx.chunks->chunks();
  const std::int64_t a = w.start[std::size_t(h * (M + 1) + j)], e = w.start[std::size_t(h * (M + 1) + j + 1)];
  if (a == e) return;
  const int d = int(cx.shape.dim);
  const std::int64_t N = cx.shape.n_keys;
  Scratch sc(d);
  std::vector<float> Qt(static_cast<std::size_t>(d * kTile)), Qrows(Qt.size()), qsub;
  int ids[kTile];
  std::iota(ids, ids + kTile, 0);
  for (std::int64_t g = a; g < e; g += kTile) {
    const int r = int(std::min<std::int64_t>(kTile, e - g));
    std::int64_t idx[kTile];
    for (int t = 0; t < r; ++t) idx[t] = w.query[std::size_t(g + t)];
    load_queries(cx, h, idx, r, Qt.data(), Qrows.data());
    TileState ts(d);
    exact_group(Qt.data(), Qrows.data(), ids, r, *cx.summaries, j, cx.k + h * N * d, cx.v + h * N * d, d, nullptr, ts,
                sc, qsub);
    for (int t = 0; t < r; ++t) {
      const std::size_t p = std::size_t(g + t);
      w.pm[p] = ts.m[t];
      w.pl[p] = ts.l[t];
      std::copy(&ts.acc[std::size_t(t * d)], &ts.acc[std::size_t(t * d)] + d, &w.pacc[p * std::size_t(d)]);
    }
  }
}

/// Phase C: each query of head h, tile t0, merges its expanded chunks' partial states in chunk order
/// into its state and writes out and expanded.
void run_finish(const Context& cx, const Work& w, std::int64_t h, std::int64_t t0) {
  const int d = int(cx.shape.dim);
  const std::int64_t Nq = cx.shape.n_queries;
  const int r = int(std::min<std::int64_t>(kTile, Nq - t0));
  std::vector<double> acc(static_cast<std::size_t>(d));
  for (int t = 0; t < r; ++t) {
    const std::size_t q = std::size_t(h * Nq + t0 + t);
    double m = w.m[q], l = w.l[q];
    std::copy(&w.acc[q * std::size_t(d)], &w.acc[q * std::size_t(d)] + d, acc.begin());
    for (std::int32_t k = 0; k < w.count[q]; ++k) {
      const std::size_t p = std::size_t(w.slot[q * std::size_t(w.cap) + std::size_t(k)]);
      if (w.pl[p] <= 0) continue;
      const double pm = w.pm[p], mn = std::max(m, pm);
      const double alpha = l > 0 ? std::exp(m - mn) : 0.0, beta = std::exp(pm - mn);
      l = l * alpha + w.pl[p] * beta;
      const float* pa = &w.pacc[p * std::size_t(d)];
      for (int c = 0; c < d; ++c) acc[std::size_t(c)] = acc[std::size_t(c)] * alpha + pa[c] * beta;
      m = mn;
    }
    float* o = cx.out + q * std::size_t(d);
    const double inv = l > 0 ? 1.0 / l : 0.0;
    for (int c = 0; c < d; ++c) o[c] = float(acc[std::size_t(c)] * inv);
    cx.expanded[q] = w.count[q];
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
  if (summaries &&
      (summaries->heads != shape.heads || summaries->dim != shape.dim || summaries->chunks.bounds != chunks.bounds))
    throw_input("cedar", "the chunk summaries were built for another key/value shape or chunk layout");
  std::vector<std::int32_t> own_expanded;
  if (!expanded) {
    own_expanded.resize(std::size_t(shape.heads * shape.n_queries));
    expanded = own_expanded.data();
  }
  const Context cx{q, k, v, shape, &chunks, summaries, options, out, expanded};
  const std::int64_t H = shape.heads, Nq = shape.n_queries, d = shape.dim, M = chunks.chunks();
  const std::int64_t tiles = (Nq + kTile - 1) / kTile;
  // Jobs of up to 8 tiles (256 queries) of one head, at least as many jobs as workers where possible.
  const std::int64_t workers = std::int64_t(worker_count(options.threads, std::size_t(H * tiles)));
  const std::int64_t per = std::max<std::int64_t>(1, std::min<std::int64_t>(8, H * tiles / workers));
  const std::int64_t groups = (tiles + per - 1) / per;
  const auto t0 = clock::now();
  if (options.method == Method::dense) {
    parallel_for_index(std::size_t(H * groups), options.threads, [&](std::size_t job) {
      const std::int64_t h = std::int64_t(job) / groups, g = std::int64_t(job) % groups;
      run_dense(cx, h, g * per, std::min(per, tiles - g * per));
    });
  } else {
    Work w;
    w.cap = std::min(options.budget, M);
    w.m.resize(std::size_t(H * Nq));
    w.l.resize(std::size_t(H * Nq));
    w.acc.resize(std::size_t(H * Nq * d));
    w.chosen.resize(std::size_t(H * Nq * w.cap));
    w.count.assign(std::size_t(H * Nq), 0);
    parallel_for_index(std::size_t(H * groups), options.threads, [&](std::size_t job) {
      const std::int64_t h = std::int64_t(job) / groups, g = std::int64_t(job) % groups;
      run_prepare(cx, w, h, g * per, std::min(per, tiles - g * per));
    });
    // Invert the expansions: per (head, chunk) the queries that expanded it, and each query's slots.
    w.start.assign(std::size_t(H * (M + 1) + 1), 0);
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < Nq; ++i) {
        const std::size_t q = std::size_t(h * Nq + i);
        for (std::int32_t k = 0; k < w.count[q]; ++k)
          ++w.start[std::size_t(h * (M + 1) + w.chosen[q * std::size_t(w.cap) + std::size_t(k)] + 1)];
      }
    for (std::size_t i = 1; i < w.start.size(); ++i) w.start[i] += w.start[i - 1];
    const std::size_t pairs = std::size_t(w.start.back());
    w.query.resize(pairs);
    w.slot.resize(w.chosen.size());
    std::vector<std::int64_t> fill(w.start.begin(), w.start.end() - 1);
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < Nq; ++i) {
        const std::size_t q = std::size_t(h * Nq + i);
        for (std::int32_t k = 0; k < w.count[q]; ++k) {
          const std::size_t at = q * std::size_t(w.cap) + std::size_t(k);
          const std::int64_t p = fill[std::size_t(h * (M + 1) + w.chosen[at])]++;
          w.query[std::size_t(p)] = std::int32_t(i);
          w.slot[at] = p;
        }
      }
    w.pm.resize(pairs);
    w.pl.resize(pairs);
    w.pacc.resize(pairs * std::size_t(d));
    parallel_for_index(std::size_t(H * M), options.threads,
                       [&](std::size_t job) { run_expand(cx, w, std::int64_t(job) / M, std::int64_t(job) % M); });
    parallel_for_index(std::size_t(H * tiles), options.threads, [&](std::size_t job) {
      run_finish(cx, w, std::int64_t(job) / tiles, std::int64_t(job) % tiles * kTile);
    });
  }
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
