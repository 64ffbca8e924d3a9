#include "train/train_config.hpp"

#include <cmath>
#include <sstream>

#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/text_input.hpp"

namespace arcal {

const OptionTable<TrainConfig>& train_option_table() {
  using T = TrainConfig;
  namespace R = ranges;
  static const std::vector<std::string> presets = [] {
    auto all = model_presets();
    all.insert(all.end(), lm_presets().begin(), lm_presets().end());
    return all;
  }();
  static const OptionTable<T> table = {
      {"dataset",
       "--dataset",
       "Dataset: images (fashion-mnist, cifar10, cifar100) or the text corpus gcide (dict-gcide, for ar-lm-tiny)",
       &T::dataset,
       {},
       {"fashion-mnist", "cifar10", "cifar100", "gcide"}},
      {"model", "--model", "Preset", &T::model, {}, presets},
      {"residual", "--residual", "Residual mode", &T::residual, {}, {"full", "block", "standard"}},
      {"data_dir",
       "--data-dir",
       "Dataset directory (default for fashion-mnist: /usr/share/datasets/fashion-mnist; CIFAR: the extracted "
       "cifar-10-batches-bin or cifar-100-binary folder)",
       &T::data_dir,
       {},
       {},
       false,
       false,
       "data"},
      {"patch",
       "--patch",
       "Patch size of the ViT presets instead of the preset's (0 = the preset's; 2 on 28x28 gives 197 tokens)",
       &T::patch,
       R::patch,
       {},
       false,
       true,
       "model"},
      {"context",
       "--context",
       "Language model: tokens (bytes) per training sequence, the model's context",
       &T::context,
       R::context,
       {},
       false,
       true,
       "model"},
      {"block_size",
       "--block-size",
       "Block AttnRes block size S in sublayers",
       &T::block_size,
       R::block_size,
       {},
       false,
       true,
       "model"},
      {"norm_eps",
       "--norm-eps",
       "Epsilon of every LayerNorm/RMSNorm",
       &T::norm_eps,
       R::norm_eps,
       {},
       false,
       true,
       "model"},
      {"epochs", "--epochs", "Training epochs", &T::epochs, R::epochs, {}, false, true, "train"},
      {"max_steps",
       "--max-steps",
       "Stop after this many optimizer steps (0 = no cap)",
       &T::max_steps,
       R::max_steps,
       {},
       false,
       true,
       "train"},
      {"train_subset",
       "--train-subset",
       "Use only this many training examples (0 = all)",
       &T::train_subset,
       R::train_subset,
       {},
       false,
       true,
       "train"},
      {"batch_size",
       "--batch-size",
       "Batch size (per rank when WORLD_SIZE > 1)",
       &T::batch_size,
       R::batch_size,
       {},
       false,
       true,
       "train"},
      {"lr", "--lr", "AdamW peak learning rate", &T::lr, R::lr, {}, false, true, "train"},
      {"weight_decay",
       "--weight-decay",
       "AdamW weight decay",
       &T::weight_decay,
       R::weight_decay,
       {},
       false,
       true,
       "train"},
      {"warmup_fraction",
       "--warmup-fraction",
       "Linear warm-up as a fraction of all steps",
       &T::warmup_fraction,
       R::warmup_fraction,
       {},
       false,
       true,
       "train"},
      {"sbece_weight",
       "--sbece-weight",
       "beta: weight of the soft-binned ECE term",
       &T::sbece_weight,
       R::sbece_weight,
       {},
       false,
       true,
       "train"},
      {"sbece_bins", "--sbece-bins", "M: soft bins", &T::sbece_bins, R::sbece_bins, {}, false, true, "train"},
      {"sbece_temperature",
       "--sbece-temperature",
       "T > 0: soft-bin temperature (method.md §2)",
       &T::sbece_temperature,
       R::sbece_temperature,
       {},
       false,
       true,
       "train"},
      {"val_fraction",
       "--val-fraction",
       "Share of the training split held out for validation (gcide: the share of documents for validation, and as "
       "many for test)",
       &T::val_fraction,
       RealRange{0.0, 0.999, false},
       {},
       false,
       true,
       "train"},
      {"seed", "--seed", "Seed for initialisation, split, order and augmentation", &T::seed},
      {"threads", "--threads", "Intra-op threads", &T::threads, R::threads, {}, false, false},
      {"device",
       "--device",
       "cpu | cuda (needs a CUDA LibTorch build)",
       &T::device,
       {},
       {"cpu", "cuda"},
       false,
       false,
       "train"},
      {"precision",
       "--precision",
       "fp32 | bf16 | fp16 | auto: autocast dtype of the training forward pass (fp16: cuda only; auto: bf16 where the "
       "CPU computes bf16 natively, else fp32, resolved before the run starts); routing softmax and loss stay fp32",
       &T::precision,
       {},
       {"fp32", "bf16", "fp16", "auto"},
       false,
       true,
       "train"},
      {"world_size",
       "",
       "Data-parallel ranks (from WORLD_SIZE); batch_size is per rank",
       &T::world_size,
       IntRange{1, 65536},
       {},
       false,
       false},
      {"checkpoint_every",
       "--checkpoint-every",
       "Checkpoint every N steps (and every epoch)",
       &T::checkpoint_every,
       R::checkpoint_every,
       {},
       false,
       false,
       "train"},
      {"snapshot_epochs",
       "--snapshot-epochs",
       "Also keep the model after these epochs as RUN/epoch-E/ (config.json, model.pt; comma-separated), e.g. for "
       "arcal run's convergence audit",
       &T::snapshot_epochs,
       R::epochs,
       {},
       false,
       true,
       "train"},
  };
  return table;
}

bool cpu_has_native_bf16() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
#else
  return false;
#endif
}

