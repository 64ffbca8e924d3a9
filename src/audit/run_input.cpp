#include "audit/run_input.hpp"

#include <map>

#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "audit/experts.hpp"
#include "audit/routing_stats.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

namespace arcal {

std::string trace_cell(const Trace& t, const std::string& fallback) {
  const auto meta = nlohmann::json::parse(t.meta_json.empty() ? "{}" : t.meta_json, nullptr, false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("model")) return fallback;
  std::string cell;
  for (const char* key : {"model", "residual", "block_size", "dataset", "split"})
    if (meta.contains(key))
      cell += (cell.empty() ? "" : "/") + (meta[key].is_string() ? meta[key].get<std::string>() : meta[key].dump());
  // meta {"model": ""} names nothing (found by fuzz_trace_meta): a blank cell would be a blank row label.
  if (cell.find_first_not_of("/ \t") == std::string::npos) return fallback;
  return cell;
}

namespace {

/// log(1 - sum of exp(lp)) over a row's kept log-probabilities, floored: the mass of every other class.
double log_rest(const double* lp, std::size_t m) {
  double mass = 0.0;
  for (std::size_t j = 0; j < m; ++j) mass += std::exp(lp[j]);
  return mass < 1.0 ? std::max(std::log1p(-mass), kLogProbFloor) : kLogProbFloor;
}

/// The reduced output form (run_input.hpp kAuditFullOutputClasses): groups by predicted-class frequency
/// and the sorted head of each row's log-probabilities. `top(i, out)` writes row i's m largest
/// log-probabilities, descending.
template <class Top>
void reduce_outputs(AuditRunInput& in, const std::vector<std::int64_t>& predicted_class, std::size_t K, std::size_t m,
                    const Top& top, const std::string& held) {
  const std::size_t n = predicted_class.size();
  std::map<std::int64_t, std::size_t> count;
  for (auto c : predicted_class) ++count[c];
  std::vector<std::pair<std::size_t, std::int64_t>> order;  // (count, class): most predicted first, ties smallest class
  for (const auto& [c, k] : count) order.emplace_back(k, c);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const std::size_t own = std::min(order.size(), kAuditClassGroups - 1);
  std::map<std::int64_t, std::int64_t> group;
  in.group_classes.clear();
  for (std::size_t g = 0; g < own; ++g) {
    group[order[g].second] = std::int64_t(g);
    in.group_classes.push_back(order[g].second);
  }
  in.group_classes.push_back(-1);  // the pool of every other class
  const auto pool = std::int64_t(own);
  auto group_of = [&](std::int64_t c) {
    const auto it = group.find(c);
    return it == group.end() ? pool : it->second;
  };
  in.vocabulary = K;
  in.classes = own + 1;
  in.predicted_class = predicted_class;
  for (std::size_t i = 0; i < n; ++i) {
    in.predicted[i] = group_of(predicted_class[i]);
    in.labels[i] = group_of(in.labels[i]);
  }
  in.sorted_width = m + 1;
  in.sorted_log_probs.assign(n * in.sorted_width, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    double* row = &in.sorted_log_probs[i * in.sorted_width];
    top(i, row);
    for (std::size_t j = 0; j < m; ++j) row[j] = std::max(row[j], kLogProbFloor);
    row[m] = log_rest(row, m);
  }
  in.log_probs.clear();
  in.outputs = std::string(kReducedOutputs) + " (" + held + "): the predicted class as one of " +
               std::to_string(in.classes) + " groups (the " + std::to_string(own) +
               " most-predicted classes, the rest pooled), the " + std::to_string(m) +
               " largest log-probabilities and the log of the remaining mass";
}

}  // namespace

AuditRunInput make_audit_run_input(const Trace& t, const std::string& run, const std::vector<std::string>& stats) {
  const std::size_t n = t.n, K = t.classes;
  AuditRunInput in;
  in.run = run;
  in.cell = trace_cell(t, run);
  in.classes = K;
  in.labels = t.labels;
  in.cluster = t.cluster;
  in.confidence.resize(n);
  in.correct.resize(n);
  in.predictive_entropy.resize(n);
  in.predicted.resize(n);
  if (t.topk > 0) {  // the top-k form: the head of each row and the whole vector's entropy, as stored
    const TraceTopLabel top = trace_top_label(t);
    in.confidence = top.confidence;
    in.correct = top.correct;
    for (std::size_t i = 0; i < n; ++i) in.predictive_entropy[i] = t.predictive_entropy[i];
    const std::size_t m = std::min(t.topk, kAuditTopLogProbs);
    reduce_outputs(
        in, top.predicted, K, m,
        [&](std::size_t i, double* row) {
          for (std::size_t j = 0; j < m; ++j) row[j] = t.topk_logprobs[i * t.topk + j];
        },
        trace_output_form(t));
  } else {
    const auto probs = trace_probabilities(t);
    const bool reduced = K > kAuditFullOutputClasses;
    if (!reduced) in.log_probs.resize(n * K);
    std::vector<double> lp_all(reduced ? n * K : 0);
    std::vector<std::int64_t> predicted_class(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double* p = &probs[i * K];
      std::size_t arg = 0;
      double h = 0.0;
      for (std::size_t k = 0; k < K; ++k) {
        if (p[k] > p[arg]) arg = k;  // ties: lowest index
        if (p[k] > 0) h -= p[k] * std::log(p[k]);
      }
      in.confidence[i] = p[arg];
      in.correct[i] = static_cast<std::int64_t>(arg) == t.labels[i] ? 1.0 : 0.0;
      in.predictive_entropy[i] = h;
      in.predicted[i] = predicted_class[i] = static_cast<std::int64_t>(arg);
      double* row = reduced ? &lp_all[i * K] : &in.log_probs[i * K];
      if (!t.logits.empty()) {  // log-softmax of the logits: exact where the probabilities round to 0 or 1
        const double* z = &t.logits[i * K];
        const double m = *std::max_element(z, z + K);
        double s = 0.0;
        for (std::size_t k = 0; k < K; ++k) s += std::exp(z[k] - m);
        const double lse = m + std::log(s);
        for (std::size_t k = 0; k < K; ++k) row[k] = std::max(z[k] - lse, kLogProbFloor);
      } else {
        for (std::size_t k = 0; k < K; ++k) row[k] = p[k] > 0 ? std::max(std::log(p[k]), kLogProbFloor) : kLogProbFloor;
      }
    }
    if (reduced) {
      const std::size_t m = kAuditTopLogProbs;
      reduce_outputs(
          in, predicted_class, K, m,
          [&](std::size_t i, double* row) {
            std::partial_sort_copy(&lp_all[i * K], &lp_all[i * K] + K, row, row + m, std::greater<double>());
          },
          trace_output_form(t));
    } else {
      in.outputs = "the whole vector of " + std::to_string(K) + " classes";
    }
  }
  if (!t.routing.empty() && t.routing_kind == "unordered")
    in.experts = std::make_shared<const ExpertView>(expert_view(t, 15, kExpertViewDraws, 0));
  for (const auto& name : stats) {
    // One statistic listed twice would be one trace counted as two tests (and, across runs, as two seeds).
    if (std::find(in.statistic_names.begin(), in.statistic_names.end(), name) != in.statistic_names.end())
      throw InputError("--stat: '" + name + "' is listed twice; list each statistic once");
    in.statistic_names.push_back(name);
    in.statistics.push_back(statistic_column(t, name));
  }
  if (!t.routing.empty()) {
    in.routing_points = t.points;
    in.routing_max_sources = t.sources;
    in.routing_sources.assign(t.routing_sources.begin(), t.routing_sources.end());
    in.routing_mean.assign(t.points * t.sources, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t k = 0; k < t.points * t.sources; ++k)
        in.routing_mean[k] += double(t.routing[i * t.points * t.sources + k]) / double(n);
  }
  if (!t.routing.empty() || !t.routing_entropy.empty()) {
    const auto rs = routing_statistics(t);
    const std::size_t P = rs.profile_points.size();
    in.profile.resize(n * P);
    for (std::size_t j = 0; j < P; ++j) {
      in.profile_names.push_back("H_" + std::to_string(rs.profile_points[j]));
      for (std::size_t i = 0; i < n; ++i) in.profile[i * P + j] = rs.entropy[i * rs.points + rs.profile_points[j]];
    }
  } else {
    const std::size_t P = stats.size();
    in.profile.resize(n * P);
    for (std::size_t j = 0; j < P; ++j) {
      in.profile_names.push_back(stats[j]);
      for (std::size_t i = 0; i < n; ++i) in.profile[i * P + j] = in.statistics[j][i];
    }
  }
  return in;
}

AuditRunInput subsample_run(const AuditRunInput& run, std::size_t max_examples, std::uint64_t seed) {
  const std::size_t n = run.confidence.size();
  if (max_examples == 0 || n <= max_examples) return run;
  std::vector<std::size_t> idx(n);
  for (std::size_t i = 0; i < n; ++i) idx[i] = i;
  if (run.cluster.empty()) {
    Rng(seed).shuffle(idx);
    idx.resize(max_examples);
  } else {  // whole clusters, in a seeded order, until max_examples would be passed
    std::map<std::int64_t, std::vector<std::size_t>> members;
    for (std::size_t i = 0; i < n; ++i) members[run.cluster[i]].push_back(i);
    std::vector<const std::vector<std::size_t>*> order;
    for (const auto& kv : members) order.push_back(&kv.second);
    Rng(seed).shuffle(order);
    idx.clear();
    for (const auto* m : order) {
      if (!idx.empty() && idx.size() + m->size() > max_examples) break;
      idx.insert(idx.end(), m->begin(), m->end());
    }
  }
  std::sort(idx.begin(), idx.end());
  auto rows = [&](const auto& v, std::size_t width) {
    std::remove_cv_t<std::remove_reference_t<decltype(v)>> out;
    if (v.empty()) return out;
    out.reserve(idx.size() * width);
    for (auto i : idx) out.insert(out.end(), v.begin() + long(i * width), v.begin() + long((i + 1) * width));
    return out;
  };
  AuditRunInput out;
  out.run = run.run;
  out.cell = run.cell;
  out.classes = run.classes;
  out.vocabulary = run.vocabulary;
  out.group_classes = run.group_classes;
  out.sorted_width = run.sorted_width;
  out.outputs = run.outputs;
  out.experts = run.experts;
  out.sorted_log_probs = rows(run.sorted_log_probs, run.sorted_width);
  out.predicted_class = rows(run.predicted_class, 1);
  out.confidence = rows(run.confidence, 1);
  out.correct = rows(run.correct, 1);
  out.predictive_entropy = rows(run.predictive_entropy, 1);
  out.labels = rows(run.labels, 1);
  out.statistic_names = run.statistic_names;
  for (const auto& s : run.statistics) out.statistics.push_back(rows(s, 1));
  out.profile_names = run.profile_names;
  out.profile = rows(run.profile, run.profile_names.size());
  out.log_probs = rows(run.log_probs, run.classes);
  out.predicted = rows(run.predicted, 1);
  out.routing_points = run.routing_points;
  out.routing_max_sources = run.routing_max_sources;
  out.routing_sources = run.routing_sources;
  out.routing_mean = run.routing_mean;
  out.cluster = rows(run.cluster, 1);
  return out;
}

}  // namespace arcal
