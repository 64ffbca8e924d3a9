// `arcal cedar-study --out DIR`: the clustered-attention study of CEDAR (method.md §8) plus, with
// --run, the trained-model study (LibTorch: part of `arcal-torch`). One option table; the library
// computes, this file reads, writes and prints.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cedar/cedar.hpp"
#include "cedar/clustered_study.hpp"
#include "cedar/torch/vit_study.hpp"
#include "command.hpp"
#include "torch_commands.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/paths.hpp"
#include "core/progress.hpp"
#include "option_binding.hpp"
#include "io/npz.hpp"
#include "train/trainer.hpp"

namespace {

namespace fs = std::filesystem;
using namespace arcal::cedar;

struct StudyCli {
  std::string out, run;
  StudyConfig study;
  ModelStudyConfig model;
  bool json = false, no_figure = false, force = false;
};

bool stderr_progress() { return arcal::cli::progress_enabled_on(STDERR_FILENO); }

/// What cedar-study writes under DIR (figures/ holds the figure's .dat, .gp, .svg and .png).
const std::vector<std::string>& study_outputs() {
  static const std::vector<std::string> files = {"results.json",
                                                 "cedar_study.csv",
                                                 "cedar_study.md",
                                                 "cedar_model.csv",
                                                 "figures/cedar_error_vs_budget.dat",
                                                 "figures/cedar_error_vs_budget.gp",
                                                 "figures/cedar_error_vs_budget.svg",
                                                 "figures/cedar_error_vs_budget.png"};
  return files;
}

/// Refusals before anything runs or is written: an --out that is a file, an output that is one of
/// the run's files, and an earlier study's results without --force.
void check_study_out(const StudyCli& cfg) {
  std::error_code ec;
  if (fs::exists(cfg.out, ec) && !fs::is_directory(cfg.out, ec))
    arcal::throw_input("--out", cfg.out +
                                    " exists and is not a directory (cedar-study writes DIR/results.json, CSV, "
                                    "markdown and figures/)");
  if (!cfg.run.empty()) {
    const std::vector<std::string> inputs = arcal::run_directory_files(cfg.run);
    for (const auto& f : study_outputs()) arcal::check_output_not_input("--out", cfg.out + "/" + f, inputs);
  }
  if (fs::exists(cfg.out + "/results.json", ec) && !cfg.force)
    arcal::throw_input("--out", cfg.out +
                                    "/results.json already exists (an earlier study); pass --force to replace its "
                                    "results (atomically, file by file) or choose another --out");
}

int run_study(StudyCli& cfg) {
  validate_study_config(cfg.study);
  check_study_out(cfg);
  std::error_code ec;
  fs::create_directories(cfg.out, ec);
  if (ec) arcal::throw_input("--out", "cannot create " + cfg.out + ": " + ec.message());
  // A replaced study without --run must not leave the earlier one's model table beside it.
  if (cfg.run.empty()) fs::remove(cfg.out + "/cedar_model.csv", ec);
  nlohmann::json results = {{"schema", "arcal.cedar_study/1"}, {"version", ARCAL_VERSION}};
  StudyResult clustered;
  {
    arcal::ProgressBar bar("cedar-study", 1, stderr_progress(), stderr);
    clustered = run_clustered_study(cfg.study, [&](std::size_t done, std::size_t total) {
      bar.set_total(static_cast<long long>(total));
      bar.update(static_cast<long long>(done), "clustered settings");
    });
  }
  results["clustered"] = study_json(clustered);
  std::string figure;
  if (!cfg.no_figure) figure = write_study_figure(clustered, cfg.out + "/figures");
  std::string markdown = study_markdown(clustered, figure.empty() ? "" : "figures/cedar_error_vs_budget.svg");
  arcal::write_file_atomic(cfg.out + "/cedar_study.csv", study_csv(clustered));
  if (!cfg.run.empty()) {
    cfg.model.run = cfg.run;
    ModelStudyResult model;
    {
      arcal::ProgressBar bar("cedar-study model", 1, stderr_progress(), stderr);
      model = run_model_study(cfg.model, [&](std::int64_t done, std::int64_t total) {
        bar.set_total(total);
        bar.update(done, "images");
      });
    }
    results["model"] = model_study_json(model);
    arcal::write_file_atomic(cfg.out + "/cedar_model.csv", model_study_csv(model));
    markdown += "\n" + model_study_markdown(model);
  }
  arcal::write_file_atomic(cfg.out + "/cedar_study.md", markdown);
  arcal::write_file_atomic(cfg.out + "/results.json", results.dump(2) + "\n");
  if (cfg.json) {
    std::cout << results.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("arcal cedar-study: {} settings x {} budgets in {:.1f} s\n", clustered.settings.size(),
                           cfg.study.budgets.size(), clustered.seconds);
  for (const auto& s : clustered.by_dispersion)
    std::cout << fmt::format("  dispersion {:<6} error reduction vs hard top-k: min {:6.2f} %, median {:6.2f} % {}\n",
                             s.dispersion, 100 * s.min_reduction, 100 * s.median_reduction,
                             s.holds ? "(>= target)" : "(below target)");
  if (results.contains("model")) std::cout << "  trained model: " << cfg.out << "/cedar_model.csv\n";
  std::cout << "wrote " << cfg.out << "/results.json, cedar_study.csv, cedar_study.md"
            << (figure.empty() ? "" : ", figures/") << "\n";
  return 0;
}

/// The clustered-attention study's options (cedar/clustered_study.hpp; docs/interface.md "Command
/// options", generated).
const arcal::OptionTable<StudyConfig>& clustered_study_options() {
  using C = StudyConfig;
  namespace R = arcal::ranges;
  static const arcal::OptionTable<C> table = {
      {"keys", "--keys", "Keys per head", &C::n_keys, R::study_keys},
      {"chunk_size", "--chunk-size", "Keys per chunk (one cluster per chunk)", &C::chunk_size, R::study_chunk_size},
      {"queries", "--queries", "Queries per head", &C::n_queries, R::study_queries},
      {"dim", "--dim", "Head width d", &C::dim, R::study_dim},
      {"heads", "--heads", "Heads", &C::heads, R::study_heads},
      {"dispersions", "--dispersions", "Within-chunk dispersions (comma-separated)", &C::dispersions,
       R::study_dispersion},
      {"temperatures", "--temperatures", "Query temperatures", &C::temperatures, R::study_temperature},
      {"query_clusters", "--query-clusters", "Clusters each query aims at", &C::query_clusters,
       R::study_query_clusters},
      {"budgets", "--budgets", "Exact-chunk budgets B", &C::budgets, R::study_budget},
      {"error_targets", "--error-targets", "Error targets of the variable-budget arm", &C::error_targets,
       R::study_error_target},
      {"kv_correlation", "--kv-correlation", "Within-chunk key-value correlation", &C::key_value_correlation,
       R::study_kv_correlation},
      {"seed", "--seed", "Seed of the data (and of the model study's bootstrap)", &C::seed},
      {"threads", "--threads", "Worker threads (0 = all cores)", &C::threads, R::worker_threads},
  };
  return table;
}

/// The trained-model study's options (cedar/torch/vit_study.hpp; its seed and threads are the study's).
const arcal::OptionTable<ModelStudyConfig>& model_study_options() {
  using C = ModelStudyConfig;
  namespace R = arcal::ranges;
  static const arcal::OptionTable<C> table = {
      {"model_budgets", "--model-budgets", "Exact row chunks per query in the model study", &C::budgets,
       R::study_budget},
      {"model_subset", "--model-subset", "First N test images (0 = all)", &C::subset, R::subset},
      {"bootstrap", "--bootstrap", "Bootstrap resamples of the model study", &C::bootstrap, R::bootstrap_draws},
  };
  return table;
}

/// The command's own options.
const arcal::OptionTable<StudyCli>& study_cli_options() {
  using C = StudyCli;
  using O = arcal::Option<C>;
  static const arcal::OptionTable<C> table = {
      O("out", "--out", "Output directory", &C::out).given(),
      O("run", "--run", "Also run the trained-model study on this run directory (a ViT preset)", &C::run)
          .existing(O::Path::existing_directory),
      {"no_figure", "--no-figure", "Skip the gnuplot figure", &C::no_figure},
      {"force", "--force", "Replace the results of an earlier study in --out (atomically, file by file)", &C::force},
      {"json", "--json", "Print results.json on stdout", &C::json},
  };
  return table;
}

arcal::cli::RunFn setup_study(CLI::App& app) {
  auto cfg = std::make_shared<StudyCli>();
  // Every numeric flag carries its range (core/limits.hpp; grid flags check each value); the grids
  // against the chunk count, and the sizes against the array limit, are checked by
  // validate_study_config before anything runs.
  arcal::cli::bind_options(app, study_cli_options(), *cfg);
  arcal::cli::bind_options(app, clustered_study_options(), cfg->study);
  arcal::cli::bind_options(app, model_study_options(), cfg->model);
  return [cfg] {
    cfg->model.seed = cfg->study.seed;
    cfg->model.threads = cfg->study.threads;
    return run_study(*cfg);
  };
}

ARCAL_COMMAND("cedar-study", arcal::cli::torch_command_description("cedar-study"), setup_study);

}  // namespace
