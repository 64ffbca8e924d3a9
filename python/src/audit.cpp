// arcal.audit: the routing-conditional audit of `arcal audit` (audit/audit_pipeline.hpp, the
// same call the CLI makes) on traces given as paths or as dicts of arrays; returns results.json.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <utility>
#include <filesystem>
#include <sstream>

#include "audit/routing_stats.hpp"
#include "results/audit_files.hpp"
#include "audit/run_input.hpp"
#include "audit/audit_pipeline.hpp"
#include "bindings.hpp"
#include "convert.hpp"
#include "io/trace.hpp"

namespace arcalpy {

namespace {

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

py::dict audit(py::object traces, py::object stats, int permutations, std::uint64_t seed, bool sensitivity,
               bool exact_null, std::size_t bins, bool equal_mass, double alpha, bool condcal, bool probes,
               int probe_restarts, int probe_repeats, int threads, py::object names, py::object out, bool force,
               bool quiet, py::kwargs kwargs) {
  const std::string fn = "arcal.audit";
  // Every option goes through the audit family's option table (audit/audit_options.hpp): the same
  // names, types and ranges as `arcal audit`'s flags and the study file's [audit] keys.
  nlohmann::json opts = {{"permutations", permutations},
                         {"seed", seed},
                         {"sensitivity", sensitivity},
                         {"exact_null", exact_null},
                         {"bins", bins},
                         {"equal_mass", equal_mass},
                         {"alpha", alpha},
                         {"condcal", condcal},
                         {"probes", probes},
                         {"probe_restarts", probe_restarts},
                         {"probe_repeats", probe_repeats},
                         {"threads", threads}};
  for (auto item : kwargs) {
    const std::string key = item.first.cast<std::string>();
    if (key == "stats" || opts.contains(key)) value_error(fn, "option '" + key + "' given twice");
    opts[key] = py_to_json(item.second, key);
  }
  arcal::FullAuditOptions o;
  arcal::options_from_json(arcal::audit_option_table(), opts, o, fn);  // InputError -> ValueError

  if (py::isinstance<py::str>(traces) || py::isinstance<py::dict>(traces) || !py::hasattr(traces, "__iter__"))
    value_error(fn, "traces must be a list of trace file paths or dicts of arrays");
  const py::list items = py::module_::import("builtins").attr("list")(traces);
  if (items.size() == 0) value_error(fn, "traces is empty (give at least one trace)");
  std::vector<std::string> run_names;
  if (!names.is_none()) {
    run_names = names.cast<std::vector<std::string>>();
    if (run_names.size() != items.size())
      value_error(fn, "names has " + std::to_string(run_names.size()) + " entries, but traces has " +
                          std::to_string(items.size()));
  }
  // Each trace: a path (read as `arcal audit` reads it) or arrays (checked by the same code).
  const py::object fspath = py::module_::import("os").attr("fspath");
  const py::object pathlike = py::module_::import("os").attr("PathLike");
  std::vector<std::string> paths(items.size());
  std::vector<std::vector<arcal::NpyArray>> arrays(items.size());
  std::vector<std::string> run_ids(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    const py::handle t = items[i];
    const std::string label = "traces[" + std::to_string(i) + "]";
    if (py::isinstance<py::str>(t) || py::isinstance(t, pathlike)) {
      paths[i] = fspath(t).cast<std::string>();
      run_ids[i] = paths[i];
    } else if (py::isinstance<py::dict>(t)) {
      for (auto item : t.cast<py::dict>()) {
        if (!py::isinstance<py::str>(item.first)) value_error(fn, label + ": array names must be str");
        arrays[i].push_back(to_npy_array(item.second, item.first.cast<std::string>(), label));
      }
      run_ids[i] = label;
    } else {
      value_error(fn, label + " is a " + py::str(py::type::handle_of(t).attr("__name__")).cast<std::string>() +
                          ", but must be a path or a dict of arrays");
    }
    if (!run_names.empty()) run_ids[i] = run_names[i];
  }
  std::vector<std::string> stat_names;
  if (py::isinstance<py::str>(stats))
    stat_names = split_names(stats.cast<std::string>());
  else if (!stats.is_none())
    stat_names = stats.cast<std::vector<std::string>>();
  if (!stats.is_none() && stat_names.empty())
    value_error(fn, "stats names no statistic, so the test family would be empty");
  const std::string out_dir = out.is_none() ? "" : py::str(fspath(out)).cast<std::string>();
  // The CLI's rule (`arcal audit --out D` without --force): an earlier audit's results are replaced only
  // when asked, checked before any work and again before writing.
  auto check_out = [&] {
    std::error_code ec;
    if (!out_dir.empty() && !force && std::filesystem::exists(out_dir + "/results.json", ec))
      value_error(fn, "out: " + out_dir +
                          "/results.json already exists (an earlier audit); pass force=True to replace "
                          "its results, or choose another out");
  };
  check_out();
  // Progress bars and stage lines on stderr, as `arcal audit` prints them; quiet=True silences them.
  o.progress = !quiet;

  nlohmann::json j;
  {
    PythonInterruptPoll poll;  // Ctrl-C raises KeyboardInterrupt within about 0.1 s (every worker stops)
    py::gil_scoped_release release;
    std::vector<arcal::Trace> loaded(items.size());
    for (std::size_t i = 0; i < items.size(); ++i)
      loaded[i] = paths[i].empty() ? arcal::trace_from_arrays(arrays[i], "traces[" + std::to_string(i) + "]", fn)
                                   : arcal::load_trace(paths[i]);
    // stats=None: what applies to the first trace, as the CLI without --stat (default_statistics).
    if (stat_names.empty()) {
      stat_names = arcal::default_statistics(loaded[0]);
      if (stat_names.empty())
        arcal::throw_input(fn, (paths[0].empty() ? std::string("traces[0]") : paths[0]) +
                                   " has logits and labels only (no routing, no features), so there is no signal to "
                                   "audit beyond the outputs; its calibration and reliability diagram: "
                                   "arcal.metrics(labels, logits=...) and arcal.reliability_diagram(...)");
    }
    std::vector<arcal::AuditRunInput> runs;
    for (std::size_t i = 0; i < loaded.size(); ++i) {
      runs.push_back(arcal::make_audit_run_input(loaded[i], run_ids[i], stat_names));
      loaded[i] = arcal::Trace{};
    }
    const arcal::AuditResults res = arcal::run_full_audit(std::move(runs), o);
    if (!out_dir.empty()) {
      check_out();  // an audit that finished meanwhile (no Python object is touched: no GIL needed)
      arcal::write_audit_results(res, out_dir);
    }
    j = arcal::audit_results_json(res);
  }
  return json_to_py(j);
}

}  // namespace

void bind_audit(py::module_& m) {
  using namespace pybind11::literals;
  m.def("audit", &audit, "traces"_a, py::kw_only(), "stats"_a = py::none(), "permutations"_a = 10000, "seed"_a = 0,
        "sensitivity"_a = false, "exact_null"_a = false, "bins"_a = 15, "equal_mass"_a = false, "alpha"_a = 0.05,
        "condcal"_a = true, "probes"_a = true, "probe_restarts"_a = 1, "probe_repeats"_a = 5, "threads"_a = 0,
        "names"_a = py::none(), "out"_a = py::none(), "force"_a = false, "quiet"_a = false,
        R"doc(The routing-conditional calibration audit of `arcal audit` (docs/method.md §6); returns results.json.

Parameters
----------
traces : list of trace file paths (str or os.PathLike) and/or dicts of arrays with the trace-file keys
    (logits or probs [N, K], labels [N], routing/routing_sources, features [N, F] with feature_names,
    meta; docs/interface.md), one per run. Arrays are checked exactly as files are.
stats : statistics to audit: a list or "re,rdv,NAME" string of re, rdv (routing entropy and depth
    variance) and feature names. None (as `arcal audit` without --stat): those that apply to the first
    trace: ["re", "rdv"] for depth routing, ["re"] for routing_kind "unordered" (MoE experts have no
    order, so no depth variance), all its features when it has no routing.
permutations : within-bin permutations R of the diagnostic (10000). seed : every seed of the audit.
sensitivity : the injection audit (§6.5; refits every probe, minutes). exact_null : the exact-null
    audit (§6.6; minutes).
bins, equal_mass, alpha, condcal, probes, probe_restarts, probe_repeats, threads : as the CLI's --bins,
    --equal-mass, --alpha, --no-condcal, --no-probes, --probe-restarts, --probe-repeats, --threads.
names : run ids, one per trace (default: the path, or "traces[i]" for arrays).
out : a directory to also write results.json and the CSV tables to, as `arcal audit --out`. An
    earlier audit's results there are replaced only with force=True (as --force), checked before the
    work starts. quiet : no progress bars or stage lines on stderr (they are on by default).
**options : sensitivity_effects, sensitivity_draws, sensitivity_threshold, sensitivity_threshold_effect,
    correction_ridge, null_replicates, null_variants, null_model_based, null_sequential, refit_restarts,
    refit_patience, refit_cold, refit_subsample (as the CLI's flags of the same names).

Returns
-------
dict: the results.json object (schema "arcal.audit/3"). res["verdict"] first: its "answer"
(present / negligible / absent / undetected / not assessed) and "summary" sentence, with the decision
chain (dependence, primary gain with its interval, beyond the outputs); then diagnostic (tests with p,
p_holm, p_bh, gap),
condcal, probes (per run and the across-run comparisons with their verdicts), and sensitivity /
exact_null when asked. Runs without the GIL; LibTorch's thread count is restored afterwards.)doc");
}

}  // namespace arcalpy
