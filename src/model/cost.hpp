// Closed-form compute cost of a model configuration per image (per sequence of `context` tokens for
// the language model): multiply-accumulates (MACs) of every
// convolution, linear layer and attention product, plus the AttnRes routing ops. The DeiT and
// Swin papers call MACs "FLOPs" (DeiT-S 4.6G, Swin-T 4.5G at 224x224); arcal prints both MACs and
// 2 x MACs so the two conventions cannot be confused. Norms, softmax and GELU are not counted.
#pragma once

#include <cstdint>

#include "model/config.hpp"

namespace arcal {

struct ModelCost {
  double macs = 0;            ///< per image, forward pass, everything below included
  double routing_macs = 0;    ///< of which AttnRes routing: score and weighted sum, 2 * S_p * T * d per point
  double attention_macs = 0;  ///< of which the QK^T and AV products
};

/// Forward-pass cost per image of a valid configuration (validate_model_config).
ModelCost model_cost(const ModelConfig& config);

}  // namespace arcal
