#include "train/trainer.hpp"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <sstream>

#include <ATen/autocast_mode.h>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/ownership.hpp"
#include "core/paths.hpp"
#include "core/rng.hpp"
#include "core/run_lock.hpp"
#include "core/text_input.hpp"
#include "calib/metrics.hpp"
#include "model/cost.hpp"
#include "model/trace_export.hpp"
#include "train/adamw.hpp"
#include "train/checkpoint.hpp"
#include "train/distributed.hpp"
#include "train/sbece.hpp"
#include "ops/torch/compute_threads.hpp"

namespace arcal {

namespace fs = std::filesystem;

void validate_train_config(const TrainConfig& c) {
  check_train_config(c);
  if (c.device == "cuda" && !torch::cuda::is_available())
    throw_input("--device",
                "cuda requested, but this LibTorch build has no CUDA support or sees no CUDA device. "
                "Build against the official CUDA LibTorch (cmake -DCMAKE_PREFIX_PATH=/path/to/libtorch, "
                "README 'Paper scale') and run where a GPU is visible");
}

ModelConfig model_config_for(const TrainConfig& c, int image_size, int channels, int classes) {
  if (is_text_dataset(c.dataset)) {
    auto mc = make_lm_config(c.model, c.context, parse_residual_mode(c.residual), c.block_size);
    mc.norm_eps = c.norm_eps;
    validate_model_config(mc);
    return mc;
  }
  auto mc = make_model_config(c.model, image_size, channels, classes, parse_residual_mode(c.residual), c.block_size);
  mc.norm_eps = c.norm_eps;
  if (c.patch > 0) {
    if (mc.arch != "vit")
      throw_input("--patch", "applies to the ViT presets (ar-vit-tiny, ar-deit-small), not " + c.model);
    mc.patch = c.patch;
    validate_model_config(mc);  // the patch must divide the image
  }
  return mc;
}

nlohmann::json describe_model(const TrainConfig& c) {
  validate_train_config(c);
  int image_size = 32, channels = 3, classes = 10;
  if (c.dataset == "fashion-mnist") {
    image_size = 28;
    channels = 1;
  } else if (c.dataset == "cifar100") {
    classes = 100;
  }
  const ModelConfig mc = model_config_for(c, image_size, channels, classes);
  ARViT model(mc);
  const ModelCost cost = model_cost(mc);
  // Per image, or for the language model per sequence of `context` tokens (the keys say which).
  const std::string unit = mc.arch == "lm" ? "_per_sequence" : "_per_image";
  nlohmann::json input = nlohmann::json::array({channels, image_size, image_size});
  if (mc.arch == "lm") input = nlohmann::json::array({c.context});
  return {{"model", mc},
          {"dataset", c.dataset},
          {"input", input},
          {"parameters", parameter_count(*model)},
          {"routing_points", mc.routing_points()},
          {"routing_sources", mc.sources_per_point()},
          {"macs" + unit, cost.macs},
          {"flops" + unit, 2.0 * cost.macs},
          {"routing_macs" + unit, cost.routing_macs},
          {"attention_macs" + unit, cost.attention_macs}};
}

double top_label_ece(const torch::Tensor& logits, const torch::Tensor& labels, int bins) {
  auto probs = torch::softmax(logits.to(torch::kDouble), -1);
  auto [conf, pred] = probs.max(-1);
  auto correct = pred.eq(labels).to(torch::kDouble).contiguous();
  conf = conf.contiguous();
  std::vector<double> c(conf.data_ptr<double>(), conf.data_ptr<double>() + conf.numel());
  std::vector<double> a(correct.data_ptr<double>(), correct.data_ptr<double>() + correct.numel());
  return expected_calibration_error(c, a, bins);
}

namespace {

/// evaluate() on a text split: every next-token prediction of every sequence, streamed in batches of
/// `batch_size` / 4 sequences (the logits of a whole split would not fit).
EvalResult evaluate_text(ARViT& model, const TensorData& data, int batch_size) {
  EvalResult r;
  const auto device = model->parameters().front().device();
  const std::int64_t sequences = std::max(1, batch_size / 4);
  double nll = 0, correct = 0;
  std::vector<double> conf, hit;
  for (std::int64_t s = 0; s < data.size(); s += sequences) {
    const auto len = std::min<std::int64_t>(sequences, data.size() - s);
    const auto seq = data.images.narrow(0, s, len);
    const auto y = lm_targets(seq).reshape({-1});
    auto lp = torch::log_softmax(model->forward(lm_inputs(seq).to(device)).to(torch::kCPU).to(torch::kFloat), -1)
                  .reshape({y.size(0), -1});
    nll -= lp.gather(1, y.unsqueeze(1)).to(torch::kDouble).sum().item<double>();
    auto [top, pred] = lp.max(-1);
    auto ok = pred.eq(y).to(torch::kDouble).contiguous();
    auto c = top.exp().to(torch::kDouble).contiguous();
    correct += ok.sum().item<double>();
    conf.insert(conf.end(), c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
    hit.insert(hit.end(), ok.data_ptr<double>(), ok.data_ptr<double>() + ok.numel());
  }
  r.n = static_cast<std::int64_t>(conf.size());
  if (r.n == 0) return r;
  r.nll = nll / double(r.n);
  r.accuracy = correct / double(r.n);
  r.ece = expected_calibration_error(conf, hit, 15);
  r.bits_per_byte = r.nll / std::log(2.0);
  return r;
}

/// An image split's metrics from its logits (N,K) in the forward pass's dtype.
EvalResult image_eval_result(const torch::Tensor& all, const torch::Tensor& labels) {
  EvalResult r;
  r.n = all.size(0);
  auto lp = torch::log_softmax(all.to(torch::kDouble), -1);
  r.nll = -lp.gather(1, labels.unsqueeze(1)).mean().item<double>();
  r.accuracy = all.argmax(-1).eq(labels).to(torch::kDouble).mean().item<double>();
  r.ece = top_label_ece(all, labels);
  return r;
}

}  // namespace

EvalResult evaluate(ARViT& model, const TensorData& data, int batch_size) {
  if (batch_size < 1) throw_input("evaluate", "batch size " + std::to_string(batch_size) + " must be >= 1");
  torch::NoGradGuard guard;
  if (data.text) {
    const bool was_training = model->is_training();
    model->eval();
    EvalResult r = evaluate_text(model, data, batch_size);
    if (was_training) model->train();
    return r;
  }
  const bool was_training = model->is_training();
  model->eval();
  EvalResult r;
  r.n = data.size();
  if (r.n == 0) return r;
  std::vector<torch::Tensor> logits;
  const auto device = model->parameters().front().device();
  for (std::int64_t s = 0; s < r.n; s += batch_size) {
    const auto len = std::min<std::int64_t>(batch_size, r.n - s);
    logits.push_back(model->forward(data.images.narrow(0, s, len).to(device)).to(torch::kCPU, torch::kFloat));
  }
  r = image_eval_result(torch::cat(logits, 0), data.labels);
  if (was_training) model->train();
  return r;
}

std::vector<std::string> run_directory_files(const std::string& run_dir) {
  std::vector<std::string> v;
  for (const char* f : {"config.json", "checkpoint.pt", "model.pt", "log.jsonl", "summary.json", ".lock"})
    v.push_back(run_dir + "/" + f);
  return v;
}

nlohmann::json trace_metadata(const TrainConfig& tc, const std::string& run_dir, const std::string& split,
                              const TensorData& traced, const TensorData& full, const std::string& as_attnres) {
  nlohmann::json meta = {{"model", tc.model},
                         {"residual", tc.residual},
                         {"block_size", tc.block_size},
                         {"dataset", tc.dataset},
                         {"split", split},
                         {"seed", tc.seed},
                         {"run", fs::path(run_dir).filename().string()},
                         {"run_dir", run_dir},
                         {"version", ARCAL_VERSION},
                         {"as_attnres", as_attnres}};
  if (traced.text) {
    meta["task"] = "lm";
    meta["cluster"] = "sequence";
    meta["context"] = tc.context;
    meta["sequences"] = traced.size();
    meta["sequences_in_split"] = full.size();
  }
  return meta;
}

namespace {

double lr_at(const TrainConfig& c, std::int64_t step, std::int64_t total) {
  const auto warmup =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(c.warmup_fraction * double(total))));
  if (step < warmup) return c.lr * double(step + 1) / double(warmup);
  const double progress = total > warmup ? double(step - warmup) / double(total - warmup) : 1.0;
  return c.lr * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
}

}  // namespace

