// The extension module arcal._arcal: the arcal core from Python (docs/python.md). One file per part
// (metrics and trace files here; calibrators, audit, CEDAR beside it); every dict it returns is the
// library's own JSON (calibration_report_json, calibrator_json, audit_results_json) converted once
// by json_to_py, so `arcal.metrics` and `arcal metrics --json` cannot drift. Long computations run
// without the GIL; arcal::InputError becomes ValueError with the library's message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <vector>

#include "bindings.hpp"
#include "calib/metrics.hpp"
#include "calib/report_json.hpp"
#include "calib/trace_metrics.hpp"
#include "convert.hpp"
#include "core/error.hpp"
#include "io/npz.hpp"
#include "io/trace.hpp"
#include "report/report.hpp"

namespace arcalpy {

namespace {

py::dict metrics(py::object labels, py::object logits, py::object probs, int bins, bool ci, std::uint64_t seed,
                 int bootstrap, py::object cluster, bool smooth) {
  const std::string fn = "arcal.metrics";
  if (logits.is_none() == probs.is_none()) value_error(fn, "give exactly one of logits= and probs=");
  const Labels y = labels_array(labels, fn);
  arcal::ReportOptions opt;
  opt.bins = bins;
  opt.draws = ci ? bootstrap : 0;
  if (!ci) opt.consistency_draws = 0;  // point values only: no bootstrap, no consistency-test intervals
  opt.seed = seed;
  opt.row_sum_tolerance = 1e-4;  // the trace files' rule (io/trace.hpp), checked in the metrics' one scan
  opt.smooth_diagram = smooth;
  if (!cluster.is_none()) {
    const Labels c = labels_array(cluster, fn, "cluster");  // integer ids; >= 0 is checked by the report
    opt.cluster.assign(c.view.begin(), c.view.end());
  }
  // The CLI's ranges (core/limits.hpp): metrics --bins and --bootstrap.
  check_int_range(fn, "bins", bins, arcal::ranges::metrics_bins);
  check_int_range(fn, "bootstrap", bootstrap, arcal::ranges::bootstrap);
  PythonInterruptPoll poll;  // Ctrl-C stops the bootstrap within about 0.1 s
  nlohmann::json j;
  if (!probs.is_none()) {
    const DoubleMatrix p = double_matrix(probs, fn, "probs");
    if (p.n != y.view.size())
      value_error(fn, "labels has " + std::to_string(y.view.size()) +
                          " entries, but probs has N = " + std::to_string(p.n) + " rows");
    py::gil_scoped_release release;
    const arcal::CalibrationReport r =
        arcal::calibration_report(arcal::Span<double>(p.data, p.n * p.k), p.n, p.k, y.view, opt);
    j = arcal::calibration_report_json(r);
  } else {
    const LogitMatrix z = logit_matrix(logits, fn, "logits");
    if (z.n != y.view.size())
      value_error(fn, "labels has " + std::to_string(y.view.size()) +
                          " entries, but logits has N = " + std::to_string(z.n) + " rows");
    py::gil_scoped_release release;
    std::vector<double> p(z.n * z.k);
    softmax_rows(z, p.data(), fn);
    j = arcal::calibration_report_json(arcal::calibration_report(p, z.n, z.k, y.view, opt));
  }
  return json_to_py(j);
}

py::dict trace_metrics(py::object trace, int bins, bool ci, std::uint64_t seed, int bootstrap, bool smooth) {
  const std::string fn = "arcal.trace_metrics";
  check_int_range(fn, "bins", bins, arcal::ranges::metrics_bins);
  check_int_range(fn, "bootstrap", bootstrap, arcal::ranges::bootstrap);
  arcal::Trace t;
  if (py::isinstance<py::dict>(trace)) {  // arrays, as read_trace returns them or record_routing's arrays()
    std::vector<arcal::NpyArray> list;
    for (auto item : trace.cast<py::dict>()) {
      const auto name = item.first.cast<std::string>();
      list.push_back(to_npy_array(item.second, name, "trace"));
    }
    py::gil_scoped_release release;
    t = arcal::trace_from_arrays(list, "trace", fn);
  } else {
    const std::string path = py::str(py::module_::import("os").attr("fspath")(trace)).cast<std::string>();
    py::gil_scoped_release release;
    t = arcal::load_trace(path);
  }
  arcal::ReportOptions opt;
  opt.bins = bins;
  opt.draws = ci ? bootstrap : 0;
  if (!ci) opt.consistency_draws = 0;
  opt.seed = seed;
  opt.smooth_diagram = smooth;
  opt.cluster = t.cluster;  // a token trace: whole documents resampled, as `arcal metrics` does
  PythonInterruptPoll poll;
  nlohmann::json j;
  {
    py::gil_scoped_release release;
    j = arcal::trace_calibration_report_json(t, arcal::trace_calibration_report(t, opt));
  }
  return json_to_py(j);
}

py::dict read_trace(const std::string& path) {
  std::vector<arcal::NpyArray> arrays;
  {
    py::gil_scoped_release release;
    arrays = arcal::read_npz(path);
    arcal::trace_from_arrays(arrays, path, "read_trace");  // validates; the arrays are returned as read
  }
  py::dict d;
  for (auto& a : arrays) {
    const std::string name = a.name;
    d[py::str(name)] = from_npy_array(std::move(a));
  }
  return d;
}

void write_trace(const std::string& path, py::kwargs arrays) {
  std::vector<arcal::NpyArray> list;
  for (auto item : arrays) {
    const auto name = item.first.cast<std::string>();
    list.push_back(to_npy_array(item.second, name, path));
  }
  py::gil_scoped_release release;
  arcal::trace_from_arrays(list, path, "write_trace");
  arcal::write_npz(path, list, true);
}

py::dict report(py::object source, py::object out, bool force) {
  const std::string fn = "arcal.report";
  std::string out_dir =
      out.is_none() ? std::string() : py::str(py::module_::import("os").attr("fspath")(out)).cast<std::string>();
  arcal::ReportOutput r;
  if (py::isinstance<py::dict>(source)) {
    if (out_dir.empty())
      value_error(fn,
                  "a dict (what arcal.metrics or arcal.audit returned, or a parsed arcal metrics --json / calibrate "
                  "--json document) needs out= (the report directory)");
    const std::string text = py_to_json(source, "source").dump();
    py::gil_scoped_release release;
    r = arcal::write_report_text(text, "(dict given to arcal.report)", out_dir, force);
  } else {
    if (!py::isinstance<py::str>(source) && !py::hasattr(source, "__fspath__"))
      throw py::type_error(
          "arcal.report: source must be a directory holding results.json, a JSON file (str or "
          "os.PathLike) or a dict, not " +
          py::str(py::type::of(source).attr("__name__")).cast<std::string>());
    const std::string path = py::str(py::module_::import("os").attr("fspath")(source)).cast<std::string>();
    if (out_dir.empty()) out_dir = arcal::default_report_dir(path);
    py::gil_scoped_release release;
    r = arcal::write_report(path, out_dir, force);
  }
  py::dict d;
  d["html"] = r.html;
  d["markdown"] = r.markdown;
  d["figures"] = r.figures;
  d["tables"] = r.tables;
  d["verdict"] = r.verdict;
  return d;
}

}  // namespace

}  // namespace arcalpy

