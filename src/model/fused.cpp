#include "model/fused.hpp"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.hpp"
#include "core/env_switch.hpp"
#include "core/fast_exp.hpp"
#include "ops/attention.hpp"
#include "ops/fused_lanes.hpp"
#include "ops/gelu.hpp"
#include "ops/layer_norm.hpp"
#include "ops/routing_bank.hpp"

namespace arcal {

namespace {

// The kernels on plain arrays: src/ops (routing_bank, layer_norm, attention, gelu; fused_lanes.hpp).
using namespace fused;

EnvSwitch g_fused("ARCAL_FUSED");

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

}  // namespace

/// What the routing points of one forward pass leave for their sources' taps (RoutingBank): per
/// point whose backward ran, its output gradient, alpha, the coefficient planes and its query; per
/// slot, the (point record, source position) pairs that read it.
struct RoutingBankState : torch::CustomClassHolder {
  struct Record {
    torch::Tensor g, alpha, coef, u;  // (B,T,d), (S,B,T), (2,S,B,T): cu then cv, (d)
    int pending = 0;                  // slots not yet handed on; the tensors are released at 0
  };
  std::vector<Record> records;
  std::vector<std::vector<std::pair<int, int>>> uses;  // [slot] (record, position in the point)
  // [slot] the source's r = (mean v^2 + eps)^(-1/2) per row (B,T), from the first point that read it
  // (a view of that point's statistics), and the eps it was computed with: later points reuse it.
  std::vector<torch::Tensor> rinv;
  std::vector<double> rinv_eps;
};

namespace {

// The arithmetic dtype of a bank holding `source`: its own, float for a bf16 source.
torch::ScalarType bank_dtype(const torch::Tensor& source) {
  return source.scalar_type() == torch::kBFloat16 ? torch::kFloat : source.scalar_type();
}

// The sources' data and which of them are bf16 (the kernels' values and half arguments).
std::pair<std::vector<const void*>, std::vector<std::uint8_t>> source_pointers(const std::vector<torch::Tensor>& v) {
  std::vector<const void*> p(v.size());
  std::vector<std::uint8_t> half(v.size());
  for (std::size_t s = 0; s < v.size(); ++s) {
    half[s] = v[s].scalar_type() == torch::kBFloat16;
    p[s] = v[s].data_ptr();
  }
  return {p, half};
}

c10::intrusive_ptr<RoutingBankState> bank_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<RoutingBankState>(ctx->saved_data["bank"].toCapsule());
}

// Identity on a source; its backward builds the source's gradient from what the routing points that
// read it left in the bank (plus any gradient that reached the tapped tensor the ordinary way). The
// engine runs it only after every such point, since each has an edge to it.
struct SourceTapFunction : public torch::autograd::Function<SourceTapFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& v, c10::IValue bank, std::int64_t slot) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({v});
    ctx->saved_data["bank"] = std::move(bank);
    ctx->saved_data["slot"] = slot;
    return v;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto bank = bank_of(ctx);
    const auto slot = static_cast<std::size_t>(ctx->saved_data["slot"].toInt());
    auto uses = std::move(bank->uses[slot]);
    bank->uses[slot].clear();
    torch::Tensor g;
    const auto v = ctx->get_saved_variables()[0].contiguous();
    const bool half = v.scalar_type() == torch::kBFloat16;  // summed in float, rounded once
    if (!uses.empty()) {
      const int K = static_cast<int>(uses.size());
      const std::int64_t d = v.size(2), N = v.numel() / d;
      g = torch::empty(v.sizes(), v.options().dtype(bank_dtype(v)));
      // v's data as the kernel reads it (bf16 sources: their own bf16 storage) and dv in T.
      auto run = [&](const auto* vp, auto* o) {
        using T = std::remove_pointer_t<decltype(o)>;
        std::vector<const T*> a(K), cu(K), cv(K), gk(K), u(K);
        for (int k = 0; k < K; ++k) {
          const auto& r = bank->records[static_cast<std::size_t>(uses[std::size_t(k)].first)];
          const std::int64_t s = uses[std::size_t(k)].second, S = r.alpha.size(0);
          a[k] = r.alpha.data_ptr<T>() + s * N;
          cu[k] = r.coef.data_ptr<T>() + s * N;
          cv[k] = r.coef.data_ptr<T>() + (S + s) * N;
          gk[k] = r.g.data_ptr<T>();
          u[k] = r.u.data_ptr<T>();
        }
        at::parallel_for(0, N, routing_grain(2 * K, d), [&](std::int64_t b, std::int64_t e) {
          source_grad(vp, K, a.data(), cu.data(), cv.data(), gk.data(), u.data(), d, b, e, o);
        });
      };
      if (half)
        run(reinterpret_cast<const std::uint16_t*>(v.data_ptr<at::BFloat16>()), g.data_ptr<float>());
      else
        AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "routing_source_grad",
                                   [&] { run(v.data_ptr<scalar_t>(), g.data_ptr<scalar_t>()); });
      for (const auto& [rec, pos] : uses) {  // a point's tensors go once every source it read has its gradient
        auto& r = bank->records[static_cast<std::size_t>(rec)];
        if (--r.pending == 0) r = RoutingBankState::Record{};
      }
    }
    if (grad_outputs[0].defined()) g = g.defined() ? g + grad_outputs[0] : grad_outputs[0];
    if (half && g.defined() && g.scalar_type() != torch::kBFloat16) g = g.to(torch::kBFloat16);
    return {g, torch::Tensor(), torch::Tensor()};
  }
};

