// arcal.Calibrator: the post-hoc calibrators of calib/fitted_calibrator.hpp with scikit-learn's
// fit / predict_proba, saved and restored through the same JSON as `arcal calibrate --save`.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <shared_mutex>

#include "bindings.hpp"
#include "calib/fitted_calibrator.hpp"
#include "convert.hpp"

namespace arcalpy {

namespace {

/// Guards one Calibrator's fitted state when threads share the object (the GIL is released while
/// fitting and applying, so a refit could replace the parameters under a running predict_proba:
/// segfaults and rows that were not probabilities). The rule: the fitted state is replaced only with
/// the GIL and the exclusive lock held; code without the GIL reads it under the shared lock, code with
/// the GIL reads it freely. The lock is never held while taking the GIL, so it cannot deadlock with it.
/// A copy gets its own lock.
struct ObjectLock {
  mutable std::shared_mutex m;
  ObjectLock() = default;
  ObjectLock(const ObjectLock&) {}
  ObjectLock& operator=(const ObjectLock&) { return *this; }
};

struct Calibrator {
  std::string method;
  arcal::CalibratorOptions options;
  bool fitted = false;
  arcal::FittedCalibrator fit;
  ObjectLock lock;
};

arcal::Predictions predictions(py::handle logits, py::handle probs, const std::string& fn) {
  if (logits.is_none() == probs.is_none()) value_error(fn, "give exactly one of logits= and probs=");
  if (!logits.is_none()) {
    const LogitMatrix z = logit_matrix(logits, fn, "logits");
    std::vector<double> v(z.n * z.k);
    if (z.is_float32) {
      const float* f = static_cast<const float*>(z.data);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = f[i];
    } else {
      const double* d = static_cast<const double*>(z.data);
      std::copy(d, d + v.size(), v.begin());
    }
    py::gil_scoped_release release;
    return arcal::predictions_from_logits(std::move(v), z.n, z.k, fn);
  }
  const DoubleMatrix p = double_matrix(probs, fn, "probs");
  std::vector<double> v(p.data, p.data + p.n * p.k);
  py::gil_scoped_release release;
  return arcal::predictions_from_probs(std::move(v), p.n, p.k, fn);
}

py::dict options_dict(const Calibrator& c) {
  py::dict d;
  d["bins"] = c.options.bins;
  d["knots"] = c.options.knots;
  d["l2"] = c.options.l2;
  d["pseudo_count"] = c.options.pseudo_count;
  return d;
}

void set_options(Calibrator& c, const py::dict& kwargs) {
  for (auto item : kwargs) {
    const auto key = item.first.cast<std::string>();
    try {
      // Size-like options are bounded as in the library (core/limits.hpp): bins = 10**9 grew until the
      // kernel killed the process, knots = 10**6 ran for minutes.
      if (key == "bins") {
        const long long v = item.second.cast<long long>();
        check_int_range("Calibrator", "option 'bins'", v, arcal::ranges::calibrator_bins);
        c.options.bins = static_cast<int>(v);
      } else if (key == "knots") {
        const long long v = item.second.cast<long long>();
        check_int_range("Calibrator", "option 'knots'", v, arcal::ranges::calibrator_knots);
        c.options.knots = static_cast<int>(v);
      } else if (key == "l2")
        c.options.l2 = item.second.cast<double>();
      else if (key == "pseudo_count")
        c.options.pseudo_count = item.second.cast<double>();
      else
        value_error("Calibrator", "unknown option '" + key + "' (bins, knots, l2, pseudo_count)");
    } catch (const py::cast_error&) {
      value_error("Calibrator", "option '" + key + "' must be a number");
    }
  }
}

Calibrator make(const std::string& method, const py::dict& kwargs) {
  const auto& methods = arcal::calibrator_methods();
  if (std::find(methods.begin(), methods.end(), method) == methods.end())
    value_error("Calibrator",
                "unknown method '" + method + "' (temperature, platt, isotonic, histogram, nw, qats, vector, matrix)");
  Calibrator c;
  c.method = method;
  set_options(c, kwargs);
  return c;
}

const arcal::FittedCalibrator& fitted(const Calibrator& c, const std::string& fn) {
  if (!c.fitted)
    value_error(fn, "this Calibrator('" + c.method + "') is not fitted; call fit(labels, logits=...) first");
  return c.fit;
}

py::object to_dict(const Calibrator& c) { return json_to_py(arcal::calibrator_json(fitted(c, "Calibrator.to_dict"))); }

Calibrator from_dict(py::object d) {
  Calibrator c;
  c.fit = arcal::calibrator_from_json(py_to_json(d, "Calibrator.from_dict"), "Calibrator.from_dict");
  c.method = c.fit.method;
  c.options = c.fit.options;
  c.fitted = true;
  return c;
}

}  // namespace

void bind_calibrator(py::module_& m) {
  using namespace pybind11::literals;
  py::class_<Calibrator>(m, "Calibrator",
                         R"doc(Calibrator(method, **options): a post-hoc calibrator (docs/method.md §5).

method: "temperature", "platt", "isotonic", "histogram", "nw", "qats", "vector" or "matrix".
options: bins (histogram, 15), knots (qats, 8), l2 (vector/matrix ridge, 1e-4), pseudo_count (nw, 1.0).

    cal = arcal.Calibrator("temperature").fit(val_labels, logits=val_logits)
    p = cal.predict_proba(logits=test_logits)          # [N, K] float64
    json.dump(cal.to_dict(), f)                          # the JSON of `arcal calibrate --save`
    cal2 = arcal.Calibrator.from_dict(json.load(f))      # the same outputs, bit for bit

Each method applies to logits or probabilities (from probabilities, log p serves as logits). The CLI's
`arcal calibrate --fit/--apply/--params` runs the same code, so a calibrator saved by either applies
identically in the other.)doc")
      .def(py::init([](const std::string& method, py::kwargs kwargs) { return make(method, kwargs); }), "method"_a)
      .def(
          "fit",
          [](py::object self, py::object labels, py::object logits, py::object probs) {
            Calibrator& c = self.cast<Calibrator&>();
            const std::string fn = "Calibrator.fit";
            const Labels y = labels_array(labels, fn);
            const arcal::Predictions p = predictions(logits, probs, fn);
            if (y.view.size() != p.n)
              value_error(fn, "labels has " + std::to_string(y.view.size()) +
                                  " entries, but the predictions have N = " + std::to_string(p.n) + " rows");
            const std::vector<std::int64_t> yv(y.view.begin(), y.view.end());
            arcal::FittedCalibrator result;
            {
              PythonInterruptPoll poll;
              py::gil_scoped_release release;
              result = arcal::fit_calibrator(c.method, p, yv, c.options);
            }
            // With the GIL and the exclusive lock: waits for running predict_proba calls on this object
            // (they hold the shared lock without the GIL, so they finish without needing it).
            const std::string warning = result.warning;
            {
              std::unique_lock<std::shared_mutex> write(c.lock.m);
              c.fit = std::move(result);
              c.fitted = true;
            }
            // A fit that should not be trusted warns (besides converged: false in to_dict); a warnings
            // filter set to "error" turns it into an exception, which propagates.
            if (!warning.empty() && PyErr_WarnEx(PyExc_RuntimeWarning, (fn + ": " + warning).c_str(), 1) != 0)
              throw py::error_already_set();
            return self;
          },
          "labels"_a, py::kw_only(), "logits"_a = py::none(), "probs"_a = py::none(),
          "Fits on labels [N] and logits= or probs= [N, K]; returns self.")
      .def(
          "predict_proba",
          [](const Calibrator& c, py::object logits, py::object probs) {
            const std::string fn = "Calibrator.predict_proba";
            const arcal::FittedCalibrator& f = fitted(c, fn);
            const arcal::Predictions p = predictions(logits, probs, fn);
            auto* out = new std::vector<double>();
            py::capsule owner(out, [](void* v) { delete static_cast<std::vector<double>*>(v); });
            {
              PythonInterruptPoll poll;
              py::gil_scoped_release release;
              std::shared_lock<std::shared_mutex> read(c.lock.m);  // a refit waits until this is done
              *out = arcal::apply_calibrator(f, p);
            }
            return py::array_t<double>({static_cast<py::ssize_t>(p.n), static_cast<py::ssize_t>(p.k)}, out->data(),
                                       owner);
          },
          py::kw_only(), "logits"_a = py::none(), "probs"_a = py::none(),
          "Calibrated probabilities [N, K] (float64) of logits= or probs= [N, K] (K as fitted).")
      .def("to_dict", &to_dict, "The fitted calibrator as the JSON object `arcal calibrate --save` writes.")
      .def_static("from_dict", &from_dict, "d"_a,
                  "The calibrator a to_dict() / `arcal calibrate --save` object describes (fitted).")
      .def_property_readonly("method", [](const Calibrator& c) { return c.method; })
      .def_property_readonly("options", &options_dict)
      .def_property_readonly("fitted", [](const Calibrator& c) { return c.fitted; })
      .def_property_readonly("classes",
                             [](const Calibrator& c) -> py::object {
                               return c.fitted ? py::object(py::int_(c.fit.classes)) : py::object(py::none());
                             })
      .def("__repr__",
           [](const Calibrator& c) {
             return "Calibrator('" + c.method + "'" +
                    (c.fitted
                         ? ", fitted on n = " + std::to_string(c.fit.n_fit) + ", K = " + std::to_string(c.fit.classes)
                         : std::string(", not fitted")) +
                    ")";
           })
      .def(py::pickle(
          [](const Calibrator& c) {
            return py::make_tuple(c.method, options_dict(c), c.fitted ? to_dict(c) : py::object(py::none()));
          },
          [](py::tuple t) {
            if (t.size() != 3) value_error("Calibrator", "invalid pickled state");
            if (!t[2].is_none()) return from_dict(t[2]);
            return make(t[0].cast<std::string>(), t[1].cast<py::dict>());
          }));
}

}  // namespace arcalpy
