// The controlled clustered-attention study of CEDAR (method.md §8, `arcal cedar-study`): keys and
// values drawn around per-chunk cluster centres with a sweep of within-chunk dispersions, queries
// aimed at one cluster with a sweep of temperatures; the relative output error of CEDAR, hard top-k,
// summary-only and CEDAR without the second-order term against dense attention at each exact-chunk
// budget; the error reduction against hard top-k. Standard library only; nothing here prints.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cedar/cedar.hpp"

namespace arcal::cedar {

/// One clustered key/value/query set. Per head and chunk j: key centre mu_j and value centre nu_j
/// ~ N(0, I_d); token i of chunk j: k_i = mu_j + s xi_i, v_i = nu_j + s (rho xi_i + sqrt(1 - rho^2)
/// zeta_i), xi, zeta ~ N(0, I_d), s the dispersion, rho the key-value correlation. Query: A distinct
/// chunks drawn uniformly (A = query_clusters), q = tau (sum_a mu_a / sqrt(A) + noise eta),
/// eta ~ N(0, I_d): with A > 1 a query splits its attention between several clusters.
struct ClusteredSpec {
  std::int64_t heads = 1, n_keys = 4096, chunk_size = 64, n_queries = 256, dim = 64;
  double dispersion = 0.1;
  double temperature = 1.0;
  double key_value_correlation = 0.5;
  double query_noise = 0.5;
  std::int64_t query_clusters = 1;
  std::uint64_t seed = 0;
};

struct Qkv {
  Shape shape;
  std::vector<float> q, k, v;  ///< [H, Nq, d], [H, N, d], [H, N, d]
};

/// Draws the set (deterministic in spec.seed). Throws InputError for non-positive sizes or a
/// dispersion, temperature or noise below 0, or a correlation outside [-1, 1].
Qkv clustered_qkv(const ClusteredSpec& spec);

struct StudyConfig {
  std::int64_t heads = 2, n_keys = 4096, chunk_size = 64, n_queries = 256, dim = 64;
  std::vector<double> dispersions{0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6};
  std::vector<double> temperatures{0.5, 1.0, 2.0};
  /// Clusters each query aims at (ClusteredSpec::query_clusters): 1 = one dominant chunk, more =
  /// attention split between chunks, where dropping hurts most.
  std::vector<std::int64_t> query_clusters{1, 2, 4};
  std::vector<std::int64_t> budgets{1, 2, 4, 8, 16};
  /// The variable-budget arm: CEDAR with these error targets, capped at the largest budget.
  std::vector<double> error_targets{0.1, 0.03, 0.01};
  double key_value_correlation = 0.5;
  double query_noise = 0.5;
  double target_reduction = 0.98;  ///< the seed's claim: > 98 % lower error than hard top-k
  std::uint64_t seed = 0;
  int threads = 0;
};

/// Throws InputError naming the field for empty or invalid grids.
void validate_study_config(const StudyConfig& config);

/// One (dispersion, temperature, query clusters, budget) cell. Errors are |O - O_dense|_F / |O_dense|_F over all
/// heads and queries.
struct StudyCell {
  double dispersion = 0, temperature = 0;
  std::int64_t query_clusters = 1, budget = 0;
  double err_cedar = 0, err_topk = 0, err_first_order = 0;
  double mean_expanded = 0;  ///< CEDAR's mean expanded chunks (<= budget: zero-bound chunks are not expanded)
  double reduction = 0;      ///< 1 - err_cedar / err_topk
};

/// Per (dispersion, temperature, query clusters): the budget-free numbers.
struct StudySetting {
  double dispersion = 0, temperature = 0;
  std::int64_t query_clusters = 1;
  double err_summary = 0;         ///< B = 0
  double err_first_order_b0 = 0;  ///< B = 0 without the second-order term
  bool cedar_monotone = true;     ///< err_cedar non-increasing over 0, budgets... (1e-9 slack)
  bool first_order_monotone = true;
  double dense_seconds = 0, cedar_seconds_max_budget = 0;
  struct Variable {
    double error_target = 0, mean_expanded = 0, err = 0;
    std::int64_t max_expanded = 0;
  };
  std::vector<Variable> variable;  ///< one per error target
};

struct DispersionSummary {
  double dispersion = 0;
  double min_reduction = 0, median_reduction = 0;  ///< over temperatures, query clusters and budgets
  bool holds = false;                              ///< min_reduction >= target
};

struct StudyResult {
  StudyConfig config;
  std::vector<StudyCell> cells;
  std::vector<StudySetting> settings;
  std::vector<DispersionSummary> by_dispersion;
  /// The largest dispersion up to which every smaller-or-equal dispersion holds (NaN when the first fails).
  double holds_up_to = 0;
  /// The smallest dispersion that fails, with its worst cell (has_failure false when none fails).
  bool has_failure = false;
  StudyCell first_failure;
  double seconds = 0;
};

/// Runs the grid; progress(done, total) after every (dispersion, temperature, clusters) setting.
StudyResult run_clustered_study(const StudyConfig& config,
                                const std::function<void(std::size_t, std::size_t)>& progress = {});

/// results.json's "clustered" object (cells, settings, by_dispersion, ...).
nlohmann::json study_json(const StudyResult& result);
/// One row per cell: dispersion,temperature,query_clusters,budget,err_cedar,err_topk,
/// err_cedar_first_order,err_summary,reduction,mean_expanded.
std::string study_csv(const StudyResult& result);
/// The markdown section: set-up, the reduction table (rows dispersion x temperature x clusters,
/// columns budget),
/// where the target stops holding, the second-order ablation and the variable budget.
std::string study_markdown(const StudyResult& result, const std::string& figure_path);
/// FIGDIR/cedar_error_vs_budget.{dat,gp,svg,png}: error vs budget on a log axis, one panel per
/// (query clusters, temperature), a curve per dispersion (CEDAR solid, hard top-k dashed).
/// Returns the SVG path.
std::string write_study_figure(const StudyResult& result, const std::string& figdir);

}  // namespace arcal::cedar