struct RoutePointFunction : public torch::autograd::Function<RoutePointFunction> {
  // Returns (h (B,T,d), alpha (S,B,T), not differentiable). slots: each source's slot in the bank.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& u, torch::TensorList sources,
                               c10::IValue bank, std::vector<std::int64_t> slots, double eps) {
    const int S = static_cast<int>(sources.size());
    std::vector<torch::Tensor> v(sources.begin(), sources.end());
    for (auto& t : v) t = t.contiguous();
    auto uc = u.contiguous();
    const std::int64_t B = v[0].size(0), T = v[0].size(1), d = v[0].size(2), N = B * T;
    auto out = torch::empty({B, T, d}, uc.options());       // the bank's dtype (bf16 sources: float)
    auto stats = torch::empty({3, S, B, T}, uc.options());  // alpha, logit, 1/rms
    const auto [vp, half] = source_pointers(v);
    // Each source's r depends on the source alone: the first point that reads it computes it, later
    // points of the same forward pass read it from the bank and only sum v.u (bitwise the same r).
    auto state = c10::static_intrusive_pointer_cast<RoutingBankState>(bank.toCapsule());
    AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "route_point", [&] {
      scalar_t* st = stats.data_ptr<scalar_t>();
      const scalar_t* up = uc.data_ptr<scalar_t>();
      scalar_t* o = out.data_ptr<scalar_t>();
      std::vector<const scalar_t*> known(std::size_t(S), nullptr);
      for (int s = 0; s < S; ++s) {
        const auto slot = static_cast<std::size_t>(slots[std::size_t(s)]);
        const auto& r = state->rinv[slot];
        if (r.defined() && r.scalar_type() == out.scalar_type() && state->rinv_eps[slot] == eps)
          known[std::size_t(s)] = r.template data_ptr<scalar_t>();
      }
      at::parallel_for(0, N, routing_grain(2 * S, d), [&](std::int64_t b, std::int64_t e) {
        route_point(up, vp.data(), half.data(), known.data(), S, N, d, eps, b, e, o, st, st + S * N, st + 2 * S * N);
      });
      for (int s = 0; s < S; ++s) {
        const auto slot = static_cast<std::size_t>(slots[std::size_t(s)]);
        if (known[std::size_t(s)]) continue;
        state->rinv[slot] = stats[2][s];
        state->rinv_eps[slot] = eps;
      }
    });
    auto alpha = stats[0];
    ctx->mark_non_differentiable({alpha});
    ctx->set_materialize_grads(false);  // alpha never receives a gradient: no zeros for it
    variable_list saved{uc, stats};
    saved.insert(saved.end(), v.begin(), v.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["bank"] = std::move(bank);
    ctx->saved_data["slots"] = std::move(slots);
    return {out, alpha};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& u = saved[0];
    const auto& stats = saved[1];
    const std::vector<torch::Tensor> values(saved.begin() + 2, saved.end());
    const int S = static_cast<int>(values.size());
    const auto slots = ctx->saved_data["slots"].toIntVector();
    auto bank = bank_of(ctx);
    torch::Tensor du = torch::zeros_like(u);
    variable_list grads(std::size_t(1 + S + 3));  // u, every source, bank, slots, eps
    if (grad_outputs[0].defined()) {
      auto grad = grad_outputs[0].to(u.scalar_type()).contiguous();
      const std::int64_t B = values[0].size(0), T = values[0].size(1), d = values[0].size(2), N = B * T;
      auto coef = torch::empty({2, S, B, T}, u.options());  // cu, cv
      const std::int64_t blocks = (N + kRouteBlock - 1) / kRouteBlock;
      auto partial = torch::empty({blocks, d}, u.options());
      const auto [vp, half] = source_pointers(values);
      AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "route_point_backward", [&] {
        const scalar_t* st = stats.data_ptr<scalar_t>();
        const scalar_t* g = grad.data_ptr<scalar_t>();
        scalar_t* cf = coef.data_ptr<scalar_t>();
        scalar_t* pp = partial.data_ptr<scalar_t>();
        const std::int64_t grain = std::max<std::int64_t>(1, routing_grain(2 * S, d) / kRouteBlock);
        at::parallel_for(0, blocks, grain, [&](std::int64_t b0, std::int64_t b1) {
          std::vector<scalar_t> da(static_cast<std::size_t>(S * kRowBlock));
          for (std::int64_t blk = b0; blk < b1; ++blk)
            route_point_backward(vp.data(), half.data(), st, st + S * N, st + 2 * S * N, g, S, N, d, blk * kRouteBlock,
                                 std::min(N, (blk + 1) * kRouteBlock), cf, cf + S * N, pp + blk * d, da.data());
        });
        add_block_partials(pp, blocks, d, du.data_ptr<scalar_t>());
      });
      const int rec = static_cast<int>(bank->records.size());
      bank->records.push_back({grad, stats[0], coef, u, S});
      for (int s = 0; s < S; ++s) bank->uses[static_cast<std::size_t>(slots[std::size_t(s)])].push_back({rec, s});
    }
    grads[0] = du;  // the sources' gradients are built by their taps from what this point left in the bank
    return grads;
  }
};

