#include "train/adamw.hpp"

#include <ATen/Parallel.h>

#include <cmath>
#include <memory>

#include "ops/adamw.hpp"

namespace arcal {

namespace {

bool same_layout(const torch::Tensor& t, const torch::Tensor& p) {
  return t.device() == p.device() && t.scalar_type() == p.scalar_type() && t.is_contiguous() && t.sizes() == p.sizes();
}

// p is a dense, contiguous float or double CPU tensor and g, its gradient, has its dtype and shape.
bool loop_takes(const torch::Tensor& p, const torch::Tensor& g) {
  return p.device().is_cpu() && (p.scalar_type() == torch::kFloat || p.scalar_type() == torch::kDouble) &&
         p.is_contiguous() && !g.is_sparse() && same_layout(g, p);
}

// p's entry in torch::optim::AdamW's state map: LibTorch's own key, the address of its TensorImpl.
void* state_key(const torch::Tensor& p) { return p.unsafeGetTensorImpl(); }

// The loop covers p: loop_takes(p, its gradient), and its moments (once made) have its dtype and shape.
bool loop_covers(const torch::Tensor& p, const torch::optim::AdamW& opt) {
  if (!loop_takes(p, p.grad())) return false;
  const auto it = opt.state().find(state_key(p));
  if (it == opt.state().end()) return true;
  const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  return same_layout(st.exp_avg(), p) && same_layout(st.exp_avg_sq(), p);
}

// The step's scalars for the element type (ops/adamw.hpp computes them in double and rounds).
void scalars_into(AdamwScalars<float>& s, double lr, double wd, double b1, double b2, double eps, std::int64_t t) {
  s = adamw_scalars_float(lr, wd, b1, b2, eps, t);
}
void scalars_into(AdamwScalars<double>& s, double lr, double wd, double b1, double b2, double eps, std::int64_t t) {
  s = adamw_scalars_double(lr, wd, b1, b2, eps, t);
}

// The loop over p's elements with LibTorch's scalars (computed in double, rounded to p's type).
void adamw_loop(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m, const torch::Tensor& v,
                double lr, double weight_decay, double beta1, double beta2, double eps, std::int64_t t) {
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "adamw_step", [&] {
    AdamwScalars<scalar_t> s;
    scalars_into(s, lr, weight_decay, beta1, beta2, eps, t);
    scalar_t* pp = p.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* mp = m.data_ptr<scalar_t>();
    scalar_t* vp = v.data_ptr<scalar_t>();
    at::parallel_for(0, p.numel(), 1 << 15,
                     [&](std::int64_t b, std::int64_t e) { adamw_kernel(pp, gp, mp, vp, b, e, s); });
  });
}

}  // namespace

void adamw_update(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m, const torch::Tensor& v,
                  double lr, double weight_decay, double beta1, double beta2, double eps, std::int64_t t) {
  if (!(loop_takes(p, g) && same_layout(m, p) && same_layout(v, p)))
    throw std::invalid_argument(
        "adamw_update: p, g, m and v must be dense contiguous CPU tensors of one shape "
        "and dtype (float or double)");
  if (t < 1) throw std::invalid_argument("adamw_update: step " + std::to_string(t) + ", but must be >= 1");
  torch::NoGradGuard no_grad;
  adamw_loop(p, g, m, v, lr, weight_decay, beta1, beta2, eps, t);
}

void adamw_step(torch::optim::AdamW& opt) {
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params())
      if (p.grad().defined() && (o.amsgrad() || !loop_covers(p, opt))) return static_cast<void>(opt.step());
  }
  torch::NoGradGuard no_grad;
  auto& states = opt.state();
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto key = state_key(p);
      auto it = states.find(key);
      if (it == states.end()) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = states.emplace(key, std::move(st)).first;
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      st.step(st.step() + 1);
      adamw_loop(p, p.grad(), st.exp_avg(), st.exp_avg_sq(), o.lr(), o.weight_decay(), std::get<0>(o.betas()),
                 std::get<1>(o.betas()), o.eps(), st.step());
    }
  }
}

void clear_gradients(torch::optim::Optimizer& opt) {
  for (auto& group : opt.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) p.mutable_grad().reset();
}

void restore_unused_gradients(torch::optim::AdamW& opt) {
  const auto& states = opt.state();
  for (auto& group : opt.param_groups())
    for (auto& p : group.params())
      if (!p.grad().defined() && states.count(state_key(p)))
        p.mutable_grad() = torch::zeros_like(p, torch::MemoryFormat::Preserve);
}

}  // namespace arcal