namespace {

std::string flag_of(const std::string& key) {
  std::string f = "--" + key;
  for (auto& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

std::string resume_command(const std::string& run_dir) { return "arcal train --resume --out " + shell_quote(run_dir); }

/// The stored configuration of a run being resumed, with the hyper-parameters given on the command
/// line compared against it: equal values pass, a different value is refused unless --override
/// names it (then it is applied and returned in `changes` as {"key": {"from": old, "to": new}}).
TrainConfig resolve_resume(const TrainConfig& requested, const RunConfig& stored, const ResumeRequest& request,
                           const std::string& config_path, nlohmann::json& changes) {
  const auto& allowed = resume_overridable_keys();
  nlohmann::json want = requested, have = stored.train;
  for (const auto& k : request.overrides) {
    if (!want.contains(k))
      throw_input("--override",
                  "'" + k + "' is not a training setting (use the flag names without dashes, e.g. lr,epochs)");
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ",") + a;
      throw_input("--override", "'" + k +
                                    "' cannot change on resume: it fixes the data, the model or the data order "
                                    "(start a new run instead); these can: " +
                                    list);
    }
    if (std::find(request.given.begin(), request.given.end(), k) == request.given.end())
      throw_input("--override", "names '" + k + "', but " + flag_of(k) + " is not given with its new value");
  }
  for (const auto& k : request.given) {
    if (k == "threads" || !want.contains(k)) continue;  // threads may always change (results do not depend on it)
    if (want[k] == have[k]) continue;
    if (std::find(request.overrides.begin(), request.overrides.end(), k) == request.overrides.end())
      throw_input("--resume", flag_of(k) + " " + json_brief(want[k]) + " differs from the run's " + k + " = " +
                                  json_brief(have[k]) + " in " + config_path + "; pass --override " + k +
                                  " to change it for the rest of the run (recorded in config.json), or drop the flag");
    changes[k] = {{"from", have[k]}, {"to", want[k]}};
    have[k] = want[k];
  }
  TrainConfig c = train_config_from_json(have, "--override");
  c.threads = requested.threads;
  return c;
}

/// True when DIR holds nothing but the lock file and the marker (what a refused or interrupted start leaves).
bool only_lock_file(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename() != ".lock" && e.path().filename() != kOutputMarker) return false;
  return !ec;
}

