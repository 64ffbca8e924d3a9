#include "io/image_data.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>

#include "core/check.hpp"
#include "core/limits.hpp"

namespace arcal {

namespace {

/// A whole file, refused before reading when it is larger than `limit` bytes.
std::string read_capped(const std::string& fn, const std::string& path, std::uint64_t limit, const std::string& hint) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) throw_input(fn, path + ": cannot open (missing file? " + hint + ")");
  if (S_ISDIR(sb.st_mode)) throw_input(fn, path + ": is a directory, not a data file");
  if (static_cast<std::uint64_t>(sb.st_size) > limit)
    throw_input(fn, path + ": file is " + byte_size(std::uint64_t(sb.st_size)) + ", more than the limit of " +
                        byte_size(limit) + " (set ARCAL_MAX_ARRAY_BYTES to raise it)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input(fn, path + ": cannot open (missing file? " + hint + ")");
  std::string data(static_cast<std::size_t>(sb.st_size), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<std::size_t>(in.gcount()));
  return data;
}

std::uint32_t be32(const std::string& d, std::size_t off) {
  auto b = [&](std::size_t i) { return std::uint32_t(static_cast<unsigned char>(d[off + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

}  // namespace

std::string gunzip_capped(const std::string& bytes, const std::string& label, std::uint64_t limit) {
  const bool gz =
      bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
  if (!gz) {  // plain file, as gzread reads it transparently
    if (bytes.size() > limit)
      throw_input("read_idx", label + ": " + byte_size(bytes.size()) + ", more than the limit of " + byte_size(limit));
    return bytes;
  }
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw_input("read_idx", label + ": cannot initialise zlib");
  std::string out;
  std::size_t pos = 0;
  char buf[1 << 16];
  int rc = Z_OK;
  auto corrupt = [&](const std::string& why) {
    inflateEnd(&zs);
    throw_input("read_idx", label + ": corrupt or truncated gzip stream (" + why + ")");
  };
  while (true) {
    const std::size_t chunk = std::min<std::size_t>(bytes.size() - pos, 1u << 30);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + pos));
    zs.avail_in = static_cast<uInt>(chunk);
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buf);
      zs.avail_out = sizeof buf;
      rc = inflate(&zs, Z_NO_FLUSH);
      if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR) corrupt(zs.msg ? zs.msg : "inflate error");
      const std::size_t produced = sizeof buf - zs.avail_out;
      if (out.size() + produced > limit) {
        inflateEnd(&zs);
        throw_input("read_idx", label + ": inflates to more than the limit of " + byte_size(limit) +
                                    " (set ARCAL_MAX_ARRAY_BYTES to raise it)");
      }
      out.append(buf, produced);
    } while (zs.avail_out == 0 && rc != Z_STREAM_END);
    pos += chunk - zs.avail_in;
    if (rc == Z_STREAM_END) {
      // Concatenated gzip members (gzip -c a b) continue; trailing zeros end the file, as in gzread.
      if (pos + 2 <= bytes.size() && static_cast<unsigned char>(bytes[pos]) == 0x1f &&
          static_cast<unsigned char>(bytes[pos + 1]) == 0x8b) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (pos >= bytes.size()) corrupt("unexpected end of file");
  }
  inflateEnd(&zs);
  return out;
}

ImageSet parse_idx_pair(const std::string& images, const std::string& labels, const std::string& images_path,
                        const std::string& labels_path, int classes) {
  const std::uint64_t limit = input_limits().max_array_bytes;
  const std::string img = gunzip_capped(images, images_path, limit + 16);
  const std::string lab = gunzip_capped(labels, labels_path, limit + 8);
  if (img.size() < 16)
    throw_input("read_idx", images_path + ": file is " + std::to_string(img.size()) +
                                " bytes, shorter than the 16-byte IDX header");
  if (lab.size() < 8)
    throw_input("read_idx",
                labels_path + ": file is " + std::to_string(lab.size()) + " bytes, shorter than the 8-byte IDX header");
  if (be32(img, 0) != 0x00000803)
    throw_input("read_idx", images_path + ": magic number is " + std::to_string(be32(img, 0)) +
                                ", but must be 2051 (IDX uint8 images)");
  if (be32(lab, 0) != 0x00000801)
    throw_input("read_idx", labels_path + ": magic number is " + std::to_string(be32(lab, 0)) +
                                ", but must be 2049 (IDX uint8 labels)");
  const std::uint32_t n = be32(img, 4), rows = be32(img, 8), cols = be32(img, 12);
  const IntRange side{1, 4096};
  if (!in_range(side, rows) || !in_range(side, cols))
    throw_input("read_idx", images_path + ": image size " + std::to_string(rows) + "x" + std::to_string(cols) +
                                " is outside " + range_text(side) + " pixels per side");
  const std::size_t n_labels = be32(lab, 4);
  if (n_labels != n)
    throw_input("read_idx", labels_path + " holds " + std::to_string(n_labels) + " labels but " + images_path +
                                " holds " + std::to_string(n) + " images");
  std::uint64_t pix = 0;
  if (!checked_mul(n, std::uint64_t(rows) * cols, pix) || pix > limit)
    throw_input("read_idx", images_path + ": " + std::to_string(n) + " images of " + std::to_string(rows) + "x" +
                                std::to_string(cols) + " pixels exceed the limit of " + byte_size(limit));
  if (img.size() != 16 + pix)
    throw_input("read_idx", images_path + ": " + std::to_string(img.size() - 16) +
                                " pixel bytes, but the header promises " + std::to_string(pix) + " (truncated file?)");
  if (lab.size() != 8 + std::size_t(n))
    throw_input("read_idx", labels_path + ": " + std::to_string(lab.size() - 8) +
                                " label bytes, but the header promises " + std::to_string(n) + " (truncated file?)");
  ImageSet s;
  s.n = n;
  s.height = static_cast<int>(rows);
  s.width = static_cast<int>(cols);
  s.channels = 1;
  s.classes = classes;
  s.pixels.assign(img.begin() + 16, img.end());
  s.labels.resize(s.n);
  for (std::size_t i = 0; i < s.n; ++i) {
    s.labels[i] = static_cast<unsigned char>(lab[8 + i]);
    check_label("read_idx", (labels_path + ": labels").c_str(), i, s.labels[i], classes);
  }
  return s;
}

ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path, int classes) {
  // A gzip'd IDX file is smaller than its content; the inflated size is capped in parse_idx_pair.
  const std::uint64_t limit = input_limits().max_array_bytes + 16;
  const std::string img = read_capped("read_idx", images_path, limit, "set --data-dir");
  const std::string lab = read_capped("read_idx", labels_path, limit, "set --data-dir");
  return parse_idx_pair(img, lab, images_path, labels_path, classes);
}

