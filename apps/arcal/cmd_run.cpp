// arcal run: a whole study as one resumable job. Expands the study (run/study_file.hpp) into training
// runs; trains them `parallel` at a time as child `arcal train` processes (one progress bar over all,
// fed by each child's --progress-file; each child also writes its run's trace), computes every run's
// calibration metrics, runs `arcal audit` over the AttnRes traces, writes DIR/results.json (the
// audit's results plus a "study" section) and renders the report (report/report.hpp). Every stage is
// keyed by a hash of what it depends on, so a re-run skips what is complete, an interrupted training
// resumes from its checkpoint, and a changed setting goes to a new directory instead of overwriting
// old results.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <sstream>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <mutex>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "calib/metrics.hpp"
#include "calib/trace_metrics.hpp"
#include "calib/report_json.hpp"
#include "audit/audit.hpp"
#include "results/audit_files.hpp"
#include "audit/run_input.hpp"
#include "audit/audit_pipeline.hpp"
#include "results/audit_json.hpp"
#include "results/read.hpp"
#include "results/study_section.hpp"
#include "results/train_json.hpp"
#include "command.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/job_pool.hpp"
#include "core/ownership.hpp"
#include "core/paths.hpp"
#include "core/progress.hpp"
#include "core/run_lock.hpp"
#include "core/subprocess.hpp"
#include "option_binding.hpp"
#include "io/trace.hpp"
#include "report/report.hpp"
#include "run/study_file.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;

/// The command that resumes this invocation (printed when it is interrupted).
std::string g_resume_command = "arcal run";

[[noreturn]] void interrupted(const std::string& what) {
  throw arcal::Interrupted(std::string("run stopped by ") + arcal::interrupt_signal_name() + " " + what +
                           "; finished runs and checkpoints are kept. Resume with: " + g_resume_command);
}

/// The running executable, as a path the children can exec even when build/arcal is rebuilt (the
/// link resolves to the running binary's own inode, deleted or not).
std::string self_exe() {
  if (!fs::exists("/proc/self/exe"))
    arcal::throw_input("arcal run", "cannot locate the arcal executable (/proc/self/exe)");
  return "/proc/self/exe";
}

struct RunOptions {
  std::string config, out;
  bool print_config = false;
  int parallel = 0;
  bool no_report = false;
};

/// The child `arcal trace` of a run directory (a trained run or a snapshot) into `out`, with the study's
/// split, threads and sequences; its log beside the run (RUN/trace.log).
arcal::Job trace_job(const arcal::StudyConfig& st, const std::string& run_dir, const std::string& out,
                     std::string label) {
  arcal::Job j;
  j.label = std::move(label);
  j.args = {"trace",
            "--run",
            run_dir,
            "--split",
            st.split,
            "--out",
            out,
            "--threads",
            std::to_string(st.threads_per_job),
            "--sequences",
            std::to_string(st.trace_sequences),
            "--quiet"};
  j.log = run_dir + "/trace.log";
  return j;
}

/// DIR/PREFIX-HASH8: an audit directory keyed by the study's typed audit options and the trace paths.
std::string audit_dir_for(const std::string& dir, const std::string& prefix, const arcal::StudyConfig& st,
                          const std::vector<std::string>& traces) {
  std::string key = arcal::study_audit_hash(st);
  for (const auto& t : traces) key += '\0' + t;
  return dir + "/" + prefix + "-" + arcal::stable_hash(key).substr(0, 8);
}

/// The audit of `traces` into audit_dir, in this process (the library call `arcal audit` makes). A
/// complete audit of this schema is read back (results/read.hpp); one of an earlier arcal is redone.
/// `what` names the audit in the progress lines. A first SIGINT/SIGTERM is honoured when the audit
/// returns (it restarts on resume); a second exits.
arcal::AuditResults audit_traces_into(const arcal::StudyConfig& st, const std::vector<std::string>& traces,
                                      const std::string& audit_dir, bool bars, const std::string& what) {
  const std::string path = audit_dir + "/results.json";
  if (fs::exists(path)) {
    const std::string text = arcal::read_file(path);
    const auto prior = nlohmann::json::parse(text, nullptr, false);
    if (prior.is_object() && prior.value("schema", "") == arcal::kAuditSchema) {
      std::cout << "  " << what << " " << audit_dir << " complete (skipped)\n";
      return arcal::read_results(text, path).audit;
    }
    std::cout << "  " << what << " " << audit_dir << " was written by an earlier arcal: re-running it\n";
  }
  std::cout << fmt::format("{}: {} traces; sensitivity {}, exact null {} ({} replicates)\n", what, traces.size(),
                           st.audit.sensitivity ? "on" : "off", st.audit.exact_null ? "on" : "off",
                           st.audit.null_replicates);
  std::cout.flush();
  if (arcal::interrupt_requested()) interrupted("before the " + what);
  arcal::FullAuditOptions ao = st.audit;
  ao.progress = bars;
  std::vector<arcal::AuditRunInput> inputs;
  for (const auto& t : traces) inputs.push_back(arcal::make_audit_run_input(arcal::load_trace(t), t, ao.stats));
  const auto res = arcal::run_full_audit(std::move(inputs), ao);
  if (arcal::interrupt_requested()) interrupted("during the " + what + " (it restarts on resume)");
  arcal::write_audit_results(res, audit_dir);
  return res;
}

