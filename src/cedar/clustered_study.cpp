// The clustered-attention study (clustered_study.hpp).
#include "cedar/clustered_study.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/rng.hpp"
#include "report/figures.hpp"

namespace arcal::cedar {

namespace {

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + a * 0xBF58476D1CE4E5B9ull + b * 0x94D049BB133111EBull + 1;
  x ^= x >> 31;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return x;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string num(double x) { return fmt::format("{:.4g}", x); }

bool same_setting(const StudySetting& s, const StudyCell& c) {
  return s.dispersion == c.dispersion && s.temperature == c.temperature && s.query_clusters == c.query_clusters;
}

/// Refuses sizes whose q, k or v would exceed the array limit (core/limits.hpp), with overflow-safe
/// products, before anything is allocated.
void check_qkv_bytes(std::int64_t H, std::int64_t N, std::int64_t Nq, std::int64_t d, const std::string& f) {
  for (auto [name, rows] : {std::pair<const char*, std::int64_t>{"q", Nq}, {"k", N}, {"v", N}}) {
    std::uint64_t bytes = 0;
    if (!checked_mul(std::uint64_t(H), std::uint64_t(rows), bytes) || !checked_mul(bytes, std::uint64_t(d), bytes) ||
        !checked_mul(bytes, sizeof(float), bytes))
      throw_input(f, std::string(name) + " [" + std::to_string(H) + ", " + std::to_string(rows) + ", " +
                         std::to_string(d) + "] does not fit in 64 bits");
    check_array_bytes(bytes, f,
                      std::string(name) + " [" + std::to_string(H) + ", " + std::to_string(rows) + ", " +
                          std::to_string(d) + "] float32");
  }
}

}  // namespace

Qkv clustered_qkv(const ClusteredSpec& s) {
  const std::string f = "clustered_qkv";
  const std::int64_t M = s.chunk_size > 0 && s.n_keys > 0 ? (s.n_keys + s.chunk_size - 1) / s.chunk_size : 0;
  for (auto [name, v] : {std::pair<const char*, std::int64_t>{"heads", s.heads},
                         {"n_keys", s.n_keys},
                         {"chunk_size", s.chunk_size},
                         {"n_queries", s.n_queries},
                         {"dim", s.dim}})
    if (v <= 0) throw_input(f, std::string(name) + " is " + std::to_string(v) + ", but must be positive");
  for (auto [name, v] : {std::pair<const char*, double>{"dispersion", s.dispersion},
                         {"temperature", s.temperature},
                         {"query_noise", s.query_noise}})
    if (!(v >= 0) || !std::isfinite(v))
      throw_input(f, std::string(name) + " is " + num(v) + ", but must be finite and >= 0");
  if (s.query_clusters < 1 || s.query_clusters > M)
    throw_input(f, "query_clusters is " + std::to_string(s.query_clusters) + ", but must be in [1, " +
                       std::to_string(M) + "] (the number of chunks)");
  if (!(std::abs(s.key_value_correlation) <= 1))
    throw_input(f, "key_value_correlation is " + num(s.key_value_correlation) + ", but must be in [-1, 1]");
  const std::int64_t H = s.heads, N = s.n_keys, Nq = s.n_queries, d = s.dim;
  check_qkv_bytes(H, N, Nq, d, f);
  Qkv out;
  out.shape = {H, Nq, N, d};
  out.q.resize(std::size_t(H * Nq * d));
  out.k.resize(std::size_t(H * N * d));
  out.v.resize(std::size_t(H * N * d));
  const double rho = s.key_value_correlation, rho2 = std::sqrt(std::max(0.0, 1.0 - rho * rho));
  for (std::int64_t h = 0; h < H; ++h) {
    Rng rng(mix_seed(s.seed, 1, std::uint64_t(h)));
    std::vector<double> mu(std::size_t(M * d)), nu(std::size_t(M * d));
    for (auto& x : mu) x = rng.normal();
    for (auto& x : nu) x = rng.normal();
    for (std::int64_t i = 0; i < N; ++i) {
      const std::int64_t j = i / s.chunk_size;
      for (std::int64_t c = 0; c < d; ++c) {
        const double xi = rng.normal(), zeta = rng.normal();
        out.k[std::size_t((h * N + i) * d + c)] = float(mu[std::size_t(j * d + c)] + s.dispersion * xi);
        out.v[std::size_t((h * N + i) * d + c)] =
            float(nu[std::size_t(j * d + c)] + s.dispersion * (rho * xi + rho2 * zeta));
      }
    }
    std::vector<std::int64_t> order(static_cast<std::size_t>(M));
    const double norm = 1.0 / std::sqrt(double(s.query_clusters));
    for (std::int64_t i = 0; i < Nq; ++i) {
      // A distinct chunks: the first A of a partial Fisher-Yates shuffle.
      for (std::int64_t j = 0; j < M; ++j) order[std::size_t(j)] = j;
      for (std::int64_t a = 0; a < s.query_clusters; ++a)
        std::swap(order[std::size_t(a)], order[std::size_t(a + std::int64_t(rng.below(std::uint64_t(M - a))))]);
      for (std::int64_t c = 0; c < d; ++c) {
        double x = 0;
        for (std::int64_t a = 0; a < s.query_clusters; ++a) x += mu[std::size_t(order[std::size_t(a)] * d + c)] * norm;
        out.q[std::size_t((h * Nq + i) * d + c)] = float(s.temperature * (x + s.query_noise * rng.normal()));
      }
    }
  }
  return out;
}

void validate_study_config(const StudyConfig& c) {
  const std::string f = "cedar-study";
  for (auto [name, v] : {std::pair<const char*, std::int64_t>{"heads", c.heads},
                         {"keys", c.n_keys},
                         {"chunk size", c.chunk_size},
                         {"queries", c.n_queries},
                         {"dim", c.dim}})
    if (v <= 0) throw_input(f, std::string(name) + " is " + std::to_string(v) + ", but must be positive");
  for (auto [name, v, r] : {std::tuple<const char*, std::int64_t, IntRange>{"heads", c.heads, ranges::study_heads},
                            {"keys", c.n_keys, ranges::study_keys},
                            {"chunk size", c.chunk_size, ranges::study_chunk_size},
                            {"queries", c.n_queries, ranges::study_queries},
                            {"dim", c.dim, ranges::study_dim}})
    if (!in_range(r, v))
      throw_input(f, std::string(name) + " is " + std::to_string(v) + ", but must be in " + range_text(r));
  check_qkv_bytes(c.heads, c.n_keys, c.n_queries, c.dim, f);
  for (auto [name, size] : {std::pair<const char*, std::size_t>{"dispersions", c.dispersions.size()},
                            {"temperatures", c.temperatures.size()},
                            {"query_clusters", c.query_clusters.size()},
                            {"budgets", c.budgets.size()},
                            {"error_targets", c.error_targets.size()}})
    if (std::int64_t(size) > ranges::study_grid_values.hi)
      throw_input(f, std::string(name) + " holds " + std::to_string(size) + " values, more than the limit " +
                         std::to_string(ranges::study_grid_values.hi));
  if (!in_range(ranges::study_kv_correlation, c.key_value_correlation))
    throw_input(f, "key-value correlation is " + num(c.key_value_correlation) + ", but must be in " +
                       range_text(ranges::study_kv_correlation));
  if (!(c.query_noise >= 0) || !std::isfinite(c.query_noise))
    throw_input(f, "query noise is " + num(c.query_noise) + ", but must be finite and >= 0");
  if (c.dispersions.empty() || c.temperatures.empty() || c.budgets.empty() || c.query_clusters.empty())
    throw_input(f, "the dispersion, temperature, query-cluster and budget grids must each hold at least one value");
  for (std::size_t i = 0; i < c.dispersions.size(); ++i)
    if (!(c.dispersions[i] >= 0) || !std::isfinite(c.dispersions[i]))
      throw_index(f, "dispersions", i, num(c.dispersions[i]), "finite and >= 0");
  for (std::size_t i = 0; i < c.temperatures.size(); ++i)
    if (!(c.temperatures[i] > 0) || !std::isfinite(c.temperatures[i]))
      throw_index(f, "temperatures", i, num(c.temperatures[i]), "finite and > 0");
  const std::int64_t M = (c.n_keys + c.chunk_size - 1) / c.chunk_size;
  for (std::size_t i = 0; i < c.query_clusters.size(); ++i)
    if (c.query_clusters[i] < 1 || c.query_clusters[i] > M)
      throw_index(f, "query_clusters", i, std::to_string(c.query_clusters[i]),
                  "in [1, " + std::to_string(M) + "] (the number of chunks)");
  for (std::size_t i = 0; i < c.budgets.size(); ++i)
    if (c.budgets[i] < 1 || c.budgets[i] > M)
      throw_index(f, "budgets", i, std::to_string(c.budgets[i]),
                  "in [1, " + std::to_string(M) + "] (the number of chunks)");
  for (std::size_t i = 0; i < c.error_targets.size(); ++i)
    if (!(c.error_targets[i] > 0) || !std::isfinite(c.error_targets[i]))
      throw_index(f, "error_targets", i, num(c.error_targets[i]), "finite and > 0");
}

StudyResult run_clustered_study(const StudyConfig& config,
                                const std::function<void(std::size_t, std::size_t)>& progress) {
  validate_study_config(config);
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  StudyResult res;
  res.config = config;
  std::vector<std::int64_t> budgets = config.budgets;
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  const std::size_t total = config.dispersions.size() * config.temperatures.size() * config.query_clusters.size();
  std::size_t done = 0;
  for (std::size_t di = 0; di < config.dispersions.size(); ++di)
    for (std::size_t ti = 0; ti < config.temperatures.size(); ++ti)
      for (std::size_t ai = 0; ai < config.query_clusters.size(); ++ai) {
        ClusteredSpec spec;
        spec.heads = config.heads;
        spec.n_keys = config.n_keys;
        spec.chunk_size = config.chunk_size;
        spec.n_queries = config.n_queries;
        spec.dim = config.dim;
        spec.dispersion = config.dispersions[di];
        spec.temperature = config.temperatures[ti];
        spec.key_value_correlation = config.key_value_correlation;
        spec.query_noise = config.query_noise;
        spec.query_clusters = config.query_clusters[ai];
        spec.seed = mix_seed(config.seed, 2, (di * 1000 + ti) * 1000 + ai);
        const Qkv data = clustered_qkv(spec);
        const ChunkLayout chunks = fixed_chunks(config.n_keys, config.chunk_size);
        const Summaries sm = summarize(data.k.data(), data.v.data(), data.shape, chunks, config.threads);
        const std::size_t n_out = data.q.size();
        std::vector<float> dense(n_out), out(n_out);
        std::vector<std::int32_t> expanded(std::size_t(data.shape.heads * data.shape.n_queries));
        auto run = [&](Method method, std::int64_t budget, bool second_order, double target, std::vector<float>& o) {
          Options opt;
          opt.method = method;
          opt.budget = budget;
          opt.second_order = second_order;
          opt.error_target = target;
          opt.threads = config.threads;
          return attention(data.q.data(), data.k.data(), data.v.data(), data.shape, chunks, opt, o.data(),
                           expanded.data(), method == Method::dense ? nullptr : &sm);
        };
        StudySetting setting;
        setting.dispersion = spec.dispersion;
        setting.temperature = spec.temperature;
        setting.query_clusters = spec.query_clusters;
        setting.dense_seconds = run(Method::dense, 0, true, 0, dense).kernel_seconds;
        auto err = [&] { return relative_error(out.data(), dense.data(), n_out); };
        run(Method::summary, 0, true, 0, out);
        setting.err_summary = err();
        run(Method::cedar, 0, false, 0, out);
        setting.err_first_order_b0 = err();
        double prev = setting.err_summary, prev_fo = setting.err_first_order_b0;
        for (std::int64_t b : budgets) {
          StudyCell cell;
          cell.dispersion = spec.dispersion;
          cell.temperature = spec.temperature;
          cell.query_clusters = spec.query_clusters;
          cell.budget = b;
          const Stats st = run(Method::cedar, b, true, 0, out);
          cell.err_cedar = err();
          cell.mean_expanded = st.mean_expanded;
          setting.cedar_seconds_max_budget = st.kernel_seconds;
          run(Method::topk, b, true, 0, out);
          cell.err_topk = err();
          run(Method::cedar, b, false, 0, out);
          cell.err_first_order = err();
          cell.reduction = cell.err_topk > 0 ? 1.0 - cell.err_cedar / cell.err_topk : 0.0;
          // Non-increasing up to float32 rounding of the outputs.
          setting.cedar_monotone = setting.cedar_monotone && cell.err_cedar <= prev * (1 + 1e-6) + 1e-7;
          setting.first_order_monotone =
              setting.first_order_monotone && cell.err_first_order <= prev_fo * (1 + 1e-6) + 1e-7;
          prev = cell.err_cedar;
          prev_fo = cell.err_first_order;
          res.cells.push_back(cell);
        }
        for (double target : config.error_targets) {
          const Stats st = run(Method::cedar, budgets.back(), true, target, out);
          setting.variable.push_back({target, st.mean_expanded, err(), st.max_expanded});
        }
        res.settings.push_back(setting);
        if (progress) progress(++done, total);
      }
  // Per dispersion: min and median reduction over temperatures and budgets.
  std::vector<double> ds = config.dispersions;
  std::sort(ds.begin(), ds.end());
  ds.erase(std::unique(ds.begin(), ds.end()), ds.end());
  res.holds_up_to = std::numeric_limits<double>::quiet_NaN();
  bool all_held = true;
  for (double dsp : ds) {
    DispersionSummary s;
    s.dispersion = dsp;
    std::vector<double> red;
    const StudyCell* worst = nullptr;
    for (const auto& c : res.cells)
      if (c.dispersion == dsp) {
        red.push_back(c.reduction);
        if (!worst || c.reduction < worst->reduction) worst = &c;
      }
    s.min_reduction = *std::min_element(red.begin(), red.end());
    s.median_reduction = median(red);
    s.holds = s.min_reduction >= config.target_reduction;
    if (s.holds && all_held) res.holds_up_to = dsp;
    if (!s.holds && !res.has_failure) {
      res.has_failure = true;
      res.first_failure = *worst;
    }
    all_held = all_held && s.holds;
    res.by_dispersion.push_back(s);
  }
  res.seconds = std::chrono::duration<double>(clock::now() - start).count();
  return res;
}

nlohmann::json study_json(const StudyResult& r) {
  const auto& c = r.config;
  nlohmann::json j;
  j["config"] = {{"heads", c.heads},
                 {"keys", c.n_keys},
                 {"chunk_size", c.chunk_size},
                 {"chunks", (c.n_keys + c.chunk_size - 1) / c.chunk_size},
                 {"queries", c.n_queries},
                 {"dim", c.dim},
                 {"dispersions", c.dispersions},
                 {"temperatures", c.temperatures},
                 {"query_clusters", c.query_clusters},
                 {"budgets", c.budgets},
                 {"error_targets", c.error_targets},
                 {"key_value_correlation", c.key_value_correlation},
                 {"query_noise", c.query_noise},
                 {"target_reduction", c.target_reduction},
                 {"seed", c.seed}};
  j["error"] = "relative output error |O - O_dense|_F / |O_dense|_F over all heads and queries";
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& x : r.cells)
    cells.push_back({{"dispersion", x.dispersion},
                     {"temperature", x.temperature},
                     {"query_clusters", x.query_clusters},
                     {"budget", x.budget},
                     {"err_cedar", x.err_cedar},
                     {"err_topk", x.err_topk},
                     {"err_cedar_first_order", x.err_first_order},
                     {"mean_expanded", x.mean_expanded},
                     {"reduction", x.reduction}});
  j["cells"] = cells;
  nlohmann::json settings = nlohmann::json::array();
  for (const auto& s : r.settings) {
    nlohmann::json var = nlohmann::json::array();
    for (const auto& v : s.variable)
      var.push_back({{"error_target", v.error_target},
                     {"mean_expanded", v.mean_expanded},
                     {"max_expanded", v.max_expanded},
                     {"err_cedar", v.err}});
    settings.push_back({{"dispersion", s.dispersion},
                        {"temperature", s.temperature},
                        {"query_clusters", s.query_clusters},
                        {"err_summary", s.err_summary},
                        {"err_cedar_first_order_b0", s.err_first_order_b0},
                        {"cedar_error_non_increasing", s.cedar_monotone},
                        {"first_order_error_non_increasing", s.first_order_monotone},
                        {"dense_seconds", s.dense_seconds},
                        {"variable_budget", var}});
  }
  j["settings"] = settings;
  nlohmann::json byd = nlohmann::json::array();
  for (const auto& s : r.by_dispersion)
    byd.push_back({{"dispersion", s.dispersion},
                   {"min_reduction", s.min_reduction},
                   {"median_reduction", s.median_reduction},
                   {"holds", s.holds}});
  j["by_dispersion"] = byd;
  j["holds_up_to_dispersion"] = std::isnan(r.holds_up_to) ? nlohmann::json(nullptr) : nlohmann::json(r.holds_up_to);
  if (r.has_failure)
    j["first_failure"] = {{"dispersion", r.first_failure.dispersion},
                          {"temperature", r.first_failure.temperature},
                          {"query_clusters", r.first_failure.query_clusters},
                          {"budget", r.first_failure.budget},
                          {"reduction", r.first_failure.reduction}};
  else
    j["first_failure"] = nullptr;
  j["seconds"] = r.seconds;
  return j;
}

