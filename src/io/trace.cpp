#include "io/trace.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "core/check.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"
#include "core/text_input.hpp"
#include "io/npz.hpp"

namespace arcal {

namespace {

std::string fmt_double(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

std::string shape_str(const std::vector<std::size_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// a * b (* c), or a value no vector can have when the product overflows.
std::size_t prod(std::size_t a, std::size_t b, std::size_t c = 1) {
  std::uint64_t r = 0;
  if (!checked_mul(a, b, r) || !checked_mul(r, c, r)) return SIZE_MAX;
  return static_cast<std::size_t>(r);
}

struct Ctx {
  std::string fn;
  std::string path;
  [[noreturn]] void fail(const std::string& msg) const { throw InputError(fn + ": " + path + ": " + msg); }
  [[noreturn]] void fail_index(const std::string& array, const std::string& index, const std::string& value,
                               const std::string& constraint) const {
    fail(array + "[" + index + "] is " + value + ", but must be " + constraint);
  }
};

/// The top-k output form: every array [N] or [N, k], finite, and consistent with being the k largest
/// log-probabilities of one distribution over K classes (float32 rounding: 1e-4 on the probability scale).
void validate_topk(const Trace& t, const Ctx& c) {
  const std::size_t N = t.n, K = t.classes, k = t.topk;
  if (k < 2 || k > K)
    c.fail("topk_logprobs has k = " + std::to_string(k) +
           " columns, but must have 2 <= k <= num_classes = " + std::to_string(K));
  if (t.topk_logprobs.size() != prod(N, k) || t.topk_indices.size() != prod(N, k))
    c.fail("topk_logprobs and topk_indices must both be [N, k] = [" + std::to_string(N) + ", " + std::to_string(k) +
           "]");
  for (auto [name, v] : {std::pair<const char*, const std::vector<float>*>{"label_logprob", &t.label_logprob},
                         {"log_normalizer", &t.log_normalizer},
                         {"predictive_entropy", &t.predictive_entropy},
                         {"prob_sq_sum", &t.prob_sq_sum}}) {
    if (v->size() != N)
      c.fail(std::string("the top-k form needs '") + name + "' [N] = [" + std::to_string(N) +
             "] beside topk_logprobs (it has " + std::to_string(v->size()) + " values)");
    for (std::size_t i = 0; i < N; ++i)
      if (!std::isfinite((*v)[i])) c.fail_index(name, std::to_string(i), fmt_double((*v)[i]), "finite");
  }
  const double tol = 1e-4;
  std::vector<std::int32_t> seen;
  for (std::size_t i = 0; i < N; ++i) {
    const float* lp = &t.topk_logprobs[i * k];
    const std::int32_t* ix = &t.topk_indices[i * k];
    double mass = 0.0, sq = 0.0;
    for (std::size_t j = 0; j < k; ++j) {
      auto idx = [&] { return std::to_string(i) + ", " + std::to_string(j); };
      if (!std::isfinite(lp[j]) || lp[j] > 1e-6f)
        c.fail_index("topk_logprobs", idx(), fmt_double(lp[j]), "finite and <= 0");
      if (j > 0 && lp[j] > lp[j - 1] + 1e-6f)
        c.fail_index(
            "topk_logprobs", idx(), fmt_double(lp[j]),
            "<= the entry before it (" + fmt_double(lp[j - 1]) + "): each row holds the k largest, descending");
      if (ix[j] < 0 || static_cast<std::size_t>(ix[j]) >= K)
        c.fail_index("topk_indices", idx(), std::to_string(ix[j]), "in [0, " + std::to_string(K - 1) + "]");
      const double p = std::exp(double(lp[j]));
      mass += p;
      sq += p * p;
    }
    seen.assign(ix, ix + k);
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
      c.fail("topk_indices row " + std::to_string(i) + " names class " +
             std::to_string(*std::adjacent_find(seen.begin(), seen.end())) +
             " twice; each row's k classes must be distinct");
    if (mass > 1.0 + tol)
      c.fail("topk_logprobs row " + std::to_string(i) + " holds probability mass " + fmt_double(mass) +
             ", but the k largest probabilities of one distribution sum to at most 1 (within 1e-4)");
    const double ly = t.label_logprob[i];
    const auto* at = std::find(ix, ix + k, static_cast<std::int32_t>(t.labels[i]));
    if (at != ix + k ? std::fabs(std::exp(ly) - std::exp(double(lp[at - ix]))) > tol
                     : std::exp(ly) > std::exp(double(lp[k - 1])) + tol)
      c.fail_index("label_logprob", std::to_string(i), fmt_double(ly),
                   at != ix + k ? "the label's entry of topk_logprobs (" + fmt_double(lp[at - ix]) + ")"
                                : "<= the smallest of topk_logprobs (" + fmt_double(lp[k - 1]) +
                                      "): the label is not among the top k");
    const double q = t.prob_sq_sum[i];
    if (q < sq - tol || q > 1.0 + tol)
      c.fail_index("prob_sq_sum", std::to_string(i), fmt_double(q),
                   "in [the top-k's own sum of squares " + fmt_double(sq) + ", 1]");
    const double h = t.predictive_entropy[i];
    if (h < -tol || h > std::log(double(K)) + tol)
      c.fail_index("predictive_entropy", std::to_string(i), fmt_double(h),
                   "in [0, log K = " + fmt_double(std::log(double(K))) + "]");
  }
}

void validate(const Trace& t, const Ctx& c) {
  const std::size_t N = t.n, K = t.classes;
  // meta is JSON that the audit and the report parse (recursively): the nesting limit of every other
  // JSON file applies to it before any parser sees it (100,000 levels segfaulted nlohmann's parser).
  if (t.meta_json.size() > input_limits().max_text_bytes)
    c.fail("meta is " + byte_size(t.meta_json.size()) + ", more than the limit of " +
           byte_size(input_limits().max_text_bytes));
  check_json_nesting(t.meta_json, c.fn, c.path + ": meta");
  if (N == 0) c.fail("the trace has no examples (N = 0)");
  if (K < 2) c.fail("classes is " + std::to_string(K) + ", but must be >= 2");
  const int forms = int(!t.logits.empty()) + int(!t.probs.empty()) + int(t.topk > 0);
  if (forms != 1) c.fail("exactly one of 'logits', 'probs' and 'topk_logprobs' must be present");
  const char* sname = t.topk > 0 ? "topk_logprobs" : t.logits.empty() ? "probs" : "logits";
  if (t.labels.size() != N)
    c.fail("labels has " + std::to_string(t.labels.size()) + " entries, but " + sname +
           " has N = " + std::to_string(N) + " rows");
  for (std::size_t i = 0; i < N; ++i)
    if (t.labels[i] < 0 || t.labels[i] >= static_cast<std::int64_t>(K))
      c.fail_index("labels", std::to_string(i), std::to_string(t.labels[i]), "in [0, " + std::to_string(K - 1) + "]");
  if (t.topk > 0) {
    validate_topk(t, c);
  } else {
    const auto& scores = t.logits.empty() ? t.probs : t.logits;
    if (scores.size() != prod(N, K))
      c.fail(std::string(sname) + " has " + std::to_string(scores.size()) + " values, but N*K = " + std::to_string(N) +
             "*" + std::to_string(K));
    for (std::size_t i = 0; i < N; ++i) {
      double sum = 0.0;
      for (std::size_t k = 0; k < K; ++k) {
        const double v = scores[i * K + k];
        // The index text is built only on failure: this loop runs N*K times.
        auto idx = [&] { return std::to_string(i) + ", " + std::to_string(k); };
        if (!std::isfinite(v)) c.fail_index(sname, idx(), fmt_double(v), "finite");
        if (!t.probs.empty() && !(v >= 0.0 && v <= 1.0)) c.fail_index(sname, idx(), fmt_double(v), "in [0, 1]");
        sum += v;
      }
      if (!t.probs.empty() && std::fabs(sum - 1.0) > 1e-4)
        c.fail("probs row " + std::to_string(i) + " sums to " + fmt_double(sum) + ", but must sum to 1 (within 1e-4)");
    }
  }
  const std::size_t P = t.points, S = t.sources;
  if (t.routing.empty()) {
    if (!t.routing_cls.empty()) c.fail("routing_cls is present without routing");
    if (!t.routing_entropy.empty() || !t.routing_depth_mean.empty() || !t.routing_depth_var.empty())
      c.fail("per-token routing statistics are present without routing");
  } else {
    if (t.routing_sources.size() != P)
      c.fail("routing_sources has " + std::to_string(t.routing_sources.size()) +
             " entries, but routing has P = " + std::to_string(P) + " points");
    if (t.routing.size() != prod(N, P, S))
      c.fail("routing has " + std::to_string(t.routing.size()) + " values, but N*P*S = " + std::to_string(N) + "*" +
             std::to_string(P) + "*" + std::to_string(S));
    for (std::size_t p = 0; p < P; ++p)
      if (t.routing_sources[p] < 1 || static_cast<std::uint64_t>(t.routing_sources[p]) > S)
        c.fail_index("routing_sources", std::to_string(p), std::to_string(t.routing_sources[p]),
                     "in [1, " + std::to_string(S) + "]");
    auto check_routing = [&](const std::vector<float>& r, const char* name) {
      for (std::size_t i = 0; i < N; ++i)
        for (std::size_t p = 0; p < P; ++p) {
          const std::size_t Sp = static_cast<std::size_t>(t.routing_sources[p]);
          const float* row = &r[(i * P + p) * S];
          double sum = 0.0;
          for (std::size_t s = 0; s < S; ++s) {
            auto idx = [&] { return std::to_string(i) + ", " + std::to_string(p) + ", " + std::to_string(s); };
            if (!std::isfinite(row[s]) || row[s] < 0.0f)
              c.fail_index(name, idx(), fmt_double(row[s]), "finite and >= 0");
            if (s >= Sp && row[s] != 0.0f)
              c.fail_index(name, idx(), fmt_double(row[s]),
                           "0 (past routing_sources[" + std::to_string(p) + "] = " + std::to_string(Sp) + ")");
            if (s < Sp) sum += row[s];
          }
          if (std::fabs(sum - 1.0) > 1e-4)
            c.fail(std::string(name) + "[" + std::to_string(i) + ", " + std::to_string(p) + ", :" + std::to_string(Sp) +
                   "] sums to " + fmt_double(sum) + ", but must sum to 1 (within 1e-4)");
        }
    };
    check_routing(t.routing, "routing");
    if (!t.routing_cls.empty()) {
      if (t.routing_cls.size() != t.routing.size())
        c.fail("routing_cls has " + std::to_string(t.routing_cls.size()) + " values, but routing has " +
               std::to_string(t.routing.size()));
      check_routing(t.routing_cls, "routing_cls");
    }
    if (!t.routing_selected.empty()) {
      if (t.routing_selected.size() != t.routing.size())
        c.fail("routing_selected has " + std::to_string(t.routing_selected.size()) + " values, but routing has " +
               std::to_string(t.routing.size()));
      for (std::size_t j = 0; j < t.routing_selected.size(); ++j) {
        const float v = t.routing_selected[j];
        const std::size_t i = j / (P * S), p = (j / S) % P, src = j % S;
        auto idx = [&] { return std::to_string(i) + ", " + std::to_string(p) + ", " + std::to_string(src); };
        if (!std::isfinite(v) || v < 0.0f) c.fail_index("routing_selected", idx(), fmt_double(v), "finite and >= 0");
        if (src >= static_cast<std::size_t>(t.routing_sources[p]) && v != 0.0f)
          c.fail_index("routing_selected", idx(), fmt_double(v), "0 (past routing_sources[" + std::to_string(p) + "])");
      }
    }
    auto check_stat = [&](const std::vector<float>& v, const char* name, double lo) {
      if (v.empty()) return;
      if (v.size() != prod(N, P))
        c.fail(std::string(name) + " has " + std::to_string(v.size()) + " values, but N*P = " + std::to_string(N) +
               "*" + std::to_string(P));
      for (std::size_t j = 0; j < v.size(); ++j)
        if (!std::isfinite(v[j]) || v[j] < lo - 1e-6)
          c.fail_index(name, std::to_string(j / P) + ", " + std::to_string(j % P), fmt_double(v[j]),
                       "finite and >= " + fmt_double(lo));
    };
    if (t.routing_kind != "depth" && t.routing_kind != "unordered")
      c.fail("routing_kind is '" + t.routing_kind +
             "', but must be 'depth' (ordered sources: AttnRes layers) or "
             "'unordered' (mixture-of-experts gates)");
    if (t.routing_kind == "unordered" && (!t.routing_depth_mean.empty() || !t.routing_depth_var.empty()))
      c.fail(
          "routing_depth_mean / routing_depth_var are present, but routing_kind is 'unordered' (experts have "
          "no depth)");
    check_stat(t.routing_entropy, "routing_entropy", 0.0);
    check_stat(t.routing_depth_mean, "routing_depth_mean", 0.0);
    check_stat(t.routing_depth_var, "routing_depth_var", 0.0);
  }
  if (!t.cluster.empty()) {
    if (t.cluster.size() != N)
      c.fail("cluster has " + std::to_string(t.cluster.size()) +
             " entries, but the trace has N = " + std::to_string(N));
    for (std::size_t i = 0; i < N; ++i)
      if (t.cluster[i] < 0) c.fail_index("cluster", std::to_string(i), std::to_string(t.cluster[i]), ">= 0");
  }
  if (!t.features.empty() || t.num_features > 0) {
    if (t.features.size() != prod(N, t.num_features))
      c.fail("features has " + std::to_string(t.features.size()) + " values, but N*F = " + std::to_string(N) + "*" +
             std::to_string(t.num_features));
    for (std::size_t j = 0; j < t.features.size(); ++j)
      if (!std::isfinite(t.features[j]))
        c.fail_index("features", std::to_string(j / t.num_features) + ", " + std::to_string(j % t.num_features),
                     fmt_double(t.features[j]), "finite");
    if (!t.feature_names.empty() && t.feature_names.size() != t.num_features)
      c.fail("feature_names has " + std::to_string(t.feature_names.size()) +
             " names, but features has F = " + std::to_string(t.num_features) + " columns");
    // A statistic is asked for by name, so each name must pick one column: two columns with one name
    // used to make both tests read the first; a feature named like a routing statistic was shadowed
    // by the statistic computed from 'routing'.
    for (std::size_t f = 0; f < t.feature_names.size(); ++f) {
      const std::string& name = t.feature_names[f];
      if (name.empty()) c.fail_index("feature_names", std::to_string(f), "''", "a non-empty name");
      for (std::size_t g = 0; g < f; ++g)
        if (t.feature_names[g] == name)
          c.fail("feature_names: '" + name + "' names columns " + std::to_string(g) + " and " + std::to_string(f) +
                 "; a statistic is chosen by name, so each feature needs its own name");
      if (!t.routing.empty() && (name == "re" || name == "rdv"))
        c.fail("feature_names[" + std::to_string(f) + "] is '" + name +
               "', the name of the routing statistic computed "
               "from 'routing'; rename the feature (e.g. 'feature_" +
               name + "')");
    }
  }
}

/// Reads the top-k output form's arrays (docs/interface.md "The trace file") into t; shapes and dtypes
/// are checked here, values by validate_topk.
template <class Get>
void read_topk(Trace& t, const Get& get, const Ctx& c, const std::string& ctx) {
  const NpyArray& lp = *get("topk_logprobs");
  t.topk = lp.shape[1];
  const NpyArray* kc = get("num_classes");
  if (!kc) c.fail("has 'topk_logprobs' but no 'num_classes' (the vocabulary size K, a 0-d integer)");
  if (kc->ndim() != 0 || (kc->dtype != DType::i8 && kc->dtype != DType::i4))
    c.fail("num_classes has shape " + shape_str(kc->shape) + " and dtype " + kc->shown_dtype() +
           ", but must be a 0-d int64 or int32");
  const std::int64_t K = kc->as_int64(ctx).at(0);
  if (K < 2) c.fail("num_classes is " + std::to_string(K) + ", but must be >= 2");
  t.classes = static_cast<std::size_t>(K);
  t.topk_logprobs = lp.as_float(ctx);
  const NpyArray* ix = get("topk_indices");
  if (!ix) c.fail("has 'topk_logprobs' but no 'topk_indices' (their classes, [N, k])");
  if (ix->shape != lp.shape)
    c.fail("topk_indices has shape " + shape_str(ix->shape) + ", but topk_logprobs has " + shape_str(lp.shape));
  if (ix->dtype != DType::i8 && ix->dtype != DType::i4)
    c.fail("topk_indices has dtype " + ix->shown_dtype() + ", but must be int64 or int32");
  const auto wide = ix->as_int64(ctx);
  t.topk_indices.resize(wide.size());
  for (std::size_t j = 0; j < wide.size(); ++j) {
    if (wide[j] < 0 || wide[j] >= K)
      c.fail_index("topk_indices", std::to_string(j / t.topk) + ", " + std::to_string(j % t.topk),
                   std::to_string(wide[j]), "in [0, " + std::to_string(K - 1) + "]");
    t.topk_indices[j] = static_cast<std::int32_t>(wide[j]);
  }
  for (auto [name, dest] : {std::pair<const char*, std::vector<float>*>{"label_logprob", &t.label_logprob},
                            {"log_normalizer", &t.log_normalizer},
                            {"predictive_entropy", &t.predictive_entropy},
                            {"prob_sq_sum", &t.prob_sq_sum}}) {
    const NpyArray* a = get(name);
    if (!a) c.fail(std::string("has 'topk_logprobs' but no '") + name + "' ([N]; docs/interface.md, the top-k form)");
    if (a->ndim() != 1 || a->shape[0] != t.n)
      c.fail(std::string(name) + " has shape " + shape_str(a->shape) + ", but must be [N] = [" + std::to_string(t.n) +
             "]");
    if (a->dtype != DType::f4 && a->dtype != DType::f8)
      c.fail(std::string(name) + " has dtype " + a->shown_dtype() + ", but must be float32 or float64");
    *dest = a->as_float(ctx);
  }
}

}  // namespace

void validate_trace(const Trace& trace) { validate(trace, {"validate_trace", trace.path}); }

Trace load_trace(const std::string& path) { return trace_from_arrays(read_npz(path), path); }

Trace trace_from_arrays(const std::vector<NpyArray>& list, const std::string& path, const std::string& fn) {
  const Ctx c{fn, path};
  std::map<std::string, const NpyArray*> arrays;
  for (const auto& a : list)
    if (!arrays.emplace(a.name, &a).second) c.fail("array '" + a.name + "' appears twice");
  const std::string ctx = fn + ": " + path;
  auto get = [&](const std::string& name) -> const NpyArray* {
    auto it = arrays.find(name);
    return it == arrays.end() ? nullptr : it->second;
  };
  auto need_ndim = [&](const NpyArray& a, std::size_t ndim, const std::string& what) {
    if (a.ndim() != ndim) c.fail(a.name + " has shape " + shape_str(a.shape) + ", but must be " + what);
  };
  auto need_float = [&](const NpyArray& a) {
    if (a.dtype != DType::f4 && a.dtype != DType::f8)
      c.fail(a.name + " has dtype " + a.shown_dtype() + ", but must be float32 or float64");
  };
  Trace t;
  t.path = path;
  const NpyArray* logits = get("logits");
  const NpyArray* probs = get("probs");
  const NpyArray* topk = get("topk_logprobs");
  if (logits && probs) c.fail("has both 'logits' and 'probs'; give exactly one");
  if (topk && (logits || probs))
    c.fail(std::string("has both '") + (logits ? "logits" : "probs") +
           "' and 'topk_logprobs'; give exactly one output form");
  if (!logits && !probs && !topk)
    c.fail("has neither 'logits' nor 'probs' (one is required; or the top-k form, 'topk_logprobs')");
  const NpyArray& scores = logits ? *logits : probs ? *probs : *topk;
  need_ndim(scores, 2, topk ? "[N, k]" : "[N, K]");
  need_float(scores);
  t.n = scores.shape[0];
  if (topk) {
    read_topk(t, get, c, ctx);
  } else {
    t.classes = scores.shape[1];
    (logits ? t.logits : t.probs) = scores.as_double(ctx);
  }
  const NpyArray* labels = get("labels");
  if (!labels) c.fail("has no 'labels' array (required)");
  need_ndim(*labels, 1, "[N]");
  if (labels->dtype != DType::i8 && labels->dtype != DType::i4)
    c.fail("labels has dtype " + labels->shown_dtype() + ", but must be int64 or int32");
  if (labels->shape[0] != t.n)
    c.fail("labels has " + std::to_string(labels->shape[0]) + " entries, but " + scores.name +
           " has N = " + std::to_string(t.n) + " rows");
  t.labels = labels->as_int64(ctx);

  if (!topk)
    for (const char* name :
         {"topk_indices", "label_logprob", "log_normalizer", "predictive_entropy", "prob_sq_sum", "num_classes"})
      if (get(name))
        c.fail(std::string("has '") + name + "' but no 'topk_logprobs' (it belongs to the top-k output form)");
  if (const NpyArray* r = get("routing")) {
    need_ndim(*r, 3, "[N, P, S]");
    if (r->shape[0] != t.n)
      c.fail("routing has " + std::to_string(r->shape[0]) + " rows, but " + scores.name +
             " has N = " + std::to_string(t.n));
    t.points = r->shape[1];
    t.sources = r->shape[2];
    need_float(*r);
    t.routing = r->as_float(ctx);
    const NpyArray* rs = get("routing_sources");
    if (!rs) c.fail("has 'routing' but no 'routing_sources'");
    need_ndim(*rs, 1, "[P]");
    const auto src = rs->as_int64(ctx);
    t.routing_sources.resize(src.size());
    for (std::size_t p = 0; p < src.size(); ++p) {
      if (src[p] < 1 || static_cast<std::uint64_t>(src[p]) > t.sources)
        c.fail_index("routing_sources", std::to_string(p), std::to_string(src[p]),
                     "in [1, " + std::to_string(t.sources) + "]");
      t.routing_sources[p] = static_cast<std::int32_t>(src[p]);
    }
    if (const NpyArray* rc = get("routing_cls")) {
      if (rc->shape != r->shape)
        c.fail("routing_cls has shape " + shape_str(rc->shape) + ", but routing has " + shape_str(r->shape));
      need_float(*rc);
      t.routing_cls = rc->as_float(ctx);
    }
    if (const NpyArray* rs_sel = get("routing_selected")) {
      if (rs_sel->shape != r->shape)
        c.fail("routing_selected has shape " + shape_str(rs_sel->shape) + ", but routing has " + shape_str(r->shape));
      need_float(*rs_sel);
      t.routing_selected = rs_sel->as_float(ctx);
    }
    for (auto [name, dest] : {std::pair<const char*, std::vector<float>*>{"routing_entropy", &t.routing_entropy},
                              {"routing_depth_mean", &t.routing_depth_mean},
                              {"routing_depth_var", &t.routing_depth_var}}) {
      if (const NpyArray* a = get(name)) {
        need_ndim(*a, 2, "[N, P]");
        if (a->shape[0] != t.n || a->shape[1] != t.points)
          c.fail(std::string(name) + " has shape " + shape_str(a->shape) + ", but must be [N, P] = [" +
                 std::to_string(t.n) + ", " + std::to_string(t.points) + "]");
        need_float(*a);
        *dest = a->as_float(ctx);
      }
    }
    if (const NpyArray* k = get("routing_kind")) {
      need_ndim(*k, 0, "a 0-d string");
      t.routing_kind = k->as_strings(ctx).at(0);
    }
  } else {
    for (const char* name : {"routing_cls", "routing_sources", "routing_entropy", "routing_depth_mean",
                             "routing_depth_var", "routing_kind", "routing_selected"})
      if (get(name)) c.fail(std::string("has '") + name + "' but no 'routing'");
  }
  if (const NpyArray* f = get("features")) {
    need_ndim(*f, 2, "[N, F]");
    need_float(*f);
    if (f->shape[0] != t.n)
      c.fail("features has " + std::to_string(f->shape[0]) + " rows, but " + scores.name +
             " has N = " + std::to_string(t.n));
    t.num_features = f->shape[1];
    t.features = f->as_double(ctx);
  }
  if (const NpyArray* fn = get("feature_names")) {
    need_ndim(*fn, 1, "[F]");
    t.feature_names = fn->as_strings(ctx);
    if (!get("features")) c.fail("has 'feature_names' but no 'features'");
  }
  if (const NpyArray* cl = get("cluster")) {
    need_ndim(*cl, 1, "[N]");
    if (cl->dtype != DType::i8 && cl->dtype != DType::i4)
      c.fail("cluster has dtype " + cl->shown_dtype() + ", but must be int64 or int32");
    if (cl->shape[0] != t.n)
      c.fail("cluster has " + std::to_string(cl->shape[0]) + " entries, but " + scores.name +
             " has N = " + std::to_string(t.n) + " rows");
    t.cluster = cl->as_int64(ctx);
  }
  if (const NpyArray* m = get("meta")) {
    need_ndim(*m, 0, "a 0-d string");
    t.meta_json = m->as_strings(ctx).at(0);
  } else {
    t.meta_json = "{}";
  }
  validate(t, c);
  return t;
}

void save_trace(const Trace& t, const std::string& path, bool compress) {
  Trace copy_for_check = t;
  copy_for_check.path = path;
  validate(copy_for_check, {"save_trace", path});
  std::vector<NpyArray> arrays;
  if (!t.logits.empty()) {
    arrays.push_back(NpyArray::from_double("logits", t.logits, {t.n, t.classes}));
  } else if (!t.probs.empty()) {
    arrays.push_back(NpyArray::from_double("probs", t.probs, {t.n, t.classes}));
  } else {
    arrays.push_back(NpyArray::from_float("topk_logprobs", t.topk_logprobs, {t.n, t.topk}));
    arrays.push_back(NpyArray::from_int32("topk_indices", t.topk_indices, {t.n, t.topk}));
    arrays.push_back(NpyArray::from_float("label_logprob", t.label_logprob, {t.n}));
    arrays.push_back(NpyArray::from_float("log_normalizer", t.log_normalizer, {t.n}));
    arrays.push_back(NpyArray::from_float("predictive_entropy", t.predictive_entropy, {t.n}));
    arrays.push_back(NpyArray::from_float("prob_sq_sum", t.prob_sq_sum, {t.n}));
    arrays.push_back(NpyArray::from_int64("num_classes", {static_cast<std::int64_t>(t.classes)}, {}));
  }
  arrays.push_back(NpyArray::from_int64("labels", t.labels, {t.n}));
  if (!t.routing.empty()) {
    arrays.push_back(NpyArray::from_float("routing", t.routing, {t.n, t.points, t.sources}));
    if (!t.routing_cls.empty())
      arrays.push_back(NpyArray::from_float("routing_cls", t.routing_cls, {t.n, t.points, t.sources}));
    if (!t.routing_selected.empty())
      arrays.push_back(NpyArray::from_float("routing_selected", t.routing_selected, {t.n, t.points, t.sources}));
    arrays.push_back(NpyArray::from_int32("routing_sources", t.routing_sources, {t.points}));
    if (!t.routing_entropy.empty())
      arrays.push_back(NpyArray::from_float("routing_entropy", t.routing_entropy, {t.n, t.points}));
    if (!t.routing_depth_mean.empty())
      arrays.push_back(NpyArray::from_float("routing_depth_mean", t.routing_depth_mean, {t.n, t.points}));
    if (!t.routing_depth_var.empty())
      arrays.push_back(NpyArray::from_float("routing_depth_var", t.routing_depth_var, {t.n, t.points}));
    if (t.routing_kind != "depth") arrays.push_back(NpyArray::scalar_string("routing_kind", t.routing_kind));
  }
  if (t.num_features > 0) {
    arrays.push_back(NpyArray::from_double("features", t.features, {t.n, t.num_features}));
    if (!t.feature_names.empty())
      arrays.push_back(NpyArray::from_strings("feature_names", t.feature_names, {t.num_features}));
  }
  if (!t.cluster.empty()) arrays.push_back(NpyArray::from_int64("cluster", t.cluster, {t.n}));
  arrays.push_back(NpyArray::scalar_string("meta", t.meta_json.empty() ? "{}" : t.meta_json));
  write_npz(path, arrays, compress);
}

std::string trace_output_form(const Trace& t) {
  if (t.topk == 0) return "the whole vector of " + std::to_string(t.classes) + " classes";
  return "the top " + std::to_string(t.topk) + " of " + std::to_string(t.classes) + " classes (top-k form)";
}

std::vector<double> trace_probabilities(const Trace& t, const std::string& what) {
  if (t.topk > 0)
    throw InputError(what + " needs every class's probability, but " + t.path + " holds " + trace_output_form(t) +
                     "; record the trace with the whole output (torch_hooks: topk=None) for it");
  if (!t.probs.empty()) return t.probs;
  const std::size_t N = t.n, K = t.classes;
  ARCAL_ASSERT(t.logits.size() == N * K, "trace logits size");
  std::vector<double> p(N * K);
  for (std::size_t i = 0; i < N; ++i) {
    const double* z = &t.logits[i * K];
    double* out = &p[i * K];
    const double m = *std::max_element(z, z + K);
    double s = 0.0;
    for (std::size_t k = 0; k < K; ++k) s += (out[k] = std::exp(z[k] - m));
    const double inv = 1.0 / s;
    for (std::size_t k = 0; k < K; ++k) out[k] *= inv;
  }
  return p;
}

TraceTopLabel trace_top_label(const Trace& t) {
  const std::size_t N = t.n, K = t.classes;
  constexpr double kFloor = 1e-300;  // calib/metrics.cpp's probability floor of the NLL
  TraceTopLabel r;
  r.confidence.resize(N);
  r.correct.resize(N);
  r.nll.resize(N);
  r.brier.resize(N);
  r.predicted.resize(N);
  if (t.topk > 0) {
    for (std::size_t i = 0; i < N; ++i) {
      const double p0 = std::exp(double(t.topk_logprobs[i * t.topk]));
      const double py = std::exp(double(t.label_logprob[i]));
      r.predicted[i] = t.topk_indices[i * t.topk];
      r.confidence[i] = p0;
      r.correct[i] = r.predicted[i] == t.labels[i] ? 1.0 : 0.0;
      r.nll[i] = -std::max(double(t.label_logprob[i]), std::log(kFloor));
      // sum_k p_k^2 >= p_y^2 exactly; the two come from float32 arrays, so at p_y ~ 1 their difference can
      // round below 0 (-1e-6 on a trained model's trace): clamped.
      r.brier[i] = std::max(0.0, double(t.prob_sq_sum[i]) - py * py) + (py - 1.0) * (py - 1.0);
    }
    return r;
  }
  const auto p = trace_probabilities(t);
  for (std::size_t i = 0; i < N; ++i) {
    const double* row = &p[i * K];
    const std::size_t arg = static_cast<std::size_t>(std::max_element(row, row + K) - row);  // first maximum
    const double py = row[t.labels[i]];
    double q = 0.0;
    for (std::size_t k = 0; k < K; ++k) q += row[k] * row[k];
    r.predicted[i] = static_cast<std::int64_t>(arg);
    r.confidence[i] = row[arg];
    r.correct[i] = static_cast<std::int64_t>(arg) == t.labels[i] ? 1.0 : 0.0;
    r.nll[i] = -std::log(std::max(py, kFloor));
    r.brier[i] = q - py * py + (py - 1.0) * (py - 1.0);
  }
  return r;
}

}  // namespace arcal
