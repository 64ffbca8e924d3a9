// The .npz archive half of io/npz.hpp: reading a zip of .npy members (libzip; stored or deflated,
// bounded sizes, named errors) and writing one atomically. The .npy half is npz.cpp.
#include "io/npz.hpp"

#include <zip.h>

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

namespace {

using npz_detail::fail;
using npz_detail::printable;

std::string zip_message(zip_error_t* err) { return zip_error_strerror(err); }

/// Reads every member of an open archive (`label` names it in messages). Each member's declared
/// size is checked against the array limit, the memory available and what its compressed size can
/// hold before anything is allocated, and inflating never produces more than the declared size.
/// Out of memory is a failure of the machine, not of the file (exit 1), but the message names what
/// could not be held: the file, the array and its size.
[[noreturn]] void out_of_memory(const std::string& label, const std::string& name, std::uint64_t bytes) {
  throw std::runtime_error("npz: " + label + ": array '" + printable(name) + "': out of memory holding " +
                           byte_size(bytes) + " (a memory limit such as ulimit -v, or the machine's memory)");
}

/// libzip's own allocation failed (ZIP_ER_MEMORY, "Malloc failure"): out of memory, exit 1, never
/// "truncated or corrupt" (under ulimit -v the first failing allocation may be libzip's).
void fail_if_zip_out_of_memory(const std::string& label, const std::string& name, zip_error_t* err) {
  if (zip_error_code_zip(err) != ZIP_ER_MEMORY) return;
  throw std::runtime_error("npz: " + label + (name.empty() ? "" : ": array '" + printable(name) + "'") +
                           ": out of memory while libzip read the archive (a memory limit such as ulimit -v, or the "
                           "machine's memory)");
}

/// Peak memory of reading one member, as a multiple of its declared size (see read_archive).
constexpr std::uint64_t kReadPeakFactor = 3;

std::string compression_name(std::uint32_t method) {
  switch (method) {
    case 1: return "Shrink";
    case 6: return "Implode";
    case 9: return "Deflate64";
    case 12: return "bzip2";
    case 14: return "LZMA";
    case 93: return "Zstandard";
    case 95: return "xz";
    case 98: return "PPMd";
    case 99: return "AES encryption";
    default: return "an unsupported method";
  }
}

std::vector<NpyArray> read_archive(zip_t* za, const std::string& label) {
  std::unique_ptr<zip_t, void (*)(zip_t*)> guard(za, [](zip_t* z) { zip_discard(z); });
  const zip_int64_t entries = zip_get_num_entries(za, 0);
  std::vector<NpyArray> arrays;
  std::set<std::string> seen;
  const InputLimits& limits = input_limits();
  std::uint64_t total = 0;
  for (zip_int64_t i = 0; i < entries; ++i) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(za, static_cast<zip_uint64_t>(i), 0, &st) != 0)
      fail(label, "", std::string("cannot stat archive member: ") + zip_strerror(za));
    std::string member = st.name ? st.name : "";
    std::string name = member;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    else
      fail(label, printable(member), "archive member is not a .npy file");
    if (!seen.insert(name).second) fail(label, printable(name), "appears twice in the archive");
    if (!(st.valid & ZIP_STAT_SIZE)) fail(label, printable(name), "the archive does not record the member's size");
    const std::uint64_t declared = st.size;
    // numpy writes stored (savez) or deflate (savez_compressed) members; another method is named, not
    // reported as a corrupt deflate stream.
    if ((st.valid & ZIP_STAT_COMP_METHOD) && st.comp_method != ZIP_CM_STORE && st.comp_method != ZIP_CM_DEFLATE)
      fail(label, printable(name),
           "the member is compressed with " + compression_name(st.comp_method) + " (zip method " +
               std::to_string(st.comp_method) +
               "); arcal reads stored or deflate members, as numpy.savez and "
               "numpy.savez_compressed write them: re-save the arrays with numpy");
    // Deflate expands at most 1032:1; a larger declared size is a lie (or a decompression bomb).
    if ((st.valid & ZIP_STAT_COMP_SIZE) && (st.valid & ZIP_STAT_COMP_METHOD)) {
      std::uint64_t most = 0;
      if (st.comp_method == ZIP_CM_STORE)
        most = st.comp_size;
      else if (!checked_mul(st.comp_size, 1032, most) || !checked_add(most, 1024, most))
        most = UINT64_MAX;
      if (declared > most)
        fail(label, printable(name),
             "declares " + byte_size(declared) + " uncompressed from " + std::to_string(st.comp_size) +
                 " compressed bytes, which " + (st.comp_method == ZIP_CM_STORE ? "a stored member" : "deflate") +
                 " cannot produce (corrupt or crafted archive)");
    }
    check_array_bytes(declared, "npz: " + label + ": array '" + printable(name) + "'", "the member's declared size");
    // Reading holds the member's bytes and the parsed array at once, and the trace then widens float32
    // to float64: about 2.3x the declared size at the peak (measured), so the guard asks for 3x rather
    // than let an array of half the free memory meet the OOM killer with no message.
    if (limits.check_available_memory) {
      const std::uint64_t avail = available_memory_bytes();
      std::uint64_t peak = 0;
      if (!checked_mul(declared, kReadPeakFactor, peak)) peak = UINT64_MAX;
      if (avail > 0 && peak > avail)
        fail(label, printable(name),
             "reading it needs about " + byte_size(peak) + " at the peak (" + std::to_string(kReadPeakFactor) +
                 " x its " + byte_size(declared) +
                 ": the member's bytes, the parsed array and its conversion), more than the " + byte_size(avail) +
                 " of memory available now");
    }
    if (!checked_add(total, declared, total) || total > limits.max_total_bytes)
      fail(label, printable(name),
           "the archive's members together exceed the limit of " + byte_size(limits.max_total_bytes) + " per file");
    zip_file_t* zf = zip_fopen_index(za, static_cast<zip_uint64_t>(i), 0);
    if (!zf) {
      fail_if_zip_out_of_memory(label, name, zip_get_error(za));
      fail(label, printable(name), std::string("cannot open member: ") + zip_strerror(za));
    }
    std::string bytes;
    try {
      bytes.assign(static_cast<std::size_t>(declared), '\0');
    } catch (const std::bad_alloc&) {
      zip_fclose(zf);
      out_of_memory(label, name, declared);
    }
    std::size_t got = 0;
    while (got < bytes.size()) {
      const zip_int64_t r = zip_fread(zf, &bytes[got], bytes.size() - got);
      if (r < 0) {
        const std::string msg = zip_error_strerror(zip_file_get_error(zf));
        const bool oom = zip_error_code_zip(zip_file_get_error(zf)) == ZIP_ER_MEMORY;
        zip_fclose(zf);
        if (oom) out_of_memory(label, name, declared);
        fail(label, printable(name), "corrupt compressed data: " + msg);
      }
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    // One byte past the declared size: inflating stops there, and the zero-byte read at the end
    // triggers libzip's CRC check on the whole member.
    char extra;
    const zip_int64_t tail = zip_fread(zf, &extra, 1);
    if (tail < 0) {
      const std::string msg = zip_error_strerror(zip_file_get_error(zf));
      zip_fclose(zf);
      fail(label, printable(name), "corrupt compressed data: " + msg);
    }
    zip_fclose(zf);
    if (tail != 0)
      fail(label, printable(name),
           "member inflates to more than the " + std::to_string(declared) +
               " bytes the archive declares (corrupt or crafted archive)");
    if (got != bytes.size())
      fail(label, printable(name),
           "member is " + std::to_string(got) + " bytes, but the archive says " + std::to_string(bytes.size()));
    try {
      arrays.push_back(parse_npy(bytes, label, name));
    } catch (const std::bad_alloc&) {
      out_of_memory(label, name, declared);
    }
  }
  return arrays;
}

