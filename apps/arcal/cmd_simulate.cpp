// arcal simulate: writes a synthetic trace with a known injected routing effect (method.md §6.5),
// for checking the audit end to end. The library does the work (audit/simulate.hpp).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "audit/simulate.hpp"
#include "command.hpp"
#include "core/limits.hpp"
#include "core/paths.hpp"
#include "option_binding.hpp"
#include "io/trace.hpp"

namespace {

struct SimulateConfig {
  arcal::SimulationOptions sim;  ///< the simulator's options (simulation_options(); reference_slope from below)
  std::string out;
  double miscalibration = 1.0;  ///< T: sim.reference_slope = 1 / T
  bool json = false;
  bool force = false;
};

/// The simulator's options on the command line (audit/simulate.hpp; docs/interface.md "Command options",
/// generated). Their keys are those of the --json summary.
const arcal::OptionTable<arcal::SimulationOptions>& simulation_options() {
  using C = arcal::SimulationOptions;
  using arcal::RealRange;
  namespace R = arcal::ranges;
  // Real-valued options through core/limits.hpp's ranges: CLI11's Range lets NaN through.
  static const arcal::OptionTable<C> table = {
      {"n", "--n", "Examples", &C::n, R::simulate_n},
      {"classes", "--classes", "Classes K", &C::classes, R::simulate_classes},
      {"effect_nats", "--effect-nats", "Oracle gain E[KL(p*||q)] of the injected effect; 0 = exact null",
       &C::effect_nats, RealRange{0.0, 10.0, false}},
      {"effect_class", "--effect-class",
       "Plant the effect only in examples predicted as this class (a class-specific routing effect; the mean gain "
       "over all examples is still --effect-nats); -1 = every class",
       &C::effect_class, arcal::IntRange{-1, std::int64_t{1} << 40}},
      {"seed", "--seed", "Seed of every random draw", &C::seed},
      {"points", "--points", "Routing points (point p has p + 2 sources)", &C::points, R::simulate_points},
      {"confound", "--confound",
       "Correlation rho of the routing signal with the outputs (s = h(outputs) + noise); the effect is planted in "
       "the independent part only. 0 = routing independent of the outputs",
       &C::confound, RealRange{0.0, 0.999, false}},
      {"confound_source",
       "--confound-source",
       "What the routing signal tracks: confidence (h = logit c), outputs (a nonlinear function of the sorted "
       "probabilities) or class (the predicted class's --class-effect offset)",
       &C::confound_source,
       {},
       {"confidence", "outputs", "class"}},
      {"class_effect", "--class-effect",
       "Class-dependent calibration: logit q += E b_k for predicted class k, b_k = 2k/(K-1) - 1 (some classes are "
       "harder; information beyond confidence, not beyond the outputs)",
       &C::class_effect, RealRange{-100.0, 100.0, false}},
      {"wiggle", "--wiggle",
       "Amplitude A of a non-smooth calibration curve: logit q += A sin(F logit c) (a reference that a smooth fit of "
       "c misses)",
       &C::wiggle, RealRange{-100.0, 100.0, false}},
      {"wiggle_frequency", "--wiggle-frequency", "Frequency F of --wiggle", &C::wiggle_frequency,
       RealRange{0.0, 1000.0, true}},
      {"output_effect", "--output-effect",
       "Dependence of correctness on the outputs beyond confidence: logit q += B sin(2 u2), u2 the standardised "
       "log(p_(2)/p_(3))",
       &C::output_effect, RealRange{-100.0, 100.0, false}},
      {"margin_mean", "--margin-mean",
       "Mean of the predicted class's logit margin |N(mean, sd)|: larger means more confident (8 with sd 3 puts most "
       "examples above 0.93 confidence, as trained classifiers)",
       &C::margin_mean, RealRange{0.0, 50.0, false}},
      {"margin_sd", "--margin-sd", "Sd of the logit margin", &C::margin_sd, RealRange{0.0, 50.0, false}},
  };
  return table;
}

/// The command's own options: the output and the miscalibration T (the simulator takes 1 / T).
const arcal::OptionTable<SimulateConfig>& simulate_options() {
  using C = SimulateConfig;
  using O = arcal::Option<C>;
  static const arcal::OptionTable<C> table = {
      O("out", "--out", "Output trace file (.npz)", &C::out).given(),
      {"miscalibration", "--miscalibration",
       "Temperature-type miscalibration T of the true accuracy curve: q(c) = sigmoid(logit(c) / T); T > 1 is "
       "overconfident, 1 calibrated",
       &C::miscalibration, arcal::RealRange{0.05, 20.0, false}},
      {"force", "--force", "Replace an existing --out file (atomically)", &C::force},
      {"json", "--json", "Print a JSON summary (schema arcal.simulate/1)", &C::json},
  };
  return table;
}

arcal::cli::RunFn setup_simulate(CLI::App& app) {
  auto cfg = std::make_shared<SimulateConfig>();
  arcal::cli::bind_options(app, simulate_options(), *cfg);
  arcal::cli::bind_options(app, simulation_options(), cfg->sim);
  return [cfg]() {
    arcal::check_output_file("--out", cfg->out, cfg->force);
    // The trace in memory: logits N x K doubles, routing and CLS routing N x P x S floats (S = P + 1).
    std::uint64_t logits = 0, routing = 0;
    if (!arcal::checked_mul(cfg->sim.n, cfg->sim.classes * 8, logits) ||
        !arcal::checked_mul(cfg->sim.n, cfg->sim.points * (cfg->sim.points + 1) * 8, routing) ||
        !arcal::checked_add(logits, routing, logits))
      logits = UINT64_MAX;
    arcal::check_array_bytes(logits, "arcal simulate",
                             "--n " + std::to_string(cfg->sim.n) + " x --classes " + std::to_string(cfg->sim.classes) +
                                 " x --points " + std::to_string(cfg->sim.points));
    arcal::SimulationOptions o = cfg->sim;
    o.reference_slope = 1.0 / cfg->miscalibration;
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
      nlohmann::json j = arcal::options_json(simulation_options(), o);  // every simulator option, by key
      j["schema"] = "arcal.simulate/1";
      j["out"] = cfg->out;
      j["miscalibration"] = cfg->miscalibration;
      j["delta"] = sim.delta;
      j["accuracy"] = acc;
      j["mean_confidence"] = conf;
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
