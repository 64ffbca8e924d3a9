// bench_cedar: kernel time of dense attention (arcal's tiled online softmax and LibTorch's
// matmul-softmax-matmul on the same threads) and of CEDAR / hard top-k at B in {8, 16, 32} (CEDAR
// also with its chunk summaries built once and reused, as a KV cache would), with the relative output
// error of each beside it and its ratio against both dense baselines, on clustered keys/values
// (src/cedar/clustered_study.hpp), all in one run so the ratios share the machine's load. See bench/README.md.
//
// usage: bench_cedar [--keys 32768,65536,131072] [--dims 64,128] [--queries 1024] [--chunk 64]
//                    [--budgets 8,16,32] [--threads N] [--repeats R] [--dispersion S]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cedar/cedar.hpp"
#include "cedar/clustered_study.hpp"
#include "ops/blas.hpp"
#include "ops/torch/compute_threads.hpp"

namespace {

using namespace arcal::cedar;
using clock_type = std::chrono::steady_clock;

std::vector<long long> parse_list(const std::string& s) {
  std::vector<long long> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stoll(item));
  return v;
}

double load_average() {
  std::ifstream f("/proc/loadavg");
  double a = -1;
  f >> a;
  return a;
}

template <class F>
double best_of(int repeats, F&& f) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock_type::now();
    f();
    best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  // LibTorch's BLAS (OpenBLAS) with its native AVX-512/AVX2 kernels, as `arcal` itself runs it.
  arcal::reexec_with_native_openblas_kernels(argv);
  std::vector<long long> keys = {32768, 65536, 131072}, dims = {64, 128}, budgets = {8, 16, 32};
  long long queries = 1024, chunk = 64;
  int threads = int(std::max(1u, std::thread::hardware_concurrency())), repeats = 3;
  double dispersion = 0.1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--keys")
      keys = parse_list(v);
    else if (a == "--dims")
      dims = parse_list(v);
    else if (a == "--budgets")
      budgets = parse_list(v);
    else if (a == "--queries")
      queries = std::stoll(v);
    else if (a == "--chunk")
      chunk = std::stoll(v);
    else if (a == "--threads")
      threads = std::stoi(v);
    else if (a == "--repeats")
      repeats = std::stoi(v);
    else if (a == "--dispersion")
      dispersion = std::stod(v);
    else {
      std::fprintf(stderr, "bench_cedar: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  arcal::set_compute_threads(threads);  // LibTorch's intra-op pool and OpenBLAS's own
  std::printf(
      "bench_cedar: %lld queries, chunks of %lld keys, %d threads (arcal and LibTorch), best of %d; "
      "clustered keys/values, dispersion %g, temperature 1, 2 clusters per query\n",
      queries, chunk, threads, repeats, dispersion);
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OPENBLAS_CORETYPE=%s; load average at start: %.2f\n\n", core ? core : "(unset)", load_average());
  std::printf("%7s %4s | %10s %10s %6s | %-6s %4s %10s %8s %10s %10s\n", "keys", "d", "dense s", "torch s", "d/t",
              "method", "B", "time s", "dense/x", "rel err", "mean exp");
  for (long long d : dims)
    for (long long n : keys) {
      ClusteredSpec spec;
      spec.heads = 1;
      spec.n_keys = n;
      spec.chunk_size = chunk;
      spec.n_queries = queries;
      spec.dim = d;
      spec.dispersion = dispersion;
      spec.temperature = 1.0;
      spec.query_clusters = 2;
      spec.seed = 1;
      const Qkv x = clustered_qkv(spec);
      const ChunkLayout ch = fixed_chunks(n, chunk);
      std::vector<float> dense(x.q.size()), out(x.q.size());
      std::vector<std::int32_t> expanded(static_cast<std::size_t>(queries));
      Options od;
      od.method = Method::dense;
      od.threads = threads;
      const double t_dense = best_of(repeats, [&] {
        attention(x.q.data(), x.k.data(), x.v.data(), x.shape, ch, od, dense.data(), expanded.data());
      });
      // LibTorch: softmax(q k^T / sqrt(d)) v, the three calls a PyTorch user writes.
      auto q = torch::from_blob(const_cast<float*>(x.q.data()), {queries, d});
      auto k = torch::from_blob(const_cast<float*>(x.k.data()), {n, d});
      auto v = torch::from_blob(const_cast<float*>(x.v.data()), {n, d});
      torch::Tensor ref;
      const double t_torch = best_of(repeats, [&] {
        torch::NoGradGuard g;
        ref = torch::matmul(torch::softmax(torch::matmul(q, k.t()) * (1.0 / std::sqrt(double(d))), -1), v);
      });
      const double err_torch = relative_error(ref.data_ptr<float>(), dense.data(), dense.size());
      std::printf("%7lld %4lld | %10.4f %10.4f %6.2f | %-6s %4s %10s %8s %10.2e %10s\n", n, d, t_dense, t_torch,
                  t_dense / t_torch, "torch", "-", "-", "-", err_torch, "-");
      for (long long b : budgets)
        for (Method m : {Method::cedar, Method::topk}) {
          Options o;
          o.method = m;
          o.budget = b;
          o.threads = threads;
          double summary_s = 0;
          // The time of a fresh key/value set: chunk summaries plus the attention pass.
          const double t = best_of(repeats, [&] {
            const Stats st = attention(x.q.data(), x.k.data(), x.v.data(), x.shape, ch, o, out.data(), expanded.data());
            summary_s = st.summary_seconds;
          });
          double mean_exp = 0;
          for (auto e : expanded) mean_exp += e;
          mean_exp /= double(expanded.size());
          std::printf(
              "%7lld %4lld | %10s %10s %6s | %-6s %4lld %10.4f %8.1f %10.2e %10.2f   (summaries %.4f s; %.1fx "
              "LibTorch)\n",
              n, d, "", "", "", to_string(m).c_str(), b, t, t_dense / t,
              relative_error(out.data(), dense.data(), dense.size()), mean_exp, summary_s, t_torch / t);
          if (m != Method::cedar) continue;
          // The summaries built once and reused, as a KV cache keeps them for a fixed key/value set
          // (prefill chunks, decoding steps): only the attention pass is timed.
          const Summaries cached = summarize(x.k.data(), x.v.data(), x.shape, ch, threads);
          const double tc = best_of(repeats, [&] {
            attention(x.q.data(), x.k.data(), x.v.data(), x.shape, ch, o, out.data(), expanded.data(), &cached);
          });
          std::printf(
              "%7lld %4lld | %10s %10s %6s | %-6s %4lld %10.4f %8.1f %10.2e %10s   (cached summaries; %.1fx "
              "LibTorch)\n",
              n, d, "", "", "", "cedar*", b, tc, t_dense / tc, relative_error(out.data(), dense.data(), dense.size()),
              "", t_torch / tc);
        }
      std::fflush(stdout);
    }
  std::printf("\nload average at end: %.2f\n", load_average());
  return 0;
}
