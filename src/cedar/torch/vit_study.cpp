// CEDAR inside a trained model (vit_study.hpp).
#include "cedar/torch/vit_study.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <sstream>

#include "calib/binning.hpp"
#include "calib/calibrators.hpp"
#include "cedar/torch/cedar_torch.hpp"
#include "cedar/torch/estimate_format.hpp"
#include "core/check.hpp"
#include "stats/bootstrap.hpp"
#include "ops/torch/compute_threads.hpp"
#include "train/trainer.hpp"

namespace arcal::cedar {

namespace {

/// Per-image quantities of one arm's predictions.
struct Predictions {
  std::vector<double> logits;  // [n, K]
  std::vector<double> probs;   // [n, K]
  std::vector<double> conf, correct, nll;
  std::vector<int> pred;
};

Predictions predictions(const torch::Tensor& logits, const std::vector<std::int64_t>& labels) {
  Predictions p;
  const auto z = logits.to(torch::kDouble).contiguous();
  const std::size_t n = std::size_t(z.size(0)), k = std::size_t(z.size(1));
  p.logits.assign(z.data_ptr<double>(), z.data_ptr<double>() + n * k);
  const auto pr = torch::softmax(z, 1).contiguous();
  p.probs.assign(pr.data_ptr<double>(), pr.data_ptr<double>() + n * k);
  const auto lp = torch::log_softmax(z, 1).contiguous();
  const double* l = lp.data_ptr<double>();
  p.conf.resize(n);
  p.correct.resize(n);
  p.nll.resize(n);
  p.pred.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double* row = &p.probs[i * k];
    std::size_t best = 0;
    for (std::size_t c = 1; c < k; ++c)
      if (row[c] > row[best]) best = c;
    p.pred[i] = int(best);
    p.conf[i] = row[best];
    p.correct[i] = std::int64_t(best) == labels[i] ? 1.0 : 0.0;
    p.nll[i] = -l[i * k + std::size_t(labels[i])];
  }
  return p;
}

/// accuracy, NLL, 15-bin ECE and over-confidence of the resample idx.
struct Stats4 {
  double acc = 0, nll = 0, ece = 0, over = 0;
};
Stats4 resample_stats(const Predictions& p, const std::vector<std::size_t>& idx) {
  constexpr int bins = 15;
  double cnt[bins] = {}, sc[bins] = {}, sa[bins] = {};
  Stats4 s;
  double conf = 0;
  for (std::size_t i : idx) {
    s.acc += p.correct[i];
    s.nll += p.nll[i];
    conf += p.conf[i];
    const int b = equal_width_bin(p.conf[i], bins);
    cnt[b] += 1;
    sc[b] += p.conf[i];
    sa[b] += p.correct[i];
  }
  const double n = double(idx.size());
  for (int b = 0; b < bins; ++b) s.ece += std::abs(sa[b] - sc[b]) / n;
  s.acc /= n;
  s.nll /= n;
  s.over = conf / n - s.acc;
  return s;
}

Estimate estimate(double value, const Interval& ci) { return Estimate{value, ci}; }

}  // namespace

