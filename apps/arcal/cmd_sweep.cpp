// arcal sweep: the training grid of a study (run/study_file.hpp) at scale, without the trace/audit stages
// of `arcal run`. Lists the runs with their `arcal train` command lines (--list), sizes them
// (--dry-run: parameters and MACs per image of each), and trains all of them or one (--index I, e.g.
// a Slurm array task) as child `arcal train` processes that inherit the environment, so each run is
// data-parallel under torchrun/Slurm when RANK/WORLD_SIZE are set. Runs live in DIR/runs/<id>-<hash>,
// the layout of `arcal run`, so a later `arcal run` on the same study finds them trained.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <thread>

#include "command.hpp"
#include "option_binding.hpp"
#include "torch_commands.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/paths.hpp"
#include "core/subprocess.hpp"
#include "run/study_file.hpp"
#include "train/distributed.hpp"
#include "train/trainer.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;

struct SweepOptions {
  std::string config, out, device, precision;  ///< "" = the study's [train] device / precision
  int index = -1, threads = 0;
  bool list = false, dry_run = false, json = false;
};

std::string threads_of(const SweepOptions& o, int study_threads) {
  return std::to_string(o.threads > 0 ? o.threads : study_threads);
}

/// The run with the sweep's execution settings. --precision changes the numbers a run produces, so
/// it enters the run's identity hash (and directory); device and threads do not (train_option_table).
arcal::StudyRun with_execution(arcal::StudyRun r, const SweepOptions& o, int study_threads) {
  if (!o.device.empty()) r.config.device = o.device;
  if (!o.precision.empty()) r.config.precision = arcal::resolve_precision(o.precision, r.config.device);
  r.config.threads = o.threads > 0 ? o.threads : study_threads;
  r.hash = arcal::options_hash(arcal::train_option_table(), r.config);
  return r;
}

