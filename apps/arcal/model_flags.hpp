// Shared CLI flags for subcommands that load a trained run (trace, intervene): the
// routing-equivalent wrapper (--as-attnres, --block-size) and the norm epsilon override.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "train/trainer.hpp"

namespace arcal::cli {

struct ModelLoadFlags {
  LoadOptions options;

  void add_to(CLI::App& app) {
    app.add_option("--as-attnres", options.as_attnres,
                   "Load a standard-residual run as AttnRes with zero pseudo-queries (full | block): the "
                   "routing-equivalent wrapper");
    app.add_option("--block-size", options.block_size, "Block size for --as-attnres block")->capture_default_str();
    app.add_option("--norm-eps", options.norm_eps, "Override the norms' epsilon (e.g. 0 for the exact wrapper)");
  }
};

}  // namespace arcal::cli
