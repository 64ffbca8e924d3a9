// A study: the whole pipeline of `arcal run` (and `arcal sweep`) described by one TOML file
// (datasets, models, residual modes, seeds, training, tracing and audit settings), the embedded
// default, its expansion into independent training runs, and the stable hashes that let a re-run skip
// what is complete. Standard library, nlohmann-json and toml11 only: no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace arcal {

struct StudyConfig {
  std::string name = "default";
  // [data]
  std::vector<std::string> datasets{"fashion-mnist"};
  std::string data_dir;  ///< "" = each dataset's default location
  // [model]
  std::vector<std::string> models{"ar-vit-tiny"};
  std::vector<std::string> residuals{"full"};  ///< AttnRes modes (full | block), audited
  bool standard_twin = true;                   ///< also train a standard-residual twin per seed
  int block_size = 2;
  // [train]
  std::vector<std::uint64_t> seeds{0, 1, 2};
  int epochs = 3;
  std::int64_t train_subset = 15000;
  std::int64_t max_steps = 0;
  int batch_size = 128;
  double lr = 1e-3;
  double weight_decay = 0.05;
  double sbece_weight = 0.5;
  // [execution]
  int parallel = 2;         ///< trainings (and traces) at once
  int threads_per_job = 1;  ///< intra-op threads of each
  // [trace]
  std::string split = "test";
  // [audit]
  std::vector<std::string> stats{"re", "rdv"};
  int permutations = 10000;
  int bins = 15;
  std::uint64_t audit_seed = 0;
  bool probes = true;
  int probe_restarts = 5;
  bool sensitivity = true;
  std::vector<double> sensitivity_effects{0.002, 0.005, 0.010, 0.020};
  double sensitivity_threshold = 0.5;          ///< recovery R for the verdict "absent"
  double sensitivity_threshold_effect = 0.010;  ///< nats; must be one of sensitivity_effects
  int sensitivity_draws = 20;
  bool exact_null = true;
  int null_replicates = 100;  ///< arcal audit defaults to 200; 100 keeps the default study in 15 minutes (p resolution 1/101)
  std::vector<std::string> null_variants{"confidence", "full_logit"};
  int threads = 2;  ///< worker threads of the audit
};

/// One training run of a study.
struct StudyRun {
  std::string id;  ///< dataset-model-residual-sSEED, unique within the study
  std::string dataset, model, residual;
  std::uint64_t seed = 0;
  bool audited = false;                 ///< AttnRes runs enter the audit; standard twins do not
  std::vector<std::string> train_args;  ///< `arcal train` arguments (without --out)
  std::string hash;                     ///< stable hash of train_args (16 hex digits)
  std::string dir_name() const { return id + "-" + hash.substr(0, 8); }
};

/// The embedded default study (what `arcal run` does with no --config).
StudyConfig default_study();

/// Reads a study TOML file over the defaults: every key is optional; unknown tables or keys, wrong
/// types and invalid values throw InputError naming the file and the key. Files beyond the limits
/// of core/limits.hpp (size, nesting, dotted-key parts, array elements) are refused, naming the
/// line and the limit, before the TOML parser sees them.
StudyConfig parse_study_toml(const std::string& path);

/// parse_study_toml on the file's text; `path` names the file in messages.
StudyConfig parse_study_toml_text(const std::string& text, const std::string& path);

/// The raw-text limits check of parse_study_toml_text on its own (throws InputError).
void check_toml_shape(const std::string& text, const std::string& path);

/// Checks ranges and names (InputError naming the key).
void validate_study(const StudyConfig& study);

/// The resolved study as TOML text that parse_study_toml reads back to the same study.
std::string study_to_toml(const StudyConfig& study);

/// Every training run: datasets x models x (residuals + standard twin) x seeds, in that nesting.
std::vector<StudyRun> expand_study(const StudyConfig& study);

/// `arcal audit` arguments for the study's audit settings (traces and --out not included).
std::vector<std::string> study_audit_args(const StudyConfig& study);

/// FNV-1a 64 of text as 16 hex digits: stable across platforms and builds.
std::string stable_hash(const std::string& text);

}  // namespace arcal
