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
#include "flag_checks.hpp"
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

arcal::cli::RunFn setup(CLI::App& app) {
  auto cfg = std::make_shared<Cli>();
  auto& s = cfg->study;
  using arcal::cli::in_range;
  namespace R = arcal::ranges;
  app.add_option("--run", s.run, "Run directory of a trained language model (ar-lm-tiny, ar-lm-tiny-nope)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--out", cfg->out, "Output directory")->required();
  app.add_option("--contexts", s.contexts,
                 "Prefill lengths L of the quality table (test documents concatenated; a model with learned positions "
                 "skips those past its training context)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(in_range(R::study_keys));
  app.add_option("--budgets", s.budgets, "Exact-chunk budgets B of hard top-k and CEDAR")
      ->delimiter(',')
      ->capture_default_str()
      ->check(in_range(R::study_budget));
  app.add_option("--chunk", s.chunk, "Tokens per chunk")->capture_default_str()->check(in_range(R::study_chunk_size));
  app.add_option("--tokens", s.tokens, "Test tokens scored per context (whole sequences, at least 2)")
      ->capture_default_str()
      ->check(in_range(R::study_keys));
  app.add_option("--timing-contexts", s.timing_contexts,
                 "Prefill lengths of the kernel-time table (one sequence each; 0 = none)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(in_range(arcal::IntRange{0, 1LL << 20}));
  app.add_option("--timing-budget", s.timing_budget, "B of the kernel-time table")
      ->capture_default_str()
      ->check(in_range(R::study_budget));
  app.add_option("--bootstrap", s.bootstrap, "Bootstrap resamples (whole sequences)")
      ->capture_default_str()
      ->check(in_range(R::bootstrap_draws));
  app.add_option("--seed", s.seed, "Bootstrap seed")->capture_default_str()->check(arcal::cli::seed_check());
  app.add_option("--threads", s.threads, "Kernel and LibTorch threads (0 = all cores)")
      ->capture_default_str()
      ->check(in_range(R::worker_threads));
  app.add_flag("--first-order", s.first_order_arms,
               "Also run summary-only and CEDAR without the second-order (variance) term of the summary score");
  app.add_flag("--no-figure", cfg->no_figure, "Skip the gnuplot figure");
  app.add_flag("--force", cfg->force, "Replace the results of an earlier run in --out (atomically, file by file)");
  app.add_flag("--json", cfg->json, "Print results.json on stdout");
  return [cfg] {
    auto& t = cfg->study.timing_contexts;
    t.erase(std::remove(t.begin(), t.end(), 0), t.end());
    return run(*cfg);
  };
}

}  // namespace

ARCAL_COMMAND("cedar-lm", arcal::cli::torch_command_description("cedar-lm"), setup);
