#include "convert.hpp"

#include <cmath>
#include <cstring>
#include <sstream>

#include "core/check.hpp"

namespace arcalpy {

namespace {

py::module_ numpy() { return py::module_::import("numpy"); }

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

std::string dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

char kind(const py::array& a) { return a.dtype().attr("kind").cast<std::string>()[0]; }

template <class T>
py::array ensure_c(const py::array& a) {
  return py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
}

bool aligned(const py::array& a) { return (a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) != 0; }

template <class T>
void softmax_typed(const T* z, std::size_t n, std::size_t k, double* p, const std::string& fn) {
  for (std::size_t i = 0; i < n; ++i) {
    const T* row = z + i * k;
    double* out = p + i * k;
    double m = -INFINITY;
    for (std::size_t c = 0; c < k; ++c) {
      const double v = static_cast<double>(row[c]);
      if (!std::isfinite(v)) {
        std::ostringstream s;
        s.precision(9);
        s << v;
        arcal::throw_input(
            fn, "logits[" + std::to_string(i) + ", " + std::to_string(c) + "] is " + s.str() + ", but must be finite");
      }
      m = v > m ? v : m;
    }
    double s = 0.0;
    for (std::size_t c = 0; c < k; ++c) s += (out[c] = std::exp(static_cast<double>(row[c]) - m));
    const double inv = 1.0 / s;
    for (std::size_t c = 0; c < k; ++c) out[c] *= inv;
  }
}

}  // namespace

[[noreturn]] void value_error(const std::string& fn, const std::string& message) {
  throw py::value_error(fn + ": " + message);
}

void check_int_range(const std::string& fn, const std::string& name, long long v, const arcal::IntRange& r) {
  if (!arcal::in_range(r, v))
    value_error(fn, name + " is " + std::to_string(v) + ", but must be in " + arcal::range_text(r));
}

py::object json_to_py(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return py::none();
    case nlohmann::json::value_t::boolean: return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return py::int_(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return py::int_(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: return py::float_(j.get<double>());
    case nlohmann::json::value_t::string: return py::str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      py::list l(j.size());
      for (std::size_t i = 0; i < j.size(); ++i) l[i] = json_to_py(j[i]);
      return l;
    }
    case nlohmann::json::value_t::object: {
      py::dict d;
      for (const auto& [key, value] : j.items()) d[py::str(key)] = json_to_py(value);
      return d;
    }
    default: return py::none();
  }
}

nlohmann::json py_to_json(py::handle h, const std::string& where) {
  if (h.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h)) {
    try {
      return h.cast<std::int64_t>();
    } catch (const py::cast_error&) {
      return h.cast<std::uint64_t>();
    }
  }
  if (py::isinstance<py::float_>(h)) return h.cast<double>();
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::isinstance<py::dict>(h)) {
    nlohmann::json j = nlohmann::json::object();
    for (auto item : h.cast<py::dict>()) {
      if (!py::isinstance<py::str>(item.first)) throw py::value_error(where + ": dict keys must be str");
      const auto key = item.first.cast<std::string>();
      j[key] = py_to_json(item.second, where + "['" + key + "']");
    }
    return j;
  }
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    nlohmann::json j = nlohmann::json::array();
    std::size_t i = 0;
    for (auto item : h) j.push_back(py_to_json(item, where + "[" + std::to_string(i++) + "]"));
    return j;
  }
  const auto np = numpy();
  if (py::isinstance(h, np.attr("ndarray"))) return py_to_json(h.attr("tolist")(), where);
  if (py::isinstance(h, np.attr("generic"))) return py_to_json(h.attr("item")(), where);
  throw py::value_error(where + ": cannot convert " +
                        py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>() + " to JSON");
}

py::array as_array(py::handle obj, const std::string& fn, const std::string& name) {
  if (obj.is_none()) value_error(fn, name + " is None");
  try {
    return numpy().attr("asarray")(obj);
  } catch (py::error_already_set& e) {
    value_error(fn, name + " is not an array (" + std::string(e.what()) + ")");
  }
}

