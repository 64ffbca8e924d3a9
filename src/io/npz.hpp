// NumPy .npy / .npz files: the exchange format of arcal's traces. Reads what np.savez and
// np.savez_compressed write (zip via libzip, deflate via zlib) and writes files numpy reads back.
// Arrays are held little-endian, C-order, in a few plain dtypes; what else numpy writes for numbers
// (big-endian, Fortran order, float16, 8/16-bit and unsigned integers) is converted on read, and
// everything else is refused with an InputError that names the file, the array and the constraint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace arcal {

/// The dtypes arcal reads and writes: '<f4', '<f8', '<i4', '<i8', '|b1' and '<Un' (UCS-4 strings).
enum class DType { f4, f8, i4, i8, b1, unicode };

/// numpy's descr string for a dtype ("<f8"; for unicode "<U" + chars).
std::string dtype_descr(DType dtype, std::size_t unicode_chars = 1);

/// One array: raw little-endian C-order bytes plus dtype and shape. A 0-d array has an empty shape.
struct NpyArray {
  std::string name;
  DType dtype = DType::f8;
  std::size_t itemsize = 8;  ///< bytes per element (4 * chars for unicode)
  std::vector<std::size_t> shape;
  std::string data;  ///< size() * itemsize bytes
  /// The dtype as the file stored it ("<u2", ">f8") when reading converted it to `dtype`; "" when not
  /// converted. Messages about the dtype name this one (what the user saved), not the held one.
  std::string file_descr;
  /// The dtype to name in a message: file_descr, else dtype's descr.
  std::string shown_dtype() const { return file_descr.empty() ? dtype_descr(dtype, itemsize / 4) : file_descr; }

  std::size_t size() const;  ///< number of elements (product of shape; 1 for 0-d)
  std::size_t ndim() const { return shape.size(); }

  /// Numeric conversions. as_double/as_float accept every numeric dtype and bool; as_int64 accepts
  /// integer and bool dtypes only. Throw InputError (naming `context` and the array) otherwise.
  std::vector<double> as_double(const std::string& context = "npz") const;
  std::vector<float> as_float(const std::string& context = "npz") const;
  std::vector<std::int64_t> as_int64(const std::string& context = "npz") const;
  /// Unicode elements as UTF-8 strings (trailing NULs stripped). Throws unless dtype is unicode.
  std::vector<std::string> as_strings(const std::string& context = "npz") const;

  static NpyArray from_double(std::string name, const std::vector<double>& v, std::vector<std::size_t> shape);
  static NpyArray from_float(std::string name, const std::vector<float>& v, std::vector<std::size_t> shape);
  static NpyArray from_int32(std::string name, const std::vector<std::int32_t>& v, std::vector<std::size_t> shape);
  static NpyArray from_int64(std::string name, const std::vector<std::int64_t>& v, std::vector<std::size_t> shape);
  static NpyArray from_bool(std::string name, const std::vector<bool>& v, std::vector<std::size_t> shape);
  /// UTF-8 strings as a '<Un' array, n = the longest string in code points (at least 1).
  static NpyArray from_strings(std::string name, const std::vector<std::string>& v, std::vector<std::size_t> shape);
  /// A 0-d unicode array holding one string (how arcal stores JSON metadata).
  static NpyArray scalar_string(std::string name, const std::string& s);
};

/// Parses one .npy file image. `file` and `name` only label error messages. Big-endian data is
/// byte-swapped, Fortran-order data transposed to C order, float16 widened to float32 (exactly),
/// int8/int16/uint8/uint16 widened to int32 and uint32/uint64 to int64 (a uint64 above INT64_MAX is
/// refused), so the result always has one of the DType dtypes.
/// Throws InputError on a bad magic, unsupported version, object or other unsupported dtype, a shape
/// whose byte size overflows or exceeds the array limit (core/limits.hpp), or data
/// shorter/longer than the header's shape implies.
NpyArray parse_npy(const std::string& bytes, const std::string& file, const std::string& name);

/// Serialises an array as .npy version 1.0 (header padded so data starts on a 64-byte boundary).
std::string format_npy(const NpyArray& array);

/// Reads every array of an .npz file, in archive order; member "x.npy" becomes array "x".
/// Throws InputError naming the file (and the member) for unreadable, truncated or corrupt archives,
/// and before allocating for a member or shape beyond the limits of core/limits.hpp (one array,
/// all arrays of the file, the memory available) or beyond what its compressed size can inflate to.
std::vector<NpyArray> read_npz(const std::string& path);

/// read_npz on an archive in memory; `label` stands for the file name in messages.
std::vector<NpyArray> read_npz_bytes(const std::string& bytes, const std::string& label);

/// Writes arrays as an .npz numpy can np.load, atomically (temp file + rename); deflate-compressed
/// when `compress` is true (like np.savez_compressed), stored otherwise (like np.savez).
/// Throws InputError on duplicate names or I/O failure.
void write_npz(const std::string& path, const std::vector<NpyArray>& arrays, bool compress);

}  // namespace arcal
