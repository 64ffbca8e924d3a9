// Seeded random numbers with results that do not depend on the standard library's distributions
// (which are implementation-defined): uniform doubles, bounded integers, normals and shuffles
// built on std::mt19937_64, whose output sequence is fixed by the C++ standard.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace arcal {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * (1.0 / 9007199254740992.0); }

  /// Uniform integer in [0, n), n > 0, by rejection (unbiased).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    std::uint64_t x;
    do {
      x = engine_();
    } while (x >= limit);
    return x % n;
  }

  /// Standard normal by Box-Muller (one value per call; the pair's twin is cached).
  double normal() {
    if (has_cached_) {
      has_cached_ = false;
      return cached_;
    }
    double u1;
    do {
      u1 = uniform();
    } while (u1 <= 0.0);
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    cached_ = r * std::sin(2.0 * M_PI * u2);
    has_cached_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

  bool bernoulli(double p) { return uniform() < p; }

  /// Fisher-Yates shuffle of v[first, last).
  template <class T>
  void shuffle(std::vector<T>& v, std::size_t first = 0, std::size_t last = SIZE_MAX) {
    if (last > v.size()) last = v.size();
    for (std::size_t i = last; i > first + 1; --i) {
      const std::size_t j = first + below(i - first);
      std::swap(v[i - 1], v[j]);
    }
  }

  std::uint64_t next_u64() { return engine_(); }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
  double cached_ = 0.0;
  bool has_cached_ = false;
};

/// Derives an independent stream seed from a base seed and a stream index (splitmix64 mixing).
inline std::uint64_t derive_seed(std::uint64_t base, std::uint64_t stream) {
  std::uint64_t z = base + 0x9E3779B97F4A7C15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace arcal
