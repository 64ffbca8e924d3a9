#include "train/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/ownership.hpp"
#include "core/text_input.hpp"
#include "train/trainer.hpp"

namespace arcal {

namespace fs = std::filesystem;

/// The archive is serialised in memory and written by write_file_atomic: LibTorch's file writer
/// throws from its destructor on a full disk (std::terminate, rc 134, the temporary left behind);
/// here a full disk is an error naming the path and ENOSPC, the temporary is removed and the previous
/// checkpoint stays as it was.
void save_archive_atomic(torch::serialize::OutputArchive& archive, const std::string& path) {
  std::ostringstream bytes;
  archive.save_to(bytes);
  write_file_atomic(path, std::move(bytes).str());
}

// ---- model identity: every checkpoint and model.pt records the model configuration (JSON) and its
// hash, and loading compares both with the configuration the weights are loaded into; the shapes
// of every parameter and buffer are compared too (LibTorch's load would silently resize them).

void write_model_identity(torch::serialize::OutputArchive& archive, const ModelConfig& mc) {
  nlohmann::json j = mc;
  archive.write("arcal_model_config", c10::IValue(j.dump()));
  archive.write("arcal_model_config_hash", c10::IValue(model_config_hash(mc)));
}

namespace {

std::string model_summary(const ModelConfig& m) {
  // Built by appending: GCC 12 warns (-Wrestrict, a false positive) on " " + std::to_string(...).
  std::string residual = to_string(m.residual);
  if (m.residual == ResidualMode::Block) residual += ' ' + std::to_string(m.block_size);
  return m.preset + " (" + residual + ", dim " + std::to_string(m.dim) + ", depth " + std::to_string(m.depth) + ", " +
         std::to_string(m.image_size) + "x" + std::to_string(m.image_size) + "x" + std::to_string(m.channels) + ", " +
         std::to_string(m.classes) + " classes)";
}

/// Refuses `path` when the configuration it records is not `mc` (the run's config.json). Files
/// written before issue 13 record none; for them only the shape check in load_weights applies.
void check_model_identity(torch::serialize::InputArchive& archive, const ModelConfig& mc, const std::string& path,
                          const std::string& fn) {
  c10::IValue cfg, hash;
  const bool has_cfg = archive.try_read("arcal_model_config", cfg);
  const bool has_hash = archive.try_read("arcal_model_config_hash", hash);
  if (!has_cfg && !has_hash) return;
  if (!has_cfg || !has_hash || !cfg.isString() || !hash.isString())
    throw_input(fn, path + ": the recorded model configuration or its hash is missing or damaged");
  const ModelConfig stored = model_config_from_json(
      parse_json_text(cfg.toStringRef(), fn, path + ": recorded model config"), path + ": recorded model config");
  if (model_config_hash(stored) != hash.toStringRef())
    throw_input(fn, path + ": the recorded model configuration does not match its recorded hash (damaged file)");
  if (hash.toStringRef() != model_config_hash(mc))
    throw_input(fn, path + " holds the weights of " + model_summary(stored) + ", but the run's config.json describes " +
                        model_summary(mc) + " (configuration hash " + hash.toStringRef() + " vs " +
                        model_config_hash(mc) + "); weights of one configuration cannot be loaded into another");
}

/// module->load(archive) with a check that no parameter or buffer changed shape (a file from a
/// different architecture with the same names would otherwise load without complaint).
void load_weights(torch::nn::Module& module, torch::serialize::InputArchive& archive, const std::string& path,
                  const std::string& fn) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> before;
  for (const auto& kv : module.named_parameters()) before.push_back({kv.key(), kv.value().sizes().vec()});
  for (const auto& kv : module.named_buffers()) before.push_back({kv.key(), kv.value().sizes().vec()});
  module.load(archive);
  std::map<std::string, std::vector<std::int64_t>> after;
  for (const auto& kv : module.named_parameters()) after[kv.key()] = kv.value().sizes().vec();
  for (const auto& kv : module.named_buffers()) after[kv.key()] = kv.value().sizes().vec();
  auto text = [](const std::vector<std::int64_t>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  for (const auto& [name, shape] : before)
    if (after[name] != shape)
      throw_input(fn, path + ": tensor '" + name + "' has shape " + text(after[name]) +
                          ", but the model of config.json needs " + text(shape) +
                          "; the weights belong to another architecture");
}

}  // namespace

void save_checkpoint(ARViT& model, torch::optim::AdamW& opt, std::int64_t step, const LossScaler& scaler,
                     const std::string& path) {
  torch::serialize::OutputArchive archive, model_archive, opt_archive;
  write_model_identity(archive, model->config());
  model->save(model_archive);
  opt.save(opt_archive);
  archive.write("model", model_archive);
  archive.write("optimizer", opt_archive);
  archive.write("step", torch::tensor(step, torch::kLong));
  archive.write("loss_scale", torch::tensor({scaler.scale, double(scaler.clean_steps)}, torch::kDouble));
  save_archive_atomic(archive, path);
}

std::int64_t load_checkpoint(ARViT& model, torch::optim::AdamW& opt, const std::string& path,
                             const torch::Device& device, LossScaler& scaler, std::int64_t total) {
  torch::serialize::InputArchive archive, model_archive, opt_archive;
  std::int64_t step = 0;
  try {
    archive.load_from(path, device);  // parameters and optimizer state onto the training device
    check_model_identity(archive, model->config(), path, "--resume");
    archive.read("model", model_archive);
    archive.read("optimizer", opt_archive);
    load_weights(*model, model_archive, path, "--resume");
    opt.load(opt_archive);
    torch::Tensor t;
    archive.read("step", t);
    if (t.numel() != 1) throw_input("--resume", path + ": the recorded step is not a single number");
    step = t.to(torch::kCPU).to(torch::kLong).item<std::int64_t>();
    torch::Tensor ls;
    if (archive.try_read("loss_scale", ls)) {  // absent in checkpoints written before issue 8
      ls = ls.to(torch::kCPU).to(torch::kDouble);
      if (ls.numel() != 2) throw_input("--resume", path + ": the recorded loss scale is not 2 numbers");
      scaler.scale = ls[0].item<double>();
      scaler.clean_steps = static_cast<std::int64_t>(ls[1].item<double>());
    }
  } catch (const c10::Error& e) {
    throw_input("--resume", path + ": not a readable checkpoint (" + std::string(e.what_without_backtrace()) + ")");
  }
  if (step < 0) throw_input("--resume", path + ": the recorded step " + std::to_string(step) + " is negative");
  if (step > total)
    throw_input("--resume", path + " is at step " + std::to_string(step) + ", past the run's end at step " +
                                std::to_string(total) +
                                " (--max-steps or --epochs lowered below the steps already done?)");
  return step;
}

/// Keeps the log's records up to `step` (a resumed run re-does what came after its checkpoint).
void truncate_log(const std::string& path, std::int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<std::int64_t>() <= step)
      kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

/// Appends one line to RUN/log.jsonl, never through a link or into a file with a second name
/// (core/ownership.hpp); a failed write is an error, not a silently shorter log.
void append_line(const std::string& path, const std::string& line) {
  const int fd = open_own_file("arcal train", path, O_WRONLY | O_CREAT | O_APPEND);
  if (const int err = write_all(fd, line + "\n"); err != 0) {
    ::close(fd);
    throw_write_error("arcal train", path, err);
  }
  if (::close(fd) != 0) throw_write_error("arcal train", path, errno);
}

ARViT load_trained_model(const std::string& run_dir, TrainConfig* config_out, const LoadOptions& options) {
  const std::string cfg_path = run_dir + "/config.json";
  if (!fs::is_directory(run_dir))
    throw_input("load_trained_model", run_dir + " is not a directory (not an arcal run?)");
  if (!fs::exists(cfg_path)) throw_input("load_trained_model", cfg_path + " does not exist (not an arcal run?)");
  const RunConfig rc = read_run_config(cfg_path);
  TrainConfig tc = rc.train;
  ModelConfig mc = rc.model;
  const ModelConfig recorded = mc;
  if (options.norm_eps >= 0) mc.norm_eps = options.norm_eps;
  ARViT model(mc);
  const std::string model_path = run_dir + "/model.pt";
  if (!fs::exists(model_path))
    throw_input("load_trained_model", model_path + " does not exist (training not finished?)");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(model_path, torch::Device(torch::kCPU));  // a CUDA-trained run loads on the CPU too
    check_model_identity(archive, recorded, model_path, "load_trained_model");
    load_weights(*model, archive, model_path, "load_trained_model");
  } catch (const c10::Error& e) {
    throw_input("load_trained_model", model_path + ": cannot load (" + std::string(e.what_without_backtrace()) + ")");
  }
  if (!options.as_attnres.empty()) {
    if (mc.residual != ResidualMode::Standard)
      throw_input("--as-attnres",
                  run_dir + " is a " + to_string(mc.residual) + " AttnRes run, not a standard-residual one");
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

}  // namespace arcal
