#include "io/npz.hpp"

#include <algorithm>
#include <climits>
#include <sys/stat.h>

#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <stdexcept>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"
#include "io/npz_detail.hpp"

namespace arcal {

namespace {}  // namespace

namespace npz_detail {

void fail(const std::string& file, const std::string& name, const std::string& what) {
  throw InputError("npz: " + file + (name.empty() ? "" : ": array '" + name + "'") + ": " + what);
}

std::string printable(const std::string& s, std::size_t max) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (s.size() > max) out += "... (" + std::to_string(s.size()) + " characters)";
  return out;
}

}  // namespace npz_detail

namespace {

using npz_detail::fail;
using npz_detail::printable;

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// ---- .npy header: a Python dict literal such as
// {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
struct Header {
  std::string descr;
  bool fortran = false;
  std::vector<std::size_t> shape;
  bool has_descr = false, has_order = false, has_shape = false;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& s, const std::string& file, const std::string& name)
      : s_(s), file_(file), name_(name) {}

  Header parse() {
    Header h;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = quoted();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"')
          fail(file_, name_, "structured dtypes are not supported (descr must be a plain type string)");
        h.descr = quoted();
        h.has_descr = true;
      } else if (key == "fortran_order") {
        h.fortran = boolean();
        h.has_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        h.has_shape = true;
      } else {
        bad("unknown header key '" + key + "'");
      }
      skip_ws();
      if (peek() == ',') ++pos_;
    }
    if (!h.has_descr || !h.has_order || !h.has_shape) bad("header lacks one of 'descr', 'fortran_order', 'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& why) {
    fail(file_, name_, "malformed .npy header (" + why + "): " + printable(s_));
  }
  char peek() { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t')) ++pos_;
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string quoted() {
    skip_ws();
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string");
    const std::size_t end = s_.find(q, pos_ + 1);
    if (end == std::string::npos) bad("unterminated string");
    std::string out = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return out;
  }
  bool boolean() {
    if (s_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (s_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    bad("expected True or False");
  }
  std::vector<std::size_t> tuple() {
    expect('(');
    std::vector<std::size_t> dims;
    while (true) {
      skip_ws();
      if (peek() == ')') {
        ++pos_;
        break;
      }
      if (peek() < '0' || peek() > '9') bad("expected a dimension");
      std::uint64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (!checked_mul(v, 10, v) || !checked_add(v, static_cast<std::uint64_t>(peek() - '0'), v))
          bad("dimension " + printable(s_.substr(pos_ - std::min<std::size_t>(pos_, 20), 40)) + " overflows 64 bits");
        ++pos_;
      }
      if (dims.size() >= input_limits().max_ndim)
        bad("more than " + std::to_string(input_limits().max_ndim) + " dimensions");
      dims.push_back(static_cast<std::size_t>(v));
      skip_ws();
      if (peek() == ',') ++pos_;
    }
    return dims;
  }

  const std::string& s_;
  const std::string& file_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

void decode_descr(const std::string& descr, const std::string& file, const std::string& name, DType& dtype,
                  std::size_t& itemsize) {
  if (descr.size() < 2) fail(file, name, "unsupported dtype '" + descr + "'");
  const char order = descr[0];
  const std::string type = descr.substr(1);
  if (order == '>')
    fail(file, name, "big-endian dtype '" + printable(descr) + "' is not supported; save little-endian arrays");
  if (type == "O" || order == 'O')
    fail(file, name, "object dtype (pickled data) is not supported and is never unpickled");
  if (order != '<' && order != '|' && order != '=') fail(file, name, "unsupported dtype '" + printable(descr) + "'");
  if (type == "f4") {
    dtype = DType::f4;
    itemsize = 4;
  } else if (type == "f8") {
    dtype = DType::f8;
    itemsize = 8;
  } else if (type == "i4") {
    dtype = DType::i4;
    itemsize = 4;
  } else if (type == "i8") {
    dtype = DType::i8;
    itemsize = 8;
  } else if (type == "b1" || type == "?") {
    dtype = DType::b1;
    itemsize = 1;
  } else if (type[0] == 'U' && type.size() > 1 && type.find_first_not_of("0123456789", 1) == std::string::npos) {
    dtype = DType::unicode;
    std::uint64_t chars = 0;
    for (std::size_t i = 1; i < type.size(); ++i)
      if (!checked_mul(chars, 10, chars) || !checked_add(chars, std::uint64_t(type[i] - '0'), chars) ||
          chars > input_limits().max_array_bytes / 4)
        fail(file, name,
             "unicode dtype '" + printable(descr) + "' has more characters per element than the limit of " +
                 std::to_string(input_limits().max_array_bytes / 4));
    if (chars == 0) fail(file, name, "zero-length unicode dtype '" + descr + "' is not supported");
    itemsize = static_cast<std::size_t>(4 * chars);
  } else {
    fail(file, name,
         "unsupported dtype '" + printable(descr) + "' (supported: float32, float64, int32, int64, bool, unicode)");
  }
}

/// Elements of a shape; false when the product overflows 64 bits.
bool checked_product(const std::vector<std::size_t>& shape, std::uint64_t& n) {
  n = 1;
  for (auto d : shape)
    if (!checked_mul(n, d, n)) return false;
  return true;
}

std::size_t product(const std::vector<std::size_t>& shape) {
  std::uint64_t n = 1;
  if (!checked_product(shape, n))
    throw InputError("npz: shape " + shape_text(shape) + " has more elements than fit in 64 bits");
  return static_cast<std::size_t>(n);
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<std::uint32_t> utf8_decode(const std::string& s, const std::string& name) {
  std::vector<std::uint32_t> cps;
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + static_cast<std::size_t>(len) > s.size())
      throw InputError("npz: array '" + name + "': string is not valid UTF-8");
    std::uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if ((cc >> 6) != 2) throw InputError("npz: array '" + name + "': string is not valid UTF-8");
      cp = (cp << 6) | (cc & 0x3F);
    }
    cps.push_back(cp);
    i += static_cast<std::size_t>(len);
  }
  return cps;
}

