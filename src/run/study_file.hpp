// A study: the whole pipeline of `arcal run` (and `arcal sweep`) described by one TOML file
// (datasets, models, residual modes, seeds, training, tracing and audit settings), the embedded
// default, its expansion into independent training runs, and the stable hashes that let a re-run skip
// what is complete. Standard library, nlohmann-json and toml11 only: no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "audit/audit_options.hpp"
#include "core/hash.hpp"  // stable_hash, used with the study hashes
#include "train/train_config.hpp"

namespace arcal {

/// The study's audit defaults (see StudyConfig::audit).
FullAuditOptions default_study_audit();
/// The study's training defaults: all training images, 10 epochs, lr 2e-3, beta 0.1, precision auto.
TrainConfig default_study_train();

struct StudyConfig {
  std::string name = "default";
  // [data]
  std::vector<std::string> datasets{"fashion-mnist"};
  // [model]
  std::vector<std::string> models{"ar-vit-tiny"};
  std::vector<std::string> residuals{"full"};  ///< AttnRes modes (full | block), audited
  bool standard_twin = true;                   ///< also train a standard-residual twin per seed
  // [train]
  std::vector<std::uint64_t> seeds{0, 1, 2};
  /// Every other training option (train/train_config.hpp's table; keys with section data, model or
  /// train), shared by every run: each run sets dataset, model, residual, seed and threads on a copy.
  TrainConfig train = default_study_train();
  // [execution]
  int parallel = 2;         ///< trainings (and traces) at once
  int threads_per_job = 1;  ///< intra-op threads of each
  // [trace]
  std::string split = "test";
  /// Language models: the token trace holds this many evenly spaced sequences of the split (each a
  /// cluster of `context` tokens; 0 = all), arcal trace --sequences.
  std::int64_t trace_sequences = 512;
  // [audit]: every option of the audit family (audit/audit_options.hpp), with the study's defaults
  // (default_study_audit): probes with 5 restarts, sensitivity and exact null on, 100 null replicates
  // (p resolution 1/101, keeps the default study near 15 minutes), 2 worker threads.
  FullAuditOptions audit = default_study_audit();
};

/// One training run of a study.
struct StudyRun {
  std::string id;  ///< dataset-model-residual-sSEED, unique within the study
  std::string dataset, model, residual;
  std::uint64_t seed = 0;
  bool audited = false;  ///< AttnRes runs enter the audit; standard twins do not
  TrainConfig config;    ///< the typed training configuration of this run
  std::string hash;      ///< options_hash of config (16 hex digits): the run's identity
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

/// Identity of the study's audit: options_hash of its typed audit options (threads excluded).
std::string study_audit_hash(const StudyConfig& study);

}  // namespace arcal
