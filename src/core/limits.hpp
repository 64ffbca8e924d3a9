// Every limit on hostile input in one place: how large an array arcal allocates for a file, how large
// and how deeply nested a text file (TOML study, JSON config or results) may be, and the valid range
// of every numeric flag (used by the CLI11 option tables and by the study file, so the two cannot
// drift). Size arithmetic on untrusted numbers goes through checked_mul/checked_add, and every
// refusal is an InputError naming the file, the member, the value and the limit.
#pragma once

#include <cstdint>
#include <string>

namespace arcal {

struct InputLimits {
  /// Bytes of any one array read from a file (an npz member, IDX images, a CIFAR file). Also capped
  /// by the memory available when the file is read. Environment: ARCAL_MAX_ARRAY_BYTES.
  std::uint64_t max_array_bytes = std::uint64_t(8) << 30;
  /// Bytes of all arrays of one file together.
  std::uint64_t max_total_bytes = std::uint64_t(16) << 30;
  /// Dimensions of an .npy array (numpy's own limit is 64).
  std::uint64_t max_ndim = 32;
  /// Bytes of a TOML study file or a JSON file that arcal parses as a whole (config.json,
  /// results.json, calibrator parameters). Environment: ARCAL_MAX_TEXT_BYTES.
  std::uint64_t max_text_bytes = std::uint64_t(64) << 20;
  /// Bytes of a TOML study file (a resolved study is about 2 KB).
  std::uint64_t max_study_bytes = std::uint64_t(1) << 20;
  /// Arrays and tables (TOML) or arrays and objects (JSON) nested inside each other.
  int max_nesting = 64;
  /// Elements of one TOML array (a study lists seeds, presets and effects: a handful each).
  std::uint64_t max_toml_array_elements = 10000;
  /// Components of one dotted TOML key or table header (a.b.c).
  int max_toml_key_depth = 16;
  /// Whether to compare sizes with the memory available (MemAvailable) when reading; fuzzers and
  /// tests turn this off to stay deterministic.
  bool check_available_memory = true;
};

/// The limits in force: the defaults above, with the environment overrides applied once.
const InputLimits& input_limits();
/// Replaces the limits in force (tests and fuzzers).
void set_input_limits(const InputLimits& limits);

/// MemAvailable of /proc/meminfo in bytes (0 when unknown).
std::uint64_t available_memory_bytes();

/// a * b and a + b; false (out untouched) when the result does not fit in 64 bits.
bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out);
bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t& out);

/// Throws InputError "CONTEXT: WHAT needs BYTES bytes, more than LIMIT" when `bytes` exceeds the
/// array limit or the available memory (the message says which and how to raise the limit).
void check_array_bytes(std::uint64_t bytes, const std::string& context, const std::string& what);

/// Human size ("1.5 GiB (1610612736 bytes)") for messages.
std::string byte_size(std::uint64_t bytes);

// ---- numeric flag ranges (inclusive). CLI11 option tables and the study file both use these.

struct IntRange {
  long long lo, hi;
};
struct RealRange {
  double lo, hi;
  bool lo_open;  ///< (lo, hi] instead of [lo, hi]
};