nlohmann::json train_locked(const TrainConfig& requested, const std::string& run_dir, bool resume,
                            const TrainEvents& events, const ResumeRequest& request, const TraceRequest& trace);

}  // namespace

nlohmann::json train_run(const TrainConfig& requested, const std::string& run_dir, bool resume,
                         const TrainEvents& events, const ResumeRequest& request, const TraceRequest& trace) {
  std::error_code ec;
  if (run_dir.empty()) throw_input("--out", "the run directory path is empty");
  if (fs::exists(run_dir, ec) && !fs::is_directory(run_dir, ec))
    throw_input("--out", run_dir +
                             " exists and is not a directory; --out names the run directory RUN/ (config.json, "
                             "checkpoint.pt, model.pt, ...): choose a directory path");
  const DistributedEnv dist_env = distributed_env_from_environment();
  if (!dist_env.primary()) return train_locked(requested, run_dir, resume, events, request, trace);
  // One writer per run directory: rank 0 holds RUN/.lock while it trains (other ranks only read).
  bool created = false;
  if (!fs::exists(run_dir, ec)) {
    if (resume) throw_input("--resume", run_dir + " does not exist: nothing to resume (start without --resume)");
    fs::create_directories(run_dir, ec);
    if (ec) throw_input("--out", "cannot create " + run_dir + ": " + ec.message());
    created = true;
  }
  // RUN/ is arcal's only if arcal made it (the marker): a user's directory with its own config.json,
  // log.jsonl or model.pt is never written into. A run of an arcal made before the marker is resumed
  // (its config.json is then read by the typed reader, which refuses anything that is not a run's).
  if (!created && !(resume && fs::exists(run_dir + "/config.json", ec)))
    check_output_dir("--out", run_dir, "arcal train", false, "");
  auto lock = std::make_unique<DirLock>(run_dir, "arcal train");
  try {
    mark_output_dir(run_dir, "arcal train");
    return train_locked(requested, run_dir, resume, events, request, trace);
  } catch (...) {
    // A start refused on input (or interrupted before writing) leaves no directory behind.
    if (created && only_lock_file(run_dir)) {
      lock.reset();
      fs::remove_all(run_dir, ec);
    }
    throw;
  }
}

