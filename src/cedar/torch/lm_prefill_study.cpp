// CEDAR in a language model's causal prefill (lm_prefill_study.hpp).
#include "cedar/torch/lm_prefill_study.hpp"

#include <fmt/format.h>

#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <thread>

#include "calib/binning.hpp"
#include "cedar/torch/cedar_torch.hpp"
#include "cedar/torch/estimate_format.hpp"
#include "core/check.hpp"
#include "stats/bootstrap.hpp"
#include "ops/torch/compute_threads.hpp"
#include "train/trainer.hpp"

namespace arcal::cedar {

namespace {

constexpr int kBins = 15;
constexpr double kLn2 = 0.69314718055994530942;

/// One sequence's sums over its next-byte predictions: what every resample statistic is built from.
struct SeqSums {
  double n = 0, nll = 0, conf = 0, correct = 0;
  std::array<double, kBins> count{}, conf_sum{}, correct_sum{};
};

struct Totals {
  double bpb = 0, nll = 0, ece = 0, over = 0, acc = 0;
};

Totals totals(const std::vector<SeqSums>& seqs, const std::vector<std::size_t>& idx) {
  SeqSums s;
  for (std::size_t i : idx) {
    const auto& q = seqs[i];
    s.n += q.n;
    s.nll += q.nll;
    s.conf += q.conf;
    s.correct += q.correct;
    for (int b = 0; b < kBins; ++b) {
      s.count[b] += q.count[b];
      s.conf_sum[b] += q.conf_sum[b];
      s.correct_sum[b] += q.correct_sum[b];
    }
  }
  Totals t;
  t.nll = s.nll / s.n;
  t.bpb = t.nll / kLn2;
  t.acc = s.correct / s.n;
  t.over = s.conf / s.n - t.acc;
  for (int b = 0; b < kBins; ++b) t.ece += std::abs(s.correct_sum[b] - s.conf_sum[b]) / s.n;
  return t;
}

double pick(const Totals& t, int which) {
  switch (which) {
    case 0: return t.bpb;
    case 1: return t.nll;
    case 2: return t.ece;
    case 3: return t.over;
    default: return t.acc;
  }
}

Estimate boot(const std::vector<SeqSums>& arm, const std::vector<SeqSums>* dense, int which, int draws,
              std::uint64_t seed) {
  const auto r = percentile_bootstrap(
      arm.size(),
      [&](const std::vector<std::size_t>& idx) {
        const double a = pick(totals(arm, idx), which);
        return dense ? a - pick(totals(*dense, idx), which) : a;
      },
      draws, seed);
  return Estimate{r.estimate, r.ci};
}

/// Thrown by the capturing backend once it holds layer 0's q/k/v: the rest of the forward is not needed.
struct CaptureDone {};

double seconds_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).norm() / b.to(torch::kDouble).norm()).item<double>();
}

/// LibTorch's causal softmax(q k^T / sqrt(d)) v in blocks of 1024 queries, each over its key prefix
/// (the whole T x T score matrix does not fit at 32K): q, k, v (H,T,d) contiguous float.
torch::Tensor libtorch_causal(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const auto T = q.size(1);
  const double scale = 1.0 / std::sqrt(double(q.size(2)));
  auto out = torch::empty_like(q);
  constexpr std::int64_t kBlock = 1024;
  for (std::int64_t r0 = 0; r0 < T; r0 += kBlock) {
    const auto r1 = std::min(T, r0 + kBlock);
    auto s = torch::matmul(q.slice(1, r0, r1), k.slice(1, 0, r1).transpose(1, 2)) * scale;  // (H, r1-r0, r1)
    auto qpos = torch::arange(r0, r1, torch::kLong).unsqueeze(1),
         kpos = torch::arange(0, r1, torch::kLong).unsqueeze(0);
    s.masked_fill_(kpos.gt(qpos), -std::numeric_limits<float>::infinity());
    out.slice(1, r0, r1).copy_(torch::matmul(torch::softmax(s, -1), v.slice(1, 0, r1)));
  }
  return out;
}