template <class T>
T load_le(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // little-endian host assumed (checked below)
  return v;
}

template <class T>
NpyArray from_plain(std::string name, DType dtype, const std::vector<T>& v, std::vector<std::size_t> shape) {
  NpyArray a;
  a.name = std::move(name);
  a.dtype = dtype;
  a.itemsize = sizeof(T);
  a.shape = std::move(shape);
  if (product(a.shape) != v.size())
    throw InputError("npz: array '" + a.name + "': " + std::to_string(v.size()) +
                     " values do not fill the shape given (" + std::to_string(product(a.shape)) + " elements)");
  if (!v.empty()) a.data.assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  return a;
}

constexpr bool host_little_endian() {
  return true;  // arcal targets x86-64 and aarch64 Linux; both little-endian.
}
static_assert(host_little_endian(), "arcal's npz code assumes a little-endian host");

// ---- What numpy also writes, converted once on read to the dtypes above: big-endian byte order,
// Fortran order, float16 (widened to float32 exactly), int8/int16/uint8/uint16 (to int32) and
// uint32/uint64 (to int64; a uint64 value above INT64_MAX is refused). `payload` holds the data bytes
// after the header; the header's descr and fortran_order are rewritten to what the data now is.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {        // subnormal half: normalise into a float32 normal
    exp = 113;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3FFu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void normalise_npy(Header& h, std::string& payload, const std::string& file, const std::string& name) {
  if (h.descr.size() < 3) return;  // decode_descr names what is wrong
  const char order = h.descr[0], kind = h.descr[1];
  if (order != '<' && order != '>' && order != '|' && order != '=') return;
  const std::string digits = h.descr.substr(2);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6) return;
  const std::size_t width = std::stoul(digits);
  if (std::string("fiubU").find(kind) == std::string::npos || width == 0) return;
  const std::size_t unit = kind == 'U' ? 4 : width;  // bytes per byte-swapped unit
  const std::size_t itemsize = kind == 'U' ? 4 * width : width;
  const bool swap = order == '>' && unit > 1;
  const bool transpose = h.fortran && h.shape.size() > 1;
  std::string target;  // the descr the data is converted to ("" = keep)
  if (kind == 'f' && width == 2)
    target = "<f4";
  else if ((kind == 'i' && (width == 1 || width == 2)) || (kind == 'u' && (width == 1 || width == 2)))
    target = "<i4";
  else if (kind == 'u' && (width == 4 || width == 8))
    target = "<i8";
  if (!swap && !transpose && target.empty()) {
    if (order == '>' && unit == 1) h.descr[0] = '|';
    return;
  }
  std::size_t n = 1;
  for (auto d : h.shape) {
    if (d != 0 && n > SIZE_MAX / d) fail(file, name, "shape is too large");
    n *= d;
  }
  if (n > SIZE_MAX / itemsize || payload.size() != n * itemsize)
    fail(file, name,
         "data is " + std::to_string(payload.size()) + " bytes, but the header's shape needs " +
             (n > SIZE_MAX / itemsize ? std::string("more") : std::to_string(n * itemsize)));
  if (swap)
    for (std::size_t off = 0; off + unit <= payload.size(); off += unit)
      std::reverse(&payload[off], &payload[off + unit]);
  if (transpose) {
    // Element at C index (i_0, ..., i_{D-1}) sits at sum_j i_j * stride_j with Fortran strides.
    const std::size_t D = h.shape.size();
    std::vector<std::size_t> stride(D), idx(D, 0);
    std::size_t s = 1;
    for (std::size_t j = 0; j < D; ++j) {
      stride[j] = s;
      s *= h.shape[j];
    }
    std::string c_order(payload.size(), '\0');
    std::size_t src = 0;
    for (std::size_t e = 0; e < n; ++e) {
      std::memcpy(&c_order[e * itemsize], &payload[src * itemsize], itemsize);
      for (std::size_t j = D; j-- > 0;) {  // odometer over the C index, last axis fastest
        if (++idx[j] < h.shape[j]) {
          src += stride[j];
          break;
        }
        src -= stride[j] * (idx[j] - 1);
        idx[j] = 0;
      }
    }
    payload.swap(c_order);
    h.fortran = false;
  }
  h.descr[0] = unit == 1 ? '|' : '<';
  if (target.empty()) return;
  const char* p = payload.data();
  std::string out;
  if (target == "<f4") {
    out.resize(4 * n);
    for (std::size_t i = 0; i < n; ++i) {
      const float f = half_to_float(load_le<std::uint16_t>(p + 2 * i));
      std::memcpy(&out[4 * i], &f, 4);
    }
  } else if (target == "<i4") {
    out.resize(4 * n);
    for (std::size_t i = 0; i < n; ++i) {
      std::int32_t v = 0;
      if (kind == 'i')
        v = width == 1 ? std::int32_t(load_le<std::int8_t>(p + i)) : load_le<std::int16_t>(p + 2 * i);
      else
        v = width == 1 ? std::int32_t(load_le<std::uint8_t>(p + i)) : load_le<std::uint16_t>(p + 2 * i);
      std::memcpy(&out[4 * i], &v, 4);
    }
  } else {
    out.resize(8 * n);
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t v = 0;
      if (width == 4) {
        v = load_le<std::uint32_t>(p + 4 * i);
      } else {
        const std::uint64_t u = load_le<std::uint64_t>(p + 8 * i);
        if (u > std::uint64_t(INT64_MAX))
          fail(file, name,
               "uint64 element " + std::to_string(i) + " is " + std::to_string(u) +
                   ", but must be <= " + std::to_string(INT64_MAX) + " (read as int64)");
        v = std::int64_t(u);
      }
      std::memcpy(&out[8 * i], &v, 8);
    }
  }
  payload.swap(out);
  h.descr = target;
}

}  // namespace

