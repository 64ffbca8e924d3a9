// A branch-free, vectorisable e^x for x <= 0 in float, shared by the hand-written kernels (CEDAR's
// tiles, the fused attention of model/fused.cpp): loops over it vectorise where std::exp stays scalar.
#pragma once

#include <cstdint>
#include <cstring>

#define ARCAL_ALWAYS_INLINE inline __attribute__((always_inline))

namespace arcal {

/// Cephes' expf after its range reduction: e^x = 2^n e^r, r = x − n ln 2 (in two steps), e^r by a degree-6
/// polynomial, 2^n from the exponent bits (n = nf, an integer in [−127, 128]; −127 gives 0). Shared by
/// exp_nonpos and the clamped variants of the kernels (ops/topk_summary.cpp).
ARCAL_ALWAYS_INLINE float exp_cephes_reduced(float x, float nf, int n) {
  float r = x - nf * 0.693359375f;
  r = r + nf * 2.12194440e-4f;
  const float r2 = r * r;
  float y = 1.9875691500E-4f;
  y = y * r + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * r2 + r + 1.0f;
  const std::int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

/// e^x for x <= 0 (x = -inf, or below -87, gives exactly 0). Cephes' expf: x = n ln2 + r with
/// |r| <= ln2 / 2, a degree-6 polynomial for e^r, 2^n from the exponent bits; relative error about
/// 2e-7. Branch-free, so loops over it vectorise.
ARCAL_ALWAYS_INLINE float exp_nonpos(float x) {
  const bool tiny = x < -87.0f;
  x = tiny ? -87.0f : x;
  const float fx = x * 1.44269504088896341f + 0.5f;
  int n = static_cast<int>(fx);
  n -= static_cast<int>(static_cast<float>(n) > fx);  // floor (truncation rounds negatives up)
  return exp_cephes_reduced(x, static_cast<float>(n), n) * (tiny ? 0.0f : 1.0f);  // a select of constants: not a branch
}

}  // namespace arcal