namespace ranges {
inline constexpr IntRange epochs{1, 100000};
inline constexpr IntRange max_steps{0, 1000000000000LL};  ///< 0 = no cap
inline constexpr IntRange train_subset{0, 1000000000};    ///< 0 = all
inline constexpr IntRange batch_size{1, 65536};
inline constexpr IntRange block_size{1, 64};  ///< the preset narrows it further
inline constexpr IntRange patch{0, 1024};     ///< train --patch, 0 = the preset's; must divide the image
inline constexpr IntRange context{2, 8192};   ///< train --context: tokens per language-model sequence
inline constexpr IntRange threads{1, 1024};
inline constexpr IntRange checkpoint_every{1, 1000000000000LL};
inline constexpr IntRange sbece_bins{1, 1000};
inline constexpr IntRange subset{0, 1000000000};        ///< intervene --subset, 0 = all
inline constexpr IntRange bootstrap{0, 1000000};        ///< metrics: 0 = no intervals
inline constexpr IntRange bootstrap_draws{1, 1000000};  ///< intervene
inline constexpr IntRange parallel{1, 256};
inline constexpr IntRange parallel_override{0, 256};  ///< run --parallel, 0 = the study's [execution] parallel
inline constexpr IntRange metrics_bins{1, 100000};    ///< metrics --bins
// calibrators (calib/fitted_calibrator.hpp; Python's Calibrator options and from_dict)
inline constexpr IntRange calibrator_bins{1, 100000};  ///< histogram bins (10^9 grew until the kernel killed it)
inline constexpr IntRange calibrator_knots{2, 256};    ///< qats knots (each adds a parameter to every L-BFGS step)
// arcal simulate (the trace is also held to the array limit before it is built)
inline constexpr IntRange simulate_n{2, 100000000};
inline constexpr IntRange simulate_classes{2, 100000};
inline constexpr IntRange simulate_points{1, 1000};
inline constexpr IntRange permutations{1, 100000000};
inline constexpr IntRange bins{1, 1000};
inline constexpr IntRange probe_restarts{1, 100};  ///< also --refit-restarts
inline constexpr IntRange refit_patience{1, 1000};
inline constexpr IntRange refit_subsample{0, 100000000};  ///< audit --refit-subsample, 0 = every example
inline constexpr IntRange sensitivity_draws{1, 100000};
inline constexpr IntRange null_replicates{1, 1000000};
inline constexpr IntRange null_group_size{2, 10};  ///< audit --null-group-size (matched-group size)
inline constexpr IntRange probe_repeats{1, 100};   ///< audit --probe-repeats (2-fold cross-fits per run)
inline constexpr IntRange audit_threads{0, 1024};  ///< 0 = all cores
inline constexpr RealRange lr{0.0, 10.0, true};
inline constexpr RealRange weight_decay{0.0, 100.0, false};
inline constexpr RealRange warmup_fraction{0.0, 0.999, false};
inline constexpr RealRange sbece_weight{0.0, 1000.0, false};
inline constexpr RealRange sbece_temperature{0.0, 100.0, true};
inline constexpr RealRange norm_eps{0.0, 1.0, false};
inline constexpr RealRange sensitivity_threshold{-1000.0, 1000.0, false};
inline constexpr RealRange correction_ridge{-1.0, 1e9, false};  ///< audit: negative = chosen by inner CV
// arcal cedar (the sizes of q, k and v come from the file, under the array limits above)
inline constexpr IntRange cedar_chunk_size{1, 1LL << 40};        ///< larger than N: one chunk
inline constexpr IntRange cedar_budget{0, 1LL << 40};            ///< exact chunks per query; above M: all
inline constexpr IntRange cedar_sink_chunks{0, 1LL << 40};       ///< the kernel narrows it to [0, M]
inline constexpr IntRange worker_threads{0, 1024};               ///< 0 = all cores (cedar, cedar-study)
inline constexpr RealRange cedar_error_target{0.0, 1e6, false};  ///< 0 = always spend the budget
// arcal cedar-study: the generated q, k, v are also held to the array limit (validate_study_config)
inline constexpr IntRange study_heads{1, 64};
inline constexpr IntRange study_keys{1, 1LL << 20};
inline constexpr IntRange study_chunk_size{1, 1LL << 20};
inline constexpr IntRange study_queries{1, 1LL << 16};
inline constexpr IntRange study_dim{1, 4096};
inline constexpr IntRange study_budget{1, 1LL << 20};  ///< the study narrows it to [1, M]
inline constexpr IntRange study_query_clusters{1, 1LL << 20};
inline constexpr RealRange study_dispersion{0.0, 1000.0, false};
inline constexpr RealRange study_temperature{0.0, 1000.0, true};
inline constexpr RealRange study_error_target{0.0, 1e6, true};
inline constexpr RealRange study_kv_correlation{-1.0, 1.0, false};
inline constexpr IntRange study_grid_values{1, 64};  ///< values per grid flag (--dispersions, --budgets, ...)
}  // namespace ranges

/// "[lo, hi]" or "(lo, hi]".
std::string range_text(const IntRange& r);
std::string range_text(const RealRange& r);
bool in_range(const IntRange& r, long long v);
bool in_range(const RealRange& r, double v);  ///< false for NaN and infinities

}  // namespace arcal