std::string dtype_descr(DType dtype, std::size_t unicode_chars) {
  switch (dtype) {
    case DType::f4: return "<f4";
    case DType::f8: return "<f8";
    case DType::i4: return "<i4";
    case DType::i8: return "<i8";
    case DType::b1: return "|b1";
    case DType::unicode: return "<U" + std::to_string(unicode_chars);
  }
  return "?";
}

std::size_t NpyArray::size() const { return product(shape); }

namespace {
/// The element count, after checking that `data` holds all of it (arrays built by hand may not).
std::size_t checked_size(const NpyArray& a, const std::string& context) {
  const std::size_t n = a.size();
  std::uint64_t need = 0;
  if (!checked_mul(n, a.itemsize, need) || a.data.size() != need)
    throw InputError(context + ": array '" + a.name + "' holds " + std::to_string(a.data.size()) +
                     " data bytes, but its shape " + shape_text(a.shape) + " needs " + std::to_string(n) + " x " +
                     std::to_string(a.itemsize));
  return n;
}
}  // namespace

std::vector<double> NpyArray::as_double(const std::string& context) const {
  const std::size_t n = checked_size(*this, context);
  std::vector<double> out(n);
  const char* p = data.data();
  switch (dtype) {
    case DType::f4:
      for (std::size_t i = 0; i < n; ++i) out[i] = load_le<float>(p + 4 * i);
      break;
    case DType::f8:
      if (n > 0) std::memcpy(out.data(), p, 8 * n);  // memcpy's pointers must not be null, even for 0 bytes
      break;
    case DType::i4:
      for (std::size_t i = 0; i < n; ++i) out[i] = load_le<std::int32_t>(p + 4 * i);
      break;
    case DType::i8:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>(load_le<std::int64_t>(p + 8 * i));
      break;
    case DType::b1:
      for (std::size_t i = 0; i < n; ++i) out[i] = p[i] != 0 ? 1.0 : 0.0;
      break;
    case DType::unicode:
      throw InputError(context + ": array '" + name + "' has dtype " + dtype_descr(dtype, itemsize / 4) +
                       ", but must be numeric");
  }
  return out;
}

