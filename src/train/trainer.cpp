#include "train/trainer.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <ATen/autocast_mode.h>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/rng.hpp"
#include "calib/metrics.hpp"
#include "model/cost.hpp"
#include "train/distributed.hpp"
#include "train/sbece.hpp"
#include "train/threads.hpp"

namespace arcal {

namespace fs = std::filesystem;

void to_json(nlohmann::json& j, const TrainConfig& c) {
  j = nlohmann::json{{"dataset", c.dataset},
                     {"data_dir", c.data_dir},
                     {"model", c.model},
                     {"residual", c.residual},
                     {"block_size", c.block_size},
                     {"epochs", c.epochs},
                     {"max_steps", c.max_steps},
                     {"train_subset", c.train_subset},
                     {"batch_size", c.batch_size},
                     {"lr", c.lr},
                     {"weight_decay", c.weight_decay},
                     {"warmup_fraction", c.warmup_fraction},
                     {"sbece_weight", c.sbece_weight},
                     {"sbece_bins", c.sbece_bins},
                     {"sbece_temperature", c.sbece_temperature},
                     {"val_fraction", c.val_fraction},
                     {"seed", c.seed},
                     {"threads", c.threads},
                     {"device", c.device},
                     {"precision", c.precision},
                     {"world_size", c.world_size},
                     {"checkpoint_every", c.checkpoint_every},
                     {"norm_eps", c.norm_eps},
                     {"patch", c.patch}};
}

void from_json(const nlohmann::json& j, TrainConfig& c) {
  TrainConfig d;
  auto get = [&](const char* k, auto& field) {
    if (j.contains(k)) j.at(k).get_to(field);
  };
  c = d;
  get("dataset", c.dataset);
  get("data_dir", c.data_dir);
  get("model", c.model);
  get("residual", c.residual);
  get("block_size", c.block_size);
  get("epochs", c.epochs);
  get("max_steps", c.max_steps);
  get("train_subset", c.train_subset);
  get("batch_size", c.batch_size);
  get("lr", c.lr);
  get("weight_decay", c.weight_decay);
  get("warmup_fraction", c.warmup_fraction);
  get("sbece_weight", c.sbece_weight);
  get("sbece_bins", c.sbece_bins);
  get("sbece_temperature", c.sbece_temperature);
  get("val_fraction", c.val_fraction);
  get("seed", c.seed);
  get("threads", c.threads);
  get("device", c.device);
  get("precision", c.precision);
  get("world_size", c.world_size);
  get("checkpoint_every", c.checkpoint_every);
  get("norm_eps", c.norm_eps);
  get("patch", c.patch);  // absent in runs written before --patch: the preset's
}

void validate_train_config(const TrainConfig& c) {
  if (c.dataset != "fashion-mnist" && c.dataset != "cifar10" && c.dataset != "cifar100")
    throw_input("--dataset", "'" + c.dataset + "' is not a known dataset; expected fashion-mnist, cifar10 or cifar100");
  parse_residual_mode(c.residual);
  if (c.epochs < 1) throw_input("--epochs", std::to_string(c.epochs) + " must be >= 1");
  if (c.patch < 0) throw_input("--patch", std::to_string(c.patch) + " must be >= 0 (0 = the preset's)");
  if (c.max_steps < 0) throw_input("--max-steps", "must be >= 0 (0 = no cap)");
  if (c.batch_size < 1) throw_input("--batch-size", std::to_string(c.batch_size) + " must be >= 1");
  if (!(c.lr > 0)) throw_input("--lr", "must be > 0");
  if (c.weight_decay < 0) throw_input("--weight-decay", "must be >= 0");
  if (c.sbece_weight < 0) throw_input("--sbece-weight", "must be >= 0");
  if (!(c.sbece_temperature > 0))
    throw_input("--sbece-temperature", std::to_string(c.sbece_temperature) + " must be > 0 (method.md §2)");
  if (c.sbece_bins < 1) throw_input("--sbece-bins", "must be >= 1");
  if (c.threads < 1) throw_input("--threads", "must be >= 1");
  if (c.device != "cpu" && c.device != "cuda") throw_input("--device", "'" + c.device + "': expected cpu or cuda");
  if (c.device == "cuda" && !torch::cuda::is_available())
    throw_input("--device", "cuda requested, but this LibTorch build has no CUDA support or sees no CUDA device. "
                            "Build against the official CUDA LibTorch (cmake -DCMAKE_PREFIX_PATH=/path/to/libtorch, "
                            "README 'Paper scale') and run where a GPU is visible");
  if (c.precision != "fp32" && c.precision != "bf16" && c.precision != "fp16")
    throw_input("--precision", "'" + c.precision + "': expected fp32, bf16 or fp16");
  if (c.precision == "fp16" && c.device != "cuda")
    throw_input("--precision", "fp16 autocast needs --device cuda (LibTorch's CPU autocast runs bf16 only); use bf16");
  if (c.world_size < 1) throw_input("world_size", "must be >= 1");
  if (c.checkpoint_every < 1) throw_input("--checkpoint-every", "must be >= 1");
  if (!(c.warmup_fraction >= 0 && c.warmup_fraction < 1)) throw_input("--warmup-fraction", "must be in [0, 1)");
  if (c.residual == "block" && c.block_size < 1) throw_input("--block-size", "must be >= 1");
}

ModelConfig model_config_for(const TrainConfig& c, int image_size, int channels, int classes) {
  auto mc = make_model_config(c.model, image_size, channels, classes, parse_residual_mode(c.residual), c.block_size);
  mc.norm_eps = c.norm_eps;
  if (c.patch > 0) {
    if (mc.arch != "vit") throw_input("--patch", "applies to the ViT presets (ar-vit-tiny, ar-deit-small), not " + c.model);
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
  return {{"model", mc},
          {"dataset", c.dataset},
          {"input", {channels, image_size, image_size}},
          {"parameters", parameter_count(*model)},
          {"routing_points", mc.routing_points()},
          {"routing_sources", mc.sources_per_point()},
          {"macs_per_image", cost.macs},
          {"flops_per_image", 2.0 * cost.macs},
          {"routing_macs_per_image", cost.routing_macs},
          {"attention_macs_per_image", cost.attention_macs}};
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

EvalResult evaluate(ARViT& model, const TensorData& data, int batch_size) {
  torch::NoGradGuard guard;
  const bool was_training = model->is_training();
  model->eval();
  EvalResult r;
  r.n = data.size();
  if (r.n == 0) return r;
  std::vector<torch::Tensor> logits;
  const auto device = model->parameters().front().device();
  for (std::int64_t s = 0; s < r.n; s += batch_size) {
    const auto len = std::min<std::int64_t>(batch_size, r.n - s);
    logits.push_back(model->forward(data.images.narrow(0, s, len).to(device)).to(torch::kCPU));
  }
  auto all = torch::cat(logits, 0);
  auto lp = torch::log_softmax(all.to(torch::kDouble), -1);
  r.nll = -lp.gather(1, data.labels.unsqueeze(1)).mean().item<double>();
  r.accuracy = all.argmax(-1).eq(data.labels).to(torch::kDouble).mean().item<double>();
  r.ece = top_label_ece(all, data.labels);
  if (was_training) model->train();
  return r;
}

namespace {

double lr_at(const TrainConfig& c, std::int64_t step, std::int64_t total) {
  const auto warmup = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::llround(c.warmup_fraction * double(total))));
  if (step < warmup) return c.lr * double(step + 1) / double(warmup);
  const double progress = total > warmup ? double(step - warmup) / double(total - warmup) : 1.0;
  return c.lr * 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
}

void save_archive_atomic(torch::serialize::OutputArchive& archive, const std::string& path) {
  write_atomic_with(path, [&](const std::string& tmp) { archive.save_to(tmp); });
}

/// fp16 loss-scaler state; part of the checkpoint so an fp16 run resumes exactly.
struct LossScaler {
  double scale = 1.0;
  std::int64_t clean_steps = 0;
};

void save_checkpoint(ARViT& model, torch::optim::AdamW& opt, std::int64_t step, const LossScaler& scaler,
                     const std::string& path) {
  torch::serialize::OutputArchive archive, model_archive, opt_archive;
  model->save(model_archive);
  opt.save(opt_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", opt_archive);
  archive.write("step", torch::tensor(step, torch::kLong));
  archive.write("loss_scale", torch::tensor({scaler.scale, double(scaler.clean_steps)}, torch::kDouble));
  save_archive_atomic(archive, path);
}

std::int64_t load_checkpoint(ARViT& model, torch::optim::AdamW& opt, const std::string& path,
                             const torch::Device& device, LossScaler& scaler) {
  torch::serialize::InputArchive archive, model_archive, opt_archive;
  try {
    archive.load_from(path, device);  // parameters and optimizer state onto the training device
  } catch (const c10::Error& e) {
    throw_input("--resume", path + ": not a readable checkpoint (" + std::string(e.what_without_backtrace()) + ")");
  }
  archive.read("model", model_archive);
  archive.read("optimizer", opt_archive);
  model->load(model_archive);
  opt.load(opt_archive);
  torch::Tensor step;
  archive.read("step", step);
  torch::Tensor ls;
  if (archive.try_read("loss_scale", ls)) {  // absent in checkpoints written before issue 8
    ls = ls.to(torch::kCPU);
    scaler.scale = ls[0].item<double>();
    scaler.clean_steps = static_cast<std::int64_t>(ls[1].item<double>());
  }
  return step.item<std::int64_t>();
}

/// Keeps the log's records up to `step` (a resumed run re-does what came after its checkpoint).
void truncate_log(const std::string& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("step", std::int64_t(0)) <= step) kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

void append_line(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
}

}  // namespace

ARViT load_trained_model(const std::string& run_dir, TrainConfig* config_out, const LoadOptions& options) {
  const std::string cfg_path = run_dir + "/config.json";
  if (!fs::exists(cfg_path)) throw_input("load_trained_model", cfg_path + " does not exist (not an arcal run?)");
  auto cfg_json = nlohmann::json::parse(read_file(cfg_path), nullptr, false);
  if (cfg_json.is_discarded() || !cfg_json.contains("train") || !cfg_json.contains("model"))
    throw_input("load_trained_model", cfg_path + " is not an arcal run config");
  TrainConfig tc = cfg_json.at("train").get<TrainConfig>();
  ModelConfig mc = cfg_json.at("model").get<ModelConfig>();
  if (options.norm_eps >= 0) mc.norm_eps = options.norm_eps;
  ARViT model(mc);
  const std::string model_path = run_dir + "/model.pt";
  if (!fs::exists(model_path)) throw_input("load_trained_model", model_path + " does not exist (training not finished?)");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(model_path, torch::Device(torch::kCPU));  // a CUDA-trained run loads on the CPU too
    model->load(archive);
  } catch (const c10::Error& e) {
    throw_input("load_trained_model", model_path + ": cannot load (" + std::string(e.what_without_backtrace()) + ")");
  }
  if (!options.as_attnres.empty()) {
    if (mc.residual != ResidualMode::Standard)
      throw_input("--as-attnres", run_dir + " is a " + to_string(mc.residual) + " AttnRes run, not a standard-residual one");
    ModelConfig wrapped = mc;
    wrapped.residual = parse_residual_mode(options.as_attnres);
    if (wrapped.residual == ResidualMode::Standard) throw_input("--as-attnres", "expected full or block");
    wrapped.block_size = options.block_size;
    validate_model_config(wrapped);
    ARViT attnres(wrapped);  // pseudo-queries 0, gains 1 from construction
    torch::NoGradGuard guard;
    auto src = model->named_parameters();
    for (auto& kv : attnres->named_parameters())
      if (src.contains(kv.key())) kv.value().copy_(src[kv.key()]);
    model = attnres;
    tc.residual = options.as_attnres;
    tc.block_size = options.block_size;
  }
  model->eval();
  if (config_out) *config_out = tc;
  return model;
}

nlohmann::json train_run(const TrainConfig& requested, const std::string& run_dir, bool resume,
                         const TrainEvents& events) {
  const std::string config_path = run_dir + "/config.json";
  const std::string ckpt_path = run_dir + "/checkpoint.pt";
  const std::string log_path = run_dir + "/log.jsonl";
  const std::string summary_path = run_dir + "/summary.json";

  TrainConfig c = requested;
  std::int64_t start_step = 0;
  if (resume) {
    if (!fs::exists(config_path))
      throw_input("--resume", config_path + " does not exist: nothing to resume (start without --resume)");
    auto j = nlohmann::json::parse(read_file(config_path), nullptr, false);
    if (j.is_discarded() || !j.contains("train")) throw_input("--resume", config_path + " is not an arcal run config");
    c = j.at("train").get<TrainConfig>();
    c.threads = requested.threads;
  } else if (fs::exists(summary_path) || fs::exists(ckpt_path)) {
    throw_input("--out", run_dir + " already holds a run (" + (fs::exists(summary_path) ? "finished" : "with a checkpoint") +
                             "); pass --resume to continue it or choose another --out");
  }
  const DistributedEnv dist_env = distributed_env_from_environment();
  if (resume && c.world_size != dist_env.world_size)
    throw_input("--resume", run_dir + " was trained with " + std::to_string(c.world_size) + " rank(s) but WORLD_SIZE is " +
                                std::to_string(dist_env.world_size) + ": the data order depends on it; resume with the same count");
  c.world_size = dist_env.world_size;
  validate_train_config(c);
  const bool primary = dist_env.primary();
  TrainEvents ev = primary ? events : TrainEvents{};
  auto say_primary = [&](const std::string& s) {
    if (ev.on_message) ev.on_message(s);
  };

  set_compute_threads(c.threads);
  // Everything that can fail on user input happens before RUN/ is touched.
  DatasetSplits data = load_dataset(c.dataset, c.data_dir, c.val_fraction, c.train_subset, c.seed);
  const auto& train = data.train;
  ModelConfig mc = model_config_for(c, static_cast<int>(train.images.size(2)), static_cast<int>(train.images.size(1)),
                                    train.classes);
  const torch::Device device = c.device == "cuda" ? torch::Device(torch::kCUDA, static_cast<torch::DeviceIndex>(dist_env.local_rank))
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
                                    " rank(s) exceeds the training split (" + std::to_string(train.size()) + " examples)");
  std::int64_t total = per_epoch * c.epochs;
  if (c.max_steps > 0) total = std::min(total, c.max_steps);