inline void gelu_kernel(const c10::BFloat16* x, std::int64_t b, std::int64_t e, c10::BFloat16* y) {
  gelu_lookup(gelu_bf16_table(), reinterpret_cast<const std::uint16_t*>(x), b, e, reinterpret_cast<std::uint16_t*>(y));
}
inline void gelu_derivative_kernel(const c10::BFloat16* x, std::int64_t b, std::int64_t e, c10::BFloat16* y,
                                   c10::BFloat16* dydx) {
  gelu_derivative_lookup(gelu_bf16_table(), reinterpret_cast<const std::uint16_t*>(x), b, e,
                         reinterpret_cast<std::uint16_t*>(y), reinterpret_cast<std::uint16_t*>(dydx));
}
inline void gelu_kernel(const float* x, std::int64_t b, std::int64_t e, float* y) { gelu_f(x, b, e, y); }
inline void gelu_kernel(const double* x, std::int64_t b, std::int64_t e, double* y) { gelu_d(x, b, e, y); }
inline void gelu_derivative_kernel(const float* x, std::int64_t b, std::int64_t e, float* y, float* dydx) {
  gelu_derivative_f(x, b, e, y, dydx);
}
inline void gelu_derivative_kernel(const double* x, std::int64_t b, std::int64_t e, double* y, double* dydx) {
  gelu_derivative_d(x, b, e, y, dydx);
}
constexpr std::int64_t kGeluGrain = 1 << 14;