PYBIND11_MODULE(_arcal, m) {
  namespace py = pybind11;
  using namespace pybind11::literals;
  m.doc() = "The arcal C++ core (calibration metrics, calibrators, the routing-conditional audit, CEDAR attention).";
  m.attr("__version__") = ARCAL_VERSION;
  // arcal::InputError (bad data, files or options; exit code 2 in the CLI) -> ValueError, same message.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const arcal::InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const arcal::Interrupted&) {
      // A PythonInterruptPoll saw a signal handler raise: its error (KeyboardInterrupt) is still set.
      if (!PyErr_Occurred()) PyErr_SetNone(PyExc_KeyboardInterrupt);
    }
  });

  m.def("metrics", &arcalpy::metrics, "labels"_a, py::kw_only(), "logits"_a = py::none(), "probs"_a = py::none(),
        "bins"_a = 15, "ci"_a = true, "seed"_a = 0, "bootstrap"_a = 1000, "cluster"_a = py::none(), "smooth"_a = false,
        R"doc(Calibration metrics of predictions, as `arcal metrics --json` prints them.

Parameters
----------
labels : array [N] of int (int64 read in place; uint8, int32, ... converted), true class in [0, K).
logits : array [N, K] of float16/float32/float64, or
probs : array [N, K] of floats in [0, 1] (float64 C-contiguous is read in place, without a copy).
    Give exactly one of logits= and probs=.
bins : equal-width confidence bins (15).
ci : the intervals of `arcal metrics` (bootstrap for accuracy, NLL, Brier, AUROC; consistency-test
    inversion for the calibration errors, docs/method.md §4) and the consistency test's p; False
    computes point values only (much faster on large N).
seed : seed of the bootstrap and the label redraws. bootstrap : resamples when ci (1000).
cluster : array [N] of int ids >= 0 of dependent examples (the tokens of one sequence; a token trace's
    `cluster`), or None. With it the bootstrap resamples whole clusters and the calibration errors get
    its percentile interval (no consistency test, whose label redraws assume independent examples).
smooth : also the smooth reliability diagram (relplot's: the kernel curve at smECE's bandwidth on a
    200-point mesh, with a 200-resample percentile band when ci), under "smooth_reliability".

Returns
-------
dict with the keys of `arcal metrics --json` (docs/interface.md, docs/schema/metrics.schema.json):
schema ("arcal.metrics/1"), n, classes, bins, bootstrap, seed, level, accuracy, ece, mce, rmsce,
ada_ece, classwise_ece, debiased_ece, smece, smece_sigma, nll, brier, auroc (None where undefined),
ci {metric: [low, high] or None}, bias_corrected, consistency, reliability [{n, confidence, accuracy}]
(None in an empty bin; conf and acc repeat them, deprecated), ...; the same values the CLI computes
from the same data.

Raises ValueError for bad input, with the CLI's message (e.g. "calibration_report: labels[5] is 4, but
must be in [0, 3]"). The computation runs without the GIL.

Example: ``arcal.metrics(y, logits=model_logits)["ece"]``)doc");

  m.def("trace_metrics", &arcalpy::trace_metrics, "trace"_a, py::kw_only(), "bins"_a = 15, "ci"_a = true, "seed"_a = 0,
        "bootstrap"_a = 1000, "smooth"_a = false,
        R"doc(Calibration metrics of a trace, as `arcal metrics TRACE --json` prints them.

trace : a trace file's path, or a dict of its arrays (what read_trace returns). Either output form:
    the whole vector (logits or probs) or the top-k form of a large vocabulary (record_routing's
    topk=; every metric but classwise_ece, which is then None, and an "outputs" key saying so). A
    token trace's `cluster` makes the bootstrap resample whole documents.
bins, ci, seed, bootstrap, smooth : as for arcal.metrics.

Returns the dict of `arcal metrics --json` (without "file"). Raises ValueError naming the file, array,
index and constraint for a bad trace.

Example: ``arcal.trace_metrics("trace.npz")["ece"]``)doc");

  m.def("read_trace", &arcalpy::read_trace, "path"_a,
        R"doc(Reads a trace file (.npz) and returns {name: array} for every array it holds.

The file is checked as `arcal audit` checks it (logits or probs [N, K], labels [N], routing, features,
...; docs/interface.md) and ValueError names the file, array, index and constraint otherwise. Arrays
come back in the dtypes arcal holds them (float16 widened to float32, small integers to int32, big-endian
and Fortran-order data converted); `meta` comes back as a str (JSON).)doc");

  m.def("write_trace", &arcalpy::write_trace, "path"_a,
        R"doc(write_trace(path, **arrays): writes a trace file (.npz, compressed, readable by np.load).

Keyword arguments are the arrays (logits or probs, labels, routing, routing_sources, features,
feature_names, meta as a str of JSON, and any others, which are kept). The arrays are checked as a
trace before anything is written (ValueError otherwise); the file is written atomically.)doc");

  m.def("report", &arcalpy::report, "source"_a, "out"_a = py::none(), py::kw_only(), "force"_a = false,
        R"doc(report(source, out=None, *, force=False): the HTML/Markdown report of `arcal report`.

source : a directory holding results.json (arcal audit --out, arcal run), a JSON file (that
    results.json, or what `arcal metrics --json` / `arcal calibrate --json` printed), or a dict:
    what arcal.audit or arcal.metrics returned (then out= is required). A metrics document gives a
    classifier's calibration report (every metric with its interval, the reliability diagram with
    its consistency band); a calibrate document the same before and after the calibrator.
out : the report directory (default DIR/report, or STEM_report beside a JSON file). It is replaced
    as a whole, so it must be an earlier report or new, unless force=True.

Returns {html, markdown, figures, tables, verdict}: the paths written and the report's first line.
Needs gnuplot (Debian's gnuplot-nox) for the figures. ValueError names the file and the problem.)doc");

  arcalpy::bind_calibrator(m);
  arcalpy::bind_audit(m);
  arcalpy::bind_cedar(m);
  arcalpy::bind_recording(m);
}