ModelStudyResult run_model_study(const ModelStudyConfig& cfg,
                                 const std::function<void(std::int64_t, std::int64_t)>& progress) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const std::string f = "cedar-study --run";
  if (cfg.bootstrap < 1) throw_input(f, "bootstrap is " + std::to_string(cfg.bootstrap) + ", but must be >= 1");
  if (cfg.threads > 0) set_compute_threads(cfg.threads);
  TrainConfig tc;
  ARViT model = load_trained_model(cfg.run, &tc);
  const ModelConfig& mc = model->config();
  if (mc.arch != "vit") throw_input(f, cfg.run + " is a " + mc.preset + " run; the attention hook needs a ViT preset");
  ModelStudyResult res;
  res.config = cfg;
  res.model = mc;
  const std::int64_t grid = mc.image_size / mc.patch;
  res.tokens = mc.tokens();
  // Chunks: CLS (token 0) alone, an always-exact sink; then one row of `grid` patches each.
  res.chunk_starts.push_back(0);
  for (std::int64_t r = 0; r < grid; ++r) res.chunk_starts.push_back(1 + r * grid);
  const ChunkLayout chunks = chunks_from_starts(res.chunk_starts, res.tokens, f);
  res.chunks = chunks.chunks();
  for (std::size_t i = 0; i < cfg.budgets.size(); ++i)
    if (cfg.budgets[i] < 1 || cfg.budgets[i] > grid)
      throw_index(f, "budgets", i, std::to_string(cfg.budgets[i]),
                  "in [1, " + std::to_string(grid) + "] (rows of patches)");

  const DatasetSplits data =
      load_dataset(tc.dataset, tc.data_dir, tc.val_fraction, tc.train_subset, tc.seed, tc.context);
  const std::int64_t n = cfg.subset > 0 ? std::min<std::int64_t>(cfg.subset, data.test.size()) : data.test.size();
  if (n < 2) throw_input(f, "the test split of " + cfg.run + " has fewer than 2 images");
  const torch::Tensor images = data.test.images.narrow(0, 0, n);
  const auto lab = data.test.labels.narrow(0, 0, n).contiguous();
  const std::vector<std::int64_t> labels(lab.data_ptr<std::int64_t>(), lab.data_ptr<std::int64_t>() + n);
  res.n = n;
  res.classes = data.test.classes;
  res.n_val = cfg.subset > 0 ? std::min<std::int64_t>(cfg.subset, data.val.size()) : data.val.size();
  if (res.n_val < 2) throw_input(f, "the validation split of " + cfg.run + " has fewer than 2 images");
  const torch::Tensor val_images = data.val.images.narrow(0, 0, res.n_val);
  const torch::Tensor val_labels = data.val.labels.narrow(0, 0, res.n_val);

  struct ArmSpec {
    Method method;
    std::int64_t budget;
  };
  std::vector<ArmSpec> specs = {{Method::dense, 0}, {Method::summary, 0}};
  for (auto b : cfg.budgets) {
    specs.push_back({Method::topk, b});
    specs.push_back({Method::cedar, b});
  }
  const std::int64_t total = n * std::int64_t(specs.size()) + res.n_val;
  std::int64_t done = 0;
  torch::NoGradGuard guard;
  model->eval();
  auto forward = [&](const torch::Tensor& x) {
    std::vector<torch::Tensor> parts;
    for (std::int64_t s = 0; s < x.size(0); s += cfg.batch_size) {
      const auto b = std::min<std::int64_t>(cfg.batch_size, x.size(0) - s);
      parts.push_back(model->forward(x.narrow(0, s, b)));
      done += b;
      if (progress) progress(done, total);
    }
    return torch::cat(parts, 0);
  };
  auto options_for = [&](const ArmSpec& a) {
    Options o;
    o.method = a.method;
    o.budget = a.budget;
    o.sink_chunks = 1;
    o.threads = cfg.threads;
    return o;
  };

  // The standard LibTorch product, to check the dense backend against (first batch only).
  {
    model->set_attention_backend({});
    const auto b = std::min<std::int64_t>(cfg.batch_size, n);
    const auto ref = model->forward(images.narrow(0, 0, b));
    model->set_attention_backend(make_backend(chunks, options_for(specs[0])));
    res.dense_vs_standard_max_abs = (model->forward(images.narrow(0, 0, b)) - ref).abs().max().item<double>();
  }
  // Temperature on the dense model's validation split (the deployment scenario: calibrate once
  // with dense attention, then change the attention at inference).
  {
    model->set_attention_backend(make_backend(chunks, options_for(specs[0])));
    const auto zval = forward(val_images).to(torch::kDouble).contiguous();
    const auto lv = val_labels.contiguous();
    const std::vector<double> zv(zval.data_ptr<double>(), zval.data_ptr<double>() + zval.numel());
    const std::vector<std::int64_t> yv(lv.data_ptr<std::int64_t>(), lv.data_ptr<std::int64_t>() + lv.numel());
    res.temperature_beta = fit_temperature(zv, std::size_t(zval.size(0)), std::size_t(zval.size(1)), yv).beta;
  }

  std::vector<Predictions> preds;
  ReportOptions ropt;
  ropt.draws = cfg.bootstrap;
  ropt.seed = cfg.seed;
  for (const ArmSpec& a : specs) {
    auto tally = std::make_shared<ExpansionTally>();
    model->set_attention_backend(make_backend(chunks, options_for(a), tally));
    preds.push_back(predictions(forward(images), labels));
    const Predictions& p = preds.back();
    ModelArm arm;
    arm.method = to_string(a.method);
    arm.budget = a.method == Method::dense ? res.chunks - 1 : a.budget;
    arm.mean_expanded = a.method == Method::dense ? double(res.chunks - 1) : tally->mean();
    arm.seconds = tally->seconds;
    const CalibrationReport rep = calibration_report(p.probs, std::size_t(n), std::size_t(res.classes), labels, ropt);
    arm.accuracy = rep.accuracy;
    arm.nll = rep.nll;
    arm.ece = rep.ece;
    const auto scaled = softmax_scaled(p.logits, std::size_t(n), std::size_t(res.classes), res.temperature_beta);
    arm.ece_ts = calibration_report(scaled, std::size_t(n), std::size_t(res.classes), labels, ropt).ece;
    const Predictions& dense = preds.front();
    const auto over = percentile_bootstrap(
        std::size_t(n), [&](const std::vector<std::size_t>& idx) { return resample_stats(p, idx).over; }, cfg.bootstrap,
        cfg.seed);
    arm.overconfidence = estimate(over.estimate, over.ci);
    // Paired differences: the same resamples (same seed) for the arm and for dense.
    for (int which = 0; which < 4; ++which) {
      auto pick = [which](const Stats4& s) {
        return which == 0 ? s.acc : which == 1 ? s.nll : which == 2 ? s.ece : s.over;
      };
      const auto r = percentile_bootstrap(
          std::size_t(n),
          [&](const std::vector<std::size_t>& idx) {
            return pick(resample_stats(p, idx)) - pick(resample_stats(dense, idx));
          },
          cfg.bootstrap, cfg.seed);
      Estimate* dst[] = {&arm.d_accuracy, &arm.d_nll, &arm.d_ece, &arm.d_overconfidence};
      *dst[which] = estimate(r.estimate, r.ci);
    }
    double agree = 0, kl = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      agree += p.pred[std::size_t(i)] == dense.pred[std::size_t(i)];
      for (std::int64_t c = 0; c < res.classes; ++c) {
        const double pd = dense.probs[std::size_t(i * res.classes + c)], pa = p.probs[std::size_t(i * res.classes + c)];
        if (pd > 0) kl += pd * (std::log(pd) - std::log(std::max(pa, 1e-300)));
      }
    }
    arm.agreement = agree / double(n);
    arm.mean_kl = kl / double(n);
    res.arms.push_back(arm);
  }
  model->set_attention_backend({});
  res.seconds = std::chrono::duration<double>(clock::now() - start).count();
  return res;
}