// Without autograd (evaluation, no_grad, an input that needs no gradient): y only.
torch::Tensor gelu_values(const torch::Tensor& x_in) {
  auto x = x_in.contiguous();
  auto y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "fused_gelu", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGeluGrain, [&](std::int64_t b, std::int64_t e) { gelu_kernel(xp, b, e, yp); });
  });
  return y;
}

struct GeluFunction : public torch::autograd::Function<GeluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in) {
    auto x = x_in.contiguous();
    auto y = torch::empty_like(x);
    auto dydx = torch::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "fused_gelu", [&] {
      const scalar_t* xp = x.data_ptr<scalar_t>();
      scalar_t* yp = y.data_ptr<scalar_t>();
      scalar_t* dp = dydx.data_ptr<scalar_t>();
      at::parallel_for(0, x.numel(), kGeluGrain,
                       [&](std::int64_t b, std::int64_t e) { gelu_derivative_kernel(xp, b, e, yp, dp); });
    });
    ctx->save_for_backward({dydx});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto dydx = ctx->get_saved_variables()[0];
    const auto g = grad_outputs[0].to(dydx.scalar_type());
    // One elementwise product: LibTorch's vectorised mul in float and double (the saved tensor is
    // contiguous); in bf16 arcal's loop, which rounds the float product as LibTorch's bf16 mul does
    // at a third of its dispatch and conversion cost.
    if (dydx.scalar_type() != at::kBFloat16) return {g * dydx};
    const auto gc = g.contiguous();
    auto dx = torch::empty_like(dydx);
    const auto* gp = reinterpret_cast<const std::uint16_t*>(gc.data_ptr<at::BFloat16>());
    const auto* dp = reinterpret_cast<const std::uint16_t*>(dydx.data_ptr<at::BFloat16>());
    auto* xp = reinterpret_cast<std::uint16_t*>(dx.data_ptr<at::BFloat16>());
    at::parallel_for(0, dx.numel(), kGeluGrain,
                     [&](std::int64_t b, std::int64_t e) { bf16_product(gp, dp, b, e, xp); });
    return {dx};
  }
};

struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  // bf16_out (float x only): y in bf16.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& w_in,
                               const torch::Tensor& b_in, double eps, bool bf16_out) {
    auto x = x_in.contiguous();
    auto w = w_in.contiguous(), b = b_in.contiguous();
    const std::int64_t d = x.size(-1), rows = x.numel() / d;  // d >= 1 (fused_layer_norm checks)
    auto y = bf16_out ? torch::empty_like(x, x.options().dtype(torch::kBFloat16)) : torch::empty_like(x);
    auto mean = torch::empty({rows}, x.options()), rstd = torch::empty({rows}, x.options());
    const std::int64_t blocks = (rows + kNormBlock - 1) / kNormBlock;
    auto run = [&](const auto* xp, const auto* wp, const auto* bp, auto* yp, auto* mp, auto* rp) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
      at::parallel_for(0, blocks, norm_block_grain(d), [&](std::int64_t b0, std::int64_t b1) {
        layer_norm_kernel(xp, wp, bp, b0 * kNormBlock, std::min(rows, b1 * kNormBlock), d, T(eps), yp, mp, rp);
      });
    };
    if (bf16_out)  // float x (fused_layer_norm checks)
      run(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
          reinterpret_cast<std::uint16_t*>(y.data_ptr<at::BFloat16>()), mean.data_ptr<float>(), rstd.data_ptr<float>());
    else
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_norm", [&] {
        run(x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
            mean.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>());
      });
    ctx->save_for_backward({x, w, mean, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    // A bf16 gradient of a float norm (its bf16 output fed a linear) is read as it is.
    const bool bf16_dy = x.scalar_type() == torch::kFloat && grad_outputs[0].scalar_type() == torch::kBFloat16;
    const auto dy = (bf16_dy ? grad_outputs[0] : grad_outputs[0].to(x.scalar_type())).contiguous();
    const std::int64_t d = x.size(-1), rows = mean.numel();
    const std::int64_t blocks = (rows + kNormBlock - 1) / kNormBlock;
    auto dx = torch::empty_like(x);
    auto partial = torch::zeros({std::max<std::int64_t>(blocks, 1), 2, d}, x.options());  // [block] dw, db
    auto run = [&](const auto* xp, const auto* gp) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
      const T *wp = w.data_ptr<T>(), *mp = mean.data_ptr<T>(), *rp = rstd.data_ptr<T>();
      T *dp = dx.data_ptr<T>(), *pp = partial.data_ptr<T>();
      at::parallel_for(0, blocks, norm_block_grain(d), [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t blk = b0; blk < b1; ++blk)
          layer_norm_backward_kernel(xp, wp, gp, mp, rp, blk * kNormBlock, std::min(rows, (blk + 1) * kNormBlock), d,
                                     dp, pp + blk * 2 * d, pp + blk * 2 * d + d);
      });
    };
    if (bf16_dy)
      run(x.data_ptr<float>(), reinterpret_cast<const std::uint16_t*>(dy.data_ptr<at::BFloat16>()));
    else
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_norm_backward",
                                 [&] { run(x.data_ptr<scalar_t>(), dy.data_ptr<scalar_t>()); });
    auto sums = torch::zeros({2, d}, x.options());  // dw, db
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_norm_sums", [&] {
      add_block_partials(partial.data_ptr<scalar_t>(), blocks, 2 * d, sums.data_ptr<scalar_t>());
    });
    return {dx, sums[0], sums[1], torch::Tensor(), torch::Tensor()};
  }
};

AttentionShape attention_shape(const torch::Tensor& qkv, std::int64_t heads, bool causal) {
  const std::int64_t D = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), D, heads, D / heads, causal};
}

struct SelfAttentionFunction : public torch::autograd::Function<SelfAttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in, std::int64_t heads, bool causal) {
    auto qkv = qkv_in.contiguous();
    const auto s = attention_shape(qkv, heads, causal);
    auto out = torch::empty({s.B, s.T, s.D}, qkv.options());
    const bool lanes = lane_path(s);
    const std::int64_t groups = (s.B + kLanes - 1) / kLanes;
    // lanes: (groups, H, T, T, 8) interleaved; else (B, H, T, np) with rows padded with weight 0.
    // float for bf16 qkv (fused_self_attention sends bf16 here on the lane path only).
    const bool bf16 = qkv.scalar_type() == torch::kBFloat16;
    const auto popts = bf16 ? qkv.options().dtype(torch::kFloat) : qkv.options();
    auto P = lanes ? torch::empty({groups, s.H, s.T, s.T, kLanes}, popts)
                   : torch::empty({s.B, s.H, s.T, padded_tokens(s.T)}, popts);
    if (bf16) {
      const auto* x = reinterpret_cast<const std::uint16_t*>(qkv.data_ptr<at::BFloat16>());
      float* p = P.data_ptr<float>();
      auto* o = reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>());
      at::parallel_for(0, groups * s.H, 1,
                       [&](std::int64_t b, std::int64_t e) { attention_forward_bf16(x, s, b, e, p, o); });
    } else {
      AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "fused_self_attention", [&] {
        const scalar_t* x = qkv.data_ptr<scalar_t>();
        scalar_t* p = P.data_ptr<scalar_t>();
        scalar_t* o = out.data_ptr<scalar_t>();
        at::parallel_for(0, (lanes ? groups : s.B) * s.H, lanes ? 1 : 8,
                         [&](std::int64_t b, std::int64_t e) { attention_forward(x, s, b, e, p, o); });
      });
    }
    ctx->save_for_backward({qkv, P});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["causal"] = causal;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& qkv = saved[0];
    const auto& P = saved[1];
    const auto s = attention_shape(qkv, ctx->saved_data["heads"].toInt(), ctx->saved_data["causal"].toBool());
    auto g = grad_outputs[0].to(qkv.scalar_type()).contiguous();
    auto dqkv = torch::empty_like(qkv);  // every entry is written: each head writes (or zeroes) its own columns
    if (qkv.scalar_type() == torch::kBFloat16) {  // the lane path (as the forward)
      const auto* x = reinterpret_cast<const std::uint16_t*>(qkv.data_ptr<at::BFloat16>());
      const float* p = P.data_ptr<float>();
      const auto* gp = reinterpret_cast<const std::uint16_t*>(g.data_ptr<at::BFloat16>());
      auto* dx = reinterpret_cast<std::uint16_t*>(dqkv.data_ptr<at::BFloat16>());
      at::parallel_for(0, (s.B + kLanes - 1) / kLanes * s.H, 1,
                       [&](std::int64_t b, std::int64_t e) { attention_backward_bf16(x, s, p, gp, b, e, dx); });
      return {dqkv, torch::Tensor(), torch::Tensor()};
    }
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "fused_self_attention_backward", [&] {
      const scalar_t* x = qkv.data_ptr<scalar_t>();
      const scalar_t* p = P.data_ptr<scalar_t>();
      const scalar_t* gp = g.data_ptr<scalar_t>();
      scalar_t* dx = dqkv.data_ptr<scalar_t>();
      const bool lanes = lane_path(s);  // as the forward chose: then P is lane-interleaved
      at::parallel_for(0, (lanes ? (s.B + kLanes - 1) / kLanes : s.B) * s.H, lanes ? 1 : 8,
                       [&](std::int64_t b, std::int64_t e) { attention_backward(x, s, p, gp, b, e, dx); });
    });
    return {dqkv, torch::Tensor(), torch::Tensor()};
  }
};

