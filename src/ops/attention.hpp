// The self-attention core on plain arrays (model/fused.cpp's SelfAttentionFunction wraps it): qkv
// [B, T, 3D] (float, double or bf16 as uint16), H heads of hd = D / H, optionally causal; P the softmax
// probabilities kept for the backward. Long sequences one (image, head) pair at a time; sequences of at
// most kLaneMaxTokens tokens 8 images per pass, one in each vector lane (lane_path). Heads [b, e).
#pragma once

#include <cstdint>

namespace arcal::fused {

struct AttentionShape {
  std::int64_t B, T, D, H, hd;
  bool causal;  ///< query i sees keys j <= i only
};

/// Images per pass of the short-sequence path (one per vector lane), and its longest sequence.
inline constexpr int kLanes = 8;
inline constexpr std::int64_t kLaneMaxTokens = 32;

std::int64_t padded_tokens(std::int64_t n);
bool lane_path(const AttentionShape& s);
void attention_forward_bf16(const std::uint16_t* qkv, const AttentionShape& s, std::int64_t b, std::int64_t e, float* P,
                            std::uint16_t* out);
void attention_backward_bf16(const std::uint16_t* qkv, const AttentionShape& s, const float* P, const std::uint16_t* g,
                             std::int64_t b, std::int64_t e, std::uint16_t* dqkv);
void attention_forward(const float* x, const AttentionShape& s, std::int64_t b, std::int64_t e, float* P, float* out);
void attention_forward(const double* x, const AttentionShape& s, std::int64_t b, std::int64_t e, double* P,
                       double* out);
void attention_backward(const float* x, const AttentionShape& s, const float* P, const float* g, std::int64_t b,
                        std::int64_t e, float* dx);
void attention_backward(const double* x, const AttentionShape& s, const double* P, const double* g, std::int64_t b,
                        std::int64_t e, double* dx);

}  // namespace arcal::fused