nlohmann::json model_study_json(const ModelStudyResult& r) {
  nlohmann::json arms = nlohmann::json::array();
  for (const auto& a : r.arms)
    arms.push_back({{"method", a.method},
                    {"budget", a.budget},
                    {"mean_expanded", a.mean_expanded},
                    {"accuracy", estimate_json(a.accuracy)},
                    {"nll", estimate_json(a.nll)},
                    {"ece", estimate_json(a.ece)},
                    {"overconfidence", estimate_json(a.overconfidence)},
                    {"ece_after_dense_temperature", estimate_json(a.ece_ts)},
                    {"delta_vs_dense",
                     {{"accuracy", estimate_json(a.d_accuracy)},
                      {"nll", estimate_json(a.d_nll)},
                      {"ece", estimate_json(a.d_ece)},
                      {"overconfidence", estimate_json(a.d_overconfidence)}}},
                    {"agreement_with_dense", a.agreement},
                    {"mean_kl_from_dense", a.mean_kl},
                    {"kernel_seconds", a.seconds}});
  return {{"run", r.config.run},
          {"model", r.model},
          {"tokens", r.tokens},
          {"chunks", r.chunks},
          {"chunk_starts", r.chunk_starts},
          {"sink", "chunk 0 (the CLS token) is exact in every arm"},
          {"n", r.n},
          {"classes", r.classes},
          {"bootstrap", r.config.bootstrap},
          {"seed", r.config.seed},
          {"ece_bins", 15},
          {"temperature_beta_dense_val", r.temperature_beta},
          {"n_val", r.n_val},
          {"dense_backend_vs_libtorch_max_abs_logit", r.dense_vs_standard_max_abs},
          {"arms", arms},
          {"seconds", r.seconds}};
}

