// Writes a small CIFAR-10 binary folder (data_batch_1..5.bin, test_batch.bin) whose images carry a
// label-dependent pattern plus seeded noise, so that tests can train CIFAR-shaped models anywhere.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace arcal::testing {

inline void write_synthetic_cifar10(const std::string& dir, int per_file, std::uint32_t seed) {
  std::filesystem::create_directories(dir);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> noise(0, 63), label(0, 9);
  auto write = [&](const std::string& name) {
    std::ofstream f(dir + "/" + name, std::ios::binary);
    for (int r = 0; r < per_file; ++r) {
      const int y = label(gen);
      f.put(static_cast<char>(y));
      for (int c = 0; c < 3; ++c)
        for (int i = 0; i < 32; ++i)
          for (int j = 0; j < 32; ++j) {
            const int base = ((i / 4 + j / 4 + c) % 10 == y) ? 160 : 40;  // class-specific stripes
            f.put(static_cast<char>(base + noise(gen)));
          }
    }
  };
  for (int b = 1; b <= 5; ++b) write("data_batch_" + std::to_string(b) + ".bin");
  write("test_batch.bin");
}

}  // namespace arcal::testing