[[noreturn]] void open_failed(const std::string& label, zip_error_t* err) {
  if (zip_error_code_zip(err) == ZIP_ER_MEMORY) {
    zip_error_fini(err);
    throw std::runtime_error("npz: " + label +
                             ": out of memory while libzip opened the archive (a memory limit such "
                             "as ulimit -v, or the machine's memory)");
  }
  const std::string msg = zip_message(err);
  zip_error_fini(err);
  fail(label, "", "cannot open as a zip archive (truncated or corrupt?): " + msg);
}

}  // namespace

std::vector<NpyArray> read_npz(const std::string& path) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) == 0) {
    if (S_ISDIR(sb.st_mode)) fail(path, "", "is a directory, not an .npz file");
    // A zip archive is read by seeking to its end: a pipe, socket or device cannot be read that way.
    const char* kind = S_ISFIFO(sb.st_mode)   ? "a FIFO (named pipe)"
                       : S_ISSOCK(sb.st_mode) ? "a socket"
                       : S_ISCHR(sb.st_mode)  ? "a character device"
                       : S_ISBLK(sb.st_mode)  ? "a block device"
                                              : nullptr;
    if (kind != nullptr)
      fail(path, "",
           std::string("is ") + kind +
               ", not a regular file; an .npz archive is read from its end, so "
               "save it to a file first");
  }
  int errorp = 0;
  zip_t* za = zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &errorp);
  if (!za) {
    zip_error_t err;
    zip_error_init_with_code(&err, errorp);
    open_failed(path, &err);
  }
  return read_archive(za, path);
}