ImageSet load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  return read_idx_pair(prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz", 10);
}

void append_cifar_bytes(ImageSet& s, const std::string& data, const std::string& path, bool cifar100) {
  const std::size_t label_bytes = cifar100 ? 2 : 1;
  const std::size_t record = label_bytes + 3072;
  s.channels = 3;
  s.height = s.width = 32;
  s.classes = cifar100 ? 100 : 10;
  if (data.empty() || data.size() % record != 0)
    throw_input("load_cifar", path + ": size " + std::to_string(data.size()) +
                                  " bytes is not a positive multiple of the " + std::to_string(record) +
                                  "-byte record (" + (cifar100 ? "CIFAR-100" : "CIFAR-10") + " binary version?)");
  std::uint64_t total = 0;
  if (!checked_add(s.pixels.size(), data.size(), total) || total > input_limits().max_array_bytes)
    throw_input("load_cifar",
                path + ": the CIFAR files together exceed the limit of " + byte_size(input_limits().max_array_bytes));
  const std::size_t count = data.size() / record;
  s.labels.reserve(s.labels.size() + count);
  s.pixels.reserve(s.pixels.size() + count * 3072);
  for (std::size_t r = 0; r < count; ++r) {
    const auto* rec = reinterpret_cast<const std::uint8_t*>(data.data()) + r * record;
    const std::int64_t y = rec[label_bytes - 1];
    check_label("load_cifar", (path + ": labels").c_str(), r, y, s.classes);
    s.labels.push_back(y);
    s.pixels.insert(s.pixels.end(), rec + label_bytes, rec + record);
  }
  s.n += count;
}

ImageSet read_cifar_files(const std::vector<std::string>& files, bool cifar100) {
  ImageSet s;
  s.channels = 3;
  s.height = s.width = 32;
  s.classes = cifar100 ? 100 : 10;
  for (const auto& path : files)
    append_cifar_bytes(s, read_capped("load_cifar", path, input_limits().max_array_bytes, "set --data-dir"), path,
                       cifar100);
  return s;
}

ImageSet load_cifar(const std::string& dir, bool cifar100, bool train) {
  std::vector<std::string> files;
  if (cifar100) {
    files.push_back(dir + (train ? "/train.bin" : "/test.bin"));
  } else if (train) {
    for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  } else {
    files.push_back(dir + "/test_batch.bin");
  }
  return read_cifar_files(files, cifar100);
}

}  // namespace arcal
