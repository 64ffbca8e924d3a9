// The subcommands that need LibTorch and live in `arcal-torch` (CMakeLists.txt: ARCAL_TORCH_APP_SOURCES).
// `arcal` lists them in its --help and forwards a command line that names one to `arcal-torch` in its
// own directory (main.cpp); tests/cli checks that this list and arcal-torch's registry agree.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace arcal::cli {

struct ForwardedCommand {
  std::string_view name, description;
};

inline constexpr std::array<ForwardedCommand, 6> kTorchCommands{{
    {"cedar-lm",
     "CEDAR, hard top-k and summaries in a trained language model's causal prefill: bits per byte, ECE "
     "and over-confidence against dense, and kernel time per layer"},
    {"cedar-study",
     "The clustered-attention study of CEDAR (and, with --run, CEDAR inside a trained model): "
     "results.json, CSV, figure, markdown"},
    {"intervene", "Routing ablations by source family: is routing mass causal?"},
    {"sweep", "Train a study's grid of runs (all, or one by --index) without trace/audit; torchrun/Slurm-ready"},
    {"trace", "Write a run's per-example predictions and routing trace (.npz)"},
    {"train", "Train one AttnRes (or standard-residual) vision transformer"},
}};

/// The description of torch command `name` (its file registers it with this text, so `arcal --help`
/// and `arcal-torch --help` cannot drift apart). Empty for a name that is not in the list.
inline std::string torch_command_description(std::string_view name) {
  for (const auto& c : kTorchCommands)
    if (c.name == name) return std::string(c.description);
  return {};
}

}  // namespace arcal::cli