std::string model_study_csv(const ModelStudyResult& r) {
  std::ostringstream o;
  o << "method,budget,mean_expanded,accuracy,accuracy_low,accuracy_high,nll,nll_low,nll_high,ece,ece_low,ece_high,"
       "overconfidence,overconfidence_low,overconfidence_high,ece_ts,ece_ts_low,ece_ts_high,d_accuracy,d_nll,d_ece,"
       "d_overconfidence,agreement,mean_kl\n";
  for (const auto& a : r.arms) {
    o << fmt::format("{},{},{:.4f}", a.method, a.budget, a.mean_expanded);
    for (const Estimate* e : {&a.accuracy, &a.nll, &a.ece, &a.overconfidence, &a.ece_ts})
      o << fmt::format(",{:.6g},{:.6g},{:.6g}", e->value, e->ci.low, e->ci.high);
    o << fmt::format(",{:.6g},{:.6g},{:.6g},{:.6g},{:.6f},{:.6g}\n", a.d_accuracy.value, a.d_nll.value, a.d_ece.value,
                     a.d_overconfidence.value, a.agreement, a.mean_kl);
  }
  return o.str();
}

std::string model_study_markdown(const ModelStudyResult& r) {
  std::ostringstream o;
  const auto& m = r.model;
  o << "## CEDAR inside a trained model\n\n";
  o << fmt::format(
      "Run `{}`: {} ({}, patch {}, {} tokens, {} heads of width {}, {} attention layers), {} test images, {} classes. "
      "Chunks: the CLS token alone (exact in every arm), then {} rows of {} patches; B = exact row chunks per query in "
      "every attention layer. Intervals: 95 % percentile bootstrap over images ({} resamples, seed {}); Δ = arm − "
      "dense "
      "on the same resamples. ECE: 15 equal-width bins. ECE after TS: temperature (β = {:.4f}) fitted on the dense "
      "model's validation split ({} images) and applied unchanged to every arm. The dense backend matches LibTorch's "
      "product to {:.2e} in the logits.\n\n",
      r.config.run, m.value("preset", std::string("?")), m.value("residual", std::string("?")), m.value("patch", 0),
      r.tokens, m.value("heads", 0), m.value("dim", 0) / std::max(1, m.value("heads", 1)), m.value("depth", 0), r.n,
      r.classes, r.chunks - 1, (r.tokens - 1) / std::max<std::int64_t>(1, r.chunks - 1), r.config.bootstrap,
      r.config.seed, r.temperature_beta, r.n_val, r.dense_vs_standard_max_abs);
  o << "| method | B | exact rows | accuracy | NLL | ECE | over-confidence | ECE after TS | Δ accuracy | Δ NLL | Δ ECE "
       "| "
       "Δ over-confidence | agrees with dense |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& a : r.arms)
    o << fmt::format("| {} | {} | {:.2f} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.4f} |\n", a.method, a.budget,
                     a.mean_expanded, estimate_text(a.accuracy), estimate_text(a.nll), estimate_text(a.ece),
                     estimate_text(a.overconfidence), estimate_text(a.ece_ts), estimate_text(a.d_accuracy),
                     estimate_text(a.d_nll), estimate_text(a.d_ece), estimate_text(a.d_overconfidence), a.agreement);
  return o.str();
}

}  // namespace arcal::cedar
