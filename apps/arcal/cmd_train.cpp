// arcal train: one option table filled into TrainConfig, the resolved configuration printed as a
// table, then the library's train_run with a progress bar. The table, the evaluation lines and the
// bar are log output (stderr, silenced by --quiet); stdout carries the result: one line, or with
// --json summary.json only.
#include <fmt/format.h>

#include <chrono>
#include <iostream>

#include "command.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/progress.hpp"
#include "flag_checks.hpp"
#include "train/distributed.hpp"
#include "train/trainer.hpp"

namespace {

using arcal::TrainConfig;

/// Writes "step total" to path (atomically), at most once a second and at the last step, so a parent
/// process (arcal run) can draw one progress bar over several trainings.
void report_progress(const std::string& path, std::int64_t step, std::int64_t total) {
  static auto last = std::chrono::steady_clock::time_point{};
  const auto now = std::chrono::steady_clock::now();
  if (path.empty() || (step < total && now - last < std::chrono::seconds(1))) return;
  last = now;
  arcal::write_file_atomic(path, std::to_string(step) + " " + std::to_string(total) + "\n");
}

/// `schema` of `arcal train --dry-run --json` (docs/schema/train_dry_run.schema.json).
constexpr const char* kDryRunSchema = "arcal.train_dry_run/1";

int run_dry(const TrainConfig& cfg, bool json) {
  auto d = arcal::describe_model(cfg);
  if (json) {
    d["schema"] = kDryRunSchema;
    std::cout << d.dump(2) << "\n";
    return 0;
  }
  const auto& m = d["model"];
  std::cout << "arcal train --dry-run: nothing is trained or written\n";
  for (auto& [k, v] : m.items()) std::cout << fmt::format("  {:<18} {}\n", k, v.dump());
  std::cout << fmt::format("  {:<18} {}\n", "input", d["input"].dump());
  std::cout << fmt::format("  {:<18} {}\n", "routing points", d["routing_points"].get<int>());
  std::cout << fmt::format("parameters        {:>14}  ({:.2f} M)\n", d["parameters"].get<std::int64_t>(),
                           d["parameters"].get<double>() / 1e6);
  std::cout << fmt::format("MACs per image    {:>14.0f}  ({:.3f} G; the DeiT/Swin papers' \"FLOPs\")\n",
                           d["macs_per_image"].get<double>(), d["macs_per_image"].get<double>() / 1e9);
  std::cout << fmt::format("FLOPs per image   {:>14.0f}  ({:.3f} G = 2 x MACs)\n", d["flops_per_image"].get<double>(),
                           d["flops_per_image"].get<double>() / 1e9);
  std::cout << fmt::format("  of which routing {:.4f} G MACs, attention products {:.4f} G MACs\n",
                           d["routing_macs_per_image"].get<double>() / 1e9, d["attention_macs_per_image"].get<double>() / 1e9);
  return 0;
}

int run_train(const TrainConfig& cfg, const std::string& out, bool resume, bool json, const std::string& progress_file,
              const arcal::ResumeRequest& request) {
  const auto dist = arcal::distributed_env_from_environment();
  if (!resume) arcal::validate_train_config(cfg);  // flag errors before the configuration table
  // SIGINT/SIGTERM stop training at the next step with a checkpoint (exit 3, with the resume command).
  arcal::install_interrupt_handlers();
  if (!dist.primary()) {  // rank > 0: train silently; rank 0 prints and writes
    arcal::train_run(cfg, out, resume, {}, request);
    return 0;
  }
  std::ostream& log = arcal::cli::log_stream();
  log << "arcal train: " << (resume ? "resuming " : "") << out
      << (dist.active() ? fmt::format(" (rank 0 of {})", dist.world_size) : std::string()) << "\n";
  nlohmann::json j = cfg;
  if (!resume)
    for (auto& [k, v] : j.items()) log << fmt::format("  {:<18} {}\n", k, v.dump());
  log.flush();
  std::unique_ptr<arcal::ProgressBar> bar;
  arcal::TrainEvents ev;
  ev.on_message = [&log](const std::string& s) { log << s << std::endl; };
  ev.on_step = [&](std::int64_t step, std::int64_t total, int epoch, double loss, double acc, double ips) {
    report_progress(progress_file, step, total);
    if (!bar) bar = arcal::cli::stderr_progress_bar("train", total);
    bar->update(step, fmt::format("ep {} loss {:.3f} acc {:.3f} {:.0f} img/s", epoch + 1, loss, acc, ips));
  };
  ev.on_eval = [&](const nlohmann::json& rec) {
    if (arcal::cli::progress_enabled_on(STDERR_FILENO)) log << "\n";
    log << fmt::format("  step {:>6} epoch {:>5.2f}  train loss {:.4f}  val acc {:.4f}  val nll {:.4f}  val ece {:.4f}",
                       rec["step"].get<std::int64_t>(), rec["epoch"].get<double>(), rec["train_loss"].get<double>(),
                       rec["val_accuracy"].get<double>(), rec["val_nll"].get<double>(), rec["val_ece"].get<double>())
        << std::endl;
  };
  nlohmann::json summary;
  try {
    summary = arcal::train_run(cfg, out, resume, ev, request);
  } catch (const arcal::Interrupted&) {
    if (bar) bar->finish();
    throw;
  }
  if (bar) bar->finish();
  if (json) {
    std::cout << summary.dump(2) << "\n";
  } else {
    std::cout << fmt::format("test accuracy {:.4f}  NLL {:.4f}  ECE-15 {:.4f}  (n = {})  {:.0f} s, {:.0f} img/s\n",
                             summary["test_accuracy"].get<double>(), summary["test_nll"].get<double>(),
                             summary["test_ece15"].get<double>(), summary["test_n"].get<std::int64_t>(),
                             summary["wall_seconds"].get<double>(), summary["images_per_second"].get<double>());
    std::cout << "wrote " << out << "/summary.json\n";
  }
  return 0;
}

arcal::cli::RunFn setup(CLI::App& app) {
  auto cfg = std::make_shared<TrainConfig>();
  auto out = std::make_shared<std::string>();
  auto resume = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  auto dry = std::make_shared<bool>(false);
  auto progress_file = std::make_shared<std::string>();
  // Every numeric flag carries its range (core/limits.hpp); `given` maps each training setting to
  // its option so that --resume can tell which ones the command line sets.
  using arcal::cli::in_range;
  namespace R = arcal::ranges;
  auto given = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>();
  auto opt = [&](const char* key, CLI::Option* o) {
    given->push_back({key, o});
    return o;
  };
  auto dataset = app.add_option("--dataset", cfg->dataset, "fashion-mnist | cifar10 | cifar100")->capture_default_str();
  auto data_dir = app.add_option("--data-dir", cfg->data_dir,
                 "Dataset directory (default for fashion-mnist: /usr/share/datasets/fashion-mnist; CIFAR: the "
                 "extracted cifar-10-batches-bin or cifar-100-binary folder)");
  auto model = app.add_option("--model", cfg->model, "Preset: ar-vit-tiny | ar-deit-small | ar-swin-tiny")->capture_default_str();
  auto residual = app.add_option("--residual", cfg->residual, "full | block | standard")->capture_default_str();
  given->push_back({"dataset", dataset});
  given->push_back({"data_dir", data_dir});
  given->push_back({"model", model});
  given->push_back({"residual", residual});
  opt("patch", app.add_option("--patch", cfg->patch,
                              "Patch size of the ViT presets instead of the preset's (0 = the preset's; 2 on 28x28 "
                              "gives 197 tokens)"))
      ->capture_default_str()->check(in_range(R::patch));
  opt("block_size", app.add_option("--block-size", cfg->block_size, "Block AttnRes block size S in sublayers"))
      ->capture_default_str()->check(in_range(R::block_size));
  opt("epochs", app.add_option("--epochs", cfg->epochs, "Training epochs"))->capture_default_str()->check(in_range(R::epochs));
  opt("max_steps", app.add_option("--max-steps", cfg->max_steps, "Stop after this many optimizer steps (0 = no cap)"))
      ->capture_default_str()->check(in_range(R::max_steps));
  opt("train_subset", app.add_option("--train-subset", cfg->train_subset, "Use only this many training examples (0 = all)"))
      ->capture_default_str()->check(in_range(R::train_subset));
  opt("batch_size", app.add_option("--batch-size", cfg->batch_size, "Batch size (per rank when WORLD_SIZE > 1)"))
      ->capture_default_str()->check(in_range(R::batch_size));
  opt("lr", app.add_option("--lr", cfg->lr, "AdamW peak learning rate"))->capture_default_str()->check(in_range(R::lr));
  opt("weight_decay", app.add_option("--weight-decay", cfg->weight_decay, "AdamW weight decay"))
      ->capture_default_str()->check(in_range(R::weight_decay));
  opt("warmup_fraction", app.add_option("--warmup-fraction", cfg->warmup_fraction, "Linear warm-up as a fraction of all steps"))
      ->capture_default_str()->check(in_range(R::warmup_fraction));
  opt("sbece_weight", app.add_option("--sbece-weight", cfg->sbece_weight, "beta: weight of the soft-binned ECE term"))
      ->capture_default_str()->check(in_range(R::sbece_weight));
  opt("sbece_bins", app.add_option("--sbece-bins", cfg->sbece_bins, "M: soft bins"))->capture_default_str()->check(in_range(R::sbece_bins));
  opt("sbece_temperature", app.add_option("--sbece-temperature", cfg->sbece_temperature, "T > 0: soft-bin temperature"))
      ->capture_default_str();  // its range is checked by the library, whose message cites method.md
  opt("seed", app.add_option("--seed", cfg->seed, "Seed for initialisation, split, order and augmentation"))
      ->capture_default_str()->check(arcal::cli::seed_check());
  opt("device", app.add_option("--device", cfg->device, "cpu | cuda (needs a CUDA LibTorch build)"))->capture_default_str();
  opt("precision", app.add_option("--precision", cfg->precision,
                                  "fp32 | bf16 | fp16: autocast dtype of the training forward pass (fp16: cuda only); "
                                  "routing softmax and loss stay fp32"))
      ->capture_default_str();
  opt("threads", app.add_option("--threads", cfg->threads, "Intra-op threads"))->capture_default_str()->check(in_range(R::threads));
  opt("checkpoint_every", app.add_option("--checkpoint-every", cfg->checkpoint_every, "Checkpoint every N steps (and every epoch)"))
      ->capture_default_str()->check(in_range(R::checkpoint_every));
  opt("norm_eps", app.add_option("--norm-eps", cfg->norm_eps, "Epsilon of every LayerNorm/RMSNorm"))
      ->capture_default_str()->check(in_range(R::norm_eps));
  auto overrides = std::make_shared<std::vector<std::string>>();
  app.add_option("--override", *overrides,
                 "With --resume: the settings (flag names without dashes, comma-separated: lr,epochs,...) whose new "
                 "values given on this command line replace the run's from its checkpoint on; recorded in config.json. "
                 "Without it a resume with a changed setting is refused")
      ->delimiter(',');
  app.add_option("--out", *out, "Run directory RUN/ (not needed with --dry-run)");
  app.add_option("--progress-file", *progress_file,
                 "Write 'step total' to this file about once a second (for arcal run's combined progress bar)");
  app.add_flag("--dry-run", *dry, "Print the resolved model, its parameter count and FLOPs per image; train nothing");
  app.add_flag("--resume", *resume, "Continue an interrupted run in --out from its checkpoint");
  app.add_flag("--json", *json, "Print summary.json at the end (stdout holds nothing else; logs go to stderr)");
  return [=]() {
    if (*dry) return run_dry(*cfg, *json);
    if (out->empty()) arcal::throw_input("--out", "is required (the run directory), except with --dry-run");
    arcal::ResumeRequest request;
    for (const auto& [key, option] : *given)
      if (option->count() > 0) request.given.push_back(key);
    for (auto k : *overrides) {
      for (auto& ch : k)
        if (ch == '-') ch = '_';  // --override max-steps and max_steps both name max_steps
      if (!k.empty()) request.overrides.push_back(k);
    }
    if (!request.overrides.empty() && !*resume) arcal::throw_input("--override", "only applies with --resume");
    return run_train(*cfg, *out, *resume, *json, *progress_file, request);
  };
}

}  // namespace

ARCAL_COMMAND("train", "Train one AttnRes (or standard-residual) vision transformer", setup);
