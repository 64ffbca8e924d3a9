#include "model/cost.hpp"

namespace arcal {

ModelCost model_cost(const ModelConfig& c) {
  validate_model_config(c);
  ModelCost cost;
  const auto sources = c.sources_per_point();
  std::size_t point = 0;
  const double pp = double(c.channels) * c.patch * c.patch;
  if (c.arch == "lm") {  // per sequence of `context` tokens; causal attention reads T(T+1)/2 pairs
    const double T = c.tokens(), d = c.dim, hidden = double(c.dim) * c.mlp_ratio;
    const double per_block_attn = T * (T + 1) * d;
    cost.attention_macs = c.depth * per_block_attn;
    cost.macs = c.depth * (T * d * 3 * d + per_block_attn + T * d * d + 2.0 * T * d * hidden) + T * d * c.classes;
    for (int S : sources) cost.routing_macs += 2.0 * S * T * d;
  } else if (c.arch != "swin") {
    const double T = c.tokens(), d = c.dim, hidden = double(c.dim) * c.mlp_ratio;
    const double per_block_attn = 2.0 * T * T * d;
    const double per_block = T * d * 3 * d + per_block_attn + T * d * d + 2.0 * T * d * hidden;
    cost.attention_macs = c.depth * per_block_attn;
    cost.macs = (T - 1) * d * pp + c.depth * per_block + d * c.classes;
    for (int S : sources) cost.routing_macs += 2.0 * S * T * d;
  } else {
    double r = double(c.image_size) / c.patch;
    cost.macs = r * r * c.stage_dims[0] * pp;
    for (int s = 0; s < c.stages(); ++s) {
      const double N = double(c.stage_resolution(s)) * c.stage_resolution(s);
      const double C = c.stage_dims[s], w = c.stage_window(s);
      if (s > 0) {
        const double Cp = c.stage_dims[s - 1];
        cost.macs += N * 4 * Cp * 2 * Cp;  // patch merging reduction
      }
      const double attn = 2.0 * N * w * w * C;  // QK^T and AV inside N / w^2 windows
      const double block = N * C * 3 * C + attn + N * C * C + 2.0 * N * C * C * c.mlp_ratio;
      cost.attention_macs += c.stage_depths[s] * attn;
      cost.macs += c.stage_depths[s] * block;
      if (!sources.empty())
        for (int p = 0; p < 2 * c.stage_depths[s] + 1; ++p) cost.routing_macs += 2.0 * sources[point++] * N * C;
    }
    cost.macs += double(c.stage_dims.back()) * c.classes;
  }
  cost.macs += cost.routing_macs;
  return cost;
}

}  // namespace arcal
