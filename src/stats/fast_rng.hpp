// Fast seeded generator for the inner loops of permutation tests: xoshiro256** (Blackman & Vigna,
// 2018) with its state filled from one 64-bit seed by splitmix64. Bounded integers use Lemire's
// multiply-shift with rejection on 32-bit halves, so they are exactly unbiased. The sequence is fixed
// by this file (not by the standard library), so seeded results are identical across platforms.
#pragma once

#include <cstdint>

namespace arcal {

class FastRng {
 public:
  explicit FastRng(std::uint64_t seed) {
    std::uint64_t x = seed;
    for (auto& s : s_) s = splitmix64(x);
  }

  std::uint64_t next_u64() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// 32 random bits; each 64-bit output is used as two halves.
  std::uint32_t next_u32() {
    if (have_half_) {
      have_half_ = false;
      return half_;
    }
    const std::uint64_t x = next_u64();
    half_ = static_cast<std::uint32_t>(x >> 32);
    have_half_ = true;
    return static_cast<std::uint32_t>(x);
  }

  /// Uniform integer in [0, n) for 0 < n < 2^32 (Lemire 2019, exact by rejection).
  std::uint32_t below(std::uint32_t n) {
    std::uint64_t m = static_cast<std::uint64_t>(next_u32()) * n;
    std::uint32_t low = static_cast<std::uint32_t>(m);
    if (low < n) {
      const std::uint32_t threshold = static_cast<std::uint32_t>(-n) % n;
      while (low < threshold) {
        m = static_cast<std::uint64_t>(next_u32()) * n;
        low = static_cast<std::uint32_t>(m);
      }
    }
    return static_cast<std::uint32_t>(m >> 32);
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  std::uint64_t s_[4];
  std::uint32_t half_ = 0;
  bool have_half_ = false;
};

}  // namespace arcal
