// Chunk layouts, chunk summaries and input checks of the CEDAR kernel (cedar.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "cedar/cedar.hpp"
#include "core/check.hpp"
#include "core/parallel.hpp"

namespace arcal::cedar {

std::string to_string(Method method) {
  switch (method) {
    case Method::cedar: return "cedar";
    case Method::topk: return "topk";
    case Method::summary: return "summary";
    case Method::dense: return "dense";
  }
  return "?";
}

Method parse_method(const std::string& name) {
  if (name == "cedar") return Method::cedar;
  if (name == "topk") return Method::topk;
  if (name == "summary") return Method::summary;
  if (name == "dense") return Method::dense;
  throw_input("cedar", "method '" + name + "' is not one of cedar, topk, summary, dense");
}

std::int64_t ChunkLayout::chunk_of(std::int64_t p) const {
  return std::int64_t(std::upper_bound(bounds.begin(), bounds.end(), p) - bounds.begin()) - 1;
}

ChunkLayout fixed_chunks(std::int64_t n_keys, std::int64_t chunk_size) {
  if (n_keys <= 0) throw_input("cedar", "the number of keys is " + std::to_string(n_keys) + ", but must be positive");
  if (chunk_size <= 0) throw_input("cedar", "chunk size is " + std::to_string(chunk_size) + ", but must be positive");
  ChunkLayout c;
  for (std::int64_t b = 0; b < n_keys; b += chunk_size) c.bounds.push_back(b);
  c.bounds.push_back(n_keys);
  return c;
}

ChunkLayout chunks_from_starts(const std::vector<std::int64_t>& starts, std::int64_t n_keys,
                               const std::string& context) {
  if (starts.empty()) throw_input(context, "chunk_starts is empty, but must hold at least the start 0");
  if (starts[0] != 0)
    throw_index(context, "chunk_starts", 0, std::to_string(starts[0]), "0 (the first chunk starts at key 0)");
  for (std::size_t i = 1; i < starts.size(); ++i) {
    if (starts[i] <= starts[i - 1])
      throw_index(context, "chunk_starts", i, std::to_string(starts[i]),
                  "greater than chunk_starts[" + std::to_string(i - 1) + "] = " + std::to_string(starts[i - 1]) +
                      " (strictly increasing)");
    if (starts[i] >= n_keys)
      throw_index(context, "chunk_starts", i, std::to_string(starts[i]),
                  "less than the number of keys N = " + std::to_string(n_keys));
  }
  ChunkLayout c;
  c.bounds = starts;
  c.bounds.push_back(n_keys);
  return c;
}

Summaries summarize(const float* k, const float* v, const Shape& shape, const ChunkLayout& chunks, int threads) {
  const std::int64_t H = shape.heads, N = shape.n_keys, d = shape.dim, M = chunks.chunks();
  if (chunks.n_keys() != N || M <= 0)
    throw_input("cedar::summarize", "the chunk layout covers " + std::to_string(chunks.n_keys()) +
                                        " keys, but k holds " + std::to_string(N));
  Summaries s;
  s.heads = H;
  s.dim = d;
  s.chunks = chunks;
  s.key_row.assign(std::size_t(H * M * 2 * d), 0.0f);
  s.mean_value.assign(std::size_t(H * M * d), 0.0f);
  s.log_count.resize(std::size_t(M));
  for (std::int64_t j = 0; j < M; ++j) s.log_count[std::size_t(j)] = float(std::log(double(chunks.size(j))));
  for (auto* a : {&s.key_rms, &s.key_max, &s.value_rms, &s.value_max, &s.value_offset})
    a->assign(std::size_t(H * M), 0.0f);
  s.value_radius.assign(std::size_t(H), 0.0f);
  s.causal_offset.assign(std::size_t(H * M), 0.0f);
  s.causal_radius.assign(std::size_t(H * M), 0.0f);
  s.token_radius.assign(std::size_t(H * N), 0.0f);

  // Chunk 0's mean value first: the causal reference point, visible to every query.
  std::vector<double> ref0(std::size_t(H * d), 0.0);
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t i = 0; i < chunks.size(0); ++i)
      for (std::int64_t c = 0; c < d; ++c)
        ref0[std::size_t(h * d + c)] += v[(h * N + i) * d + c] / double(chunks.size(0));
  std::vector<float> chunk_token_max(std::size_t(H * M), 0.0f);  // max_i |v_i - vbar_0| per chunk

