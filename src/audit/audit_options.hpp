// Every option of the audit family: `arcal audit`'s flags, the study file's [audit] table, the Python
// module's arcal.audit keyword arguments and the audit directory's identity hash all come from one
// option table (core/options.hpp) over FullAuditOptions. Standard library only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "audit/verdict.hpp"
#include "core/options.hpp"

namespace arcal {

/// Every option of `arcal audit` (docs/interface.md), with the CLI's defaults.
struct FullAuditOptions {
  std::vector<std::string> stats{"re", "rdv"};  ///< routing statistics (re, rdv) or feature names
  int permutations = 10000;                     ///< within-bin permutations R
  std::uint64_t seed = 0;                       ///< permutations, splits, shuffles, probe seeds
  std::uint64_t bins = 15;
  bool equal_mass = false;
  double alpha = 0.05;
  double smallest_effect =
      kDefaultSmallestEffect;    ///< the verdict's delta [nats] (method.md §6.8 "The verdict"; audit/verdict.hpp)
  bool drop_duplicates = false;  ///< remove duplicated rows before the audit (method.md §6.9 "Data integrity")
  bool condcal = true;
  bool probes = true;
  int probe_restarts = 1;  ///< seeded restarts averaged per MLP probe and split
  int probe_repeats = 5;   ///< repeated 2-fold cross-fits per run
  bool sensitivity = false;
  std::vector<double> sensitivity_effects{0.002, 0.005, 0.010, 0.020};
  int sensitivity_draws = 20;
  double sensitivity_threshold = 0.5;
  double sensitivity_threshold_effect = 0.010;
  double correction_ridge = -1.0;  ///< the correction probe's ridge; -1: chosen by inner CV (method.md §6.5)
  bool exact_null = false;
  int null_replicates = 200;
  std::vector<std::string> null_variants{"confidence", "full_logit"};
  std::uint64_t null_group_size = 5;  ///< matched-group size of the conditional permutation null (2-10)
  bool null_model_based = true;       ///< also run the model-based null (§6.6 b), labelled as such
  bool null_sequential = true;        ///< stop the decision null once its decisions at alpha are settled
  int refit_restarts = 1;
  int refit_patience = 3;
  bool refit_cold = false;
  /// Most examples per run the sensitivity audit and the exact null refit on (a seeded subsample of
  /// larger runs, run_input.hpp subsample_run; 0 = all). Their cost is a few hundred probe refits per
  /// run, so at N = 10^5-10^6 the whole run is out of reach; the subsample costs power only.
  std::uint64_t refit_subsample = 20000;
  int threads = 0;        ///< workers for the MLP fits (0 = all cores); results do not depend on it
  bool progress = false;  ///< progress lines and bars on stderr (not an option of the table)
};

/// The audit family's option table (keys = TOML keys of [audit] = Python keyword names).
const OptionTable<FullAuditOptions>& audit_option_table();

/// check_options plus the rules that tie options together (a non-empty statistic list, the threshold
/// effect among the effects). Throws InputError naming `where` and the option (its flag, or its key
/// with by_key: the study file's messages).
void validate_audit_options(const FullAuditOptions& o, const std::string& where, bool by_key = false);

}  // namespace arcal
