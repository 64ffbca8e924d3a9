// arcal simulate: writes a synthetic trace with a known injected routing effect (method.md §6.5),
// for checking the audit end to end. The library does the work (audit/simulate.hpp).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "audit/simulate.hpp"
#include "command.hpp"
#include "core/limits.hpp"
#include "core/paths.hpp"
#include "flag_checks.hpp"
#include "io/trace.hpp"

namespace {

struct SimulateConfig {
  std::string out;
  std::size_t n = 10000;
  std::size_t classes = 10;
  double effect_nats = 0.0;
  std::int64_t effect_class = -1;
  std::uint64_t seed = 0;
  std::size_t points = 6;
  double confound = 0.0;
  std::string confound_source = "confidence";
  double miscalibration = 1.0;
  double wiggle = 0.0, wiggle_frequency = 3.0, output_effect = 0.0, class_effect = 0.0;
  double margin_mean = 4.0, margin_sd = 2.0;
  bool json = false;
  bool force = false;
};

arcal::cli::RunFn setup_simulate(CLI::App& app) {
  auto cfg = std::make_shared<SimulateConfig>();
  app.add_option("--out", cfg->out, "Output trace file (.npz)")->required();
  app.add_option("--n", cfg->n, "Examples")->check(arcal::cli::in_range(arcal::ranges::simulate_n));
  app.add_option("--classes", cfg->classes, "Classes K")->check(arcal::cli::in_range(arcal::ranges::simulate_classes));
  app.add_option("--effect-nats", cfg->effect_nats, "Oracle gain E[KL(p*||q)] of the injected effect; 0 = exact null")
      ->check(arcal::cli::in_range(arcal::RealRange{0.0, 10.0, false}));
  app.add_option("--effect-class", cfg->effect_class,
                 "Plant the effect only in examples predicted as this class (a class-specific routing effect; the "
                 "mean gain over all examples is still --effect-nats); -1 = every class")
      ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40));
  // Real-valued options through core/limits.hpp's ranges: CLI11's Range lets NaN through.
  using arcal::RealRange;
  using arcal::cli::in_range;
  app.add_option("--seed", cfg->seed, "Seed of every random draw")->check(arcal::cli::seed_check());
  app.add_flag("--force", cfg->force, "Replace an existing --out file (atomically)");
  app.add_option("--points", cfg->points, "Routing points (point p has p + 2 sources)")
      ->check(in_range(arcal::ranges::simulate_points));
  app.add_option("--confound", cfg->confound,
                 "Correlation rho of the routing signal with the outputs (s = h(outputs) + noise); the effect "
                 "is planted in the independent part only. 0 = routing independent of the outputs")
      ->check(in_range(RealRange{0.0, 0.999, false}));
  app.add_option("--confound-source", cfg->confound_source,
                 "What the routing signal tracks: confidence (h = logit c), outputs (a nonlinear function of the "
                 "sorted probabilities) or class (the predicted class's --class-effect offset)")
      ->check(CLI::IsMember({"confidence", "outputs", "class"}));
  app.add_option("--class-effect", cfg->class_effect,
                 "Class-dependent calibration: logit q += E b_k for predicted class k, b_k = 2k/(K-1) - 1 (some "
                 "classes are harder; information beyond confidence, not beyond the outputs)")
      ->check(in_range(RealRange{-100.0, 100.0, false}));
  app.add_option("--miscalibration", cfg->miscalibration,
                 "Temperature-type miscalibration T of the true accuracy curve: q(c) = sigmoid(logit(c) / T); "
                 "T > 1 is overconfident, 1 calibrated")
      ->check(in_range(RealRange{0.05, 20.0, false}));
  app.add_option("--wiggle", cfg->wiggle,
                 "Amplitude A of a non-smooth calibration curve: logit q += A sin(F logit c) (a reference that a "
                 "smooth fit of c misses)")
      ->check(in_range(RealRange{-100.0, 100.0, false}));
  app.add_option("--wiggle-frequency", cfg->wiggle_frequency, "Frequency F of --wiggle")
      ->check(in_range(RealRange{0.0, 1000.0, true}));
  app.add_option("--output-effect", cfg->output_effect,
                 "Dependence of correctness on the outputs beyond confidence: logit q += B sin(2 u2), u2 the "
                 "standardised log(p_(2)/p_(3))")
      ->check(in_range(RealRange{-100.0, 100.0, false}));
  app.add_option("--margin-mean", cfg->margin_mean,
                 "Mean of the predicted class's logit margin |N(mean, sd)|: larger means more confident (8 with "
                 "sd 3 puts most examples above 0.93 confidence, as trained classifiers)")
      ->check(in_range(RealRange{0.0, 50.0, false}));
  app.add_option("--margin-sd", cfg->margin_sd, "Sd of the logit margin")->check(in_range(RealRange{0.0, 50.0, false}));
  app.add_flag("--json", cfg->json, "Print a JSON summary (schema arcal.simulate/1)");
  return [cfg]() {
    arcal::check_output_file("--out", cfg->out, cfg->force);
    // The trace in memory: logits N x K doubles, routing and CLS routing N x P x S floats (S = P + 1).
    std::uint64_t logits = 0, routing = 0;
    if (!arcal::checked_mul(cfg->n, cfg->classes * 8, logits) ||
        !arcal::checked_mul(cfg->n, cfg->points * (cfg->points + 1) * 8, routing) ||
        !arcal::checked_add(logits, routing, logits))
      logits = UINT64_MAX;
    arcal::check_array_bytes(logits, "arcal simulate",
                             "--n " + std::to_string(cfg->n) + " x --classes " + std::to_string(cfg->classes) +
                                 " x --points " + std::to_string(cfg->points));
    arcal::SimulationOptions o;
    o.n = cfg->n;
    o.classes = cfg->classes;
    o.effect_nats = cfg->effect_nats;
    o.effect_class = cfg->effect_class;
    o.seed = cfg->seed;
    o.points = cfg->points;
    o.confound = cfg->confound;
    o.confound_source = cfg->confound_source;
    o.reference_slope = 1.0 / cfg->miscalibration;
    o.wiggle = cfg->wiggle;
    o.wiggle_frequency = cfg->wiggle_frequency;
    o.output_effect = cfg->output_effect;
    o.class_effect = cfg->class_effect;
    o.margin_mean = cfg->margin_mean;
    o.margin_sd = cfg->margin_sd;
    const auto sim = arcal::simulate_trace(o);
    arcal::save_trace(sim.trace, cfg->out);
    double acc = 0.0, conf = 0.0;
    for (std::size_t i = 0; i < o.n; ++i) {
      acc += sim.correct[i];
      conf += sim.confidence[i];
    }
    acc /= static_cast<double>(o.n);
    conf /= static_cast<double>(o.n);
    if (cfg->json) {
      nlohmann::json j = {{"schema", "arcal.simulate/1"},
                          {"out", cfg->out},
                          {"n", o.n},
                          {"classes", o.classes},
                          {"effect_nats", o.effect_nats},
                          {"effect_class", o.effect_class},
                          {"delta", sim.delta},
                          {"seed", o.seed},
                          {"confound", o.confound},
                          {"confound_source", o.confound_source},
                          {"miscalibration", cfg->miscalibration},
                          {"wiggle", o.wiggle},
                          {"wiggle_frequency", o.wiggle_frequency},
                          {"output_effect", o.output_effect},
                          {"class_effect", o.class_effect},
                          {"margin_mean", o.margin_mean},
                          {"margin_sd", o.margin_sd},
                          {"points", o.points},
                          {"accuracy", acc},
                          {"mean_confidence", conf}};
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("wrote %s: n %zu, classes %zu, effect %.6g nats (delta %.6g), accuracy %.4f, mean confidence %.4f\n",
                  cfg->out.c_str(), o.n, o.classes, o.effect_nats, sim.delta, acc, conf);
    }
    return 0;
  };
}

ARCAL_COMMAND("simulate", "Write a synthetic trace with a known injected routing effect", setup_simulate);

}  // namespace