std::string study_csv(const StudyResult& r) {
  std::ostringstream o;
  o << "dispersion,temperature,query_clusters,budget,err_cedar,err_topk,err_cedar_first_order,err_summary,reduction,"
       "mean_expanded\n";
  for (const auto& c : r.cells) {
    double summary = 0;
    for (const auto& s : r.settings)
      if (same_setting(s, c)) summary = s.err_summary;
    o << fmt::format("{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6f},{:.4f}\n", c.dispersion, c.temperature,
                     c.query_clusters, c.budget, c.err_cedar, c.err_topk, c.err_first_order, summary, c.reduction,
                     c.mean_expanded);
  }
  return o.str();
}

std::string study_markdown(const StudyResult& r, const std::string& figure_path) {
  const auto& c = r.config;
  std::ostringstream o;
  o << "## CEDAR: the clustered-attention study\n\n";
  o << fmt::format(
      "{} heads x {} queries over N = {} keys in {} chunks of {} (d = {}). Per chunk, key and value centres "
      "~ N(0, I); tokens = centre + dispersion x N(0, I) noise (key-value correlation {}); each query = "
      "temperature x (the normalised sum of A random chunks' key centres + {} x N(0, I)), A = query clusters. "
      "Error = |O - O_dense|_F / |O_dense|_F; "
      "reduction = 1 - err(CEDAR) / err(hard top-k) at the same number of exact chunks B. Seed {}.\n\n",
      c.heads, c.n_queries, c.n_keys, (c.n_keys + c.chunk_size - 1) / c.chunk_size, c.chunk_size, c.dim,
      num(c.key_value_correlation), num(c.query_noise), c.seed);
  std::vector<std::int64_t> budgets = c.budgets;
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  o << "Error reduction of CEDAR against hard top-k (%):\n\n| dispersion | temperature | A |";
  for (auto b : budgets) o << " B = " << b << " |";
  o << " summary only (B = 0) error |\n|---|---|---|";
  for (std::size_t i = 0; i <= budgets.size(); ++i) o << "---|";
  o << "\n";
  for (const auto& s : r.settings) {
    o << "| " << num(s.dispersion) << " | " << num(s.temperature) << " | " << s.query_clusters << " |";
    for (auto b : budgets)
      for (const auto& x : r.cells)
        if (same_setting(s, x) && x.budget == b) o << fmt::format(" {:.2f} |", 100 * x.reduction);
    o << " " << num(s.err_summary) << " |\n";
  }
  o << "\nPer dispersion (over temperatures, query clusters and budgets):\n\n| dispersion | min reduction | median "
       "reduction | >= "
    << num(100 * c.target_reduction) << " % everywhere |\n|---|---|---|---|\n";
  for (const auto& s : r.by_dispersion)
    o << fmt::format("| {} | {:.2f} % | {:.2f} % | {} |\n", num(s.dispersion), 100 * s.min_reduction,
                     100 * s.median_reduction, s.holds ? "yes" : "no");
  o << "\n";
  if (std::isnan(r.holds_up_to))
    o << "The target does not hold even at the lowest dispersion.";
  else
    o << "The target holds at every budget and temperature up to dispersion " << num(r.holds_up_to) << ".";
  if (r.has_failure)
    o << fmt::format(
        " It first fails at dispersion {} (worst cell: temperature {}, A = {}, B = {}, reduction {:.2f} %).",
        num(r.first_failure.dispersion), num(r.first_failure.temperature), r.first_failure.query_clusters,
        r.first_failure.budget, 100 * r.first_failure.reduction);
  o << "\n\n";
  // The second-order ablation.
  std::size_t mono = 0, mono_fo = 0;
  for (const auto& s : r.settings) {
    mono += s.cedar_monotone;
    mono_fo += s.first_order_monotone;
  }
  o << fmt::format(
      "Error non-increasing in B (from B = 0): CEDAR in {} of {} settings; without the second-order term of the "
      "summary score in {} of {}.\n\n",
      mono, r.settings.size(), mono_fo, r.settings.size());
  o << "Errors (B = 0 is summary-only):\n\n| dispersion | temperature | A | B | CEDAR | without 2nd-order term | hard "
       "top-k |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const auto& s : r.settings) {
    o << fmt::format("| {} | {} | {} | 0 | {} | {} | - |\n", num(s.dispersion), num(s.temperature), s.query_clusters,
                     num(s.err_summary), num(s.err_first_order_b0));
    for (const auto& x : r.cells)
      if (same_setting(s, x))
        o << fmt::format("| | | | {} | {} | {} | {} |\n", x.budget, num(x.err_cedar), num(x.err_first_order),
                         num(x.err_topk));
  }
  if (!c.error_targets.empty()) {
    o << fmt::format("\nVariable budget (cap B = {}): mean expanded chunks and error per error target ε.\n\n",
                     budgets.back());
    o << "| dispersion | temperature | A |";
    for (double e : c.error_targets) o << " ε = " << num(e) << " |";
    o << "\n|---|---|---|";
    for (std::size_t i = 0; i < c.error_targets.size(); ++i) o << "---|";
    o << "\n";
    for (const auto& s : r.settings) {
      o << "| " << num(s.dispersion) << " | " << num(s.temperature) << " | " << s.query_clusters << " |";
      for (const auto& v : s.variable) o << fmt::format(" {:.2f} chunks, err {} |", v.mean_expanded, num(v.err));
      o << "\n";
    }
  }
  if (!figure_path.empty()) o << "\n![error vs budget](" << figure_path << ")\n";
  return o.str();
}

