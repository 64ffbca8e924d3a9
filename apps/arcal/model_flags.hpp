// Shared CLI flags for subcommands that load a trained run (trace, intervene): the
// routing-equivalent wrapper (--as-attnres, --block-size) and the norm epsilon override.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "flag_checks.hpp"
#include "train/trainer.hpp"

namespace arcal::cli {

struct ModelLoadFlags {
  LoadOptions options;

  void add_to(CLI::App& app) {
    app.add_option("--as-attnres", options.as_attnres,
                   "Load a standard-residual run as AttnRes with zero pseudo-queries (full | block): the "
                   "routing-equivalent wrapper")
        ->check(CLI::IsMember({"full", "block"}));
    app.add_option("--block-size", options.block_size, "Block size for --as-attnres block")
        ->capture_default_str()
        ->check(in_range(ranges::block_size));
    app.add_option("--norm-eps", options.norm_eps, "Override the norms' epsilon (e.g. 0 for the exact wrapper)")
        ->check(in_range(ranges::norm_eps));
  }
};

}  // namespace arcal::cli