std::vector<float> NpyArray::as_float(const std::string& context) const {
  if (dtype == DType::f4) {
    std::vector<float> out(checked_size(*this, context));
    if (!out.empty()) std::memcpy(out.data(), data.data(), 4 * out.size());
    return out;
  }
  const auto d = as_double(context);
  return std::vector<float>(d.begin(), d.end());
}

std::vector<std::int64_t> NpyArray::as_int64(const std::string& context) const {
  const std::size_t n = checked_size(*this, context);
  std::vector<std::int64_t> out(n);
  const char* p = data.data();
  switch (dtype) {
    case DType::i4:
      for (std::size_t i = 0; i < n; ++i) out[i] = load_le<std::int32_t>(p + 4 * i);
      break;
    case DType::i8:
      if (n > 0) std::memcpy(out.data(), p, 8 * n);
      break;
    case DType::b1:
      for (std::size_t i = 0; i < n; ++i) out[i] = p[i] != 0;
      break;
    default:
      throw InputError(context + ": array '" + name + "' has dtype " + dtype_descr(dtype, itemsize / 4) +
                       ", but must be an integer type (int32 or int64)");
  }
  return out;
}

std::vector<std::string> NpyArray::as_strings(const std::string& context) const {
  if (dtype != DType::unicode)
    throw InputError(context + ": array '" + name + "' has dtype " + dtype_descr(dtype) +
                     ", but must be a unicode string");
  const std::size_t n = checked_size(*this, context), chars = itemsize / 4;
  std::vector<std::string> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::string s;
    for (std::size_t c = 0; c < chars; ++c) {
      const auto cp = load_le<std::uint32_t>(data.data() + i * itemsize + 4 * c);
      if (cp == 0) break;
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        throw InputError(context + ": array '" + name + "' element " + std::to_string(i) +
                         " holds the invalid code point " + std::to_string(cp));
      append_utf8(s, cp);
    }
    out[i] = std::move(s);
  }
  return out;
}

NpyArray NpyArray::from_double(std::string name, const std::vector<double>& v, std::vector<std::size_t> shape) {
  return from_plain(std::move(name), DType::f8, v, std::move(shape));
}
NpyArray NpyArray::from_float(std::string name, const std::vector<float>& v, std::vector<std::size_t> shape) {
  return from_plain(std::move(name), DType::f4, v, std::move(shape));
}
NpyArray NpyArray::from_int32(std::string name, const std::vector<std::int32_t>& v, std::vector<std::size_t> shape) {
  return from_plain(std::move(name), DType::i4, v, std::move(shape));
}
NpyArray NpyArray::from_int64(std::string name, const std::vector<std::int64_t>& v, std::vector<std::size_t> shape) {
  return from_plain(std::move(name), DType::i8, v, std::move(shape));
}
NpyArray NpyArray::from_bool(std::string name, const std::vector<bool>& v, std::vector<std::size_t> shape) {
  std::vector<std::uint8_t> bytes(v.begin(), v.end());
  NpyArray a = from_plain(std::move(name), DType::b1, bytes, std::move(shape));
  return a;
}
NpyArray NpyArray::from_strings(std::string name, const std::vector<std::string>& v, std::vector<std::size_t> shape) {
  NpyArray a;
  a.name = std::move(name);
  a.dtype = DType::unicode;
  a.shape = std::move(shape);
  if (product(a.shape) != v.size())
    throw InputError("npz: array '" + a.name + "': " + std::to_string(v.size()) +
                     " strings do not fill the shape given");
  std::vector<std::vector<std::uint32_t>> cps;
  std::size_t chars = 1;
  for (const auto& s : v) {
    cps.push_back(utf8_decode(s, a.name));
    chars = std::max(chars, cps.back().size());
  }
  a.itemsize = 4 * chars;
  a.data.assign(v.size() * a.itemsize, '\0');
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!cps[i].empty()) std::memcpy(&a.data[i * a.itemsize], cps[i].data(), 4 * cps[i].size());
  return a;
}
NpyArray NpyArray::scalar_string(std::string name, const std::string& s) {
  return from_strings(std::move(name), {s}, {});
}

