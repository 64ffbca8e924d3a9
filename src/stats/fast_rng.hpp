// Fast seeded generator for the inner loops of permutation tests: wyrand (Wang Yi's wyhash PRNG, the
// generator behind Go's runtime fastrand; passes BigCrush and PractRand), a Weyl counter mixed by one
// 64x64->128-bit multiply, so successive outputs do not wait on each other. The counter starts at
// splitmix64(seed). Bounded integers use Lemire's multiply-shift with rejection on 32-bit halves, so
// they are exactly unbiased. The sequence is fixed by this file, not by the standard library.
#pragma once

#include <cstdint>

namespace arcal {

class FastRng {
 public:
  explicit FastRng(std::uint64_t seed) {
    std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    state_ = z ^ (z >> 31);
  }

  std::uint64_t next_u64() {
    state_ += 0xa0761d6478bd642fULL;
    const unsigned __int128 t = static_cast<unsigned __int128>(state_) * (state_ ^ 0xe7037ed1a0b428dbULL);
    return static_cast<std::uint64_t>(t >> 64) ^ static_cast<std::uint64_t>(t);
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
  std::uint32_t below(std::uint32_t n) { return bounded(next_u32(), n); }

  /// Two independent uniform integers, in [0, n1) and [0, n2), from one 64-bit output (the inner
  /// loop of the permutation test; same distribution as two calls to below).
  void below_pair(std::uint32_t n1, std::uint32_t n2, std::uint32_t& j1, std::uint32_t& j2) {
    const std::uint64_t x = next_u64();
    j1 = bounded(static_cast<std::uint32_t>(x), n1);
    j2 = bounded(static_cast<std::uint32_t>(x >> 32), n2);
  }

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  /// Lemire's nearly divisionless method: r is a fresh uniform 32-bit value; rejected candidates are
  /// replaced by fresh ones from the low half of a new output.
  std::uint32_t bounded(std::uint32_t r, std::uint32_t n) {
    std::uint64_t m = static_cast<std::uint64_t>(r) * n;
    std::uint32_t low = static_cast<std::uint32_t>(m);
    if (low < n) {
      const std::uint32_t threshold = static_cast<std::uint32_t>(-n) % n;
      while (low < threshold) {
        m = static_cast<std::uint64_t>(static_cast<std::uint32_t>(next_u64())) * n;
        low = static_cast<std::uint32_t>(m);
      }
    }
    return static_cast<std::uint32_t>(m >> 32);
  }

  std::uint64_t state_;
  std::uint32_t half_ = 0;
  bool have_half_ = false;
};

}  // namespace arcal
