// arcal intervene: routing ablations by source family (method.md §7) on a run's test split (an
// image model's images, or a language model's next-byte predictions with whole sequences
// resampled), written as JSON (atomically) with a printed table of mass against effect.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <sstream>

#include "command.hpp"
#include "torch_commands.hpp"
#include "model_flags.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/paths.hpp"
#include "core/progress.hpp"
#include "option_binding.hpp"
#include "model/intervene.hpp"
#include "report/figures.hpp"
#include "ops/torch/compute_threads.hpp"
#include "train/trainer.hpp"

namespace {

struct Options {
  std::string run, out, figures, points, families = "embedding,current,history", split = "test";
  int bootstrap = 1000, threads = 1;
  arcal::cli::ModelLoadFlags load;
  std::int64_t subset = 0;
  std::uint64_t seed = 0;
  bool json = false;
  bool force = false;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int run(const Options& o) {
  std::vector<std::string> inputs;
  for (const char* f : {"config.json", "checkpoint.pt", "model.pt", "log.jsonl", "summary.json"})
    inputs.push_back(o.run + "/" + f);
  arcal::check_output_not_input("--out", o.out, inputs);
  arcal::check_output_file("--out", o.out, o.force);
  arcal::check_distinct_outputs({{"--out", o.out}, {"--figures", o.figures}});
  if (o.split != "test" && o.split != "val") arcal::throw_input("--split", "'" + o.split + "': expected test or val");
  arcal::set_compute_threads(o.threads);
  arcal::InterventionOptions io;
  io.families = split_list(o.families);
  for (const auto& p : split_list(o.points)) {
    try {
      io.points.push_back(std::stoi(p));
    } catch (const std::exception&) {
      arcal::throw_input("--points", "'" + p + "' is not an integer point index");
    }
  }
  io.bootstrap = o.bootstrap;
  io.seed = o.seed;
  arcal::TrainConfig tc;
  auto model = arcal::load_trained_model(o.run, &tc, o.load.options);
  auto data = arcal::load_dataset(tc.dataset, tc.data_dir, tc.val_fraction, tc.train_subset, tc.seed, tc.context);
  auto split = o.split == "val" ? data.val : data.test;
  if (split.size() == 0) arcal::throw_input("--split", o.split + " split of " + o.run + " is empty");
  if (o.subset > 0 && o.subset < split.size())
    split = {split.images.narrow(0, 0, o.subset), split.labels.narrow(0, 0, o.subset), split.classes, split.text};
  std::unique_ptr<arcal::ProgressBar> bar;
  auto rep = arcal::run_interventions(model, split, io, [&](int done, int total) {
    if (!bar) bar = arcal::cli::stderr_progress_bar("intervene", total);
    bar->update(done);
  });
  if (bar) bar->finish();

  arcal::InterventionResults res;
  res.run = o.run;
  res.as_attnres = o.load.options.as_attnres;
  res.residual = tc.residual;
  res.split = o.split;
  res.bootstrap = o.bootstrap;
  res.seed = o.seed;
  res.report = rep;
  if (!o.load.options.as_attnres.empty()) {
    // The wrapper against the standard model it wraps, on the first batch (method.md §1).
    arcal::LoadOptions plain = o.load.options;
    plain.as_attnres.clear();
    auto standard = arcal::load_trained_model(o.run, nullptr, plain);
    res.has_wrapper_check = true;
    res.wrapper_check = arcal::check_wrapper(standard, model, split, split.text ? 16 : 250);
  }
  const nlohmann::json j = res;  // results/intervene_json.hpp
  arcal::write_file_atomic(o.out, j.dump(2) + "\n");
  std::vector<std::string> figure_paths;
  if (!o.figures.empty()) figure_paths = arcal::write_intervention_figures(j, o.figures);
  if (o.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  if (rep.unit == "token")
    std::cout << fmt::format(
        "base next-byte accuracy {:.4f}, NLL {:.4f} nats = {:.4f} bits per byte (n = {} tokens in {} "
        "sequences; intervals resample whole sequences)\n",
        rep.base_accuracy, rep.base_nll, rep.base_nll / arcal::kLn2, rep.n, rep.clusters);
  else
    std::cout << fmt::format("base accuracy {:.4f}, NLL {:.4f} (n = {})\n", rep.base_accuracy, rep.base_nll, rep.n);
  if (res.has_wrapper_check)
    std::cout << fmt::format(
        "wrapped standard model (norm eps {:g}): max relative logit difference {:.2e}, max |alpha - "
        "1/S_p| {:.2e} over {} examples\n",
        res.wrapper_check.norm_eps, res.wrapper_check.max_rel_logit_diff, res.wrapper_check.max_routing_deviation,
        res.wrapper_check.examples);
  std::cout << fmt::format("{:>5} {:<9} {:<10} {:>7} {:>22} {:>22} {:>22}\n", "point", "sublayer", "family", "mass",
                           "Δacc [95% CI]", "ΔNLL [95% CI]", "KL [95% CI]");
  for (const auto& e : rep.effects)
    std::cout << fmt::format(
        "{:>5} {:<9} {:<10} {:>7.4f} {:>+8.4f} [{:+.4f},{:+.4f}] {:>+8.4f} [{:+.4f},{:+.4f}] {:>8.4f} "
        "[{:.4f},{:.4f}]\n",
        e.point < 0 ? std::string("all") : std::to_string(e.point), e.sublayer, e.family, e.mass, e.delta_accuracy,
        e.delta_accuracy_ci.low, e.delta_accuracy_ci.high, e.delta_nll, e.delta_nll_ci.low, e.delta_nll_ci.high,
        e.mean_kl, e.mean_kl_ci.low, e.mean_kl_ci.high);
  std::cout << fmt::format("Spearman(mass, KL) = {:.3f}, Spearman(mass, ΔNLL) = {:.3f} over {} (point, family) pairs\n",
                           rep.spearman_mass_kl, rep.spearman_mass_nll, rep.pairs);
  for (const auto& m : rep.mass_importance) {
    std::string none;
    for (const auto& f : m.mass_without_effect) none += (none.empty() ? "" : ", ") + f;
    std::cout << fmt::format(
        "{}: largest mass {} ({:.3f}), largest effect {} (KL {:.4f}){}; {} of {} points dissociated{}\n", m.sublayer,
        m.largest_mass_family, m.largest_mass, m.largest_effect_family, m.largest_effect_kl,
        m.dissociated ? " -- mass is not importance" : "", m.dissociated_points, m.points,
        none.empty() ? "" : "; mass >= 0.1 with no detectable ΔNLL: " + none);
  }
  std::cout << "wrote " << o.out << "\n";
  for (const auto& f : figure_paths) std::cout << "wrote " << f << "\n";
  return 0;
}

/// Every option of `arcal intervene` but the loading ones (model_flags.hpp); docs/interface.md
/// "Command options", generated.
const arcal::OptionTable<Options>& intervene_options() {
  using C = Options;
  using O = arcal::Option<C>;
  namespace R = arcal::ranges;
  static const arcal::OptionTable<C> table = {
      O("run", "--run", "Run directory written by arcal train", &C::run).given(),
      O("out", "--out", "JSON file to write", &C::out).given(),
      {"figures", "--figures",
       "Also draw the mass-vs-effect and per-point figures into this folder (gnuplot; .dat and .gp kept)", &C::figures},
      {"points", "--points", "Comma-separated routing points (default: all)", &C::points},
      {"families", "--families", "Source families: embedding,current,history", &C::families},
      {"split", "--split", "test | val", &C::split},
      {"subset", "--subset",
       "Use only the first N examples (images, or a language model's sequences) of the split (0 = all)", &C::subset,
       R::subset},
      {"bootstrap", "--bootstrap", "Bootstrap draws for the intervals", &C::bootstrap, R::bootstrap_draws},
      {"seed", "--seed", "Bootstrap seed", &C::seed},
      {"threads", "--threads", "Intra-op threads", &C::threads, R::threads},
      {"force", "--force", "Replace an existing --out file (atomically)", &C::force},
      {"json", "--json", "Print the JSON instead of the table", &C::json},
  };
  return table;
}

arcal::cli::RunFn setup(CLI::App& app) {
  auto o = std::make_shared<Options>();
  arcal::cli::bind_options(app, intervene_options(), *o);
  o->load.add_to(app);
  return [o]() { return run(*o); };
}

}  // namespace

ARCAL_COMMAND("intervene", arcal::cli::torch_command_description("intervene"), setup);
