// Trace export: closed-form routing statistics under uniform routing, and `arcal trace` on a
// trained run read back by numpy (Debian's python3-numpy): routing rows sum to 1 over valid
// sources, and the logits reproduce the run's test accuracy from summary.json.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>

#include "core/atomic_file.hpp"
#include "model/trace_export.hpp"

using namespace arcal;
namespace fs = std::filesystem;

TEST(TraceExport, UniformRoutingHasClosedFormStatistics) {
  torch::manual_seed(1);
  ARViT m(make_model_config("ar-vit-tiny", 28, 1, 10, ResidualMode::Block, 2));
  TensorData data{torch::randn({7, 1, 28, 28}), torch::randint(0, 10, {7}, torch::kLong), 10};
  auto t = export_trace(m, data, "{}", 4);
  ASSERT_EQ(t.points, 13u);
  for (std::size_t i = 0; i < t.n; ++i)
    for (std::size_t p = 0; p < t.points; ++p) {
      const double S = t.routing_sources[p];
      const std::size_t q = i * t.points + p;
      // Uniform over S sources at depths j/(S-1): H = log S, mean 1/2, variance (S+1)/(12(S-1)).
      EXPECT_NEAR(t.routing_entropy[q], std::log(S), 1e-5);
      EXPECT_NEAR(t.routing_depth_mean[q], S > 1 ? 0.5 : 0.0, 1e-6);
      EXPECT_NEAR(t.routing_depth_var[q], S > 1 ? (S + 1) / (12 * (S - 1)) : 0.0, 1e-6);
      for (std::size_t s = 0; s < t.sources; ++s)
        EXPECT_FLOAT_EQ(t.routing[q * t.sources + s], s < S ? float(1.0 / S) : 0.0f);
    }
}

TEST(TraceCli, NumpyReadsTraceThatReproducesTestAccuracy) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
  const std::string bin = std::string(ARCAL_BINARY_DIR) + "/arcal";
  const auto dir = fs::path(ARCAL_BINARY_DIR) / "test_tmp" / "trace_cli";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string run = (dir / "run").string(), npz = (dir / "test.npz").string();
  ASSERT_EQ(
      std::system((bin + " train --residual full --train-subset 1280 --batch-size 64 --max-steps 20 --quiet --out " +
                   run + " > /dev/null")
                      .c_str()),
      0);
  ASSERT_EQ(std::system((bin + " trace --quiet --run " + run + " --out " + npz + " > /dev/null").c_str()), 0);
  const std::string py = std::string(ARCAL_TEST_PYTHON) +
                         " -c \"\nimport json, sys, numpy as np\n"
                         "d = np.load('" +
                         npz +
                         "')\n"
                         "s = json.load(open('" +
                         run +
                         "/summary.json'))\n"
                         "r, S = d['routing'], d['routing_sources']\n"
                         "assert d['logits'].shape == (10000, 10) and d['labels'].dtype == np.int64\n"
                         "assert r.shape == (10000, 13, 13) and r.dtype == np.float32\n"
                         "for p in range(len(S)):\n"
                         "    assert np.abs(r[:, p, :S[p]].sum(-1) - 1).max() < 1e-5, p\n"
                         "    assert (r[:, p, S[p]:] == 0).all(), p\n"
                         "acc = float((d['logits'].argmax(1) == d['labels']).mean())\n"
                         "assert abs(acc - s['test_accuracy']) < 1e-12, (acc, s['test_accuracy'])\n"
                         "assert json.loads(str(d['meta']))['split'] == 'test'\n\"";
  EXPECT_EQ(std::system(py.c_str()), 0);
}
