// arcal cedar-lm: CEDAR, hard top-k, summaries only and dense in a trained language model's causal
// prefill (cedar/torch/lm_prefill_study.hpp; issue 28): results.json (arcal.cedar_lm/1), CSV, markdown and
// the Δ-bits-per-byte figure under --out.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "cedar/torch/lm_prefill_study.hpp"
#include "command.hpp"
#include "torch_commands.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/paths.hpp"
#include "option_binding.hpp"
#include "report/figures.hpp"
#include "train/trainer.hpp"

namespace {

namespace fs = std::filesystem;

struct Cli {
  arcal::cedar::LmStudyConfig study;
  std::string out;
  bool json = false, no_figure = false, force = false;
};

int run(Cli& cfg) {
  std::error_code ec;
  if (fs::exists(cfg.out, ec) && !fs::is_directory(cfg.out, ec))
    arcal::throw_input("--out", cfg.out +
                                    " exists and is not a directory (cedar-lm writes DIR/results.json, CSV, markdown "
                                    "and figures/)");
  const std::vector<std::string> inputs = arcal::run_directory_files(cfg.study.run);
  for (const char* f : {"results.json", "cedar_lm.csv", "cedar_lm.md"})
    arcal::check_output_not_input("--out", cfg.out + "/" + f, inputs);
  if (fs::exists(cfg.out + "/results.json", ec) && !cfg.force)
    arcal::throw_input("--out", cfg.out +
                                    "/results.json already exists (an earlier study); pass --force to replace it "
                                    "(atomically, file by file) or choose another --out");
  arcal::cedar::LmStudyResult res;
  {
    auto bar = arcal::cli::stderr_progress_bar("cedar-lm", 1);
    res = arcal::cedar::run_lm_study(cfg.study, [&](std::int64_t done, std::int64_t total) {
      bar->set_total(total);
      bar->update(done, "sequence passes");
    });
    bar->finish();
  }
  fs::create_directories(cfg.out, ec);
  if (ec) arcal::throw_input("--out", "cannot create " + cfg.out + ": " + ec.message());
  nlohmann::json j = arcal::cedar::lm_study_json(res);
  j["version"] = ARCAL_VERSION;
  std::vector<std::string> figures;
  if (!cfg.no_figure && !res.contexts.empty()) figures = arcal::write_cedar_lm_figure(j, cfg.out + "/figures");
  std::string md = arcal::cedar::lm_study_markdown(res);
  if (!figures.empty()) md += "\n![Δ bits per byte against dense](figures/cedar_lm_bpb.svg)\n";
  arcal::write_file_atomic(cfg.out + "/cedar_lm.csv", arcal::cedar::lm_study_csv(res));
  arcal::write_file_atomic(cfg.out + "/cedar_lm.md", md);
  arcal::write_file_atomic(cfg.out + "/results.json", j.dump(2) + "\n");
  if (cfg.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("arcal cedar-lm: {} context(s), {} timing length(s) in {:.1f} s\n", res.contexts.size(),
                           res.timings.size(), res.seconds);
  for (const auto& c : res.contexts)
    for (const auto& a : c.arms)
      std::cout << fmt::format(
          "  L {:>6} {:<8}{} B {:>3}: {:.4f} bits/byte (Δ {:+.4f} [{:+.4f}, {:+.4f}]), ECE {:.4f}, "
          "over-confidence {:+.4f}\n",
          c.context, a.method, a.second_order ? "" : " (1st order)", a.budget, a.bits_per_byte.value,
          a.d_bits_per_byte.value, a.d_bits_per_byte.ci.low, a.d_bits_per_byte.ci.high, a.ece.value,
          a.overconfidence.value);
  for (const auto& t : res.timings)
    std::cout << fmt::format("  kernel L {:>6}: CEDAR {:.2f}x our dense, {:.2f}x LibTorch (error {:.2e})\n", t.context,
                             t.dense_seconds / t.cedar_seconds, t.libtorch_seconds / t.cedar_seconds, t.cedar_error);
  if (!res.skipped_contexts.empty())
    std::cout << "  not run (beyond the learned positions, context " << res.training_context
              << "): " << fmt::format("{}", fmt::join(res.skipped_contexts, ", ")) << "\n";
  std::cout << "wrote " << cfg.out << "/results.json, cedar_lm.csv, cedar_lm.md"
            << (figures.empty() ? "" : ", figures/") << "\n";
  return 0;
}

/// The prefill study's options (cedar/torch/lm_prefill_study.hpp; docs/interface.md "Command options",
/// generated).
const arcal::OptionTable<arcal::cedar::LmStudyConfig>& lm_study_options() {
  using C = arcal::cedar::LmStudyConfig;
  using O = arcal::Option<C>;
  namespace R = arcal::ranges;
  static const arcal::OptionTable<C> table = {
      O("run", "--run", "Run directory of a trained language model (ar-lm-tiny, ar-lm-tiny-nope)", &C::run)
          .given()
          .existing(O::Path::existing_directory),
      {"contexts", "--contexts",
       "Prefill lengths L of the quality table (test documents concatenated; a model with learned positions skips "
       "those past its training context)",
       &C::contexts, R::study_keys},
      {"budgets", "--budgets", "Exact-chunk budgets B of hard top-k and CEDAR", &C::budgets, R::study_budget},
      {"chunk", "--chunk", "Tokens per chunk", &C::chunk, R::study_chunk_size},
      {"tokens", "--tokens", "Test tokens scored per context (whole sequences, at least 2)", &C::tokens, R::study_keys},
      {"timing_contexts", "--timing-contexts", "Prefill lengths of the kernel-time table (one sequence each; 0 = none)",
       &C::timing_contexts, arcal::IntRange{0, 1LL << 20}},
      {"timing_budget", "--timing-budget", "B of the kernel-time table", &C::timing_budget, R::study_budget},
      {"bootstrap", "--bootstrap", "Bootstrap resamples (whole sequences)", &C::bootstrap, R::bootstrap_draws},
      {"seed", "--seed", "Bootstrap seed", &C::seed},
      {"threads", "--threads", "Kernel and LibTorch threads (0 = all cores)", &C::threads, R::worker_threads},
      {"first_order", "--first-order",
       "Also run summary-only and CEDAR without the second-order (variance) term of the summary score",
       &C::first_order_arms},
  };
  return table;
}

/// The command's own options.
const arcal::OptionTable<Cli>& cli_options() {
  using C = Cli;
  using O = arcal::Option<C>;
  static const arcal::OptionTable<C> table = {
      O("out", "--out", "Output directory", &C::out).given(),
      {"no_figure", "--no-figure", "Skip the gnuplot figure", &C::no_figure},
      {"force", "--force", "Replace the results of an earlier run in --out (atomically, file by file)", &C::force},
      {"json", "--json", "Print results.json on stdout", &C::json},
  };
  return table;
}

arcal::cli::RunFn setup(CLI::App& app) {
  auto cfg = std::make_shared<Cli>();
  arcal::cli::bind_options(app, cli_options(), *cfg);
  arcal::cli::bind_options(app, lm_study_options(), cfg->study);
  return [cfg] {
    auto& t = cfg->study.timing_contexts;
    t.erase(std::remove(t.begin(), t.end(), 0), t.end());
    return run(*cfg);
  };
}

}  // namespace

ARCAL_COMMAND("cedar-lm", arcal::cli::torch_command_description("cedar-lm"), setup);
