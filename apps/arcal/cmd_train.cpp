// arcal train: one option table filled into TrainConfig, the resolved configuration printed as a
// table, then the library's train_run with a progress bar. The table, the evaluation lines and the
// bar are log output (stderr, silenced by --quiet); stdout carries the result: one line, or with
// --json summary.json only.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "command.hpp"
#include "torch_commands.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/paths.hpp"
#include "core/progress.hpp"
#include "core/text_input.hpp"
#include "option_binding.hpp"
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
                           d["routing_macs_per_image"].get<double>() / 1e9,
                           d["attention_macs_per_image"].get<double>() / 1e9);
  return 0;
}

int run_train(const TrainConfig& cfg, const std::string& out, bool resume, bool json, const std::string& progress_file,
              const arcal::ResumeRequest& request, const arcal::TraceRequest& trace) {
  const auto dist = arcal::distributed_env_from_environment();
  if (!resume) arcal::validate_train_config(cfg);  // flag errors before the configuration table
  if (!trace.path.empty()) {  // before training: a trace that cannot be written must not cost a training
    if (trace.split != "test" && trace.split != "val")
      arcal::throw_input("--trace-split", "'" + trace.split + "': expected test or val");
    arcal::check_output_not_input("--trace", trace.path, arcal::run_directory_files(out));
    arcal::check_output_file("--trace", trace.path, false);
  }
  // SIGINT/SIGTERM stop training at the next step with a checkpoint (exit 3, with the resume command).
  arcal::install_interrupt_handlers();
  if (!dist.primary()) {  // rank > 0: train silently; rank 0 prints and writes
    arcal::train_run(cfg, out, resume, {}, request, trace);
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
    summary = arcal::train_run(cfg, out, resume, ev, request, trace);
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
    if (!trace.path.empty()) std::cout << "wrote " << trace.path << " (" << trace.split << " trace)\n";
    std::cout << "wrote " << out << "/summary.json\n";
  }
  return 0;
}

/// `arcal train`'s own options (beside the training family's table and the trace request).
struct TrainCli {
  std::string config_file, out, progress_file;
  std::vector<std::string> overrides;
  bool dry_run = false, resume = false, json = false;
};

/// The command's own options (docs/interface.md "Command options", generated).
const arcal::OptionTable<TrainCli>& train_cli_options() {
  using C = TrainCli;
  static const arcal::OptionTable<C> table = {
      {"config", "--config",
       "Start from this typed training configuration (JSON keyed like RUN/config.json's \"train\"; arcal run and "
       "sweep pass runs this way); flags given as well override its values",
       &C::config_file},
      {"override", "--override",
       "With --resume: the settings (flag names without dashes, comma-separated: lr,epochs,...) whose new values "
       "given on this command line replace the run's from its checkpoint on; recorded in config.json. Without it a "
       "resume with a changed setting is refused",
       &C::overrides},
      {"out", "--out", "Run directory RUN/ (not needed with --dry-run)", &C::out},
      {"progress_file", "--progress-file",
       "Write 'step total' to this file about once a second (for arcal run's combined progress bar)",
       &C::progress_file},
      {"dry_run", "--dry-run", "Print the resolved model, its parameter count and FLOPs per image; train nothing",
       &C::dry_run},
      {"resume", "--resume", "Continue an interrupted run in --out from its checkpoint", &C::resume},
      {"json", "--json", "Print summary.json at the end (stdout holds nothing else; logs go to stderr)", &C::json},
  };
  return table;
}

/// The trace written after training (--trace; train/trainer.hpp TraceRequest).
const arcal::OptionTable<arcal::TraceRequest>& trace_request_options() {
  using C = arcal::TraceRequest;
  static const arcal::OptionTable<C> table = {
      {"trace", "--trace",
       "After training, also write the trace file `arcal trace --run RUN --out FILE` would write, from the model in "
       "memory (on the test split the same pass gives summary.json's test metrics); refused if FILE exists",
       &C::path},
      {"trace_split", "--trace-split", "With --trace: test | val", &C::split},
      {"trace_sequences", "--trace-sequences",
       "With --trace on a language-model run: trace this many evenly spaced sequences of the split (0 = all)",
       &C::sequences, arcal::IntRange{0, std::int64_t{1} << 30}},
  };
  return table;
}

arcal::cli::RunFn setup(CLI::App& app) {
  auto cfg = std::make_shared<TrainConfig>();
  // Every training option from the training family's table (train/train_config.hpp); `given` maps
  // each training setting to its option so that --resume can tell which ones the command line sets.
  auto given = std::make_shared<std::vector<std::pair<std::string, CLI::Option*>>>(arcal::cli::bind_options(
      app, arcal::train_option_table(), *cfg, "the training family (\"Training options\" above)"));
  auto cli = std::make_shared<TrainCli>();
  arcal::cli::bind_options(app, train_cli_options(), *cli);
  auto trace = std::make_shared<arcal::TraceRequest>();
  arcal::cli::bind_options(app, trace_request_options(), *trace);
  return [=]() {
    std::vector<std::string> file_keys;  // every setting --config gives: a resume compares them too
    if (!cli->config_file.empty()) {
      // The file's values, then every flag given on the command line on top.
      const nlohmann::json file_json = arcal::read_json_file(cli->config_file, "arcal train", "--config");
      if (file_json.is_object())
        for (const auto& item : file_json.items()) file_keys.push_back(item.key());
      arcal::TrainConfig from_file = arcal::train_config_from_json(file_json, cli->config_file);
      for (const auto& [key, option] : *given) {
        if (option->count() == 0) continue;
        for (const auto& row : arcal::train_option_table())
          if (row.key == key) std::visit([&](auto member) { from_file.*member = (*cfg).*member; }, row.field);
      }
      *cfg = from_file;
    }
    if (cli->dry_run) return run_dry(*cfg, cli->json);
    if (cli->out.empty()) arcal::throw_input("--out", "is required (the run directory), except with --dry-run");
    arcal::ResumeRequest request;
    for (const auto& [key, option] : *given)
      if (option->count() > 0) request.given.push_back(key);
    // A resume compares every source of configuration: a setting changed in the --config file is a
    // change like the same flag (it used to be kept silently at the run's value).
    for (const auto& k : file_keys)
      if (std::find(request.given.begin(), request.given.end(), k) == request.given.end()) request.given.push_back(k);
    for (auto k : cli->overrides) {
      for (auto& ch : k)
        if (ch == '-') ch = '_';  // --override max-steps and max_steps both name max_steps
      if (!k.empty()) request.overrides.push_back(k);
    }
    if (!request.overrides.empty() && !cli->resume) arcal::throw_input("--override", "only applies with --resume");
    return run_train(*cfg, cli->out, cli->resume, cli->json, cli->progress_file, request, *trace);
  };
}

}  // namespace

ARCAL_COMMAND("train", arcal::cli::torch_command_description("train"), setup);