std::string write_study_figure(const StudyResult& r, const std::string& figdir) {
  const auto& c = r.config;
  const std::vector<double>& ds = c.dispersions;
  const std::vector<double>& ts = c.temperatures;
  const std::vector<std::int64_t>& as = c.query_clusters;
  std::ostringstream data;
  data << "# budget err_cedar err_topk; one block per (query clusters, temperature, dispersion), in that order\n";
  for (auto a : as)
    for (double t : ts)
      for (double d : ds) {
        data << "# query_clusters " << a << " temperature " << t << " dispersion " << d << "\n";
        for (const auto& x : r.cells)
          if (x.query_clusters == a && x.temperature == t && x.dispersion == d)
            data << x.budget << " " << std::max(x.err_cedar, 1e-12) << " " << std::max(x.err_topk, 1e-12) << "\n";
        data << "\n\n";
      }
  std::ostringstream gp;
  gp << "set multiplot layout " << as.size() << "," << ts.size() << "\n";
  gp << "set logscale y\nset logscale x 2\nset format y '10^{%L}'\nset grid\n"
        "set key bottom left opaque box font ',7' spacing 1.1\n";
  for (std::size_t ai = 0; ai < as.size(); ++ai)
    for (std::size_t ti = 0; ti < ts.size(); ++ti) {
      gp << "set title 'temperature " << num(ts[ti]) << ", " << as[ai] << (as[ai] == 1 ? " cluster" : " clusters")
         << " per query' font ',10'\n";
      gp << (ti == 0 ? "set ylabel 'relative error'\n" : "unset ylabel\n");
      gp << (ai + 1 == as.size() ? "set xlabel 'exact chunks B'\n" : "unset xlabel\n");
      gp << (ai == 0 && ti == 0 ? "set key\n" : "unset key\n");
      gp << "plot ";
      for (std::size_t di = 0; di < ds.size(); ++di) {
        const std::size_t idx = (ai * ts.size() + ti) * ds.size() + di;
        gp << (di ? ", \\\n     " : "") << "'cedar_error_vs_budget.dat' index " << idx
           << " using 1:2 with linespoints lt " << di + 1 << " pt 7 ps 0.5 title 'CEDAR, dispersion " << num(ds[di])
           << "'"
           << ", '' index " << idx << " using 1:3 with linespoints lt " << di + 1 << " dt 2 pt 6 ps 0.5 "
           << (di == 0 ? "title 'hard top-k (dashed)'" : "notitle");
      }
      gp << "\n";
    }
  gp << "unset multiplot\n";
  return render_gnuplot_figure(figdir, "cedar_error_vs_budget", data.str(), gp.str(), int(380 * ts.size()),
                               int(300 * as.size()))
      .front();
}

}  // namespace arcal::cedar