namespace {

/// The files of a run directory.
struct RunPaths {
  std::string config, checkpoint, log, summary, model;
  explicit RunPaths(const std::string& run_dir)
      : config(run_dir + "/config.json"),
        checkpoint(run_dir + "/checkpoint.pt"),
        log(run_dir + "/log.jsonl"),
        summary(run_dir + "/summary.json"),
        model(run_dir + "/model.pt") {}
};

/// The run's settings once the command line and, on resume, RUN/config.json are reconciled.
struct ResolvedRun {
  TrainConfig config;
  RunConfig stored;                                     ///< RUN/config.json (resume only)
  nlohmann::json overrides = nlohmann::json::object();  ///< --override changes: {"key": {"from", "to"}}
  DistributedEnv dist;
};

/// Refuses a start over an existing run and a resume of nothing (or with another WORLD_SIZE), applies
/// --override, and validates the resulting configuration. Touches no file.
ResolvedRun resolve_run(const TrainConfig& requested, const std::string& run_dir, bool resume,
                        const ResumeRequest& request, const RunPaths& paths) {
  ResolvedRun run;
  TrainConfig resolved = requested;
  resolved.precision = resolve_precision(requested.precision, requested.device);  // "auto" -> bf16 | fp32
  run.config = resolved;
  if (resume) {
    if (!fs::exists(paths.config))
      throw_input("--resume", paths.config + " does not exist: nothing to resume (start without --resume)");
    run.stored = read_run_config(paths.config);
    run.config = resolve_resume(resolved, run.stored, request, paths.config, run.overrides);
  } else if (fs::exists(paths.summary) || fs::exists(paths.checkpoint)) {
    throw_input("--out", run_dir + " already holds a run (" +
                             (fs::exists(paths.summary) ? "finished" : "with a checkpoint") +
                             "); pass --resume to continue it or choose another --out");
  } else if (!request.overrides.empty()) {
    throw_input("--override", "only applies with --resume");
  }
  run.dist = distributed_env_from_environment();
  if (resume && run.config.world_size != run.dist.world_size)
    throw_input("--resume", run_dir + " was trained with " + std::to_string(run.config.world_size) +
                                " rank(s) but WORLD_SIZE is " + std::to_string(run.dist.world_size) +
                                ": the data order depends on it; resume with the same count");
  run.config.world_size = run.dist.world_size;
  validate_train_config(run.config);
  return run;
}

/// Rank 0's RUN/config.json: on a resume with --override the stored document with the new values and
/// the change history (resume_overrides); on a fresh start the resolved configuration (and an empty
/// log.jsonl). A plain resume from a checkpoint keeps the file as it is.
void record_run_config(const ResolvedRun& run, const ModelConfig& mc, std::int64_t parameters, bool resume,
                       bool from_checkpoint, std::int64_t start_step, const RunPaths& paths,
                       const std::function<void(const std::string&)>& say) {
  if (resume && !run.overrides.empty()) {
    // The changed settings become the run's configuration; the history says what changed and when.
    nlohmann::json cfg = run.stored.json;
    cfg["schema"] = kTrainConfigSchema;
    cfg["train"] = run.config;
    cfg["train"]["threads"] = run.stored.train.threads;
    if (!cfg.contains("resume_overrides") || !cfg["resume_overrides"].is_array())
      cfg["resume_overrides"] = nlohmann::json::array();
    cfg["resume_overrides"].push_back({{"step", start_step}, {"changes", run.overrides}});
    write_file_atomic(paths.config, cfg.dump(2) + "\n");
    for (const auto& [k, v] : run.overrides.items())
      say("override: " + k + " " + json_brief(v["from"]) + " -> " + json_brief(v["to"]) + " from step " +
          std::to_string(start_step) + " (recorded in config.json)");
    return;
  }
  if (from_checkpoint) return;
  const nlohmann::json cfg = {{"schema", kTrainConfigSchema},
                              {"train", run.config},
                              {"model", mc},
                              {"version", ARCAL_VERSION},
                              {"parameters", parameters}};
  write_file_atomic(paths.config, cfg.dump(2) + "\n");
  write_file_atomic(paths.log, "");
}

/// Autocast of the training forward pass (precision bf16/fp16); the loss and the routing softmax run
/// in fp32. Off for fp32.
struct Autocast {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
  bool cuda = false;