/// Options of one arm in causal prefill: chunk 0 a sink, the query's own chunk exact.
Options prefill_options(Method m, std::int64_t budget, int threads) {
  Options o;
  o.method = m;
  o.budget = budget;
  o.sink_chunks = 1;
  o.causal = true;
  o.threads = threads;
  return o;
}

/// The kernel-time row at prefill length L: layer 0's q/k/v of the first test sequence of L tokens
/// (read by a backend that stops the forward pass once it holds them), then every kernel on them.
LmTiming time_kernels(ARViT& model, const TrainConfig& tc, const LmStudyConfig& cfg, std::int64_t L) {
  const auto data = load_dataset(tc.dataset, tc.data_dir, tc.val_fraction, 0, tc.seed, int(L));
  const auto x = data.test.images.narrow(0, 0, 1).narrow(1, 0, L).to(torch::kLong);
  torch::Tensor q, k, v;
  model->set_attention_backend([&](const torch::Tensor& q4, const torch::Tensor& k4, const torch::Tensor& v4, bool) {
    q = q4[0].to(torch::kFloat).contiguous();  // (H,T,hd)
    k = k4[0].to(torch::kFloat).contiguous();
    v = v4[0].to(torch::kFloat).contiguous();
    throw CaptureDone{};
    return q4;
  });
  try {
    model->forward(x);
  } catch (const CaptureDone&) {
  }
  model->set_attention_backend({});
  if (!q.defined()) throw_input("cedar-lm", "the model called no attention layer (internal)");
  LmTiming t;
  t.context = L;
  const ChunkLayout chunks = fixed_chunks(L, cfg.chunk);
  t.chunks = chunks.chunks();
  auto opt = [&](Method m, std::int64_t b) { return prefill_options(m, b, cfg.threads); };
  torch::Tensor o_dense, o_lib, o_cedar, o_topk, o_sum;
  Stats st;
  t.dense_seconds = seconds_of([&] { o_dense = attention_tensors(q, k, v, chunks, opt(Method::dense, 0)).first; });
  t.libtorch_seconds = seconds_of([&] { o_lib = libtorch_causal(q, k, v); });
  t.cedar_seconds = seconds_of(
      [&] { o_cedar = attention_tensors(q, k, v, chunks, opt(Method::cedar, cfg.timing_budget), &st).first; });
  t.cedar_mean_expanded = st.mean_expanded;
  t.topk_seconds =
      seconds_of([&] { o_topk = attention_tensors(q, k, v, chunks, opt(Method::topk, cfg.timing_budget)).first; });
  t.summary_seconds = seconds_of([&] { o_sum = attention_tensors(q, k, v, chunks, opt(Method::summary, 0)).first; });
  t.cedar_error = rel_error(o_cedar, o_dense);
  t.topk_error = rel_error(o_topk, o_dense);
  t.summary_error = rel_error(o_sum, o_dense);
  t.libtorch_vs_dense_error = rel_error(o_lib, o_dense);
  return t;
}

}  // namespace