DoubleMatrix double_matrix(py::handle obj, const std::string& fn, const std::string& name) {
  py::array a = as_array(obj, fn, name);
  if (a.ndim() != 2) value_error(fn, name + " has shape " + shape_text(a) + ", but must be [N, K]");
  if (kind(a) != 'f')
    value_error(fn, name + " has dtype " + dtype_name(a) + ", but must be a float type (float16, float32, float64)");
  DoubleMatrix m;
  m.keep = ensure_c<double>(a);
  // The library reads it without the GIL, while another Python thread may write the caller's array:
  // a private copy unless the conversion already made one (arcal.metrics in a loop beside a thread
  // that mutated the labels used to crash the interpreter).
  if (!aligned(m.keep) || m.keep.ptr() == a.ptr()) m.keep = py::array_t<double>(m.keep.attr("copy")());
  m.copied = true;
  m.data = static_cast<const double*>(m.keep.data());
  m.n = static_cast<std::size_t>(a.shape(0));
  m.k = static_cast<std::size_t>(a.shape(1));
  return m;
}

LogitMatrix logit_matrix(py::handle obj, const std::string& fn, const std::string& name) {
  py::array a = as_array(obj, fn, name);
  if (a.ndim() != 2) value_error(fn, name + " has shape " + shape_text(a) + ", but must be [N, K]");
  if (kind(a) != 'f')
    value_error(fn, name + " has dtype " + dtype_name(a) + ", but must be a float type (float16, float32, float64)");
  LogitMatrix m;
  m.is_float32 = a.dtype().itemsize() == 4;
  m.keep = m.is_float32 ? ensure_c<float>(a) : ensure_c<double>(a);
  if (!aligned(m.keep) || m.keep.ptr() == a.ptr()) m.keep = m.keep.attr("copy")();  // private: read without the GIL
  m.data = m.keep.data();
  m.n = static_cast<std::size_t>(a.shape(0));
  m.k = static_cast<std::size_t>(a.shape(1));
  return m;
}

Labels labels_array(py::handle obj, const std::string& fn, const std::string& name) {
  py::array a = as_array(obj, fn, name);
  if (a.ndim() != 1) value_error(fn, name + " has shape " + shape_text(a) + ", but must be [N]");
  const char k = kind(a);
  if (k != 'i' && k != 'u' && k != 'b')
    value_error(fn, name + " has dtype " + dtype_name(a) + ", but must be an integer type (int64, int32, uint8, ...)");
  Labels l;
  l.keep = ensure_c<std::int64_t>(a);
  if (!aligned(l.keep) || l.keep.ptr() == a.ptr()) l.keep = l.keep.attr("copy")();  // private: read without the GIL
  l.view =
      arcal::Span<std::int64_t>(static_cast<const std::int64_t*>(l.keep.data()), static_cast<std::size_t>(a.shape(0)));
  return l;
}

void softmax_rows(const LogitMatrix& z, double* out, const std::string& fn) {
  if (z.is_float32)
    softmax_typed(static_cast<const float*>(z.data), z.n, z.k, out, fn);
  else
    softmax_typed(static_cast<const double*>(z.data), z.n, z.k, out, fn);
}

arcal::NpyArray to_npy_array(py::handle obj, const std::string& name, const std::string& source) {
  const auto np = numpy();
  py::array a =
      py::isinstance<py::str>(obj) ? py::array(np.attr("array")(obj)) : as_array(obj, source, "'" + name + "'");
  if (!(a.flags() & py::array::c_style)) a = a.attr("copy")("C");
  const std::string descr = a.dtype().attr("str").cast<std::string>();
  std::string shape = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) shape += std::to_string(a.shape(i)) + ", ";
  if (a.ndim() > 1)
    shape.resize(shape.size() - 2);
  else if (a.ndim() == 1)
    shape.resize(shape.size() - 1);
  shape += ")";
  const std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }\n";
  std::string image("\x93NUMPY\x02\x00", 8);
  for (int b = 0; b < 4; ++b) image += static_cast<char>((header.size() >> (8 * b)) & 0xFF);
  image += header;
  if (kind(a) != 'O') {
    const std::size_t bytes = static_cast<std::size_t>(a.nbytes());
    const std::size_t at = image.size();
    image.resize(at + bytes);
    if (bytes) std::memcpy(&image[at], a.data(), bytes);
  }
  return arcal::parse_npy(image, source, name);
}

py::object from_npy_array(arcal::NpyArray&& a) {
  if (a.dtype == arcal::DType::unicode && a.shape.empty()) return py::str(a.as_strings().at(0));
  const std::string descr = arcal::dtype_descr(a.dtype, a.itemsize / 4);
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end()), strides(a.shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(a.itemsize);
  for (std::size_t i = a.shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= static_cast<py::ssize_t>(a.shape[i]);
  }
  auto* bytes = new std::string(std::move(a.data));
  py::capsule owner(bytes, [](void* p) { delete static_cast<std::string*>(p); });
  return py::array(py::dtype(descr), shape, strides, bytes->data(), owner);
}

}  // namespace arcalpy
