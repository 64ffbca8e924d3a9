// bench_permutation: the diagnostic's permutation family (30 tests x R = 10,000 x N = 10,000) in
// arcal against the vectorised NumPy reference (bench/reference/permutation_numpy.py) on the same
// strata, one core each. Prints both timings, the ratio and the largest p-value difference in units
// of its Monte-Carlo standard error. usage: bench_permutation [R] [tests] [N]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "audit/diagnostic.hpp"
#include "audit/simulate.hpp"
#include "core/parallel.hpp"
#include "core/atomic_file.hpp"
#include "core/rng.hpp"
#include "stats/permutation.hpp"

using namespace arcal;

int main(int argc, char** argv) {
  const int R = argc > 1 ? std::atoi(argv[1]) : 10000;
  const std::size_t tests = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 30;
  const std::size_t n = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 10000;
  // A family like the paper's: mostly null, some with small injected effects so p-values vary.
  const double effects[] = {0.0, 0.0, 0.0, 0.0001, 0.0002, 0.0005};
  std::vector<std::vector<ContrastStratum>> family;
  nlohmann::json dump = nlohmann::json::array();
  DiagnosticOptions opt;
  for (std::size_t t = 0; t < tests; ++t) {
    SimulationOptions so;
    so.n = n;
    so.seed = 100 + t;
    so.effect_nats = effects[t % 6];
    const auto s = simulate_trace(so);
    auto m = matched_confidence_strata(s.confidence, s.correct, s.routing_entropy, opt);
    nlohmann::json js = nlohmann::json::array();
    for (const auto& st : m.strata)
      js.push_back({{"values", st.values}, {"n_top", st.n_top}, {"n_bottom", st.n_bottom}, {"weight", st.weight}});
    dump.push_back(js);
    family.push_back(std::move(m.strata));
  }
  const auto dir = std::filesystem::temp_directory_path() / "arcal_bench_permutation";
  std::filesystem::create_directories(dir);
  const std::string strata_path = (dir / "strata.json").string();
  write_file_atomic(strata_path, dump.dump());

  const auto t0 = std::chrono::steady_clock::now();
  const std::clock_t c0 = std::clock();
  std::vector<PermutationTestResult> ours;
  for (std::size_t t = 0; t < tests; ++t)
    ours.push_back(within_stratum_permutation_test(family[t], R, derive_seed(1, t)));
  const double cpp_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpp_cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  std::printf("arcal  : %zu tests x R = %d x N = %zu in %.3f s wall, %.3f s CPU (one thread)\n", tests, R, n, cpp_s,
              cpp_cpu);
  // The same family with the tests on every core (what arcal audit does: run_diagnostic_family); each
  // test keeps its seed, so the results must be identical.
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<PermutationTestResult> par(tests);
  parallel_for_index(tests, 0,
                     [&](std::size_t t) { par[t] = within_stratum_permutation_test(family[t], R, derive_seed(1, t)); });
  const double par_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  for (std::size_t t = 0; t < tests; ++t)
    if (par[t].p != ours[t].p || par[t].statistic != ours[t].statistic) {
      std::fprintf(stderr, "bench_permutation: test %zu differs between one thread and all cores\n", t);
      return 1;
    }
  std::printf("arcal  : the same on %zu threads in %.3f s wall (identical results)\n", worker_count(0, tests), par_s);

  const std::string out_path = (dir / "numpy.json").string();
  const std::string cmd = std::string("env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ") + ARCAL_BENCH_PYTHON + " " +
                          ARCAL_BENCH_REFERENCE + " " + strata_path + " " + std::to_string(R) + " 7 > " + out_path;
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "bench_permutation: the NumPy reference failed: %s\n", cmd.c_str());
    return 1;
  }
  const auto ref = nlohmann::json::parse(read_file(out_path));
  const double np_s = ref["seconds"].get<double>();
  const double np_cpu = ref["cpu_seconds"].get<double>();
  double worst_z = 0.0, worst_gap = 0.0;
  for (std::size_t t = 0; t < tests; ++t) {
    const double p1 = ours[t].p, p2 = ref["p"][t].get<double>();
    const double pbar = 0.5 * (p1 + p2);
    const double se = std::sqrt(2.0 * std::max(pbar * (1 - pbar), 1.0 / R) / R);
    worst_z = std::max(worst_z, std::abs(p1 - p2) / se);
    worst_gap = std::max(worst_gap, std::abs(ours[t].statistic - ref["gap"][t].get<double>()));
    std::printf("  test %2zu  G = %+.5f  p_arcal = %.4f  p_numpy = %.4f\n", t, ours[t].statistic, p1, p2);
  }
  std::printf("numpy  : %.3f s wall, %.3f s CPU (numpy %s, one thread)\n", np_s, np_cpu,
              ref["numpy"].get<std::string>().c_str());
  std::printf(
      "ratio  : %.1fx wall, %.1fx CPU (one thread each); %.1fx wall with arcal on all cores   max |G diff| = %.2e   "
      "max |p diff| / MC se = %.2f\n",
      np_s / cpp_s, np_cpu / cpp_cpu, np_s / par_s, worst_gap, worst_z);

  // The decision test of §6.1 (cross-fitted q̂(c), residuals, conditional permutation within c-strata)
  // against the paper protocol, whole tests from the raw arrays, same family, one thread each.
  DiagnosticOptions one = opt;
  one.permutations = R;
  one.threads = 1;
  double paper_s = 0, decision_s = 0;
  for (std::size_t t = 0; t < tests; ++t) {
    SimulationOptions so;
    so.n = n;
    so.seed = 100 + t;
    so.effect_nats = effects[t % 6];
    const auto s = simulate_trace(so);
    auto t1 = std::chrono::steady_clock::now();
    (void)matched_confidence_gap_test(s.confidence, s.correct, s.routing_entropy, one, derive_seed(2, t));
    auto t2 = std::chrono::steady_clock::now();
    (void)residual_gap_test(s.confidence, s.correct, s.routing_entropy, one, derive_seed(3, t));
    auto t3 = std::chrono::steady_clock::now();
    paper_s += std::chrono::duration<double>(t2 - t1).count();
    decision_s += std::chrono::duration<double>(t3 - t2).count();
  }
  std::printf(
      "decision vs paper: paper protocol %.3f s, decision test %.3f s for the %zu tests (one thread): "
      "%.2fx the paper protocol's time\n",
      paper_s, decision_s, tests, decision_s / paper_s);
  return 0;
}