std::string quote(const std::string& a) {
  if (a.find_first_of(" \t'\"$\\") == std::string::npos && !a.empty()) return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string status_of(const std::string& dir) {
  if (fs::exists(dir + "/summary.json")) return "trained";
  if (fs::exists(dir + "/checkpoint.pt")) return "checkpoint";
  return "to train";
}

int train_child(const std::vector<std::string>& args) {
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) arcal::throw_input("arcal sweep", "cannot locate the arcal executable (/proc/self/exe): " + ec.message());
  std::vector<std::string> argv_s{exe.string()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The child in its own process group: SIGINT/SIGTERM reach the sweep, which forwards them once.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  auto env = arcal::child_environment();  // the inherited environment, and the child dies with us
  const int rc = posix_spawn(&pid, argv_s[0].c_str(), nullptr, &attr, argv.data(), env.envp());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) throw std::runtime_error("arcal sweep: cannot start arcal train: " + std::string(std::strerror(rc)));
  int status = 0;
  bool forwarded = false;
  for (;;) {
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno != EINTR)) break;
    if (arcal::interrupt_requested() && !forwarded) {
      kill(pid, arcal::interrupt_signal());
      forwarded = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int run_sweep(const SweepOptions& o) {
  if (o.config.empty()) arcal::throw_input("--config", "is required: the study TOML whose runs to sweep");
  if (!o.device.empty() && o.device != "cpu" && o.device != "cuda")
    arcal::throw_input("--device", "'" + o.device + "': expected cpu or cuda");
  if (!o.precision.empty() && o.precision != "fp32" && o.precision != "bf16" && o.precision != "fp16" &&
      o.precision != "auto")
    arcal::throw_input("--precision", "'" + o.precision + "': expected fp32, bf16, fp16 or auto");
  const arcal::StudyConfig study = arcal::parse_study_toml(o.config);
  for (const auto& m : study.models)
    if (std::find(arcal::model_presets().begin(), arcal::model_presets().end(), m) == arcal::model_presets().end())
      arcal::throw_input(o.config + ": [model] presets",
                         "'" + m + "' is not a known preset (ar-vit-tiny, ar-deit-small, ar-swin-tiny)");
  const std::string dir = o.out.empty() ? "runs/" + study.name : o.out;
  std::vector<arcal::StudyRun> runs;
  for (const auto& r : arcal::expand_study(study)) runs.push_back(with_execution(r, o, study.threads_per_job));
  if (o.index >= static_cast<int>(runs.size()))
    arcal::throw_input("--index", std::to_string(o.index) + " is outside [0, " + std::to_string(runs.size()) +
                                      ") (the study has " + std::to_string(runs.size()) + " runs; --list shows them)");
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (o.index < 0 || static_cast<int>(i) == o.index) chosen.push_back(i);
  const bool primary = arcal::distributed_env_from_environment().primary();

  if (o.list || o.dry_run) {
    nlohmann::json rows = nlohmann::json::array();
    for (auto i : chosen) {
      const auto& r = runs[i];
      const std::string rd = dir + "/runs/" + r.dir_name();
      nlohmann::json row = {{"index", i},
                            {"id", r.id},
                            {"dir", rd},
                            {"status", status_of(rd)},
                            {"train_args", arcal::options_flags(arcal::train_option_table(), r.config)},
                            {"config", r.config}};
      if (o.dry_run) {
        const auto d = arcal::describe_model(r.config);
        row["parameters"] = d["parameters"];
        row["macs_per_image"] = d["macs_per_image"];
        row["routing_points"] = d["routing_points"];
      }
      rows.push_back(row);
    }
    if (o.json) {
      // An object, not the bare array of earlier versions, so that the output carries its schema.
      const nlohmann::json doc = {
          {"schema", "arcal.sweep/1"}, {"study", study.name},       {"config", o.config}, {"dir", dir},
          {"dry_run", o.dry_run},      {"total_runs", runs.size()}, {"runs", rows}};
      std::cout << doc.dump(2) << "\n";
      return 0;
    }
    std::cout << fmt::format("arcal sweep: study '{}', {} run(s), directory {}\n", study.name, runs.size(), dir);
    for (const auto& row : rows) {
      std::string cmd = "arcal train";
      for (const auto& a : row["train_args"]) cmd += " " + quote(a.get<std::string>());
      cmd += " --out " + quote(row["dir"].get<std::string>());
      std::cout << fmt::format("{:>4}  {:<44} {:<10}", row["index"].get<std::size_t>(), row["id"].get<std::string>(),
                               row["status"].get<std::string>());
      if (o.dry_run)
        std::cout << fmt::format("  {:>11} params  {:>8.3f} GMACs/img  {:>3} routing points",
                                 row["parameters"].get<std::int64_t>(), row["macs_per_image"].get<double>() / 1e9,
                                 row["routing_points"].get<int>());
      std::cout << "\n";
      if (o.list) std::cout << "      " << cmd << "\n";
    }
    return 0;
  }

  // Progress lines go to stderr (--quiet silences them); the last line, the tally, is the result.
  std::ostream& log = arcal::cli::log_stream();
  if (primary)
    log << fmt::format("arcal sweep: study '{}', {} of {} run(s) into {}", study.name, chosen.size(), runs.size(), dir)
        << std::endl;
  arcal::install_interrupt_handlers();
  const std::string resume = "arcal sweep --config " + arcal::shell_quote(o.config) +
                             (o.out.empty() ? "" : " --out " + arcal::shell_quote(o.out)) +
                             (o.index >= 0 ? " --index " + std::to_string(o.index) : "");
  int trained = 0, skipped = 0;
  for (auto i : chosen) {
    if (arcal::interrupt_requested())
      throw arcal::Interrupted(std::string("sweep stopped by ") + arcal::interrupt_signal_name() +
                               "; trained runs are kept. Resume with: " + resume);
    const auto& r = runs[i];
    const std::string rd = dir + "/runs/" + r.dir_name();
    const std::string status = status_of(rd);
    if (status == "trained") {
      ++skipped;
      if (primary) log << fmt::format("[{}] {} trained (skipped)", i, r.id) << std::endl;
      continue;
    }
    std::vector<std::string> args{"train"};
    if (status == "checkpoint") {
      args.insert(args.end(), {"--resume", "--threads", threads_of(o, study.threads_per_job)});
    } else {
      // The run's typed training configuration (the table's JSON), not flag strings.
      fs::create_directories(rd);
      arcal::mark_output_dir(rd, "arcal sweep");  // the child's `arcal train --out RD` finds its marker
      arcal::write_file_atomic(rd + "/train_request.json", nlohmann::json(r.config).dump(1) + "\n");
      args.insert(args.end(), {"--config", rd + "/train_request.json"});
    }
    args.insert(args.end(), {"--out", rd, "--quiet"});
    if (primary)
      log << fmt::format("[{}] {} {}", i, r.id, status == "checkpoint" ? "resuming" : "training") << std::endl;
    const int rc = train_child(args);
    if (rc == 3 || arcal::interrupt_requested())
      throw arcal::Interrupted(std::string("sweep stopped: run ") + std::to_string(i) + " (" + r.id +
                               ") was interrupted and keeps its checkpoint. Resume with: " + resume);
    if (rc != 0) {
      const std::string what = fmt::format(
          "run {} ({}) failed with exit code {}; fix it and rerun the sweep (finished "
          "runs are skipped, interrupted ones resume)",
          i, r.id, rc);
      if (rc == 2) arcal::throw_input("arcal sweep", what);  // its input: exit 2 here too
      throw std::runtime_error("arcal sweep: " + what);
    }
    ++trained;
  }
  if (primary) std::cout << fmt::format("arcal sweep: {} trained, {} already trained\n", trained, skipped);
  return 0;
}

/// Every option of `arcal sweep` (docs/interface.md "Command options", generated).
const arcal::OptionTable<SweepOptions>& sweep_options() {
  using C = SweepOptions;
  using O = arcal::Option<C>;
  static const arcal::OptionTable<C> table = {
      O("config", "--config", "Study TOML (arcal run's format); its datasets x presets x modes x seeds", &C::config)
          .given(),
      {"out", "--out", "Study directory (default: runs/NAME, as arcal run)", &C::out},
      {"list", "--list", "List the runs, their status and their arcal train command lines; train nothing", &C::list},
      {"dry_run", "--dry-run", "List the runs with parameters and MACs per image; train nothing", &C::dry_run},
      {"index", "--index",
       "Train only run I (0-based, as --list numbers them; e.g. $SLURM_ARRAY_TASK_ID; -1, the default: every run)",
       &C::index, arcal::IntRange{0, 1000000}},
      {"device", "--device", "cpu | cuda, replacing the study's [train] device for every training", &C::device},
      {"precision", "--precision",
       "fp32 | bf16 | fp16 | auto, replacing the study's [train] precision for every training (enters the run hash)",
       &C::precision},
      {"threads", "--threads", "Intra-op threads per training (0 = the study's threads_per_job)", &C::threads,
       arcal::IntRange{0, arcal::ranges::threads.hi}},
      {"json", "--json", "With --list/--dry-run: print the runs as one JSON object (schema arcal.sweep/1)", &C::json},
  };
  return table;
}

arcal::cli::RunFn setup(CLI::App& app) {
  auto o = std::make_shared<SweepOptions>();
  arcal::cli::bind_options(app, sweep_options(), *o);
  return [o]() { return run_sweep(*o); };
}

}  // namespace

ARCAL_COMMAND("sweep", arcal::cli::torch_command_description("sweep"), setup);
