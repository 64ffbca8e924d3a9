// bench_smoother: AR-CondCal's kernel smoother (stats/kernels.hpp NadarayaWatson) at the audit's
// shapes, n sources predicted at n queries in (logit c, s) and in logit c alone, Scott multiple 1:
// the fast path (box Hermite expansion) against the exact sum it replaces (fast = false, today's code
// before issue 26) and the vectorised NumPy reference (bench/reference/smoother_numpy.py), one core
// each, in one run; the largest difference from the exact sum beside each ratio. Above --exact-max
// points the exact sum and NumPy are skipped (quadratic) and the fast path runs alone, on one core and
// on all cores. usage: bench_smoother [N ...] [--exact-max M]  (default 10000 30000 100000 1000000)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "core/subprocess.hpp"
#include "io/npz.hpp"
#include "stats/kernels.hpp"

using namespace arcal;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Audit-like columns: logit c of a confident model (skewed) and a routing statistic correlated with it.
void make_data(std::size_t n, std::uint64_t seed, std::vector<double>& x2, std::vector<double>& x1,
               std::vector<double>& y) {
  Rng rng(seed);
  x2.resize(2 * n);
  x1.resize(n);
  y.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double a = rng.normal(), b = rng.normal();
    const double logit = 2.5 + 1.5 * a;
    x2[2 * i] = x1[i] = logit;
    x2[2 * i + 1] = 0.5 * a + b;
    y[i] = rng.uniform() < 1.0 / (1.0 + std::exp(-logit)) ? 1.0 : 0.0;
  }
}

struct Timed {
  std::vector<double> est;
  double wall = 0, cpu = 0;
};

Timed run(const std::vector<double>& x, const std::vector<double>& y, std::size_t d, const std::vector<double>& h,
          bool fast, int threads) {
  NadarayaWatsonOptions o;
  o.fast = fast;
  o.threads = threads;
  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  Timed t;
  t.est = NadarayaWatson(x, y, d, h, o).predict(x);
  t.wall = seconds_since(t0);
  t.cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  return t;
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::size_t> sizes;
  std::size_t exact_max = 30000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--exact-max" && i + 1 < argc)
      exact_max = std::strtoul(argv[++i], nullptr, 10);
    else
      sizes.push_back(std::strtoul(argv[i], nullptr, 10));
  }
  if (sizes.empty()) sizes = {10000, 30000, 100000, 1000000};
  const auto dir = std::filesystem::temp_directory_path() / "arcal_bench_smoother";
  std::filesystem::create_directories(dir);
  std::printf("n sources predicted at the same n points; Scott multiple 1; one core unless said\n");
  std::printf("%9s %4s %10s %10s %10s %10s %9s %9s %10s %10s\n", "n", "dims", "fast [s]", "exact [s]", "numpy [s]",
              "fast 2T [s]", "exact/fast", "numpy/fast", "|fast-exact|", "|numpy-exact|");
  for (const std::size_t n : sizes) {
    std::vector<double> x2, x1, y;
    make_data(n, 26 + n, x2, x1, y);
    std::vector<double> c0(n), c1(n);
    for (std::size_t i = 0; i < n; ++i) c0[i] = x2[2 * i], c1[i] = x2[2 * i + 1];
    for (const std::size_t d : {std::size_t{2}, std::size_t{1}}) {
      const std::vector<double>& x = d == 2 ? x2 : x1;
      const std::vector<double> h = d == 2 ? std::vector<double>{scott_bandwidth(c0, 2), scott_bandwidth(c1, 2)}
                                           : std::vector<double>{scott_bandwidth(c0, 1)};
      const Timed fast = run(x, y, d, h, true, 1);
      const Timed par = run(x, y, d, h, true, 0);
      if (par.est != fast.est) {
        std::fprintf(stderr, "bench_smoother: n = %zu, d = %zu: the estimates depend on the thread count\n", n, d);
        return 1;
      }
      if (n > exact_max) {
        std::printf("%9zu %4zu %10.3f %10s %10s %10.3f %9s %9s %10s %10s\n", n, d, fast.wall, "-", "-", par.wall, "-",
                    "-", "-", "-");
        continue;
      }
      const Timed exact = run(x, y, d, h, false, 1);
      const std::string in = (dir / "in.npz").string(), out = (dir / "out.npy").string(),
                        js = (dir / "t.json").string();
      write_npz(in,
                {NpyArray::from_double("x", x, {n, d}), NpyArray::from_double("y", y, {n}),
                 NpyArray::from_double("h", h, {d}), NpyArray::from_double("q", x, {n, d})},
                true);
      SpawnOptions so;
      so.stdout_path = js;
      if (run_program({ARCAL_BENCH_PYTHON, ARCAL_BENCH_REFERENCE, in, out}, so) != 0) {
        std::fprintf(stderr, "bench_smoother: the NumPy reference failed\n");
        return 1;
      }
      const auto ref = nlohmann::json::parse(read_file(js));
      const auto arrays = parse_npy(read_file(out), out, "estimate").as_double();
      std::printf("%9zu %4zu %10.3f %10.3f %10.3f %10.3f %8.1fx %8.1fx %10.1e %10.1e\n", n, d, fast.wall, exact.wall,
                  ref["seconds"].get<double>(), par.wall, exact.wall / fast.wall,
                  ref["seconds"].get<double>() / fast.wall, max_diff(fast.est, exact.est), max_diff(arrays, exact.est));
    }
  }
  std::printf("(%zu cores for the 2T column; identical estimates on one core and on all)\n", worker_count(0, 1 << 20));
  return 0;
}
