// Shared CLI flags for subcommands that load a trained run (trace, intervene): the
// routing-equivalent wrapper (--as-attnres, --block-size) and the norm epsilon override, one option
// table over LoadOptions (train/trainer.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "option_binding.hpp"
#include "train/trainer.hpp"

namespace arcal::cli {

/// The loading options' table (bound by each command that loads a run).
inline const OptionTable<LoadOptions>& load_option_table() {
  using C = LoadOptions;
  static const OptionTable<C> table = {
      {"as_attnres",
       "--as-attnres",
       "Load a standard-residual run as AttnRes with zero pseudo-queries (full | block): the routing-equivalent "
       "wrapper",
       &C::as_attnres,
       {},
       {"full", "block"}},
      {"block_size", "--block-size", "Block size for --as-attnres block", &C::block_size, ranges::block_size},
      {"norm_eps", "--norm-eps", "Override the norms' epsilon (e.g. 0 for the exact wrapper; negative: the run's)",
       &C::norm_eps, ranges::norm_eps},
  };
  return table;
}

struct ModelLoadFlags {
  LoadOptions options;

  void add_to(CLI::App& app) { bind_options(app, load_option_table(), options); }
};

}  // namespace arcal::cli
