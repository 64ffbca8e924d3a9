// The models' linear layer as one autograd operator (fused_linear, model/fused.hpp): the same GEMMs
// as torch::linear's addmm, without its broadcast copy of the bias and the half-dozen autograd nodes
// around it (autocast's casts of x, weight and bias and their backward, the transpose, the views).
#include <ATen/autocast_mode.h>

#include <cstring>

#include "model/fused.hpp"
#include "ops/torch/onednn_gemm.hpp"

namespace arcal {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dtype the product is computed in: autocast's (bf16) for a float input when CPU autocast is on,
// as autocast's linear casts its arguments; the input's own otherwise.
torch::ScalarType compute_dtype(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  if (at::autocast::is_autocast_enabled(at::kCPU) && at::isFloatingType(t) && t != torch::kDouble)
    return at::autocast::get_autocast_dtype(at::kCPU);
  return t;
}

torch::Tensor in_dtype(const torch::Tensor& t, torch::ScalarType dtype) {
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

// out (M,N) = bias in every row, then out += x w^T in place: the GEMM at::addmm runs after its own
// copy of the broadcast bias (beta 1, alpha 1), so the values are addmm's bit for bit. Weight and bias
// are cast to x2's dtype here (autocast's casts; no-ops otherwise).
torch::Tensor linear_values(const torch::Tensor& x2, const torch::Tensor& weight, const torch::Tensor& bias) {
  const auto w = in_dtype(weight, x2.scalar_type());
  const auto b = in_dtype(bias, x2.scalar_type()).contiguous();
  // bf16: oneDNN's product with the bias as its own argument, bitwise the rows-then-addmm_ below
  // (model/onednn_gemm.hpp), without LibTorch's per-call descriptor set-up.
  if (auto direct = onednn_bf16_mm(x2, w.t(), b); direct.defined()) return direct;
  auto out = torch::empty({x2.size(0), w.size(0)}, x2.options());
  const auto row_bytes = std::size_t(w.size(0)) * out.element_size();
  const auto* src = static_cast<const char*>(b.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  for (std::int64_t r = 0; r < out.size(0); ++r) std::memcpy(dst + std::size_t(r) * row_bytes, src, row_bytes);
  out.addmm_(x2, w.t());
  return out;
}

// x2 (M,K) and weight (N,K), bias (N) already in the compute dtype; weight and bias as the caller
// holds them (their gradients go back in their own dtype, as autocast's cast's backward returns).
struct LinearFunction : public torch::autograd::Function<LinearFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x2, const torch::Tensor& weight,
                               const torch::Tensor& bias) {
    const auto w = in_dtype(weight, x2.scalar_type());
    ctx->save_for_backward({x2, w});
    ctx->saved_data["weight_dtype"] = int64_t(weight.scalar_type());
    ctx->saved_data["bias_dtype"] = int64_t(bias.scalar_type());
    return linear_values(x2, w, bias);
  }
  // addmm's backward with mat1 = x2 and the column-major mat2 = w^T, as LibTorch writes it:
  // dx = g w, dw = (g^T x2) (mm_mat2_backward's form for a column-major mat2, transposed back), and
  // db = the sum of g over rows (the engine's sum_to of the broadcast bias); then the casts back.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& x2 = saved[0];
    const auto& w = saved[1];
    const auto g = in_dtype(grad_outputs[0], x2.scalar_type());
    torch::Tensor dx, dw, db;
    // bf16 products through oneDNN directly (model/onednn_gemm.hpp), bitwise at::mm's.
    auto mm = [](const torch::Tensor& a, const torch::Tensor& b) {
      auto direct = onednn_bf16_mm(a, b);
      return direct.defined() ? direct : a.mm(b);
    };
    if (ctx->needs_input_grad(0)) dx = mm(g, w);
    if (ctx->needs_input_grad(1))
      dw = in_dtype(mm(g.t(), x2), torch::ScalarType(ctx->saved_data["weight_dtype"].toInt()));
    if (ctx->needs_input_grad(2))
      db = in_dtype(g.sum({0}, true).view({w.size(0)}), torch::ScalarType(ctx->saved_data["bias_dtype"].toInt()));
    return {dx, dw, db};
  }
};

}  // namespace

torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const auto dtype = compute_dtype(x);
  const bool takes = fused_operators_enabled() && x.device().is_cpu() && bias.defined() && weight.dim() == 2 &&
                     bias.dim() == 1 && bias.size(0) == weight.size(0) && (x.dim() == 2 || x.dim() == 3) &&
                     x.size(-1) == weight.size(1) && x.numel() > 0 && weight.device().is_cpu() &&
                     bias.device().is_cpu() &&
                     (dtype == torch::kFloat || dtype == torch::kDouble || dtype == torch::kBFloat16);
  // Autocast casts a float weight and bias to its dtype; any other mix of dtypes, and the inputs
  // at::linear itself sends elsewhere (matmul then add_ for a strided 3-d input), stay with it.
  const bool autocast_casts =
      at::autocast::is_autocast_enabled(at::kCPU) && dtype == at::autocast::get_autocast_dtype(at::kCPU);
  auto fits = [&](const torch::Tensor& p) {
    return p.scalar_type() == dtype || (autocast_casts && p.scalar_type() == torch::kFloat);
  };
  if (!takes || !fits(weight) || !fits(bias)) return torch::linear(x, weight, bias);
  const auto xc = in_dtype(x, dtype);
  if (xc.dim() == 3 && !xc.is_contiguous()) return torch::linear(x, weight, bias);
  const auto x2 = xc.dim() == 3 ? xc.view({xc.size(0) * xc.size(1), xc.size(2)}) : xc;
  const bool grads =
      torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || bias.requires_grad());
  // Without gradients the values alone (autocast's weight cast and the GEMM; no graph).
  const auto out = grads ? LinearFunction::apply(x2, weight, bias) : linear_values(x2, weight, bias);
  return xc.dim() == 3 ? out.view({xc.size(0), xc.size(1), out.size(1)}) : out;
}

}  // namespace arcal