std::vector<NpyArray> read_npz_bytes(const std::string& bytes, const std::string& label) {
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &err);
  if (!src) open_failed(label, &err);
  zip_t* za = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!za) {
    zip_source_free(src);
    open_failed(label, &err);
  }
  zip_error_fini(&err);
  return read_archive(za, label);
}

void write_npz(const std::string& path, const std::vector<NpyArray>& arrays, bool compress) {
  std::set<std::string> names;
  for (const auto& a : arrays) {
    if (a.name.empty()) throw InputError("write_npz: " + path + ": an array has an empty name");
    if (!names.insert(a.name).second) throw InputError("write_npz: " + path + ": array '" + a.name + "' appears twice");
    if (a.data.size() != a.size() * a.itemsize)
      throw InputError("write_npz: " + path + ": array '" + a.name + "' has " + std::to_string(a.data.size()) +
                       " data bytes, but its shape needs " + std::to_string(a.size() * a.itemsize));
  }
  write_atomic_with(path, [&](const std::string& tmp) {
    int errorp = 0;
    zip_t* za = zip_open(tmp.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &errorp);
    if (!za) {
      zip_error_t err;
      zip_error_init_with_code(&err, errorp);
      const std::string msg = zip_message(&err);
      zip_error_fini(&err);
      throw InputError("write_npz: cannot create " + tmp + ": " + msg);
    }
    // The buffers must live until zip_close, which is when libzip reads and compresses them.
    std::vector<std::string> images;
    images.reserve(arrays.size());
    try {
      for (const auto& a : arrays) {
        images.push_back(format_npy(a));
        const std::string& img = images.back();
        zip_source_t* src = zip_source_buffer(za, img.data(), img.size(), 0);
        if (!src) throw InputError(std::string("write_npz: ") + path + ": " + zip_strerror(za));
        const zip_int64_t idx = zip_file_add(za, (a.name + ".npy").c_str(), src, ZIP_FL_ENC_UTF_8);
        if (idx < 0) {
          zip_source_free(src);
          throw InputError(std::string("write_npz: ") + path + ": array '" + a.name + "': " + zip_strerror(za));
        }
        if (zip_set_file_compression(za, static_cast<zip_uint64_t>(idx), compress ? ZIP_CM_DEFLATE : ZIP_CM_STORE,
                                     compress ? 6 : 0) != 0)
          throw InputError(std::string("write_npz: ") + path + ": " + zip_strerror(za));
      }
      if (zip_close(za) != 0) {
        // A full disk: the system error (ENOSPC) names the cause and makes it a failure while working.
        const int sys = zip_error_code_system(zip_get_error(za));
        if (zip_error_system_type(zip_get_error(za)) == ZIP_ET_SYS && sys > 0)
          throw_write_error("write_npz", path, sys);
        throw InputError(std::string("write_npz: cannot write ") + tmp + ": " + zip_strerror(za));
      }
    } catch (...) {
      zip_discard(za);
      throw;
    }
  });
}

}  // namespace arcal