bool floating(const torch::Tensor& t) { return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble; }

}  // namespace

bool fused_operators_enabled() { return g_fused.enabled(); }

void set_fused_operators(bool enabled) { g_fused.set(enabled); }

bool fused_storage_dtype(torch::ScalarType t) {
  return t == torch::kFloat || t == torch::kDouble || t == torch::kBFloat16;
}

torch::Tensor fused_self_attention(const torch::Tensor& qkv, int heads, bool causal) {
  const char* fn = "fused_self_attention";
  if (qkv.dim() != 3 || qkv.size(2) % 3 != 0) throw_input(fn, "qkv must be (B,T,3D)");
  if (heads < 1 || (qkv.size(2) / 3) % heads != 0) throw_input(fn, "D must be a multiple of the number of heads");
  if (!fused_storage_dtype(qkv.scalar_type())) throw_input(fn, "qkv must be float, double or bfloat16");
  if (!qkv.device().is_cpu())
    throw_input(fn, "CPU tensors only (the models use LibTorch's composite on other devices)");
  if (qkv.scalar_type() == torch::kBFloat16 && !lane_path(attention_shape(qkv, heads, causal)))
    return SelfAttentionFunction::apply(qkv.to(torch::kFloat), static_cast<std::int64_t>(heads), causal)
        .to(torch::kBFloat16);
  return SelfAttentionFunction::apply(qkv, static_cast<std::int64_t>(heads), causal);
}

torch::Tensor composite_self_attention(const torch::Tensor& qkv_in, int heads, bool causal) {
  const auto B = qkv_in.size(0), T = qkv_in.size(1), D = qkv_in.size(2) / 3, hd = D / heads;
  auto qkv = qkv_in.reshape({B, T, 3, heads, hd}).permute({2, 0, 3, 1, 4});  // (3,B,H,T,hd)
  auto scores = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
  if (causal)
    scores = scores.masked_fill(torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool)).triu(1),
                                -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(scores, -1), qkv[2]).transpose(1, 2).reshape({B, T, D});
}

RoutingBank::RoutingBank() : bank_(c10::IValue::make_capsule(c10::make_intrusive<RoutingBankState>())) {}

