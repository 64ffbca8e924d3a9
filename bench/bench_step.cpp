// The training step split into its phases (forward, loss + backward, AdamW), with the fused
// operators of model/fused.hpp on and off (with them, the trainer's one-pass AdamW of train/adamw.hpp;
// without, LibTorch's step), in fp32 and bf16 autocast, all in one run (issue 26). A third case per
// precision, "uncut", is the fused step without AR-ViT's first-token cut (model/ar_vit.hpp), so the
// cut's share is a ratio in the same run.
// Wall-clock timing without LibTorch's profiler, whose per-operator cost distorts a step made of
// thousands of small calls (bench/README.md). Random images and labels: the step's cost does not
// depend on the data.
//
// With --attention, the attention core alone, fused against LibTorch's operators (see time_attention).
//
// Usage: bench_step [--preset ar-vit-tiny] [--residual full|block|standard] [--batch 128]
//                   [--steps 30] [--threads 1] [--attention]
#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "model/ar_vit.hpp"
#include "model/fused.hpp"
#include "train/adamw.hpp"
#include "train/sbece.hpp"
#include "ops/blas.hpp"
#include "ops/torch/compute_threads.hpp"

using namespace arcal;

namespace {

using Clock = std::chrono::steady_clock;

struct Phases {
  double forward = 0, backward = 0, optimizer = 0;
  double total() const { return forward + backward + optimizer; }
};

Phases time_steps(ARViT& model, torch::optim::AdamW& opt, const torch::Tensor& x, const torch::Tensor& y, int steps,
                  bool bf16) {
  Phases p;
  for (int s = 0; s < steps + 3; ++s) {  // 3 warm-up steps
    if (fused_operators_enabled())
      clear_gradients(opt);  // the trainer's (train/adamw.hpp)
    else
      opt.zero_grad();
    auto t0 = Clock::now();
    if (bf16) {
      at::autocast::set_autocast_enabled(at::kCPU, true);
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    }
    auto logits = model->forward(x);
    if (bf16) {
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
    }
    logits = logits.to(torch::kFloat);
    auto t1 = Clock::now();
    auto loss = torch::cross_entropy_loss(logits, y) + 0.1 * soft_binned_ece(logits, y, 15, 0.01);
    loss.backward();
    if (fused_operators_enabled()) restore_unused_gradients(opt);
    auto t2 = Clock::now();
    if (fused_operators_enabled())
      adamw_step(opt);  // the trainer's one-pass step (train/adamw.hpp)
    else
      opt.step();  // LibTorch's, as before the fused operators
    auto t3 = Clock::now();
    if (s >= 3) {
      p.forward += std::chrono::duration<double>(t1 - t0).count();
      p.backward += std::chrono::duration<double>(t2 - t1).count();
      p.optimizer += std::chrono::duration<double>(t3 - t2).count();
    }
  }
  p.forward /= steps;
  p.backward /= steps;
  p.optimizer /= steps;
  return p;
}

// The attention core alone (issue 26): fused_self_attention's forward and backward against
// composite_self_attention (the same softmax(q k^T / sqrt(hd)) v in LibTorch's operators), at the
// preset's shape (batch, tokens, width, heads), fp32 and bf16, best of `reps` calls each, in one run.
struct CoreTimes {
  double forward = 1e30, backward = 1e30;
};
CoreTimes time_attention(bool fused, const torch::Tensor& qkv0, const torch::Tensor& g, int heads, int reps) {
  CoreTimes t;
  for (int r = 0; r < reps + 3; ++r) {
    auto qkv = qkv0.detach().clone().requires_grad_(true);
    const auto t0 = Clock::now();
    const auto o = fused ? fused_self_attention(qkv, heads) : composite_self_attention(qkv, heads);
    const auto t1 = Clock::now();
    o.backward(g);
    const auto t2 = Clock::now();
    if (r >= 3) {
      t.forward = std::min(t.forward, std::chrono::duration<double>(t1 - t0).count());
      t.backward = std::min(t.backward, std::chrono::duration<double>(t2 - t1).count());
    }
  }
  return t;
}

void attention_table(const ModelConfig& cfg, int batch, int reps) {
  const std::int64_t T = cfg.tokens(), D = cfg.dim;
  std::printf("attention core, batch %d, %lld tokens, width %lld, %d heads; best of %d calls, ms\n", batch,
              static_cast<long long>(T), static_cast<long long>(D), cfg.heads, reps);
  std::printf("%-6s %10s %10s %12s %12s %8s\n", "prec", "fused fwd", "fused bwd", "LibTorch fwd", "LibTorch bwd",
              "ratio");
  for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
    torch::manual_seed(2);
    const auto qkv = torch::randn({batch, T, 3 * D}).to(dtype);
    const auto g = torch::randn({batch, T, D}).to(dtype);
    set_fused_operators(true);
    const auto f = time_attention(true, qkv, g, cfg.heads, reps);
    const auto c = time_attention(false, qkv, g, cfg.heads, reps);
    std::printf("%-6s %10.3f %10.3f %12.3f %12.3f %7.2fx\n", dtype == torch::kFloat ? "fp32" : "bf16", 1e3 * f.forward,
                1e3 * f.backward, 1e3 * c.forward, 1e3 * c.backward,
                (c.forward + c.backward) / (f.forward + f.backward));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_step: the training step's phases with the fused operators on and off (fp32, bf16)"};
  std::string preset = "ar-vit-tiny", residual = "full";
  int batch = 128, steps = 30, threads = 1;
  app.add_option("--preset", preset, "model preset")->capture_default_str();
  app.add_option("--residual", residual, "full | block | standard")->capture_default_str();
  app.add_option("--batch", batch, "images per step")->capture_default_str();
  app.add_option("--steps", steps, "timed steps per case (after 3 warm-up steps)")->capture_default_str();
  app.add_option("--threads", threads, "intra-op threads")->capture_default_str();
  std::string only;
  app.add_option("--only", only,
                 "time one case only (for perf record): fp32-composite, fp32-uncut, fp32-fused, bf16-composite, "
                 "bf16-uncut, bf16-fused");
  bool attention = false;
  app.add_flag("--attention", attention,
               "time the attention core alone (forward and backward, fused against LibTorch's operators) instead "
               "of the step");
  CLI11_PARSE(app, argc, argv);
  reexec_with_native_openblas_kernels(argv);  // as arcal itself does
  set_compute_threads(threads);               // LibTorch's and OpenBLAS's threads, as arcal train sets them
  keep_freed_memory_for_training();           // and its allocator settings
  const auto mode = parse_residual_mode(residual);
  auto cfg = make_model_config(preset, 28, 1, 10, mode, 2);
  if (attention) {
    attention_table(cfg, batch, std::max(steps, 1) * 10);
    return 0;
  }
  torch::manual_seed(0);
  auto x = torch::randn({batch, 1, 28, 28});
  auto y = torch::randint(0, 10, {batch}, torch::kLong);
  std::printf("%s %s, batch %d, %d thread(s), %d steps per case; ms per step (images/s)\n", preset.c_str(),
              residual.c_str(), batch, threads, steps);
  std::printf("%-6s %-9s %9s %9s %9s %9s %10s\n", "prec", "operators", "forward", "backward", "AdamW", "step",
              "images/s");
  for (bool bf16 : {false, true}) {
    double composite = 0, uncut = 0;
    for (const std::string operators : {"composite", "uncut", "fused"}) {
      const std::string name = std::string(bf16 ? "bf16" : "fp32") + "-" + operators;
      if (!only.empty() && only != name) continue;
      set_fused_operators(operators != "composite");
      set_first_token_cut(operators != "uncut");
      torch::manual_seed(1);
      ARViT model(cfg);
      torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.05));
      const auto p = time_steps(model, opt, x, y, steps, bf16);
      std::printf("%-6s %-9s %9.2f %9.2f %9.2f %9.2f %10.1f", bf16 ? "bf16" : "fp32", operators.c_str(),
                  1e3 * p.forward, 1e3 * p.backward, 1e3 * p.optimizer, 1e3 * p.total(), batch / p.total());
      if (operators == "fused" && composite > 0 && uncut > 0)
        std::printf("   fused / composite: %.2fx, cut / uncut: %.2fx\n", composite / p.total(), uncut / p.total());
      else
        std::printf("\n");
      if (operators == "composite") composite = p.total();
      if (operators == "uncut") uncut = p.total();
    }
  }
  return 0;
}