  // fp16 needs loss scaling (bf16 has fp32's exponent range): dynamic, halved on overflow (the step
  // is skipped), doubled after 2000 clean steps, as torch.cuda.amp.GradScaler does.
  LossScaler scaler;
  if (c.precision == "fp16") scaler.scale = 65536.0;
  if (primary) fs::create_directories(run_dir);
  if (resume && fs::exists(ckpt_path)) {
    start_step = load_checkpoint(model, opt, ckpt_path, device, scaler);
    if (primary) truncate_log(log_path, start_step);
    say_primary("resuming " + run_dir + " from step " + std::to_string(start_step) + " of " + std::to_string(total));
  } else if (primary) {
    nlohmann::json cfg = {{"train", c}, {"model", mc}, {"version", ARCAL_VERSION},
                          {"parameters", parameter_count(*model)}};
    write_file_atomic(config_path, cfg.dump(2) + "\n");
    write_file_atomic(log_path, "");
  }
  if (group) group->barrier();  // every rank has checked RUN/ before rank 0 writes checkpoints into it

  // Autocast for the training forward pass; the loss and the routing softmax run in fp32.
  const bool autocast = c.precision != "fp32";
  const auto autocast_dtype = c.precision == "fp16" ? at::kHalf : at::kBFloat16;
  auto set_autocast = [&](bool on) {
    if (!autocast) return;
    if (device.is_cuda()) {
      at::autocast::set_autocast_gpu_dtype(autocast_dtype);
      at::autocast::set_enabled(on);
    } else {
      at::autocast::set_autocast_cpu_dtype(autocast_dtype);
      at::autocast::set_cpu_enabled(on);
    }
    if (!on) at::autocast::clear_cache();
  };