/// One point of the convergence audit from its audit: accuracy mean and sample sd over the audited runs
/// (the audit's run summaries), the verdict.
arcal::ConvergencePoint convergence_point(std::uint64_t epoch, const arcal::AuditResults& res,
                                          const std::string& audit_dir) {
  arcal::ConvergencePoint p;
  p.epoch = epoch;
  p.runs = res.run_summaries.size();
  double m = 0, v = 0;
  for (const auto& r : res.run_summaries) m += r.accuracy / double(p.runs);
  for (const auto& r : res.run_summaries) v += (r.accuracy - m) * (r.accuracy - m);
  p.accuracy_mean = m;
  p.accuracy_sd = p.runs > 1 ? std::sqrt(v / double(p.runs - 1)) : std::nan("");
  p.audit_dir = fs::path(audit_dir).filename().string();
  p.verdict = res.verdict;
  return p;
}

/// The convergence audit ([train] snapshot_epochs): each audited run's snapshot RUN/epoch-E is traced
/// and the snapshots of one epoch audited together (DIR/audit-epoch-E-HASH8), with the same options as
/// the final audit. Returns one point per snapshot epoch below the study's last, in epoch order.
std::vector<arcal::ConvergencePoint> audit_snapshots(const arcal::StudyConfig& st,
                                                     const std::vector<arcal::StudyRun>& runs, const std::string& dir,
                                                     const std::string& exe, bool bars) {
  std::vector<std::uint64_t> epochs = st.train.snapshot_epochs;
  std::sort(epochs.begin(), epochs.end());
  epochs.erase(std::unique(epochs.begin(), epochs.end()), epochs.end());
  std::vector<arcal::ConvergencePoint> points;
  for (const auto e : epochs) {
    if (e >= std::uint64_t(st.train.epochs)) continue;  // the final models are the last point
    const std::string sub = "epoch-" + std::to_string(e);
    std::vector<arcal::Job> jobs;
    std::vector<std::string> traces;
    for (const auto& r : runs) {
      if (!r.audited) continue;
      const std::string snap = dir + "/runs/" + r.dir_name() + "/" + sub;
      if (!fs::exists(snap + "/model.pt"))
        arcal::throw_input("arcal run", snap + "/model.pt does not exist: run " + r.id +
                                            " kept no snapshot after epoch " + std::to_string(e));
      const std::string tf = snap + "/" + st.split + ".npz";
      traces.push_back(tf);
      if (fs::exists(tf)) continue;
      jobs.push_back(trace_job(st, snap, tf, "trace " + r.id + " " + sub));
    }
    arcal::run_jobs(exe, jobs, st.parallel, "trace " + sub, bars, "arcal run", g_resume_command);
    const std::string audit_dir = audit_dir_for(dir, "audit-" + sub, st, traces);
    const auto res =
        audit_traces_into(st, traces, audit_dir, bars, "convergence audit after epoch " + std::to_string(e));
    auto p = convergence_point(e, res, audit_dir);
    points.push_back(std::move(p));
  }
  return points;
}