namespace {
RoutingBankState& state_of(const c10::IValue& bank) {
  return *c10::static_intrusive_pointer_cast<RoutingBankState>(bank.toCapsule());
}
}  // namespace

int RoutingBank::add(const torch::Tensor& source) {
  const char* fn = "RoutingBank::add";
  if (source.dim() != 3) throw_input(fn, "a source must be (B,T,d)");
  if (!fused_storage_dtype(source.scalar_type())) throw_input(fn, "a source must be float, double or bfloat16");
  if (!source.device().is_cpu()) throw_input(fn, "CPU tensors only");
  if (!tapped_.empty() && (source.sizes() != tapped_[0].sizes() || bank_dtype(source) != bank_dtype(tapped_[0])))
    throw_input(fn, "source " + std::to_string(tapped_.size()) +
                        " must match source 0's shape and dtype (bfloat16 sources mix with float ones only)");
  const auto slot = static_cast<std::int64_t>(tapped_.size());
  auto& state = state_of(bank_);
  state.uses.emplace_back();
  state.rinv.emplace_back();
  state.rinv_eps.push_back(0.0);
  tapped_.push_back(SourceTapFunction::apply(source, bank_, slot));
  return static_cast<int>(slot);
}

std::pair<torch::Tensor, torch::Tensor> RoutingBank::route(const torch::Tensor& u, const std::vector<int>& slots,
                                                           double eps) {
  const char* fn = "RoutingBank::route";
  if (slots.empty()) throw_input(fn, "no sources");
  std::vector<torch::Tensor> v;
  std::vector<std::int64_t> ids;
  for (int s : slots) {
    if (s < 0 || s >= static_cast<int>(tapped_.size())) throw_input(fn, "slot " + std::to_string(s) + " was not added");
    v.push_back(tapped_[static_cast<std::size_t>(s)]);
    ids.push_back(s);
  }
  if (u.dim() != 1 || u.size(0) != v[0].size(2)) throw_input(fn, "the query must be (d) with d = the sources' width");
  if (u.scalar_type() != bank_dtype(v[0]))
    throw_input(fn, "the query must have the sources' dtype (float for bfloat16 sources)");
  auto out = RoutePointFunction::apply(u, torch::TensorList(v), bank_, std::move(ids), eps);
  return {out[0], out[1]};
}

torch::Tensor fused_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               double eps, bool bf16_output) {
  const char* fn = "fused_layer_norm";
  if (x.dim() < 1 || x.size(-1) < 1) throw_input(fn, "x must have a non-empty last axis");
  if (!floating(x)) throw_input(fn, "x must be float or double");
  if (!x.device().is_cpu() || !weight.device().is_cpu() || !bias.device().is_cpu())
    throw_input(fn, "CPU tensors only (the models use LibTorch's layer_norm on other devices)");
  if (weight.dim() != 1 || bias.dim() != 1 || weight.size(0) != x.size(-1) || bias.size(0) != x.size(-1))
    throw_input(fn, "weight and bias must be (d,) with d = x.size(-1) = " + std::to_string(x.size(-1)));
  if (weight.scalar_type() != x.scalar_type() || bias.scalar_type() != x.scalar_type())
    throw_input(fn, "weight and bias must have x's dtype");
  if (!(eps >= 0.0)) throw_input(fn, "eps must be >= 0");
  if (bf16_output && x.scalar_type() != torch::kFloat) throw_input(fn, "a bf16 output is for a float x only");
  return LayerNormFunction::apply(x, weight, bias, eps, bf16_output);
}

torch::Tensor fused_gelu(const torch::Tensor& x) {
  if (!fused_storage_dtype(x.scalar_type())) throw_input("fused_gelu", "x must be float, double or bfloat16");
  if (!x.device().is_cpu())
    throw_input("fused_gelu", "CPU tensors only (the models use LibTorch's gelu on other devices)");
  if (torch::GradMode::is_enabled() && x.requires_grad()) return GeluFunction::apply(x);
  return gelu_values(x);
}

}  // namespace arcal