  Autocast(const std::string& precision, const torch::Device& device)
      : enabled(precision != "fp32"), dtype(precision == "fp16" ? at::kHalf : at::kBFloat16), cuda(device.is_cuda()) {}

  void set(bool on) const {
    if (!enabled) return;
    if (cuda) {
      at::autocast::set_autocast_dtype(at::kCUDA, dtype);
      at::autocast::set_autocast_enabled(at::kCUDA, on);
    } else {
      at::autocast::set_autocast_dtype(at::kCPU, dtype);
      at::autocast::set_autocast_enabled(at::kCPU, on);
    }
    if (!on) at::autocast::clear_cache();
  }
};

/// The epoch's example order: a permutation of the training split seeded by (seed, epoch), the same on
/// every rank and on resume.
void shuffle_for_epoch(std::vector<std::int64_t>& order, std::int64_t size, std::uint64_t seed, int epoch) {
  order.resize(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(derive_seed(seed, 1000 + static_cast<std::uint64_t>(epoch)));
  rng.shuffle(order);
}

/// Step `step`'s batch for this rank, augmented, on `device`: the global batch is what one process
/// with batch b x world would draw (same order, same augmentation seed); rank r trains on rows
/// [r b, (r+1) b) of it.
std::pair<torch::Tensor, torch::Tensor> rank_batch(const TensorData& train, std::vector<std::int64_t>& order,
                                                   std::int64_t step, std::int64_t per_epoch, std::int64_t global_batch,
                                                   int pad, const TrainConfig& c, int rank,
                                                   const torch::Device& device) {
  const auto offset = (step % per_epoch) * global_batch;
  auto idx = torch::from_blob(order.data() + offset, {global_batch}, torch::kLong);
  if (train.text) {  // byte sequences: inputs (b,T) and next-token targets flattened to (b T); no augmentation
    auto seq = train.images.index_select(0, idx);
    if (c.world_size > 1) seq = seq.narrow(0, std::int64_t(rank) * c.batch_size, c.batch_size);
    return {lm_inputs(seq).to(device), lm_targets(seq).reshape({-1}).to(device)};
  }
  auto x = augment_batch(train.images.index_select(0, idx), pad,
                         derive_seed(c.seed, 5000000 + static_cast<std::uint64_t>(step)), c.dataset);
  auto y = train.labels.index_select(0, idx);
  if (c.world_size > 1) {
    x = x.narrow(0, std::int64_t(rank) * c.batch_size, c.batch_size);
    y = y.narrow(0, std::int64_t(rank) * c.batch_size, c.batch_size);
  }
  return {x.to(device), y.to(device)};
}

/// fp16 loss scaling: divides every gradient by the scale and reports whether all are finite; an
/// overflow halves the scale (the step is then skipped), 2000 clean steps double it, as
/// torch.cuda.amp.GradScaler does. No-op (true) at scale 1.
bool unscale_gradients(ARViT& model, LossScaler& scaler) {
  if (scaler.scale == 1.0) return true;
  bool finite = true;
  torch::NoGradGuard ng;
  for (auto& p : model->parameters())
    if (p.grad().defined()) {
      p.grad().div_(scaler.scale);
      finite = finite && torch::isfinite(p.grad()).all().item<bool>();
    }
  if (!finite) {
    scaler.scale /= 2;
    scaler.clean_steps = 0;
  } else if (++scaler.clean_steps % 2000 == 0) {
    scaler.scale *= 2;
  }
  return finite;
}

struct StepResult {
  torch::Tensor logits;  ///< (b, K) float32
  double loss = 0;
};

/// One optimizer step on (x, y) at learning rate lr: forward under autocast, cross-entropy + beta
/// SB-ECE in fp32 (with several ranks the SB-ECE term is a per-rank batch statistic: its bins see b
/// examples), backward (scaled for fp16), gradients averaged over the ranks, then AdamW unless fp16
/// gradients overflowed.
StepResult optimizer_step(ARViT& model, torch::optim::AdamW& opt, const torch::Tensor& x, const torch::Tensor& y,
                          double lr, const TrainConfig& c, const Autocast& autocast, LossScaler& scaler,
                          DataParallelGroup* group) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  clear_gradients(opt);  // the backward hands over the gradients (train/adamw.hpp)
  autocast.set(true);
  auto logits = model->forward(x);
  autocast.set(false);
  logits = logits.to(torch::kFloat).reshape({-1, logits.size(-1)});  // (b,K); a language model's (b,T,K) -> (bT,K)
  auto loss = torch::cross_entropy_loss(logits, y);
  if (c.sbece_weight > 0) loss = loss + c.sbece_weight * soft_binned_ece(logits, y, c.sbece_bins, c.sbece_temperature);
  (scaler.scale != 1.0 ? loss * scaler.scale : loss).backward();
  restore_unused_gradients(opt);
  if (group) group->average_gradients(*model);
  if (unscale_gradients(model, scaler)) adamw_step(opt);  // torch::optim::AdamW::step in one pass per tensor
  return {logits, loss.item<double>()};
}

/// RUN/epoch-E/ after epoch E when c.snapshot_epochs lists it: the run's config.json and the model at
/// that point (model.pt with its configuration), so that `arcal trace --run RUN/epoch-E` reads it as a
/// run. Written atomically, file by file; a resumed run rewrites a snapshot only when it passes E again.
void save_snapshot_if_asked(ARViT& model, const TrainConfig& c, const RunPaths& paths, const std::string& run_dir,
                            std::int64_t epoch) {
  if (std::find(c.snapshot_epochs.begin(), c.snapshot_epochs.end(), std::uint64_t(epoch)) == c.snapshot_epochs.end())
    return;
  const std::string dir = run_dir + "/epoch-" + std::to_string(epoch);
  fs::create_directories(dir);
  write_file_atomic(dir + "/config.json", read_file(paths.config));
  torch::serialize::OutputArchive archive;
  write_model_identity(archive, model->config());
  model->save(archive);
  save_archive_atomic(archive, dir + "/model.pt");
}

/// After the last step (rank 0): model.pt with its configuration, and summary.json from the test split.
nlohmann::json write_final_outputs(ARViT& model, const DatasetSplits& data, const TrainConfig& c,
                                   const std::string& run_dir, const RunPaths& paths, std::int64_t total,
                                   std::int64_t per_epoch, std::int64_t start_step, double wall, double train_seconds,
                                   std::int64_t images_seen, double divergence, const TraceRequest& trace_request) {
  const TensorData& test_split = data.test;
  std::optional<Trace> trace;
  std::optional<EvalResult> from_trace;
  if (!trace_request.path.empty()) {
    const TensorData& full = trace_request.split == "test" ? data.test : data.val;  // not empty (train_locked)
    const TensorData traced = full.text ? select_sequences(full, trace_request.sequences) : full;
    trace = export_trace(model, traced, trace_metadata(c, run_dir, trace_request.split, traced, full, "").dump(),
                         kEvalBatchSize);
    // The trace's logits are the float forward pass's, widened exactly to double: narrowed back they
    // are evaluate()'s logits (the same batches), so the summary is what evaluate() gives.
    if (trace_request.split == "test" && !full.text)
      from_trace = image_eval_result(
          torch::from_blob(trace->logits.data(), {std::int64_t(trace->n), std::int64_t(trace->classes)}, torch::kDouble)
              .to(torch::kFloat),
          test_split.labels);
  }
  const EvalResult test = from_trace ? *from_trace : evaluate(model, test_split);
  torch::serialize::OutputArchive final_archive;
  write_model_identity(final_archive, model->config());
  model->save(final_archive);
  save_archive_atomic(final_archive, paths.model);
  if (trace) save_trace(*trace, trace_request.path);
  TrainSummary s;  // results/train_json.hpp
  s.test_accuracy = test.accuracy;
  s.test_nll = test.nll;
  s.test_ece15 = test.ece;
  s.test_n = test.n;
  s.steps = total;
  s.epochs = double(total) / double(per_epoch);
  s.resumed_from_step = start_step;
  s.wall_seconds = wall;
  s.train_seconds = train_seconds;
  s.images_per_second = train_seconds > 0 ? double(images_seen) / train_seconds : 0.0;
  s.threads = c.threads;
  s.world_size = c.world_size;
  s.precision = c.precision;
  s.max_parameter_divergence = divergence;
  s.parameters = parameter_count(*model);
  if (test_split.text) {
    s.test_bits_per_byte = test.bits_per_byte;
    s.tokens_per_second = s.images_per_second * double(test_split.images.size(1) - 1);
  }
  const nlohmann::json summary = s;
  write_file_atomic(paths.summary, summary.dump(2) + "\n");
  return summary;
}

nlohmann::json train_locked(const TrainConfig& requested, const std::string& run_dir, bool resume,
                            const TrainEvents& events, const ResumeRequest& request, const TraceRequest& trace) {
  const RunPaths paths(run_dir);
  const ResolvedRun run = resolve_run(requested, run_dir, resume, request, paths);
  const TrainConfig& c = run.config;
  const DistributedEnv& dist_env = run.dist;
  const bool primary = dist_env.primary();
  TrainEvents ev = primary ? events : TrainEvents{};
  auto say_primary = [&](const std::string& s) {
    if (ev.on_message) ev.on_message(s);
  };

  set_compute_threads(c.threads);
  keep_freed_memory_for_training();
  // Everything that can fail on user input happens before RUN/ is touched.
  DatasetSplits data = load_dataset(c.dataset, c.data_dir, c.val_fraction, c.train_subset, c.seed, c.context);
  if (primary && !trace.path.empty() && (trace.split == "test" ? data.test : data.val).size() == 0)
    throw_input("--trace-split", "the " + trace.split + " split of this run is empty (val_fraction " +
                                     std::to_string(c.val_fraction) + "): there is nothing to trace");
  const auto& train = data.train;
  ModelConfig mc = train.text ? model_config_for(c, 0, 0, train.classes)
                              : model_config_for(c, static_cast<int>(train.images.size(2)),
                                                 static_cast<int>(train.images.size(1)), train.classes);
  if (resume && model_config_hash(mc) != model_config_hash(run.stored.model))
    throw_input("--resume", paths.config +
                                ": its model section does not match the model its train section builds ("
                                "edited by hand?); the checkpoint cannot be resumed safely");
  if (interrupt_requested())
    throw Interrupted(std::string("train stopped by ") + interrupt_signal_name() + " before training started; " +
                      (resume ? "the checkpoint is unchanged: resume with " + resume_command(run_dir)
                              : "nothing was written: run the same command again"));
  const torch::Device device = c.device == "cuda"
                                   ? torch::Device(torch::kCUDA, static_cast<torch::DeviceIndex>(dist_env.local_rank))
                                   : torch::Device(torch::kCPU);
  std::unique_ptr<DataParallelGroup> group;
  if (dist_env.active()) group = std::make_unique<DataParallelGroup>(dist_env, c.device);

  torch::manual_seed(c.seed);
  ARViT model(mc);
  model->to(device);
  if (group) group->broadcast_module(*model);  // identical start even if a rank's RNG differed
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));

  const std::int64_t global_batch = std::int64_t(c.batch_size) * c.world_size;
  const std::int64_t per_epoch = train.size() / global_batch;
  if (per_epoch < 1)
    throw_input("--batch-size", std::to_string(c.batch_size) + " x " + std::to_string(c.world_size) +
                                    " rank(s) exceeds the training split (" + std::to_string(train.size()) +
                                    " examples)");
  std::int64_t total = per_epoch * c.epochs;
  if (c.max_steps > 0) total = std::min(total, c.max_steps);

  // fp16 needs loss scaling (bf16 has fp32's exponent range): dynamic, from 65536 (unscale_gradients).
  LossScaler scaler;
  if (c.precision == "fp16") scaler.scale = 65536.0;
  const bool from_checkpoint = resume && fs::exists(paths.checkpoint);
  std::int64_t start_step = 0;
  if (from_checkpoint) {
    start_step = load_checkpoint(model, opt, paths.checkpoint, device, scaler, total);
    if (primary) truncate_log(paths.log, start_step);
    say_primary("resuming " + run_dir + " from step " + std::to_string(start_step) + " of " + std::to_string(total));
  }
  if (primary)
    record_run_config(run, mc, parameter_count(*model), resume, from_checkpoint, start_step, paths, say_primary);
  if (group) group->barrier();  // every rank has checked RUN/ before rank 0 writes checkpoints into it

  const Autocast autocast(c.precision, device);
  const int pad = train.text ? 0 : train.images.size(2) == 28 ? 2 : 4;
  const auto t0 = std::chrono::steady_clock::now();
  double train_seconds = 0;
  std::int64_t images_seen = 0;
  std::vector<std::int64_t> order;
  int order_epoch = -1;
  double loss_sum = 0;
  std::int64_t loss_count = 0;
  model->train();
  std::int64_t checkpoint_step = from_checkpoint ? start_step : -1;
  // SIGINT/SIGTERM (core/interrupt.hpp): between steps every rank agrees to stop, rank 0 writes a
  // checkpoint of the steps done, and Interrupted (exit code 3) says how to resume.
  auto stop_if_interrupted = [&](std::int64_t done) {
    bool stop = interrupt_requested();
    if (group) stop = group->any_rank(stop);
    if (!stop) return;
    if (primary && checkpoint_step != done) save_checkpoint(model, opt, done, scaler, paths.checkpoint);
    throw Interrupted(std::string("train stopped by ") +
                      (interrupt_requested() ? interrupt_signal_name() : "another rank") + " after step " +
                      std::to_string(done) + " of " + std::to_string(total) + "; " + paths.checkpoint +
                      " holds it. Resume with: " + resume_command(run_dir));
  };
  // ARCAL_PROFILE=FILE: LibTorch's profiler over steps 20-69 of this invocation, written as a chrome
  // trace (bench/profile_train.py aggregates it per operator; bench/README.md "Profile").
  const char* profile_path = std::getenv("ARCAL_PROFILE");
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profile;
  for (std::int64_t step = start_step; step < total; ++step) {
    stop_if_interrupted(step);
    if (profile_path && step == start_step + 20)
      profile = std::make_unique<torch::autograd::profiler::RecordProfile>(profile_path);
    if (profile && step == start_step + 70) profile.reset();
    const int epoch = static_cast<int>(step / per_epoch);
    if (epoch != order_epoch) {
      shuffle_for_epoch(order, train.size(), c.seed, epoch);
      order_epoch = epoch;
    }
    const auto t_step = std::chrono::steady_clock::now();
    const auto [x, y] = rank_batch(train, order, step, per_epoch, global_batch, pad, c, dist_env.rank, device);
    const StepResult r = optimizer_step(model, opt, x, y, lr_at(c, step, total), c, autocast, scaler, group.get());
    if (!std::isfinite(r.loss))
      throw std::runtime_error("training diverged: loss is " + std::to_string(r.loss) + " at step " +
                               std::to_string(step));
    loss_sum += r.loss;
    ++loss_count;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_step).count();
    train_seconds += dt;
    images_seen += global_batch;
    if (ev.on_step) {
      const double acc = r.logits.argmax(-1).eq(y).to(torch::kFloat).mean().item<double>();
      ev.on_step(step + 1, total, epoch, r.loss, acc, double(images_seen) / std::max(train_seconds, 1e-9));
    }
    const bool epoch_end = (step + 1) % per_epoch == 0 || step + 1 == total;
    if (!primary) continue;  // evaluation, log and checkpoints belong to rank 0
    if (epoch_end) {
      // Validation runs in the training precision (under the same autocast as the training's forward
      // pass): in bf16 half the cost of a float pass. The test split, summary.json and the traces stay
      // float (write_final_outputs).
      autocast.set(true);
      const EvalResult v = evaluate(model, data.val);
      autocast.set(false);
      nlohmann::json rec = {{"schema", kTrainLogSchema},
                            {"step", step + 1},
                            {"epoch", double(step + 1) / double(per_epoch)},
                            {"train_loss", loss_sum / double(std::max<std::int64_t>(1, loss_count))},
                            {"val_accuracy", v.accuracy},
                            {"val_nll", v.nll},
                            {"val_ece", v.ece},
                            {"val_n", v.n},
                            {"lr", lr_at(c, step, total)}};
      if (data.val.text) rec["val_bits_per_byte"] = v.bits_per_byte;
      loss_sum = 0;
      loss_count = 0;
      append_line(paths.log, rec.dump());
      if (ev.on_eval) ev.on_eval(rec);
    }
    if (epoch_end) save_snapshot_if_asked(model, c, paths, run_dir, (step + 1 + per_epoch - 1) / per_epoch);
    if (epoch_end || (step + 1) % c.checkpoint_every == 0) {
      save_checkpoint(model, opt, step + 1, scaler, paths.checkpoint);
      checkpoint_step = step + 1;
    }
  }
  stop_if_interrupted(total);

  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double divergence = 0;
  if (group) {
    divergence = group->max_parameter_divergence(*model);  // collective: every rank takes part
    group->barrier();
    if (!primary) return {{"rank", dist_env.rank}, {"max_parameter_divergence", divergence}};
  }
  return write_final_outputs(model, data, c, run_dir, paths, total, per_epoch, start_step, wall, train_seconds,
                             images_seen, divergence, trace);
}

}  // namespace

}  // namespace arcal
