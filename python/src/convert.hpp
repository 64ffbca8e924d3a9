// Conversions between Python and the arcal core, shared by every part of the module: JSON values
// (the library's JSON writers are the one source of every dict the module returns, so the module and
// the CLI cannot drift), numpy arrays as private copies (the library reads them without the GIL while
// other Python threads may write the caller's arrays), and numpy arrays to and from the npz layer's NpyArray (through
// parse_npy, so arrays from Python meet exactly the dtype rules and messages of arrays from files).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/interrupt.hpp"
#include "core/limits.hpp"
#include "core/span.hpp"
#include "io/npz.hpp"

namespace arcalpy {

namespace py = pybind11;

/// null -> None, bool, int, float, str, list, dict.
py::object json_to_py(const nlohmann::json& j);
/// The inverse, for dicts given to the module (Calibrator.from_dict): None, bool, int, float, str,
/// list/tuple, dict with str keys, numpy scalars and arrays (as lists). Throws ValueError otherwise.
nlohmann::json py_to_json(py::handle h, const std::string& where = "value");

/// For the life of the object, the library's long loops on this thread (bootstrap draws, the qats
/// optimiser: core/interrupt.hpp poll_interrupt) run Python's signal handlers every 100 ms, taking
/// the GIL for that moment only; a handler that raises (Ctrl-C: KeyboardInterrupt) stops the call,
/// which throws arcal::Interrupted with the Python error still set, and the module's exception
/// translator lets that error through. Create it while holding the GIL, before releasing it.
class PythonInterruptPoll {
 public:
  PythonInterruptPoll()
      : poll_([] {
          py::gil_scoped_acquire gil;
          return PyErr_CheckSignals() != 0;
        }) {}

 private:
  arcal::ScopedInterruptPoll poll_;
};

/// Throws ValueError unless v lies in r: "fn: NAME is V, but must be in [lo, hi]" (core/limits.hpp).
void check_int_range(const std::string& fn, const std::string& name, long long v, const arcal::IntRange& r);

/// Throws ValueError with "fn: message" (for checks made in the module itself).
[[noreturn]] void value_error(const std::string& fn, const std::string& message);

/// np.asarray(obj) (lists, numpy arrays, CPU torch tensors, anything with __array__).
py::array as_array(py::handle obj, const std::string& fn, const std::string& name);

/// A [n, k] float64 matrix: always a private float64 C-contiguous copy (read without the GIL, so it
/// must not be an array another thread can write; float16/float32/other float kinds are widened;
/// non-float dtypes are refused with ValueError naming fn and the array).
struct DoubleMatrix {
  py::array keep;  ///< keeps the buffer alive
  const double* data = nullptr;
  std::size_t n = 0, k = 0;
  bool copied = false;
};
DoubleMatrix double_matrix(py::handle obj, const std::string& fn, const std::string& name);

/// [n, k] logits as a private float32 or float64 C-contiguous copy (float32 kept as float32; other
/// floats as float64), read by the softmax without the GIL.
struct LogitMatrix {
  py::array keep;
  const void* data = nullptr;
  bool is_float32 = false;
  std::size_t n = 0, k = 0;
};
LogitMatrix logit_matrix(py::handle obj, const std::string& fn, const std::string& name);

/// Labels [n] as a private int64 copy, converted from any integer or bool dtype (uint8, int32, ...)
/// by numpy. Float labels are refused.
struct Labels {
  py::array keep;
  arcal::Span<std::int64_t> view;
};
/// A 1-d integer array read as int64 (labels, or cluster ids: `name` names it in messages).
Labels labels_array(py::handle obj, const std::string& fn, const std::string& name = "labels");

/// Softmax rows of [n, k] logits (float32 or float64) into double probabilities, with the arithmetic
/// of io/trace.hpp's trace_probabilities. Throws InputError (ValueError) naming fn and the index of a
/// non-finite logit. Call without the GIL.
void softmax_rows(const LogitMatrix& z, double* out, const std::string& fn);

/// A numpy array (or str / list of str) as the npz layer's array named `name`: the numpy image goes
/// through arcal::parse_npy, so float16, small and unsigned integers, big-endian and Fortran-ordered
/// arrays are converted as from a file and object arrays are refused with the same message.
arcal::NpyArray to_npy_array(py::handle obj, const std::string& name, const std::string& source);

/// An NpyArray as a numpy array that owns the bytes (moved, not copied); a 0-d unicode array becomes str.
py::object from_npy_array(arcal::NpyArray&& a);

}  // namespace arcalpy
