// bench_metrics: arcal's calibration metrics against a NumPy implementation of the same conventions
// (bench/reference/metrics_numpy.py) on one synthetic N x K data set: values must agree to 1e-9
// relative, and the time ratio NumPy / arcal is printed. usage: bench_metrics [N] [K] [BINS] [REPEATS]
// (arcal's time is the best of REPEATS calls, default 1; bench_python_metrics.py compares against it).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "calib/metrics.hpp"
#include "core/atomic_file.hpp"
#include "io/trace.hpp"

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000000, k = argc > 2 ? std::atol(argv[2]) : 100;
  const int bins = argc > 3 ? std::atoi(argv[3]) : 15;
  const int repeats = argc > 4 ? std::max(1, std::atoi(argv[4])) : 1;
  const std::string dir = "/tmp/arcal_bench_" + std::to_string(n) + "_" + std::to_string(k);
  const std::string data = dir + ".npz", out = dir + ".json";
  const std::string py =
      std::string(ARCAL_BENCH_PYTHON) + " " + ARCAL_SOURCE_DIR + "/bench/reference/metrics_numpy.py ";
  if (std::system((py + "make " + data + " " + std::to_string(n) + " " + std::to_string(k) + " 7").c_str()) != 0)
    return 1;
  if (std::system((py + "run " + data + " " + std::to_string(bins) + " " + out).c_str()) != 0) return 1;
  const auto ref = nlohmann::json::parse(arcal::read_file(out));
  const arcal::Trace t = arcal::load_trace(data);
  arcal::ReportOptions opt;
  opt.bins = bins;
  opt.draws = 0;              // point values: the same work the NumPy side does (no bootstrap,
  opt.consistency_draws = 0;  // no consistency-test intervals)
  arcal::CalibrationReport r;
  double ours = 1e300;
  for (int rep = 0; rep < repeats; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    r = arcal::calibration_report(t.probs, t.n, t.classes, t.labels, opt);
    ours = std::min(ours, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const std::map<std::string, double> got = {{"accuracy", r.accuracy.value},
                                             {"ece", r.ece.value},
                                             {"mce", r.mce.value},
                                             {"rmsce", r.rmsce.value},
                                             {"ada_ece", r.ada_ece.value},
                                             {"classwise_ece", r.classwise_ece.value},
                                             {"debiased_ece", r.debiased_ece.value},
                                             {"smece", r.smece.value},
                                             {"smece_sigma", r.smece_sigma.value},
                                             {"nll", r.nll.value},
                                             {"brier", r.brier.value},
                                             {"auroc", r.auroc.value}};
  bool ok = true;
  std::printf("bench_metrics: N = %ld, K = %ld, bins = %d\n  %-14s %22s %22s %10s\n", n, k, bins, "metric", "arcal",
              "numpy", "rel.diff");
  for (const auto& [name, v] : got) {
    const double want = ref["values"][name].get<double>();
    const double rel = std::fabs(v - want) / std::max(std::fabs(want), 1e-300);
    const bool good = rel <= 1e-9;
    ok = ok && good;
    std::printf("  %-14s %22.15g %22.15g %10.2e %s\n", name.c_str(), v, want, rel, good ? "" : "MISMATCH");
  }
  const double theirs = ref["seconds"].get<double>();
  std::printf("  time: arcal %.3f s, numpy %.3f s, ratio numpy/arcal = %.1fx\n", ours, theirs, theirs / ours);
  std::printf("  %s\n", ok ? "values agree to 1e-9 relative" : "VALUES DISAGREE");
  return ok ? 0 : 1;
}
