// arcal trace: runs a trained model over its test or validation split and writes a trace file
// (docs/interface.md), then reports accuracy against the run's summary.json. A language-model run
// gives a token trace (one example per next-token prediction, the sequence as cluster id) of an evenly
// spaced subsample of the split's sequences (--sequences).
#include <fmt/format.h>

#include <iostream>

#include "command.hpp"
#include "torch_commands.hpp"
#include "model_flags.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/paths.hpp"
#include "core/progress.hpp"
#include "option_binding.hpp"
#include "model/trace_export.hpp"
#include "ops/torch/compute_threads.hpp"
#include "train/trainer.hpp"

namespace {

struct TraceOptions {
  std::string run, split = "test", out;
  int batch = 500;
  std::int64_t sequences = 512;
  arcal::cli::ModelLoadFlags load;
  int threads = 1;
  bool force = false;
};

int run_trace(const TraceOptions& o) {
  if (o.split != "test" && o.split != "val") arcal::throw_input("--split", "'" + o.split + "': expected test or val");
  arcal::check_output_not_input("--out", o.out, arcal::run_directory_files(o.run));
  arcal::check_output_file("--out", o.out, o.force);
  arcal::set_compute_threads(o.threads);
  arcal::TrainConfig tc;
  auto model = arcal::load_trained_model(o.run, &tc, o.load.options);
  auto data = arcal::load_dataset(tc.dataset, tc.data_dir, tc.val_fraction, tc.train_subset, tc.seed, tc.context);
  const auto& full = o.split == "test" ? data.test : data.val;
  if (full.size() == 0) arcal::throw_input("--split", o.split + " split of " + o.run + " is empty");
  const auto split = full.text ? arcal::select_sequences(full, o.sequences) : full;
  const auto meta = arcal::trace_metadata(tc, o.run, o.split, split, full, o.load.options.as_attnres);
  auto bar = arcal::cli::stderr_progress_bar("trace", split.size());
  auto trace = arcal::export_trace(model, split, meta.dump(), o.batch,
                                   [&](std::int64_t done, std::int64_t) { bar->update(done); });
  bar->finish();
  arcal::save_trace(trace, o.out);
  std::size_t correct = 0;
  for (std::size_t i = 0; i < trace.n; ++i) {
    const double* row = trace.logits.data() + i * trace.classes;
    std::size_t best = 0;
    for (std::size_t k = 1; k < trace.classes; ++k)
      if (row[k] > row[best]) best = k;
    correct += static_cast<std::int64_t>(best) == trace.labels[i];
  }
  std::cout << fmt::format(
      "wrote {}: {} examples{}, {} classes, {} routing points; accuracy {:.4f}\n", o.out, trace.n,
      split.text ? fmt::format(" (tokens of {} of the split's {} sequences)", split.size(), full.size()) : "",
      trace.classes, trace.points, double(correct) / double(trace.n));
  return 0;
}

/// Every option of `arcal trace` but the loading ones (model_flags.hpp); docs/interface.md "Command
/// options", generated.
const arcal::OptionTable<TraceOptions>& trace_options() {
  using C = TraceOptions;
  using O = arcal::Option<C>;
  namespace R = arcal::ranges;
  static const arcal::OptionTable<C> table = {
      O("run", "--run", "Run directory written by arcal train", &C::run).given(),
      {"split", "--split", "test | val", &C::split},
      O("out", "--out", "Trace file to write (.npz)", &C::out).given(),
      {"batch_size", "--batch-size", "Evaluation batch size", &C::batch, R::batch_size},
      {"threads", "--threads", "Intra-op threads", &C::threads, R::threads},
      {"sequences", "--sequences",
       "Language-model runs: trace this many evenly spaced sequences of the split (0 = all; each is one cluster of "
       "--context tokens)",
       &C::sequences, arcal::IntRange{0, std::int64_t{1} << 30}},
      {"force", "--force", "Replace an existing --out file (atomically, once the new trace is complete)", &C::force},
  };
  return table;
}

arcal::cli::RunFn setup(CLI::App& app) {
  auto o = std::make_shared<TraceOptions>();
  arcal::cli::bind_options(app, trace_options(), *o);
  o->load.add_to(app);
  return [o]() { return run_trace(*o); };
}

}  // namespace

ARCAL_COMMAND("trace", arcal::cli::torch_command_description("trace"), setup);
