#include "train/train_config.hpp"

#include <cmath>
#include <sstream>

#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/text_input.hpp"

namespace arcal {

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

TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + " must be a JSON object, but is " + json_brief(j));
  TrainConfig c;
  // Missing keys keep the defaults (configs of older versions); present ones must have the right
  // type and fit their field exactly. Ranges are checked by check_train_config afterwards.
  const IntRange int32{-2147483647LL - 1, 2147483647LL};
  const IntRange int64{-9223372036854775807LL, 9223372036854775807LL};
  auto str = [&](const char* k, std::string& f) {
    if (j.contains(k)) f = json_string(j, k, where);
  };
  auto i32 = [&](const char* k, int& f) {
    if (j.contains(k)) f = static_cast<int>(json_int(j, k, where, int32));
  };
  auto i64 = [&](const char* k, std::int64_t& f) {
    if (j.contains(k)) f = json_int(j, k, where, int64);
  };
  auto real = [&](const char* k, double& f) {
    if (j.contains(k)) f = json_real(j, k, where);
  };
  str("dataset", c.dataset);
  str("data_dir", c.data_dir);
  str("model", c.model);
  str("residual", c.residual);
  i32("block_size", c.block_size);
  i32("epochs", c.epochs);
  i64("max_steps", c.max_steps);
  i64("train_subset", c.train_subset);
  i32("batch_size", c.batch_size);
  real("lr", c.lr);
  real("weight_decay", c.weight_decay);
  real("warmup_fraction", c.warmup_fraction);
  real("sbece_weight", c.sbece_weight);
  i32("sbece_bins", c.sbece_bins);
  real("sbece_temperature", c.sbece_temperature);
  real("val_fraction", c.val_fraction);
  if (j.contains("seed")) c.seed = json_uint64(j, "seed", where);
  i32("threads", c.threads);
  str("device", c.device);
  str("precision", c.precision);
  i32("world_size", c.world_size);
  i64("checkpoint_every", c.checkpoint_every);
  real("norm_eps", c.norm_eps);
  i32("patch", c.patch);  // absent in runs written before --patch: the preset's
  return c;
}

void from_json(const nlohmann::json& j, TrainConfig& c) { c = train_config_from_json(j, "train config"); }

void check_train_config(const TrainConfig& c) {
  if (c.dataset != "fashion-mnist" && c.dataset != "cifar10" && c.dataset != "cifar100")
    throw_input("--dataset", "'" + c.dataset + "' is not a known dataset; expected fashion-mnist, cifar10 or cifar100");
  parse_residual_mode(c.residual);
  auto in = [](const char* flag, long long v, const IntRange& r) {
    if (!in_range(r, v)) throw_input(flag, std::to_string(v) + " must be in " + range_text(r));
  };
  auto in_real = [](const char* flag, double v, const RealRange& r) {
    if (!in_range(r, v)) {
      std::ostringstream o;
      o << v;
      throw_input(flag, o.str() + " must be in " + range_text(r));
    }
  };
  in("--epochs", c.epochs, ranges::epochs);
  in("--max-steps", c.max_steps, ranges::max_steps);
  in("--train-subset", c.train_subset, ranges::train_subset);
  in("--batch-size", c.batch_size, ranges::batch_size);
  in_real("--lr", c.lr, ranges::lr);
  in_real("--weight-decay", c.weight_decay, ranges::weight_decay);
  in_real("--sbece-weight", c.sbece_weight, ranges::sbece_weight);
  if (!(c.sbece_temperature > 0))
    throw_input("--sbece-temperature", std::to_string(c.sbece_temperature) + " must be > 0 (method.md §2)");
  in_real("--sbece-temperature", c.sbece_temperature, ranges::sbece_temperature);
  in("--sbece-bins", c.sbece_bins, ranges::sbece_bins);
  in("--threads", c.threads, ranges::threads);
  if (c.device != "cpu" && c.device != "cuda") throw_input("--device", "'" + c.device + "': expected cpu or cuda");
  if (c.precision != "fp32" && c.precision != "bf16" && c.precision != "fp16")
    throw_input("--precision", "'" + c.precision + "': expected fp32, bf16 or fp16");
  if (c.precision == "fp16" && c.device != "cuda")
    throw_input("--precision", "fp16 autocast needs --device cuda (LibTorch's CPU autocast runs bf16 only); use bf16");
  in("world_size", c.world_size, IntRange{1, 65536});
  in("--checkpoint-every", c.checkpoint_every, ranges::checkpoint_every);
  in_real("--warmup-fraction", c.warmup_fraction, ranges::warmup_fraction);
  in_real("--norm-eps", c.norm_eps, ranges::norm_eps);
  if (!(c.val_fraction >= 0 && c.val_fraction < 1)) throw_input("val_fraction", "must be in [0, 1)");
  in("--block-size", c.block_size, ranges::block_size);
  in("--patch", c.patch, ranges::patch);
}

RunConfig parse_run_config_text(const std::string& text, const std::string& path) {
  const std::string fn = "run config";
  const nlohmann::json j = parse_json_text(text, fn, path);
  if (!j.is_object() || !j.contains("train") || !j.contains("model"))
    throw InputError(fn + ": " + path + " is not an arcal run config (needs the objects 'train' and 'model')");
  if (j.contains("schema")) {  // absent in runs written before it was added: version 1
    const auto& s = j["schema"];
    if (!s.is_string() || s.get<std::string>() != kTrainConfigSchema)
      throw InputError(fn + ": " + path + ": schema is " + json_brief(s) + ", but this arcal reads \"" +
                       kTrainConfigSchema + "\" (a run written by " +
                       (s.is_string() && s.get<std::string>().rfind("arcal.train_config/", 0) == 0
                            ? "another arcal version"
                            : "something else") +
                       "?)");
  }
  RunConfig r;
  r.train = train_config_from_json(j["train"], fn + ": " + path + ": train");
  try {
    check_train_config(r.train);
  } catch (const InputError& e) {
    throw InputError(fn + ": " + path + ": train: " + e.what());
  }
  r.model = model_config_from_json(j["model"], fn + ": " + path + ": model");
  if (r.model.preset != r.train.model || to_string(r.model.residual) != r.train.residual)
    throw InputError(fn + ": " + path + ": model (" + r.model.preset + ", " + to_string(r.model.residual) +
                     ") does not match train (" + r.train.model + ", " + r.train.residual + ")");
  if (r.train.patch > 0 && r.model.patch != r.train.patch)
    throw InputError(fn + ": " + path + ": model patch " + std::to_string(r.model.patch) +
                     " does not match train patch " + std::to_string(r.train.patch));
  r.json = j;
  return r;
}

RunConfig read_run_config(const std::string& path) {
  return parse_run_config_text(read_text_file(path, "run config", "config.json", input_limits().max_text_bytes), path);
}

const std::vector<std::string>& resume_overridable_keys() {
  static const std::vector<std::string> keys = {"epochs", "max_steps", "lr", "weight_decay", "warmup_fraction",
                                                "sbece_weight", "sbece_bins", "sbece_temperature",
                                                "checkpoint_every", "device", "precision", "data_dir"};
  return keys;
}

}  // namespace arcal
