// The Attention-Residual operator over a stack of sublayers (method.md §1), shared by AR-ViT,
// AR-DeiT and the stages of AR-Swin: routing capture and ablation records, and attnres_stack, which
// runs L sublayers with Full or Block AttnRes and the final aggregation op over one v_0.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace arcal {

/// Filled by forward() when passed: for every routing point p, alpha (S_p,B,T), detached, fp32.
/// For AR-Swin, points run stage by stage and T is that stage's token count.
struct RoutingCapture {
  std::vector<torch::Tensor> alpha;
};

/// A routing intervention: at the listed points, zero the routing weight of the listed source
/// indices and renormalise (method.md §7). Empty = no intervention.
struct RoutingAblation {
  std::vector<std::vector<int>> drop_sources;  ///< [P] lists of source indices to zero
  bool empty() const { return drop_sources.empty(); }
};

/// Gainless RMS normalisation over the last axis (the learnable gain is folded into the query).
torch::Tensor rms_normalise(const torch::Tensor& v, double eps);

/// One routing op: scores S tensors (B,T), values S tensors (B,T,d) -> (B,T,d). The softmax over
/// sources runs in fp32 (float64 stays float64) whatever the autocast dtype of the scores.
/// `point` is the global routing point index used for capture and ablation.
torch::Tensor attnres_route(int point, const std::vector<torch::Tensor>& scores,
                            const std::vector<torch::Tensor>& values, RoutingCapture* capture,
                            const RoutingAblation* ablation);

/// Runs `layers` sublayers over v0 (B,T,d) with AttnRes: block size S (1 = Full), queries
/// (layers+1,d) = pseudo-query * RMS gain of each point (the last row is the final aggregation).
/// sublayer(l, h) returns f_l(h). Points are numbered first_point .. first_point + layers.
/// Returns the final aggregation's output (B,T,d).
///
/// first_token_from = l >= 0 (a model whose output reads token 0 only, as AR-ViT's CLS head): sublayer
/// l still reads every token but returns its output at token 0 only, (B,1,d); from there on the
/// sources, the partial sum and every later point are cut to token 0, and the result is (B,1,d).
/// Rows past token 0 of the last sublayers cannot reach such an output, so its value and every
/// gradient are those of the full stack (tests/model/test_first_token.cpp). Not with a capture
/// (which records every token's weights): InputError.
torch::Tensor attnres_stack(const torch::Tensor& v0, int layers, int block_size, const torch::Tensor& queries,
                            double eps, int first_point,
                            const std::function<torch::Tensor(int, const torch::Tensor&)>& sublayer,
                            RoutingCapture* capture, const RoutingAblation* ablation, int first_token_from = -1);

}  // namespace arcal