/// The trainings of a study as one job queue (run_jobs): the audited runs first, then the standard
/// twins. Each training writes its run's trace (arcal train --trace); a run trained before without
/// its trace gets a trace job. Completed trainings and traces are left out (a re-run resumes).
/// audit_traces gets the audited runs' trace paths and audit_jobs the jobs the audit waits for.
std::vector<arcal::Job> study_jobs(const arcal::StudyConfig& st, const std::vector<arcal::StudyRun>& runs,
                                   const std::string& dir, std::vector<std::string>& audit_traces,
                                   std::vector<std::size_t>& audit_jobs) {
  std::vector<arcal::Job> jobs;
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& r : runs) {
      if (r.audited != (pass == 0)) continue;
      const std::string rd = dir + "/runs/" + r.dir_name();
      const std::string tf = rd + "/" + st.split + ".npz";
      if (r.audited) audit_traces.push_back(tf);
      const bool done = fs::exists(rd + "/summary.json");
      const bool resume = !done && fs::exists(rd + "/config.json");
      std::cout << fmt::format("  {:<44} {}\n", r.dir_name(),
                               done     ? "trained (skipped)"
                               : resume ? "resuming"
                                        : "to train");
      if (!done) {
        fs::create_directories(rd);
        arcal::mark_output_dir(rd, "arcal run");  // the child's `arcal train --out RD` finds its marker
        // The child reads the run's typed training configuration (the table's JSON), not flag strings.
        arcal::write_file_atomic(rd + "/train_request.json", nlohmann::json(r.config).dump(1) + "\n");
        arcal::Job j;
        j.label = "train " + r.id;
        // Not --quiet: train.log keeps the configuration and evaluation lines (bars are off on a file).
        j.args = {"train", "--config",        rd + "/train_request.json", "--out",
                  rd,      "--progress-file", rd + "/progress.txt"};
        if (resume) j.args.push_back("--resume");
        // The training writes the run's trace itself (arcal train --trace): no process, data load or
        // model load of its own, and on the test split one forward pass serves the summary and the trace.
        if (!fs::exists(tf))
          j.args.insert(j.args.end(), {"--trace", tf, "--trace-split", st.split, "--trace-sequences",
                                       std::to_string(st.trace_sequences)});
        j.log = rd + "/train.log";
        j.progress = rd + "/progress.txt";
        if (r.audited) audit_jobs.push_back(jobs.size());
        jobs.push_back(j);
      }
      if (!done || fs::exists(tf)) continue;  // traced by its training, or already traced
      // A run trained before (an earlier arcal run, or one stopped between training and trace).
      if (r.audited) audit_jobs.push_back(jobs.size());
      jobs.push_back(trace_job(st, rd, tf, "trace " + r.id));
    }
  return jobs;
}

