#include "audit/torch/mlp_probe.hpp"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.hpp"
#include "core/rng.hpp"

namespace arcal {

std::int64_t mlp_parameter_count(int inputs, int h1, int h2) {
  return std::int64_t(inputs) * h1 + h1 + std::int64_t(h1) * h2 + h2 + h2 + 1;
}

std::pair<int, int> capacity_matched_widths(int inputs, std::int64_t target) {
  std::pair<int, int> best{1, 1};
  double best_err = std::numeric_limits<double>::infinity();
  for (int h = 1; h <= 1024; ++h) {
    const double err = std::abs(double(mlp_parameter_count(inputs, h, h) - target)) / double(target);
    if (err < best_err) {
      best_err = err;
      best = {h, h};
    }
  }
  if (best_err > 0.02) {
    for (int h2 = 1; h2 <= 2048; ++h2) {
      const double err = std::abs(double(mlp_parameter_count(inputs, best.first, h2) - target)) / double(target);
      if (err < best_err) {
        best_err = err;
        best.second = h2;
      }
    }
  }
  return best;
}

namespace {

struct Net : torch::nn::Module {
  Net(int in, int h1, int h2) {
    l1 = register_module("l1", torch::nn::Linear(in, h1));
    l2 = register_module("l2", torch::nn::Linear(h1, h2));
    out = register_module("out", torch::nn::Linear(h2, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) { return out(torch::gelu(l2(torch::gelu(l1(x))))).squeeze(1); }
  torch::nn::Linear l1{nullptr}, l2{nullptr}, out{nullptr};
};

}  // namespace

std::vector<double> fit_predict_mlp_probe(const std::vector<double>& x_train, std::size_t n, std::size_t f,
                                          const std::vector<double>& y_train, const std::vector<double>& x_eval,
                                          std::size_t m, const MlpProbeOptions& o, MlpProbeInfo* info) {
  const char* fn = "fit_predict_mlp_probe";
  if (f == 0) throw_input(fn, "no features (f = 0)");
  check_same_size(fn, "x_train", x_train.size(), "n x f", n * f);
  check_same_size(fn, "y_train", y_train.size(), "n", n);
  check_same_size(fn, "x_eval", x_eval.size(), "m x f", m * f);
  if (n < 10) throw_input(fn, "needs at least 10 training rows, got " + std::to_string(n));
  for (std::size_t i = 0; i < n; ++i) {
    if (o.soft_labels)
      check_probability(fn, "y_train", i, y_train[i]);
    else if (y_train[i] != 0.0 && y_train[i] != 1.0)
      throw_index(fn, "y_train", i, std::to_string(y_train[i]), "0 or 1");
  }
  if (o.warm_start && (o.warm_start->inputs != int(f) || o.warm_start->hidden1 != o.hidden1 ||
                       o.warm_start->hidden2 != o.hidden2 || o.warm_start->tensors.size() != 6))
    throw_input(fn, "warm_start has shape (" + std::to_string(o.warm_start->inputs) + ", " +
                        std::to_string(o.warm_start->hidden1) + ", " + std::to_string(o.warm_start->hidden2) +
                        ") with " + std::to_string(o.warm_start->tensors.size()) + " tensors, but must be (" +
                        std::to_string(f) + ", " + std::to_string(o.hidden1) + ", " + std::to_string(o.hidden2) +
                        ") with 6");
  for (std::size_t i = 0; i < x_train.size(); ++i) check_finite(fn, "x_train", i, x_train[i]);
  for (std::size_t i = 0; i < x_eval.size(); ++i) check_finite(fn, "x_eval", i, x_eval[i]);

  torch::NoGradGuard outer_guard;
  auto Xtr = torch::from_blob(const_cast<double*>(x_train.data()), {long(n), long(f)}, torch::kDouble).clone();
  auto Xev = torch::from_blob(const_cast<double*>(x_eval.data()), {long(m), long(f)}, torch::kDouble).clone();
  auto mean = Xtr.mean(0), sd = Xtr.std(0, /*unbiased=*/false);
  for (std::size_t j = 0; j < f; ++j)
    if (!(sd[long(j)].item<double>() > 0))
      throw_input(fn, "feature column " + std::to_string(j) + " is constant on the training rows");
  Xtr = ((Xtr - mean) / sd).to(torch::kFloat);
  Xev = ((Xev - mean) / sd).to(torch::kFloat);
  auto Y = torch::from_blob(const_cast<double*>(y_train.data()), {long(n)}, torch::kDouble).to(torch::kFloat);

  std::vector<double> avg(m, 0.0);
  double epochs_sum = 0;
  std::int64_t params = 0;
  for (int r = 0; r < o.restarts; ++r) {
    const std::uint64_t seed = derive_seed(o.seed, static_cast<std::uint64_t>(r));
    // Inner split for early stopping.
    std::vector<std::int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(seed);
    rng.shuffle(perm);
    const std::size_t n_val = std::max<std::size_t>(1, static_cast<std::size_t>(o.inner_val * double(n)));
    auto val_idx = torch::tensor(std::vector<std::int64_t>(perm.begin(), perm.begin() + n_val), torch::kLong);
    std::vector<std::int64_t> fit_rows(perm.begin() + n_val, perm.end());
    auto Xv = Xtr.index_select(0, val_idx), Yv = Y.index_select(0, val_idx);
    auto fit_idx = torch::tensor(fit_rows, torch::kLong);
    auto Xf = Xtr.index_select(0, fit_idx), Yf = Y.index_select(0, fit_idx);
    const auto nf = static_cast<std::int64_t>(fit_rows.size());

    torch::manual_seed(seed);
    auto net = std::make_shared<Net>(static_cast<int>(f), o.hidden1, o.hidden2);
    params = 0;
    for (const auto& p : net->parameters()) params += p.numel();
    if (o.warm_start) {
      auto ps = net->parameters();
      for (std::size_t i = 0; i < ps.size(); ++i) {
        const auto& w = o.warm_start->tensors[i];
        if (std::int64_t(w.size()) != ps[i].numel())
          throw_input(fn, "warm_start tensor " + std::to_string(i) + " has " + std::to_string(w.size()) +
                              " values, but the network's has " + std::to_string(ps[i].numel()));
        ps[i].copy_(torch::from_blob(const_cast<float*>(w.data()), ps[i].sizes(), torch::kFloat));
      }
    }
    torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(o.lr).weight_decay(o.weight_decay));
    double best = std::numeric_limits<double>::infinity();
    int best_epoch = 0, since = 0;
    std::vector<torch::Tensor> best_state;
    std::vector<std::int64_t> order(static_cast<std::size_t>(nf));
    if (o.warm_start) {
      // The starting point competes with the trained epochs, so a refit can keep the warm weights.
      best = torch::binary_cross_entropy_with_logits(net->forward(Xv), Yv).item<double>();
      for (const auto& p : net->parameters()) best_state.push_back(p.detach().clone());
    }
    for (int epoch = 0; epoch < o.max_epochs; ++epoch) {
      std::iota(order.begin(), order.end(), 0);
      rng.shuffle(order);
      auto ord = torch::tensor(order, torch::kLong);
      for (std::int64_t s = 0; s < nf; s += o.batch_size) {
        auto idx = ord.narrow(0, s, std::min<std::int64_t>(o.batch_size, nf - s));
        torch::AutoGradMode enable(true);
        opt.zero_grad();
        auto loss = torch::binary_cross_entropy_with_logits(net->forward(Xf.index_select(0, idx)), Yf.index_select(0, idx));
        loss.backward();
        opt.step();
      }
      const double vl = torch::binary_cross_entropy_with_logits(net->forward(Xv), Yv).item<double>();
      if (vl < best - 1e-6) {
        best = vl;
        best_epoch = epoch + 1;
        since = 0;
        best_state.clear();
        for (const auto& p : net->parameters()) best_state.push_back(p.detach().clone());
      } else if (++since >= o.patience) {
        break;
      }
    }
    auto ps = net->parameters();
    // best_state is empty only when no epoch improved on +inf (max_epochs = 0 or a NaN loss).
    if (best_state.size() != ps.size()) throw_input(fn, "training produced no finite inner-validation loss");
    for (std::size_t i = 0; i < ps.size(); ++i) ps[i].copy_(best_state[i]);
    if (info && r == 0) {
      info->weights.inputs = int(f);
      info->weights.hidden1 = o.hidden1;
      info->weights.hidden2 = o.hidden2;
      info->weights.tensors.clear();
      for (const auto& p : ps) {
        auto c = p.detach().contiguous();
        info->weights.tensors.emplace_back(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
      }
    }
    auto pred = torch::sigmoid(net->forward(Xev)).to(torch::kDouble).contiguous();
    const double* pp = pred.data_ptr<double>();
    for (std::size_t i = 0; i < m; ++i) avg[i] += pp[i] / o.restarts;
    epochs_sum += best_epoch;
  }
  if (info) {
    info->parameters = params;
    info->mean_epochs = epochs_sum / o.restarts;
  }
  return avg;
}

}  // namespace arcal
