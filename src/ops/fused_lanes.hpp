// What the fused model kernels of src/ops share (routing_bank, layer_norm, attention, gelu): bf16 held as
// uint16 and widened to float (`widen`, rounded back by `store`), e^x for x <= 0 (`exp_shifted`), 8-float
// vectors (GCC's vector extensions, so each target clone gets its own ISA's shuffles) with 8 x 8
// transposes and the lane-order row totals whose summation order the fused kernels' bitwise results
// rest on, and the in-order addition of per-block partial sums (results independent of the thread count).
// Each kernel is a plain loop nest the compiler vectorises over the innermost contiguous axis; target
// clones (ARCAL_FUSED_CLONES) give every ISA level its own copy.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/fast_exp.hpp"

#ifdef ARCAL_NO_TARGET_CLONES  // ThreadSanitizer builds: an instrumented ifunc resolver runs before TSan's runtime
                               // exists
#define ARCAL_FUSED_CLONES
#else
#define ARCAL_FUSED_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

namespace arcal::fused {

template <typename T>
ARCAL_ALWAYS_INLINE T exp_shifted(T x) {  // e^x for x <= 0
  if constexpr (std::is_same_v<T, float>)
    return exp_nonpos(x);
  else
    return std::exp(x);
}

// Storage and arithmetic: float and double are computed in their own type; bf16 storage (what the
// linears write under autocast) is widened to float (exact) when read and rounded to the nearest
// bf16 (ties to even, NaN kept quiet) when written, as LibTorch's conversions round.
ARCAL_ALWAYS_INLINE float widen(float v) { return v; }
ARCAL_ALWAYS_INLINE double widen(double v) { return v; }
ARCAL_ALWAYS_INLINE float widen(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
ARCAL_ALWAYS_INLINE void store(float& dst, float v) { dst = v; }
ARCAL_ALWAYS_INLINE void store(double& dst, double v) { dst = v; }
ARCAL_ALWAYS_INLINE void store(std::uint16_t& dst, float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  dst = f != f ? std::uint16_t(0x7fc0) : std::uint16_t(rounded);
}

// ---- 8-float vectors (GCC's vector extensions, so each target clone gets its own ISA's shuffles) ---
// Loads widen bf16 as widen() does and stores round as store() does, so values moved through them are
// those of the element loops. Vectors pass by reference: by value they would change the default
// clone's calling convention.
typedef float LaneVec __attribute__((vector_size(32)));
typedef std::uint32_t LaneBits __attribute__((vector_size(32)));
typedef std::uint16_t LaneHalves __attribute__((vector_size(16)));

// Unaligned 8-float loads and stores as vector moves: through memcpy GCC copied each vector to the
// stack in 16-byte halves and read it back whole (a failed store-to-load forward, in the attention's
// gathers); a vector type of float alignment is read and written in registers.
typedef float LaneVecUnaligned __attribute__((vector_size(32), aligned(4), may_alias));
typedef std::uint16_t LaneHalvesUnaligned __attribute__((vector_size(16), aligned(2), may_alias));
ARCAL_ALWAYS_INLINE void lane_load8(const float* p, LaneVec& v) { v = *reinterpret_cast<const LaneVecUnaligned*>(p); }
ARCAL_ALWAYS_INLINE void lane_load8(const std::uint16_t* p, LaneVec& v) {
  // Each bf16 becomes the high half of a float whose low half is zero: one interleave with zeros
  // (GCC turns a widening conversion of 8 halves into two half-width ones and an insert).
  typedef std::uint16_t Halves16 __attribute__((vector_size(32)));
  const LaneHalves h = *reinterpret_cast<const LaneHalvesUnaligned*>(p);
  const Halves16 z = __builtin_shufflevector(LaneHalves{}, h, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  v = reinterpret_cast<LaneVec>(z);
}
ARCAL_ALWAYS_INLINE void lane_store8(float* p, const LaneVec& v) { *reinterpret_cast<LaneVecUnaligned*>(p) = v; }
ARCAL_ALWAYS_INLINE void lane_store8(std::uint16_t* p, const LaneVec& v) {
  const LaneBits u = reinterpret_cast<LaneBits>(v);
  const LaneBits nan = reinterpret_cast<LaneBits>(v != v);
  const LaneBits rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const LaneHalves h = __builtin_convertvector((rounded & ~nan) | (nan & 0x7fc0u), LaneHalves);
  *reinterpret_cast<LaneHalvesUnaligned*>(p) = h;
}
// r[k][l] <- r[l][k] (an 8 x 8 transpose): pairs interleaved, then quads, then the 4-wide halves exchanged.
ARCAL_ALWAYS_INLINE void lane_transpose8(LaneVec* r) {
  LaneVec t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = __builtin_shufflevector(t[k], t[k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 1] = __builtin_shufflevector(t[k], t[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[k + 2] = __builtin_shufflevector(t[k + 1], t[k + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 3] = __builtin_shufflevector(t[k + 1], t[k + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[k + 4] = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// out[c] += sum over blocks of partial[blk * width + c], the blocks added in order: a cross-row sum
// whose row blocks were computed on any threads comes out the same on every thread count.
template <typename T>
void add_block_partials(const T* partial, std::int64_t blocks, std::int64_t width, T* out) {
  for (std::int64_t blk = 0; blk < blocks; ++blk)
    for (std::int64_t c = 0; c < width; ++c) out[c] += partial[blk * width + c];
}

// Row sums in float when d is a multiple of 16, 8 rows at a time. A row's sum is held in 16 lanes
// (lane l adds the terms c = l, l + 16, ... in order, by multiply-adds), and the lanes are then added
// in order 0..15 to zero: the order GCC's vectorised reduction gives the one-row loops below in the
// AVX-512 clone, so there the sums are bitwise theirs (a bf16 training's model.pt is byte-identical;
// the other clones' one-row loops may add in another order). The per-row lane additions (16 dependent
// scalar adds after a spill, half of a routing point's time) become one transpose and 16 vector adds
// for 8 rows.
ARCAL_ALWAYS_INLINE void lane_totals8(LaneVec* lo, LaneVec* hi, float* out) {
  lane_transpose8(lo);
  lane_transpose8(hi);
  LaneVec t = {};
  for (int l = 0; l < 8; ++l) t += lo[l];
  for (int l = 0; l < 8; ++l) t += hi[l];
  lane_store8(out, t);
}
constexpr bool rows_by_eight(std::int64_t d) { return d % 16 == 0; }

}  // namespace arcal::fused