NpyArray parse_npy(const std::string& bytes, const std::string& file, const std::string& name) {
  static const char magic[] = "\x93NUMPY";
  if (bytes.size() < 10 || bytes.compare(0, 6, magic, 6) != 0) fail(file, name, "not a .npy file (bad magic)");
  const int major = static_cast<unsigned char>(bytes[6]);
  std::size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len =
        static_cast<unsigned char>(bytes[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(file, name, "truncated .npy header");
    header_len = 0;
    for (int k = 0; k < 4; ++k)
      header_len |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + k])) << (8 * k);
    offset = 12;
  } else {
    fail(file, name, "unsupported .npy format version " + std::to_string(major));
  }
  if (bytes.size() - offset < header_len)
    fail(file, name,
         "truncated .npy header (" + std::to_string(header_len) + " header bytes declared, " +
             std::to_string(bytes.size() - offset) + " present)");
  const std::string header_text = bytes.substr(offset, header_len);
  Header h = HeaderParser(header_text, file, name).parse();
  std::string payload = bytes.substr(offset + header_len);
  const std::string stored_descr = h.descr;
  normalise_npy(h, payload, file, name);
  if (h.fortran)
    fail(file, name, "Fortran-order arrays of this dtype are not supported; save with np.ascontiguousarray");
  NpyArray a;
  a.name = name;
  decode_descr(h.descr, file, name, a.dtype, a.itemsize);
  if (stored_descr != h.descr) a.file_descr = printable(stored_descr);  // messages name the file's dtype
  a.shape = h.shape;
  // Sizes from the header are untrusted: every product is checked before anything is allocated.
  std::uint64_t n = 0, need64 = 0;
  if (!checked_product(a.shape, n) || !checked_mul(n, a.itemsize, need64))
    fail(file, name,
         "shape " + shape_text(a.shape) + " of " + std::to_string(a.itemsize) +
             "-byte elements overflows 64 bits (limit: " + byte_size(input_limits().max_array_bytes) + " per array)");
  if (need64 > input_limits().max_array_bytes)
    fail(file, name,
         "shape " + shape_text(a.shape) + " needs " + byte_size(need64) + ", more than the limit of " +
             byte_size(input_limits().max_array_bytes) + " per array (set ARCAL_MAX_ARRAY_BYTES to raise it)");
  const std::size_t need = static_cast<std::size_t>(need64);
  const std::size_t have = payload.size();
  if (have < need)
    fail(file, name,
         "data is " + std::to_string(have) + " bytes, but the header's shape needs " + std::to_string(need));
  if (have > need)
    fail(file, name,
         "data is " + std::to_string(have) + " bytes, more than the header's shape needs (" + std::to_string(need) +
             ")");
  a.data = std::move(payload);
  return a;
}

std::string format_npy(const NpyArray& a) {
  std::string shape = "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i) shape += std::to_string(a.shape[i]) + ", ";
  if (a.shape.size() > 1)
    shape.resize(shape.size() - 2);
  else if (a.shape.size() == 1)
    shape.resize(shape.size() - 1);  // "(5,)"
  shape += ")";
  std::string dict =
      "{'descr': '" + dtype_descr(a.dtype, a.itemsize / 4) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces and a final newline so that magic + len + header is a multiple of 64.
  std::size_t total = 10 + dict.size() + 1;
  const std::size_t pad = (64 - total % 64) % 64;
  dict.append(pad, ' ');
  dict += '\n';
  if (dict.size() > 65535) throw InputError("npz: array '" + a.name + "': header too long for .npy v1.0");
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>((dict.size() >> 8) & 0xFF);
  out += dict;
  out += a.data;
  return out;
}

}  // namespace arcal
