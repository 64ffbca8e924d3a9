// CUDA checks, in the manner of ggml's test-backend-ops: every preset and residual mode gives the
// same logits and routing on CUDA as on the CPU (fp32, TF32 off, 1e-3 relative), bf16 autocast on
// CUDA keeps the routing softmax in fp32, and a short CIFAR-shaped run trains on the GPU (loss
// falls, accuracy above chance). Every test skips when LibTorch sees no CUDA device, so the
// binary is safe to run anywhere; tests/gpu/run_gpu_checks.sh is the entry point.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/autocast_mode.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../train/synthetic_cifar.hpp"
#include "model/ar_vit.hpp"
#include "train/trainer.hpp"

using namespace arcal;

namespace {

double max_rel(const torch::Tensor& a, const torch::Tensor& b) {
  auto d = (a.to(torch::kCPU, torch::kDouble) - b.to(torch::kCPU, torch::kDouble)).abs().max().item<double>();
  return d / std::max(b.to(torch::kDouble).abs().max().item<double>(), 1e-30);
}

#define REQUIRE_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible to LibTorch"

}  // namespace

TEST(Gpu, CudaForwardMatchesCpuForEveryPresetAndMode) {
  REQUIRE_CUDA();
  // TF32 would round matmul/conv inputs to 10 mantissa bits; the comparison is about fp32.
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  torch::manual_seed(0);
  auto images = torch::randn({4, 3, 32, 32});
  for (const auto& preset : model_presets()) {
    for (auto mode : {ResidualMode::Full, ResidualMode::Block, ResidualMode::Standard}) {
      SCOPED_TRACE(preset + " " + to_string(mode));
      ARViT cpu(make_model_config(preset, 32, 3, 10, mode, 4));
      {  // non-trivial routing, so the check covers the routing path too
        torch::NoGradGuard g;
        for (auto& kv : cpu->named_parameters())
          if (kv.key().find("pseudo_query") != std::string::npos) kv.value().normal_(0.0, 0.5);
      }
      cpu->eval();
      RoutingCapture cap_cpu, cap_gpu;
      auto ref = cpu->forward(images, &cap_cpu);
      cpu->to(torch::kCUDA);
      auto got = cpu->forward(images.to(torch::kCUDA), &cap_gpu);
      EXPECT_LE(max_rel(got, ref), 1e-3);
      ASSERT_EQ(cap_gpu.alpha.size(), cap_cpu.alpha.size());
      for (std::size_t p = 0; p < cap_cpu.alpha.size(); ++p)
        EXPECT_LE(max_rel(cap_gpu.alpha[p], cap_cpu.alpha[p]), 1e-3) << p;
    }
  }
}

TEST(Gpu, Bf16AutocastKeepsRoutingInFp32) {
  REQUIRE_CUDA();
  torch::manual_seed(1);
  ARViT m(make_model_config("ar-swin-tiny", 32, 3, 10, ResidualMode::Full, 2));
  m->to(torch::kCUDA);
  auto x = torch::randn({4, 3, 32, 32}, torch::kCUDA);
  auto ref = m->forward(x);
  RoutingCapture cap;
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  auto got = m->forward(x, &cap);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
  for (const auto& a : cap.alpha) EXPECT_EQ(a.scalar_type(), torch::kFloat);
  EXPECT_LE(max_rel(got.to(torch::kFloat), ref), 5e-2);  // bf16 keeps 8 mantissa bits
}

TEST(Gpu, ShortCifarShapedRunTrains) {
  REQUIRE_CUDA();
  const auto root = std::filesystem::temp_directory_path() / ("arcal_gpu_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  arcal::testing::write_synthetic_cifar10((root / "data").string(), 400, 7);  // 2000 training images
  for (const std::string precision : {"fp32", "bf16"}) {
    TrainConfig c;
    c.dataset = "cifar10";
    c.data_dir = (root / "data").string();
    c.model = "ar-vit-tiny";
    c.residual = "full";
    c.device = "cuda";
    c.precision = precision;
    c.batch_size = 64;
    c.epochs = 3;
    c.lr = 2e-3;
    auto s = train_run(c, (root / ("run_" + precision)).string(), false);
    std::cout << "[          ] " << precision << ": test accuracy " << s["test_accuracy"] << ", "
              << s["images_per_second"] << " img/s\n";
    EXPECT_GT(s["test_accuracy"].get<double>(), 0.3) << precision;  // chance is 0.1; the stripes are easy
  }
  std::filesystem::remove_all(root);
}

// `gpu_checks --write-cifar DIR` writes the synthetic CIFAR-10 folder for the script's CLI runs;
// `gpu_checks --cuda-available` exits 0 when LibTorch sees a CUDA device; anything else runs the tests.
int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--cuda-available") return torch::cuda::is_available() ? 0 : 1;
  if (argc == 3 && std::string(argv[1]) == "--write-cifar") {
    arcal::testing::write_synthetic_cifar10(argv[2], 400, 7);
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