  // Per chunk, two passes in float64 (mean, then deviations), so the variance has no cancellation.
  constexpr std::int64_t G = 16;  // chunks per job
  const std::int64_t groups = (M + G - 1) / G;
  parallel_for_index(std::size_t(H * groups), threads, [&](std::size_t job) {
    const std::int64_t h = std::int64_t(job) / groups, g = std::int64_t(job) % groups;
    std::vector<double> buf(static_cast<std::size_t>(3 * d));
    double* __restrict mk = buf.data();
    double* __restrict mv = mk + d;
    double* __restrict var = mv + d;
    const double* __restrict r0 = &ref0[std::size_t(h * d)];
    for (std::int64_t j = g * G; j < std::min(M, (g + 1) * G); ++j) {
      const std::int64_t n = chunks.size(j), b0 = chunks.begin(j);
      const float* __restrict kb = k + (h * N + b0) * d;
      const float* __restrict vb = v + (h * N + b0) * d;
      std::fill(buf.begin(), buf.end(), 0.0);
      for (std::int64_t i = 0; i < n; ++i) {
#pragma omp simd
        for (std::int64_t c = 0; c < d; ++c) {
          mk[c] += kb[i * d + c];
          mv[c] += vb[i * d + c];
        }
      }
      const double inv = 1.0 / double(n);
      for (std::int64_t c = 0; c < d; ++c) {
        mk[c] *= inv;
        mv[c] *= inv;
      }
      double k2sum = 0, k2max = 0, v2sum = 0, v2max = 0, t0max = 0;
      float* tok = &s.token_radius[std::size_t(h * N + b0)];
      for (std::int64_t i = 0; i < n; ++i) {
        double dk = 0, dv = 0, d0 = 0;
#pragma omp simd reduction(+ : dk, dv, d0)
        for (std::int64_t c = 0; c < d; ++c) {
          const double a = kb[i * d + c] - mk[c], b = vb[i * d + c] - mv[c], e = vb[i * d + c] - r0[c];
          var[c] += a * a;
          dk += a * a;
          dv += b * b;
          d0 += e * e;
        }
        k2sum += dk;
        v2sum += dv;
        k2max = std::max(k2max, dk);
        v2max = std::max(v2max, dv);
        tok[i] = float(std::sqrt(d0));
        t0max = std::max(t0max, std::sqrt(d0));
      }
      float* row = &s.key_row[std::size_t((h * M + j) * 2 * d)];
      float* mvo = &s.mean_value[std::size_t((h * M + j) * d)];
      for (std::int64_t c = 0; c < d; ++c) {
        row[c] = float(mk[c]);
        row[d + c] = float(var[c] * inv);
        mvo[c] = float(mv[c]);
      }
      const std::size_t a = s.at(h, j);
      s.key_rms[a] = float(std::sqrt(k2sum * inv));
      s.key_max[a] = float(std::sqrt(k2max));
      s.value_rms[a] = float(std::sqrt(v2sum * inv));
      s.value_max[a] = float(std::sqrt(v2max));
      chunk_token_max[a] = float(t0max);
    }
  });
  // Per head, O(M d): the value centre c_h (the count-weighted mean of the chunk means), each chunk
  // mean's distance to c_h and to vbar_0, the radius R_h = max_j (|vbar_j - c_h| + r_v,max,j) of a
  // ball around c_h that holds every value (hence every output, a convex combination of values and
  // chunk means), and the causal radii (running maximum of |v_i - vbar_0| over chunks 0..j).
  for (std::int64_t h = 0; h < H; ++h) {
    std::vector<double> centre(static_cast<std::size_t>(d), 0.0);
    for (std::int64_t j = 0; j < M; ++j) {
      const float* mv = &s.mean_value[std::size_t((h * M + j) * d)];
      for (std::int64_t c = 0; c < d; ++c) centre[std::size_t(c)] += double(chunks.size(j)) * mv[c] / double(N);
    }
    double radius = 0, running = 0;
    for (std::int64_t j = 0; j < M; ++j) {
      const float* mv = &s.mean_value[std::size_t((h * M + j) * d)];
      double e = 0, e0 = 0;
      for (std::int64_t c = 0; c < d; ++c) {
        e += (mv[c] - centre[std::size_t(c)]) * (mv[c] - centre[std::size_t(c)]);
        e0 += (mv[c] - ref0[std::size_t(h * d + c)]) * (mv[c] - ref0[std::size_t(h * d + c)]);
      }
      const std::size_t a = s.at(h, j);
      s.value_offset[a] = float(std::sqrt(e));
      s.causal_offset[a] = float(std::sqrt(e0));
      radius = std::max(radius, std::sqrt(e) + double(s.value_max[a]));
      running = std::max(running, double(chunk_token_max[a]));
      s.causal_radius[a] = float(running);
    }
    s.value_radius[std::size_t(h)] = float(radius);
  }
  return s;
}