LmStudyResult run_lm_study(const LmStudyConfig& cfg, const std::function<void(std::int64_t, std::int64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const std::string f = "cedar-lm";
  if (cfg.bootstrap < 1) throw_input(f, "--bootstrap is " + std::to_string(cfg.bootstrap) + ", but must be >= 1");
  if (cfg.chunk < 1) throw_input(f, "--chunk is " + std::to_string(cfg.chunk) + ", but must be >= 1");
  for (std::size_t i = 0; i < cfg.budgets.size(); ++i)
    if (cfg.budgets[i] < 1) throw_index(f, "--budgets", i, std::to_string(cfg.budgets[i]), ">= 1");
  for (std::size_t i = 0; i < cfg.contexts.size(); ++i)
    if (cfg.contexts[i] < 2) throw_index(f, "--contexts", i, std::to_string(cfg.contexts[i]), ">= 2");
  for (std::size_t i = 0; i < cfg.timing_contexts.size(); ++i)
    if (cfg.timing_contexts[i] < 2)
      throw_index(f, "--timing-contexts", i, std::to_string(cfg.timing_contexts[i]), ">= 2");
  if (cfg.timing_budget < 1) throw_input(f, "--timing-budget must be >= 1");
  if (cfg.threads > 0) set_compute_threads(cfg.threads);
  TrainConfig tc;
  ARViT model = load_trained_model(cfg.run, &tc);
  const ModelConfig& mc = model->config();
  if (mc.arch != "lm") throw_input(f, cfg.run + " is a " + mc.preset + " run, not a language model (ar-lm-tiny)");
  LmStudyResult res;
  res.config = cfg;
  res.model = mc;
  res.training_context = mc.context;
  res.learned_positions = mc.learned_positions;
  res.threads = cfg.threads > 0 ? cfg.threads : int(std::thread::hardware_concurrency());
  auto runnable = [&](std::int64_t L) { return !mc.learned_positions || L <= mc.context; };

  struct ArmSpec {
    Method method;
    std::int64_t budget;
    bool second_order = true;
  };
  std::vector<ArmSpec> specs = {{Method::dense, 0}, {Method::summary, 0}};
  for (auto b : cfg.budgets) {
    specs.push_back({Method::topk, b});
    specs.push_back({Method::cedar, b});
  }
  if (cfg.first_order_arms) {
    specs.push_back({Method::summary, 0, false});
    for (auto b : cfg.budgets) specs.push_back({Method::cedar, b, false});
  }
  auto options_for = [&](const ArmSpec& a) {
    auto o = prefill_options(a.method, a.budget, cfg.threads);
    o.second_order = a.second_order;
    return o;
  };

  torch::NoGradGuard guard;
  model->eval();
  // The contexts' data first, so that progress knows the total.
  std::vector<std::pair<std::int64_t, torch::Tensor>> plans;  // (L, sequences (n, L+1) uint8)
  for (auto L : cfg.contexts) {
    if (!runnable(L)) {
      res.skipped_contexts.push_back(L);
      continue;
    }
    const auto data = load_dataset(tc.dataset, tc.data_dir, tc.val_fraction, 0, tc.seed, int(L));
    const std::int64_t n = std::min<std::int64_t>(data.test.size(), std::max<std::int64_t>(2, cfg.tokens / L));
    if (n < 2)
      throw_input(f, "the test split holds " + std::to_string(data.test.size()) + " sequence(s) of " +
                         std::to_string(L + 1) + " bytes; the intervals need at least 2 (lower --contexts)");
    plans.emplace_back(L, data.test.images.narrow(0, 0, n));
  }
  std::int64_t total = 0, done = 0;
  for (const auto& [L, seqs] : plans) total += seqs.size(0) * std::int64_t(specs.size());
  for (auto L : cfg.timing_contexts) total += runnable(L) ? 1 : 0;

  for (const auto& [L, seqs] : plans) {
    LmContext ctx;
    ctx.context = L;
    ctx.sequences = seqs.size(0);
    ctx.tokens = ctx.sequences * L;
    ctx.chunks = (L + cfg.chunk - 1) / cfg.chunk;
    ctx.beyond_training = L > mc.context;
    const std::int64_t batch = std::max<std::int64_t>(1, 8192 / L);
    std::vector<std::vector<SeqSums>> sums(specs.size(), std::vector<SeqSums>(std::size_t(ctx.sequences)));
    std::vector<double> agree(specs.size(), 0.0), kl(specs.size(), 0.0);
    std::vector<std::shared_ptr<ExpansionTally>> tallies;
    for (std::size_t a = 0; a < specs.size(); ++a) tallies.push_back(std::make_shared<ExpansionTally>());
    for (std::int64_t s = 0; s < ctx.sequences; s += batch) {
      const auto B = std::min(batch, ctx.sequences - s);
      const auto tok = seqs.narrow(0, s, B).to(torch::kLong);
      const auto x = tok.narrow(1, 0, L), y = tok.narrow(1, 1, L).reshape({B * L});
      torch::Tensor dense_lp, dense_pred;
      for (std::size_t a = 0; a < specs.size(); ++a) {
        model->set_attention_backend(make_backend_fixed(cfg.chunk, options_for(specs[a]), tallies[a]));
        const auto lp = torch::log_softmax(model->forward(x).to(torch::kDouble), -1).reshape({B * L, -1});
        const auto [conf_lp, pred] = lp.max(1);
        const auto conf = conf_lp.exp().contiguous();
        const auto correct = pred.eq(y).to(torch::kDouble).contiguous();
        const auto nll = (-lp.gather(1, y.unsqueeze(1)).squeeze(1)).contiguous();
        if (a == 0) {
          dense_lp = lp;
          dense_pred = pred;
        } else {
          agree[a] += pred.eq(dense_pred).sum().item<double>();
          kl[a] += (dense_lp.exp() * (dense_lp - lp)).sum().item<double>();
        }
        const double *c = conf.data_ptr<double>(), *k = correct.data_ptr<double>(), *l = nll.data_ptr<double>();
        for (std::int64_t i = 0; i < B * L; ++i) {
          auto& q = sums[a][std::size_t(s + i / L)];
          q.n += 1;
          q.nll += l[i];
          q.conf += c[i];
          q.correct += k[i];
          const int b = equal_width_bin(c[i], kBins);
          q.count[b] += 1;
          q.conf_sum[b] += c[i];
          q.correct_sum[b] += k[i];
        }
        done += B;
        if (progress) progress(done, total);
      }
    }
    const double layer_calls = double(mc.depth) * double(ctx.sequences);
    for (std::size_t a = 0; a < specs.size(); ++a) {
      LmArm arm;
      arm.method = to_string(specs[a].method);
      arm.budget = specs[a].method == Method::dense ? ctx.chunks : specs[a].budget;
      arm.second_order = specs[a].second_order;
      arm.mean_expanded = tallies[a]->mean();
      const auto& S = sums[a];
      const std::uint64_t seed = cfg.seed;  // the same resamples for every arm: paired differences
      arm.bits_per_byte = boot(S, nullptr, 0, cfg.bootstrap, seed);
      arm.nll = boot(S, nullptr, 1, cfg.bootstrap, seed);
      arm.ece = boot(S, nullptr, 2, cfg.bootstrap, seed);
      arm.overconfidence = boot(S, nullptr, 3, cfg.bootstrap, seed);
      arm.accuracy = boot(S, nullptr, 4, cfg.bootstrap, seed);
      arm.d_bits_per_byte = boot(S, &sums[0], 0, cfg.bootstrap, seed);
      arm.d_ece = boot(S, &sums[0], 2, cfg.bootstrap, seed);
      arm.d_overconfidence = boot(S, &sums[0], 3, cfg.bootstrap, seed);
      arm.agreement = a == 0 ? 1.0 : agree[a] / double(ctx.tokens);
      arm.mean_kl = a == 0 ? 0.0 : kl[a] / double(ctx.tokens);
      arm.layer_seconds = tallies[a]->seconds / layer_calls;
      ctx.arms.push_back(arm);
    }
    res.contexts.push_back(ctx);
  }

  // Kernel time per layer on the model's own layer-0 q/k/v (one sequence of L tokens).
  for (auto L : cfg.timing_contexts) {
    if (!runnable(L)) continue;
    res.timings.push_back(time_kernels(model, tc, cfg, L));
    if (progress) progress(++done, total);
  }
  model->set_attention_backend({});
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

nlohmann::json lm_study_json(const LmStudyResult& r) {
  nlohmann::json contexts = nlohmann::json::array();
  for (const auto& c : r.contexts) {
    nlohmann::json arms = nlohmann::json::array();
    for (const auto& a : c.arms)
      arms.push_back({{"method", a.method},
                      {"budget", a.budget},
                      {"second_order", a.second_order},
                      {"mean_expanded", a.mean_expanded},
                      {"bits_per_byte", estimate_json(a.bits_per_byte)},
                      {"nll", estimate_json(a.nll)},
                      {"ece", estimate_json(a.ece)},
                      {"overconfidence", estimate_json(a.overconfidence)},
                      {"accuracy", estimate_json(a.accuracy)},
                      {"delta_vs_dense",
                       {{"bits_per_byte", estimate_json(a.d_bits_per_byte)},
                        {"ece", estimate_json(a.d_ece)},
                        {"overconfidence", estimate_json(a.d_overconfidence)}}},
                      {"agreement_with_dense", a.agreement},
                      {"mean_kl_from_dense", a.mean_kl},
                      {"layer_seconds", a.layer_seconds}});
    contexts.push_back({{"context", c.context},
                        {"sequences", c.sequences},
                        {"tokens", c.tokens},
                        {"chunks", c.chunks},
                        {"beyond_training_context", c.beyond_training},
                        {"arms", arms}});
  }
  nlohmann::json timings = nlohmann::json::array();
  for (const auto& t : r.timings)
    timings.push_back(
        {{"context", t.context},
         {"chunks", t.chunks},
         {"budget", r.config.timing_budget},
         {"seconds",
          {{"dense", t.dense_seconds},
           {"libtorch", t.libtorch_seconds},
           {"cedar", t.cedar_seconds},
           {"topk", t.topk_seconds},
           {"summary", t.summary_seconds}}},
         {"cedar_vs_dense", t.dense_seconds / t.cedar_seconds},
         {"cedar_vs_libtorch", t.libtorch_seconds / t.cedar_seconds},
         {"dense_vs_libtorch", t.libtorch_seconds / t.dense_seconds},
         {"relative_error", {{"cedar", t.cedar_error}, {"topk", t.topk_error}, {"summary", t.summary_error}}},
         {"cedar_mean_expanded", t.cedar_mean_expanded},
         {"libtorch_vs_dense_error", t.libtorch_vs_dense_error}});
  return {{"schema", "arcal.cedar_lm/1"},
          {"run", r.config.run},
          {"model", r.model},
          {"training_context", r.training_context},
          {"positions", r.learned_positions ? "learned" : "none"},
          {"chunk", r.config.chunk},
          {"budgets", r.config.budgets},
          {"bootstrap", r.config.bootstrap},
          {"seed", r.config.seed},
          {"ece_bins", kBins},
          {"threads", r.threads},
          {"skipped_contexts", r.skipped_contexts},
          {"contexts", contexts},
          {"timings", timings},
          {"seconds", r.seconds}};
}

std::string lm_study_csv(const LmStudyResult& r) {
  std::ostringstream o;
  o << "context,method,second_order,budget,mean_expanded,bits_per_byte,bpb_low,bpb_high,nll,ece,ece_low,ece_high,"
       "overconfidence,"
       "over_low,over_high,d_bits_per_byte,d_bpb_low,d_bpb_high,d_ece,d_overconfidence,d_over_low,d_over_high,"
       "agreement,"
       "mean_kl,layer_seconds\n";
  for (const auto& c : r.contexts)
    for (const auto& a : c.arms)
      o << fmt::format(
          "{},{},{},{},{:.4f},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:."
          "6g},"
          "{:.6g},{:.6g},{:.6g},{:.6g},{:.6f},{:.6g},{:.6g}\n",
          c.context, a.method, a.second_order ? 1 : 0, a.budget, a.mean_expanded, a.bits_per_byte.value,
          a.bits_per_byte.ci.low, a.bits_per_byte.ci.high, a.nll.value, a.ece.value, a.ece.ci.low, a.ece.ci.high,
          a.overconfidence.value, a.overconfidence.ci.low, a.overconfidence.ci.high, a.d_bits_per_byte.value,
          a.d_bits_per_byte.ci.low, a.d_bits_per_byte.ci.high, a.d_ece.value, a.d_overconfidence.value,
          a.d_overconfidence.ci.low, a.d_overconfidence.ci.high, a.agreement, a.mean_kl, a.layer_seconds);
  return o.str();
}

std::string lm_study_markdown(const LmStudyResult& r) {
  std::ostringstream o;
  const auto& m = r.model;
  o << "## CEDAR in the language model's causal prefill\n\n";
  o << fmt::format(
      "Run `{}`: {} ({}, {} positions, trained at context {}), {} causal attention layers of {} heads. Test documents "
      "concatenated to contexts of L tokens; chunks of {} tokens; chunk 0 (a sink) and each query's own chunk are "
      "exact in every arm; B = further exact chunks per query. Intervals: 95 % percentile bootstrap over whole "
      "sequences ({} resamples, seed {}); Δ = arm − dense on the same resamples. ECE: top-label, 15 equal-width "
      "bins. Threads: {}.\n\n",
      r.config.run, m.value("preset", std::string("?")), m.value("residual", std::string("?")),
      r.learned_positions ? "learned" : "no (NoPE)", r.training_context, m.value("depth", 0), m.value("heads", 0),
      r.config.chunk, r.config.bootstrap, r.config.seed, r.threads);
  if (!r.skipped_contexts.empty()) {
    o << "Not run (beyond the learned positions, which end at " << r.training_context << "):";
    for (auto L : r.skipped_contexts) o << " " << L;
    o << ".\n\n";
  }
  for (const auto& c : r.contexts) {
    o << fmt::format("### L = {} ({} sequences, {} tokens, {} chunks{})\n\n", c.context, c.sequences, c.tokens,
                     c.chunks, c.beyond_training ? "; longer than the training context" : "");
    o << "| method | B | exact chunks | bits per byte | Δ bits per byte | ECE | Δ ECE | over-confidence | Δ "
         "over-confidence | agrees with dense | KL from dense | s per layer "
         "|\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& a : c.arms)
      o << fmt::format("| {}{} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {:.4f} | {:.5f} | {:.4f} |\n", a.method,
                       a.second_order ? "" : " (first order)", a.budget, a.mean_expanded,
                       estimate_text(a.bits_per_byte), estimate_text(a.d_bits_per_byte), estimate_text(a.ece),
                       estimate_text(a.d_ece), estimate_text(a.overconfidence), estimate_text(a.d_overconfidence),
                       a.agreement, a.mean_kl, a.layer_seconds);
    o << "\n";
  }
  if (!r.timings.empty()) {
    o << fmt::format("### Kernel time per layer (layer 0's q/k/v, one sequence, causal prefill, B = {})\n\n",
                     r.config.timing_budget);
    o << "| L | chunks | LibTorch s | dense s | CEDAR s | top-k s | summary s | CEDAR vs dense | CEDAR vs LibTorch | "
         "CEDAR error | top-k error | summary error | exact chunks "
         "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& t : r.timings)
      o << fmt::format(
          "| {} | {} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {:.4f} | {:.2f}× | {:.2f}× | {:.2e} | {:.2e} | {:.2e} | "
          "{:.2f} |\n",
          t.context, t.chunks, t.libtorch_seconds, t.dense_seconds, t.cedar_seconds, t.topk_seconds, t.summary_seconds,
          t.dense_seconds / t.cedar_seconds, t.libtorch_seconds / t.cedar_seconds, t.cedar_error, t.topk_error,
          t.summary_error, t.cedar_mean_expanded);
  }
  return o.str();
}

}  // namespace arcal::cedar