int run_study(const RunOptions& o) {
  const arcal::StudyConfig study = o.config.empty() ? arcal::default_study() : arcal::parse_study_toml(o.config);
  arcal::StudyConfig st = study;
  if (o.parallel > 0) st.parallel = o.parallel;
  arcal::validate_study(st);
  const std::string toml = arcal::study_to_toml(st);
  if (o.print_config) {
    std::cout << toml;
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = o.out.empty() ? "runs/" + st.name : o.out;
  g_resume_command = "arcal run" + (o.config.empty() ? std::string() : " --config " + arcal::shell_quote(o.config)) +
                     " --out " + arcal::shell_quote(dir) +
                     (o.parallel > 0 ? " --parallel " + std::to_string(o.parallel) : "") +
                     (o.no_report ? " --no-report" : "");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    arcal::throw_input("--out", dir + " exists and is not a directory");
  // The study file may be DIR/study.toml itself only when it is already the resolved study (then
  // rewriting it changes nothing); any other file arcal run writes is never an input.
  if (!o.config.empty() && (arcal::same_file(o.config, dir + "/results.json") ||
                            (arcal::same_file(o.config, dir + "/study.toml") && arcal::read_file(o.config) != toml)))
    arcal::throw_input("--config",
                       o.config + " is a file arcal run rewrites in " + dir + "; copy it elsewhere and pass the copy");
  // DIR is arcal's only if arcal made it (the marker; a study directory of an arcal made before the
  // marker has runs/ and study.toml): a user's directory, with a study.toml of its own, is refused.
  if (!(fs::is_directory(dir + "/runs", ec) && fs::exists(dir + "/study.toml", ec)))
    arcal::check_output_dir("--out", dir, "arcal run", false, "");
  fs::create_directories(dir + "/runs", ec);
  if (ec) arcal::throw_input("--out", "cannot create " + dir + "/runs: " + ec.message());
  arcal::mark_output_dir(dir, "arcal run");
  // One arcal run per study directory (each training child also locks its own run directory).
  const arcal::DirLock lock(dir, "arcal run");
  const std::string study_hash = arcal::stable_hash(toml);
  arcal::write_file_atomic(dir + "/study.toml", toml);
  const std::string exe = self_exe();
  const bool bars = arcal::cli::progress_enabled();
  arcal::install_interrupt_handlers();

  const auto runs = arcal::expand_study(st);
  std::size_t audited = 0;
  for (const auto& r : runs) audited += r.audited;
  std::cout << fmt::format("arcal run: study '{}' ({}), {} runs ({} AttnRes audited, {} standard twins) -> {}\n",
                           st.name, o.config.empty() ? "embedded default" : o.config, runs.size(), audited,
                           runs.size() - audited, dir);
  std::cout << fmt::format("  study hash {}; {} at a time, {} thread(s) each\n", study_hash, st.parallel,
                           st.threads_per_job);

  // 1-2. Trainings (each writing its trace) as one queue of child processes, `parallel` at a time: the
  // audited runs first, then the standard twins. Once every audited run is traced, the audit (step 4)
  // starts in this process on a thread of its own, beside the twins' trainings, so the cores do not
  // idle while the last trainings run alone (docs/architecture.md). Its results do not depend on what
  // runs beside it.
  std::vector<std::string> audit_traces;
  std::vector<std::size_t> audit_jobs;  // the jobs the audit waits for
  std::vector<arcal::Job> jobs = study_jobs(st, runs, dir, audit_traces, audit_jobs);
  // 4. (started here) The audit over the AttnRes traces, in this process (the library call `arcal audit`
  // makes). Its thread stops at the next poll on SIGINT/SIGTERM, or when a training fails.
  const std::string audit_dir = audit_dir_for(dir, "audit", st, audit_traces);
  std::atomic<bool> audit_cancel{false};
  std::future<arcal::AuditResults> audit;
  // Beside trainings the audit's thread runs at the lowest priority (nice 19; the worker threads it
  // starts inherit it), so it takes the cycles the trainings leave instead of time-slicing with them:
  // on the default study, at equal priority, three to four busy threads on two cores cost about as
  // much as the overlap saved. The queue raises it back to 0 when the trainings are done (allowed to
  // root or under RLIMIT_NICE; otherwise it stays low, which only matters on a shared machine).
  std::mutex nice_mutex;  // orders the thread's lowering against the queue's raising
  int audit_tid = 0;
  bool trainings_done = false;
  auto start_audit = [&](bool beside_jobs) {
    audit = std::async(std::launch::async, [&, beside_jobs] {
      if (beside_jobs) {
        const std::lock_guard<std::mutex> lock(nice_mutex);
        if (!trainings_done) {
          audit_tid = int(syscall(SYS_gettid));
          setpriority(PRIO_PROCESS, id_t(audit_tid), 19);
        }
      }
      const arcal::ScopedInterruptPoll poll([&] { return arcal::interrupt_requested() || audit_cancel.load(); });
      // Beside the trainings' progress bar its own bars would interleave: it reports when done.
      return audit_traces_into(st, audit_traces, audit_dir, bars && !beside_jobs, "audit");
    });
  };
  auto audit_ready = [&] {
    return std::all_of(audit_jobs.begin(), audit_jobs.end(), [&](std::size_t i) { return jobs[i].done; });
  };
  // Stops the audit at its next poll and lets it unwind, before an error of this thread leaves.
  auto stop_audit = [&] {
    if (!audit.valid()) return;
    audit_cancel = true;
    audit.wait();
  };
  if (audit_ready()) start_audit(jobs.size() > 0);
  try {
    arcal::run_jobs(
        exe, jobs, st.parallel, "train and trace", bars, "arcal run", g_resume_command,
        [&](std::size_t) {
          if (!audit.valid() && audit_ready()) start_audit(true);
        },
        [&] {  // the audit's state from its future: running, or ended (done or failed)
          if (!audit.valid()) return std::string();
          return std::string(audit.wait_for(std::chrono::seconds(0)) == std::future_status::ready ? ", audit ended"
                                                                                                  : ", audit running");
        });
  } catch (...) {
    stop_audit();
    throw;
  }
  {
    const std::lock_guard<std::mutex> lock(nice_mutex);  // alone now: full priority
    trainings_done = true;
    if (audit_tid != 0) setpriority(PRIO_PROCESS, id_t(audit_tid), 0);
  }

  // 3. Metrics of every run (seconds; recomputed each time from the traces), while the audit runs.
  arcal::StudyResults study_results;
  try {
    for (const auto& r : runs) {
      if (arcal::interrupt_requested()) interrupted("while computing metrics");
      const std::string rd = dir + "/runs/" + r.dir_name();
      const std::string tf = rd + "/" + st.split + ".npz";
      const auto trace = arcal::load_trace(tf);
      arcal::ReportOptions ro;
      ro.bins = int(st.audit.bins);
      ro.draws = 1000;
      ro.seed = st.audit.seed;
      arcal::StudyRunResult row;
      row.id = r.id;
      row.dir = "runs/" + r.dir_name();
      row.dataset = r.dataset;
      row.model = r.model;
      row.residual = r.residual;
      row.seed = r.seed;
      row.audited = r.audited;
      row.trace = "runs/" + r.dir_name() + "/" + st.split + ".npz";
      row.config_hash = r.hash;
      ro.cluster = trace.cluster;  // token traces: the bootstrap resamples whole sequences
      row.metrics = arcal::trace_calibration_report(trace, ro);
      try {  // a damaged summary.json only loses these two numbers
        const auto summary = nlohmann::json::parse(arcal::read_file(rd + "/summary.json")).get<arcal::TrainSummary>();
        row.train_seconds = summary.wall_seconds;
        row.images_per_second = summary.images_per_second;
      } catch (const std::exception&) {
      }
      study_results.runs.push_back(std::move(row));
    }
  } catch (...) {
    stop_audit();
    throw;
  }

  // 4. The audit started above: its results (an error or interrupt in it is rethrown here).
  if (!audit.valid()) start_audit(false);  // started above whenever the queue finished; a guard for get()
  const arcal::AuditResults final_audit = audit.get();

  // 5. DIR/results.json = the audit's results (its verdict by this version's rule) + the study section.
  nlohmann::json results = arcal::audit_results_json(final_audit);
  study_results.name = st.name;
  study_results.config_hash = study_hash;
  study_results.config_toml = toml;
  study_results.config_source = o.config.empty() ? "embedded default" : o.config;
  study_results.version = ARCAL_VERSION;
  study_results.split = st.split;
  study_results.audit_dir = fs::path(audit_dir).filename().string();
  study_results.groups = arcal::summarise_groups(study_results.runs);
  if (!st.train.snapshot_epochs.empty()) {
    study_results.convergence = audit_snapshots(st, runs, dir, exe, bars);
    // The final models, audited above, are the last point.
    study_results.convergence.push_back(convergence_point(std::uint64_t(st.train.epochs), final_audit, audit_dir));
  }
  study_results.wall_seconds_this_invocation =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double seconds = study_results.wall_seconds_this_invocation;
  results["study"] = study_results;
  arcal::write_file_atomic(dir + "/results.json", results.dump(1));

  // 6. Report.
  if (arcal::interrupt_requested()) interrupted("before the report");
  if (!o.no_report) {
    arcal::ReportOutput rep;
    try {
      rep = arcal::write_report(dir, dir + "/report");
    } catch (const arcal::InputError&) {
      if (arcal::interrupt_requested()) interrupted("while rendering the report");
      throw;
    }
    std::cout << fmt::format("\nreport: {}\n", rep.html);
    std::cout << "  " << rep.verdict << "\n";
  }
  std::cout << fmt::format("done in {:.0f} s; results: {}/results.json\n", seconds, dir);
  return 0;
}

/// Every option of `arcal run` (docs/interface.md "Command options", generated).
const arcal::OptionTable<RunOptions>& run_options() {
  using C = RunOptions;
  static const arcal::OptionTable<C> table = {
      {"config", "--config",
       "Study file (TOML; docs/interface.md). Without it: the embedded default study (ar-vit-tiny on Fashion-MNIST, "
       "AttnRes seeds 0-2 and a standard twin each)",
       &C::config},
      {"out", "--out", "Study directory (default: runs/NAME)", &C::out},
      {"print_config", "--print-config", "Print the resolved study (TOML) and exit", &C::print_config},
      {"parallel", "--parallel", "Override [execution] parallel (trainings at once; 0 = the study's)", &C::parallel,
       arcal::ranges::parallel_override},
      {"no_report", "--no-report", "Stop after results.json", &C::no_report},
  };
  return table;
}

arcal::cli::RunFn setup(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  arcal::cli::bind_options(app, run_options(), *o);
  return [o]() { return run_study(*o); };
}

}  // namespace

ARCAL_COMMAND("run", "Whole study end to end: train seeds -> traces -> audit -> report (resumable)", setup);