std::string resolve_precision(const std::string& precision, const std::string& device) {
  if (precision != "auto") return precision;
  return device == "cpu" && cpu_has_native_bf16() ? "bf16" : "fp32";
}

void to_json(nlohmann::json& j, const TrainConfig& c) { j = options_json(train_option_table(), c); }

TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + " must be a JSON object, but is " + json_brief(j));
  // Missing keys keep the defaults (configs of older versions); present ones must have the right
  // type and fit their field exactly; ranges and allowed values as the flags'.
  TrainConfig c;
  options_from_json(train_option_table(), j, c, where);
  return c;
}

void from_json(const nlohmann::json& j, TrainConfig& c) { c = train_config_from_json(j, "train config"); }

void check_train_config(const TrainConfig& c) {
  check_options(train_option_table(), c, "arcal train");
  parse_residual_mode(c.residual);
  if (!(c.sbece_temperature > 0))
    throw_input("--sbece-temperature", std::to_string(c.sbece_temperature) + " must be > 0 (method.md §2)");
  const bool text = c.dataset == "gcide", lm = is_lm_preset(c.model);
  if (text != lm)
    throw_input("--model",
                text ? "'" + c.model + "' is an image model; the text corpus gcide trains ar-lm-tiny"
                     : "'" + c.model + "' is a language model; it trains on --dataset gcide, not " + c.dataset);
  if (text && c.patch > 0) throw_input("--patch", "applies to the ViT presets, not the language model");
  if (text && !(c.val_fraction > 0 && c.val_fraction <= 0.25))
    throw_input("val_fraction",
                std::to_string(c.val_fraction) +
                    ": the text corpus needs a fraction in (0, 0.25] of its documents (test takes as many)");
  if (c.precision == "fp16" && c.device != "cuda")
    throw_input("--precision", "fp16 autocast needs --device cuda (LibTorch's CPU autocast runs bf16 only); use bf16");
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
  static const std::vector<std::string> keys = {"epochs",           "max_steps",    "lr",         "weight_decay",
                                                "warmup_fraction",  "sbece_weight", "sbece_bins", "sbece_temperature",
                                                "checkpoint_every", "device",       "precision",  "data_dir"};
  return keys;
}

}  // namespace arcal