  const int pad = train.images.size(2) == 28 ? 2 : 4;
  const auto t0 = std::chrono::steady_clock::now();
  double train_seconds = 0;
  std::int64_t images_seen = 0;
  std::vector<std::int64_t> order;
  int order_epoch = -1;
  double loss_sum = 0;
  std::int64_t loss_count = 0;
  model->train();
  for (std::int64_t step = start_step; step < total; ++step) {
    const int epoch = static_cast<int>(step / per_epoch);
    if (epoch != order_epoch) {
      order.resize(static_cast<std::size_t>(train.size()));
      std::iota(order.begin(), order.end(), 0);
      Rng rng(derive_seed(c.seed, 1000 + static_cast<std::uint64_t>(epoch)));
      rng.shuffle(order);
      order_epoch = epoch;
    }
    const auto t_step = std::chrono::steady_clock::now();
    // The global batch is what one process with batch b x world would draw (same order, same
    // augmentation seed); rank r trains on rows [r b, (r+1) b) of it.
    const auto offset = (step % per_epoch) * global_batch;
    auto idx = torch::from_blob(order.data() + offset, {global_batch}, torch::kLong);
    auto x = augment_batch(train.images.index_select(0, idx), pad, derive_seed(c.seed, 5000000 + static_cast<std::uint64_t>(step)), c.dataset);
    auto y = train.labels.index_select(0, idx);
    if (c.world_size > 1) {
      x = x.narrow(0, std::int64_t(dist_env.rank) * c.batch_size, c.batch_size);
      y = y.narrow(0, std::int64_t(dist_env.rank) * c.batch_size, c.batch_size);
    }
    x = x.to(device);
    y = y.to(device);
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr_at(c, step, total));
    opt.zero_grad();
    set_autocast(true);
    auto logits = model->forward(x);
    set_autocast(false);
    logits = logits.to(torch::kFloat);
    // With several ranks the SB-ECE term is a per-rank batch statistic (its bins see b examples).
    auto loss = torch::cross_entropy_loss(logits, y);
    if (c.sbece_weight > 0) loss = loss + c.sbece_weight * soft_binned_ece(logits, y, c.sbece_bins, c.sbece_temperature);
    (scaler.scale != 1.0 ? loss * scaler.scale : loss).backward();
    if (group) group->average_gradients(*model);
    bool finite = true;
    if (scaler.scale != 1.0) {
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
    }
    if (finite) opt.step();
    const double lv = loss.item<double>();
    if (!std::isfinite(lv)) throw std::runtime_error("training diverged: loss is " + std::to_string(lv) + " at step " + std::to_string(step));
    loss_sum += lv;
    ++loss_count;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_step).count();
    train_seconds += dt;
    images_seen += global_batch;
    if (ev.on_step) {
      const double acc = logits.argmax(-1).eq(y).to(torch::kFloat).mean().item<double>();
      ev.on_step(step + 1, total, epoch, lv, acc, double(images_seen) / std::max(train_seconds, 1e-9));
    }
    const bool epoch_end = (step + 1) % per_epoch == 0 || step + 1 == total;
    if (!primary) continue;  // evaluation, log and checkpoints belong to rank 0
    if (epoch_end) {
      EvalResult v = evaluate(model, data.val);
      nlohmann::json rec = {{"step", step + 1},
                            {"epoch", double(step + 1) / double(per_epoch)},
                            {"train_loss", loss_sum / double(std::max<std::int64_t>(1, loss_count))},
                            {"val_accuracy", v.accuracy},
                            {"val_nll", v.nll},
                            {"val_ece", v.ece},
                            {"val_n", v.n},
                            {"lr", lr_at(c, step, total)}};
      loss_sum = 0;
      loss_count = 0;
      append_line(log_path, rec.dump());
      if (ev.on_eval) ev.on_eval(rec);
    }
    if (epoch_end || (step + 1) % c.checkpoint_every == 0) save_checkpoint(model, opt, step + 1, scaler, ckpt_path);
  }

  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double divergence = 0;
  if (group) {
    divergence = group->max_parameter_divergence(*model);  // collective: every rank takes part
    group->barrier();
    if (!primary) return {{"rank", dist_env.rank}, {"max_parameter_divergence", divergence}};
  }
  EvalResult test = evaluate(model, data.test);
  torch::serialize::OutputArchive final_archive;
  model->save(final_archive);
  save_archive_atomic(final_archive, run_dir + "/model.pt");
  nlohmann::json summary = {{"test_accuracy", test.accuracy},
                            {"test_nll", test.nll},
                            {"test_ece15", test.ece},
                            {"test_n", test.n},
                            {"steps", total},
                            {"epochs", double(total) / double(per_epoch)},
                            {"resumed_from_step", start_step},
                            {"wall_seconds", wall},
                            {"train_seconds", train_seconds},
                            {"images_per_second", train_seconds > 0 ? double(images_seen) / train_seconds : 0.0},
                            {"threads", c.threads},
                            {"world_size", c.world_size},
                            {"precision", c.precision},
                            {"max_parameter_divergence", divergence},
                            {"parameters", parameter_count(*model)}};
  write_file_atomic(summary_path, summary.dump(2) + "\n");
  return summary;
}

}  // namespace arcal
