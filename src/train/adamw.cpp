#include "train/adamw.hpp"

#include <ATen/Parallel.h>

#include <cmath>
#include <memory>

namespace arcal {

namespace {

#define ARCAL_ADAMW_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

// The scalars as LibTorch passes them to its float kernels: computed in double, rounded to T.
template <typename T>
struct AdamwScalars {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, sqrt_bc2, eps, neg_step;
};

template <typename T>
inline void adamw_rows(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, std::int64_t b,
                       std::int64_t e, const AdamwScalars<T>& s) {
  const T decay = s.decay, beta1 = s.beta1, c1 = s.one_minus_beta1, beta2 = s.beta2, c2 = s.one_minus_beta2;
  const T sqrt_bc2 = s.sqrt_bc2, eps = s.eps, neg_step = s.neg_step;  // in registers, not re-read per element
  // The decay first, in a pass of its own: the product is rounded before the update is added, as
  // LibTorch's p.mul_(1 - lr wd) rounds it (in one loop the vectorised add would fuse with it).
#pragma omp simd
  for (std::int64_t i = b; i < e; ++i) p[i] *= decay;
#pragma omp simd
  for (std::int64_t i = b; i < e; ++i) {
    const T gi = g[i];
    const T mi = m[i] * beta1 + c1 * gi;
    const T vi = v[i] * beta2 + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] + neg_step * mi / (std::sqrt(vi) / sqrt_bc2 + eps);
  }
}
// One clone set per dtype (overloads: target_clones takes no templates).
ARCAL_ADAMW_CLONES void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t b, std::int64_t e,
                                     const AdamwScalars<float>& s) {
  adamw_rows(p, g, m, v, b, e, s);
}
ARCAL_ADAMW_CLONES void adamw_kernel(double* p, const double* g, double* m, double* v, std::int64_t b,
                                     std::int64_t e, const AdamwScalars<double>& s) {
  adamw_rows(p, g, m, v, b, e, s);
}

bool same_layout(const torch::Tensor& t, const torch::Tensor& p) {
  return t.device() == p.device() && t.scalar_type() == p.scalar_type() && t.is_contiguous() && t.sizes() == p.sizes();
}

// p is a dense, contiguous float or double CPU tensor and g, its gradient, has its dtype and shape.
bool loop_takes(const torch::Tensor& p, const torch::Tensor& g) {
  return p.device().is_cpu() && (p.scalar_type() == torch::kFloat || p.scalar_type() == torch::kDouble) &&
         p.is_contiguous() && !g.is_sparse() && same_layout(g, p);
}

// p's entry in torch::optim::AdamW's state map: LibTorch's own key, the address of its TensorImpl.
std::string state_key(const torch::Tensor& p) { return c10::guts::to_string(p.unsafeGetTensorImpl()); }

// The loop covers p: loop_takes(p, its gradient), and its moments (once made) have its dtype and shape.
bool loop_covers(const torch::Tensor& p, const torch::optim::AdamW& opt) {
  if (!loop_takes(p, p.grad())) return false;
  const auto it = opt.state().find(state_key(p));
  if (it == opt.state().end()) return true;
  const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
  return same_layout(st.exp_avg(), p) && same_layout(st.exp_avg_sq(), p);
}

// The loop over p's elements with LibTorch's scalars (computed in double, rounded to p's type).
void adamw_loop(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m, const torch::Tensor& v,
                double lr, double weight_decay, double beta1, double beta2, double eps, std::int64_t t) {
  const double bc1 = 1 - std::pow(beta1, double(t)), bc2 = 1 - std::pow(beta2, double(t));
  AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "adamw_step", [&] {
    const AdamwScalars<scalar_t> s{scalar_t(weight_decay != 0 ? 1 - lr * weight_decay : 1.0),
                                   scalar_t(beta1),
                                   scalar_t(1 - beta1),
                                   scalar_t(beta2),
                                   scalar_t(1 - beta2),
                                   scalar_t(std::sqrt(bc2)),
                                   scalar_t(eps),
                                   scalar_t(-(lr / bc1))};
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
    throw std::invalid_argument("adamw_update: p, g, m and v must be dense contiguous CPU tensors of one shape "
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