namespace {

void check_shape(const Shape& s, const std::string& context) {
  const std::pair<const char*, std::int64_t> dims[] = {
      {"heads H", s.heads}, {"queries Nq", s.n_queries}, {"keys N", s.n_keys}, {"head width d", s.dim}};
  for (const auto& [name, value] : dims)
    if (value <= 0) throw_input(context, std::string(name) + " is " + std::to_string(value) + ", but must be positive");
}

void check_finite_array(const float* a, const char* name, std::int64_t heads, std::int64_t rows, std::int64_t dim,
                        const std::string& context) {
  const std::int64_t n = heads * rows * dim;
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(a[i])) {
      const std::int64_t h = i / (rows * dim), r = (i / dim) % rows, c = i % dim;
      throw_input(context, std::string(name) + "[" + std::to_string(h) + ", " + std::to_string(r) + ", " +
                               std::to_string(c) + "] is " + std::to_string(a[i]) + ", but must be finite");
    }
}

}  // namespace

void check_inputs(const float* q, const float* k, const float* v, const Shape& shape, const std::string& context) {
  check_shape(shape, context);
  check_finite_array(q, "q", shape.heads, shape.n_queries, shape.dim, context);
  check_finite_array(k, "k", shape.heads, shape.n_keys, shape.dim, context);
  check_finite_array(v, "v", shape.heads, shape.n_keys, shape.dim, context);
}

void check_options(const Options& o, const Shape& shape, const ChunkLayout& chunks) {
  const std::string f = "cedar";
  check_shape(shape, f);
  if (chunks.n_keys() != shape.n_keys || chunks.chunks() <= 0)
    throw_input(f, "the chunk layout covers " + std::to_string(chunks.n_keys()) + " keys, but k holds " +
                       std::to_string(shape.n_keys));
  if (o.budget < 0) throw_input(f, "budget is " + std::to_string(o.budget) + ", but must be >= 0");
  if (!(o.error_target >= 0.0) || !std::isfinite(o.error_target))
    throw_input(f, "error target is " + std::to_string(o.error_target) + ", but must be a finite number >= 0");
  if (o.error_target > 0.0 && o.method != Method::cedar)
    throw_input(f, "an error target applies to method cedar only, not " + to_string(o.method));
  if (o.sink_chunks < 0 || o.sink_chunks > chunks.chunks())
    throw_input(f, "sink chunks is " + std::to_string(o.sink_chunks) + ", but must be in [0, " +
                       std::to_string(chunks.chunks()) + "] (the number of chunks)");
  if (o.causal && shape.n_queries > shape.n_keys)
    throw_input(f, "causal attention takes the queries as the last Nq key positions, so Nq = " +
                       std::to_string(shape.n_queries) + " must be <= N = " + std::to_string(shape.n_keys));
  if (o.method == Method::topk && o.budget == 0 && o.sink_chunks == 0 && !o.causal)
    throw_input(f, "hard top-k with budget 0 and no sink chunk keeps no key; use a budget >= 1");
}

double relative_error(const float* a, const float* b, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = double(a[i]) - double(b[i]);
    num += e * e;
    den += double(b[i]) * double(b[i]);
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num / den);
}

}  // namespace arcal::cedar
