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

/// R stacked MLPs that share their inputs: weights in nn::Linear's [out, in] layout with a leading
/// replicate axis, W1 [R, h1, f], b1 [R, h1], W2 [R, h2, h1], b2 [R, h2], W3 [R, 1, h2], b3 [R, 1].
/// Every operation is per replicate (batched matrix products, elementwise ops, reductions along the
/// row axis), so replicate r's arithmetic is that of a fit on its own.
using Params = std::vector<torch::Tensor>;

/// Logits [R, B] of the stacked MLPs on rows x [Rx, B, f]: Rx = 1 (rows shared by every replicate) or
/// Rx = R (each replicate its own rows).
torch::Tensor stacked_forward(const Params& p, const torch::Tensor& x) {
  const auto R = p[0].size(0);
  auto h = torch::gelu(torch::baddbmm(p[1].unsqueeze(1), x.size(0) == R ? x : x.expand({R, x.size(1), x.size(2)}),
                                      p[0].transpose(1, 2)));
  h = torch::gelu(torch::baddbmm(p[3].unsqueeze(1), h, p[2].transpose(1, 2)));
  return torch::baddbmm(p[5].unsqueeze(1), h, p[4].transpose(1, 2)).squeeze(2);
}

/// Mean binary cross-entropy per replicate: logits, targets [R, B] -> [R].
torch::Tensor replicate_bce(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::binary_cross_entropy_with_logits(logits, targets, {}, {}, at::Reduction::None).mean(1);
}

/// One seeded initialisation, the draws of nn::Linear's reset (kaiming_uniform_ with a = sqrt(5) on the
/// weight, U(±1/sqrt(fan_in)) on the bias, layer by layer) from a generator of our own, so fits on
/// different threads never share torch's global generator. Shapes as Params with R = 1.
Params seeded_init(int f, int h1, int h2, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const std::vector<std::pair<int, int>> layers{{h1, f}, {h2, h1}, {1, h2}};
  Params p;
  for (const auto& [out, in] : layers) {
    const double gain = std::sqrt(2.0 / (1 + std::pow(std::sqrt(5.0), 2)));
    const double wb = std::sqrt(3.0) * (gain / std::sqrt(double(in))), bb = 1 / std::sqrt(double(in));
    auto w = torch::empty({1, out, in}, torch::kFloat), b = torch::empty({1, out}, torch::kFloat);
    w.uniform_(-wb, wb, gen);
    b.uniform_(-bb, bb, gen);
    p.push_back(w);
    p.push_back(b);
  }
  return p;
}

Params warm_params(const MlpWeights& w) {
  const std::vector<std::vector<std::int64_t>> shapes{{1, w.hidden1, w.inputs}, {1, w.hidden1}, {1, w.hidden2, w.hidden1},
                                                      {1, w.hidden2},           {1, 1, w.hidden2}, {1, 1}};
  Params p;
  for (std::size_t i = 0; i < 6; ++i)
    p.push_back(torch::from_blob(const_cast<float*>(w.tensors[i].data()), shapes[i], torch::kFloat).clone());
  return p;
}

}  // namespace

std::vector<std::vector<double>> fit_predict_mlp_probes(const std::vector<double>& x_train, std::size_t n, std::size_t f,
                                                        const std::vector<const std::vector<double>*>& ys,
                                                        const std::vector<double>& x_eval, std::size_t m,
                                                        const MlpProbeOptions& o, std::vector<MlpProbeInfo>* infos,
                                                        const MlpOffsets* offsets) {
  return fit_predict_mlp_probes_rows({&x_train}, n, f, ys, {&x_eval}, m, o, infos, offsets);
}

std::vector<std::vector<double>> fit_predict_mlp_probes_rows(const std::vector<const std::vector<double>*>& x_trains,
                                                             std::size_t n, std::size_t f,
                                                             const std::vector<const std::vector<double>*>& ys,
                                                             const std::vector<const std::vector<double>*>& x_evals,
                                                             std::size_t m, const MlpProbeOptions& o,
                                                             std::vector<MlpProbeInfo>* infos,
                                                             const MlpOffsets* offsets) {
  const char* fn = "fit_predict_mlp_probes";
  if (f == 0) throw_input(fn, "no features (f = 0)");
  if (ys.empty()) throw_input(fn, "no label vectors (ys is empty)");
  for (const auto* part : {&x_trains, &x_evals}) {
    const bool is_train = part == &x_trains;
    const std::string name = is_train ? "x_train" : "x_eval";
    if (part->size() != 1 && part->size() != ys.size())
      throw_input(fn, name + " has " + std::to_string(part->size()) + " row sets, but must have 1 or " +
                          std::to_string(ys.size()) + " (one per label vector)");
    for (std::size_t r = 0; r < part->size(); ++r) {
      if (!(*part)[r]) throw_input(fn, name + "[" + std::to_string(r) + "] is null");
      const std::string row = part->size() == 1 ? name : name + "[" + std::to_string(r) + "]";
      check_same_size(fn, row.c_str(), (*part)[r]->size(), is_train ? "n x f" : "m x f", (is_train ? n : m) * f);
      for (std::size_t i = 0; i < (*part)[r]->size(); ++i) check_finite(fn, row.c_str(), i, (*(*part)[r])[i]);
    }
  }
  if (n < 10) throw_input(fn, "needs at least 10 training rows, got " + std::to_string(n));
  if (o.restarts < 1) throw_input(fn, "restarts is " + std::to_string(o.restarts) + ", but must be >= 1");
  for (std::size_t r = 0; r < ys.size(); ++r) {
    const std::string name = "ys[" + std::to_string(r) + "]";
    if (!ys[r]) throw_input(fn, name + " is null");
    check_same_size(fn, name.c_str(), ys[r]->size(), "n", n);
    for (std::size_t i = 0; i < n; ++i) {
      const double v = (*ys[r])[i];
      if (o.soft_labels)
        check_probability(fn, name.c_str(), i, v);
      else if (v != 0.0 && v != 1.0)
        throw_index(fn, name, i, std::to_string(v), "0 or 1");
    }
  }
  if (o.warm_start && (o.warm_start->inputs != int(f) || o.warm_start->hidden1 != o.hidden1 ||
                       o.warm_start->hidden2 != o.hidden2 || o.warm_start->tensors.size() != 6))
    throw_input(fn, "warm_start has shape (" + std::to_string(o.warm_start->inputs) + ", " +
                        std::to_string(o.warm_start->hidden1) + ", " + std::to_string(o.warm_start->hidden2) +
                        ") with " + std::to_string(o.warm_start->tensors.size()) + " tensors, but must be (" +
                        std::to_string(f) + ", " + std::to_string(o.hidden1) + ", " + std::to_string(o.hidden2) +
                        ") with 6");
  if (o.warm_start) {
    const std::vector<std::size_t> sizes{f * std::size_t(o.hidden1), std::size_t(o.hidden1),
                                         std::size_t(o.hidden1) * std::size_t(o.hidden2), std::size_t(o.hidden2),
                                         std::size_t(o.hidden2), 1};
    for (std::size_t i = 0; i < 6; ++i)
      if (o.warm_start->tensors[i].size() != sizes[i])
        throw_input(fn, "warm_start tensor " + std::to_string(i) + " has " + std::to_string(o.warm_start->tensors[i].size()) +
                            " values, but the network's has " + std::to_string(sizes[i]));
  }
  if (offsets) {
    for (const auto* part : {&offsets->train, &offsets->eval}) {
      const bool is_train = part == &offsets->train;
      const std::string name = is_train ? "offsets.train" : "offsets.eval";
      if (part->size() != 1 && part->size() != ys.size())
        throw_input(fn, name + " has " + std::to_string(part->size()) + " rows, but must have 1 or " +
                            std::to_string(ys.size()) + " (one per label vector)");
      for (std::size_t r = 0; r < part->size(); ++r) {
        const std::string row = name + "[" + std::to_string(r) + "]";
        check_same_size(fn, row.c_str(), (*part)[r].size(), is_train ? "n" : "m", is_train ? n : m);
        for (std::size_t i = 0; i < (*part)[r].size(); ++i) check_finite(fn, row.c_str(), i, (*part)[r][i]);
      }
    }
  }
  torch::NoGradGuard outer_guard;
  const auto R = static_cast<std::int64_t>(ys.size());
  // Rows [Rx, n, f] and [Rx, m, f] (Rx = 1: shared), each row set standardised by its own training rows.
  auto stack_rows = [](const std::vector<const std::vector<double>*>& parts, std::size_t rows, std::size_t cols) {
    std::vector<torch::Tensor> t;
    for (const auto* v : parts)
      t.push_back(torch::from_blob(const_cast<double*>(v->data()), {long(rows), long(cols)}, torch::kDouble));
    return torch::stack(t);
  };
  auto Xtr = stack_rows(x_trains, n, f), Xev = stack_rows(x_evals, m, f);
  if (Xev.size(0) != Xtr.size(0)) {  // one side shared, the other per replicate: share neither
    Xtr = Xtr.expand({R, long(n), long(f)}).contiguous();
    Xev = Xev.expand({R, long(m), long(f)}).contiguous();
  }
  auto mean = Xtr.mean(1, /*keepdim=*/true), sd = Xtr.std(1, /*unbiased=*/false, /*keepdim=*/true);
  {
    auto sd_flat = sd.reshape({-1}).contiguous();
    for (std::int64_t j = 0; j < sd_flat.numel(); ++j)
      if (!(sd_flat.data_ptr<double>()[j] > 0))
        throw_input(fn, "feature column " + std::to_string(std::size_t(j) % f) + " is constant on the training rows" +
                            (Xtr.size(0) > 1 ? " of replicate " + std::to_string(std::size_t(j) / f) : std::string()));
  }
  Xtr = ((Xtr - mean) / sd).to(torch::kFloat);
  Xev = ((Xev - mean) / sd).to(torch::kFloat);
  const bool per_replicate_rows = Xtr.size(0) > 1;
  std::vector<float> yflat(std::size_t(R) * n);
  for (std::int64_t r = 0; r < R; ++r)
    for (std::size_t i = 0; i < n; ++i) yflat[std::size_t(r) * n + i] = float((*ys[std::size_t(r)])[i]);
  auto Y = torch::from_blob(yflat.data(), {R, long(n)}, torch::kFloat).clone();
  // Offsets [R, n] and [R, m] (zeros without offsets: adding them changes nothing).
  auto offset_tensor = [&](const std::vector<std::vector<double>>* rows, std::size_t cols) {
    if (!rows) return torch::zeros({R, long(cols)}, torch::kFloat);
    std::vector<float> flat(std::size_t(R) * cols);
    for (std::int64_t r = 0; r < R; ++r) {
      const auto& src = (*rows)[rows->size() == 1 ? 0 : std::size_t(r)];
      for (std::size_t i = 0; i < cols; ++i) flat[std::size_t(r) * cols + i] = float(src[i]);
    }
    return torch::from_blob(flat.data(), {R, long(cols)}, torch::kFloat).clone();
  };
  const auto Otr = offset_tensor(offsets ? &offsets->train : nullptr, n);
  const auto Oev = offset_tensor(offsets ? &offsets->eval : nullptr, m);

  std::vector<std::vector<double>> avg(std::size_t(R), std::vector<double>(m, 0.0));
  std::vector<double> epochs_sum(std::size_t(R), 0.0);
  if (infos) infos->assign(std::size_t(R), MlpProbeInfo{});
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // torch's AdamW defaults
  for (int restart = 0; restart < o.restarts; ++restart) {
    const std::uint64_t seed = derive_seed(o.seed, static_cast<std::uint64_t>(restart));
    // Inner split for early stopping, shared by every replicate.
    std::vector<std::int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(seed);
    rng.shuffle(perm);
    const std::size_t n_val = std::max<std::size_t>(1, static_cast<std::size_t>(o.inner_val * double(n)));
    auto val_idx = torch::tensor(std::vector<std::int64_t>(perm.begin(), perm.begin() + n_val), torch::kLong);
    std::vector<std::int64_t> fit_rows(perm.begin() + n_val, perm.end());
    auto fit_idx = torch::tensor(fit_rows, torch::kLong);
    auto Xv = Xtr.index_select(1, val_idx), Xf = Xtr.index_select(1, fit_idx);
    auto Yv = Y.index_select(1, val_idx), Yf = Y.index_select(1, fit_idx);
    auto Ov = Otr.index_select(1, val_idx), Of = Otr.index_select(1, fit_idx);
    const auto nf = static_cast<std::int64_t>(fit_rows.size());

    // Starting weights (shared by every replicate), their AdamW moments, and the best-epoch state.
    Params p = o.warm_start ? warm_params(*o.warm_start) : seeded_init(int(f), o.hidden1, o.hidden2, seed);
    if (offsets && !o.warm_start) {
      // A correction starts as "no change": the output layer at zero, so the start is the offset.
      p[4].zero_();
      p[5].zero_();
    }
    for (auto& t : p) t = t.expand([&] {
                           auto s = t.sizes().vec();
                           s[0] = R;
                           return s;
                         }()).contiguous();
    Params best_p, exp_avg, exp_avg_sq;
    for (auto& t : p) {
      best_p.push_back(t.clone());
      exp_avg.push_back(torch::zeros_like(t));
      exp_avg_sq.push_back(torch::zeros_like(t));
    }
    std::vector<double> best(std::size_t(R), std::numeric_limits<double>::infinity());
    std::vector<int> best_epoch(std::size_t(R), 0), since(std::size_t(R), 0);
    std::vector<bool> has_best(std::size_t(R), false);
    if (o.warm_start || offsets) {
      // The starting point competes with the trained epochs, so a refit can keep the warm weights and
      // a correction can keep "no change".
      auto vl = replicate_bce(stacked_forward(p, Xv) + Ov, Yv).to(torch::kDouble).contiguous();
      for (std::int64_t r = 0; r < R; ++r) {
        best[std::size_t(r)] = vl.data_ptr<double>()[r];
        has_best[std::size_t(r)] = true;
      }
    }
    // Replicates still training (original indices); a stopped replicate leaves the stack, so the cost
    // of an epoch is proportional to the replicates still improving.
    std::vector<std::int64_t> active(static_cast<std::size_t>(R));
    std::iota(active.begin(), active.end(), 0);
    auto Yf_a = Yf, Yv_a = Yv, Of_a = Of, Ov_a = Ov, Xf_a = Xf, Xv_a = Xv;
    std::vector<std::int64_t> order(static_cast<std::size_t>(nf));
    std::int64_t step = 0;
    for (int epoch = 0; epoch < o.max_epochs && !active.empty(); ++epoch) {
      std::iota(order.begin(), order.end(), 0);
      rng.shuffle(order);
      auto ord = torch::tensor(order, torch::kLong);
      for (std::int64_t s = 0; s < nf; s += o.batch_size) {
        auto idx = ord.narrow(0, s, std::min<std::int64_t>(o.batch_size, nf - s));
        for (auto& t : p) t.requires_grad_(true);
        torch::Tensor loss;
        {
          torch::AutoGradMode enable(true);
          // The sum of the replicates' mean losses: replicate r's gradient is that of its own loss.
          loss = replicate_bce(stacked_forward(p, Xf_a.index_select(1, idx)) + Of_a.index_select(1, idx),
                               Yf_a.index_select(1, idx))
                     .sum();
          loss.backward();
        }
        // AdamW exactly as torch::optim::AdamW (decoupled decay, then the bias-corrected Adam step).
        ++step;
        const double bc1 = 1 - std::pow(beta1, double(step)), bc2 = 1 - std::pow(beta2, double(step));
        for (std::size_t k = 0; k < p.size(); ++k) {
          auto g = p[k].grad();
          p[k].mul_(1 - o.lr * o.weight_decay);
          exp_avg[k].mul_(beta1).add_(g, 1 - beta1);
          exp_avg_sq[k].mul_(beta2).addcmul_(g, g, 1 - beta2);
          auto denom = (exp_avg_sq[k].sqrt() / std::sqrt(bc2)).add_(eps);
          p[k].addcdiv_(exp_avg[k], denom, -o.lr / bc1);
          p[k].mutable_grad().reset();
        }
      }
      auto vl = replicate_bce(stacked_forward(p, Xv_a) + Ov_a, Yv_a).to(torch::kDouble).contiguous();
      std::vector<std::int64_t> improved_pos, improved_id, keep_pos, keep_id;
      for (std::size_t a = 0; a < active.size(); ++a) {
        const auto r = std::size_t(active[a]);
        const double v = vl.data_ptr<double>()[a];
        bool keep = true;
        if (v < best[r] - 1e-6) {
          best[r] = v;
          best_epoch[r] = epoch + 1;
          since[r] = 0;
          has_best[r] = true;
          improved_pos.push_back(std::int64_t(a));
          improved_id.push_back(active[a]);
        } else if (++since[r] >= o.patience) {
          keep = false;
        }
        if (keep) {
          keep_pos.push_back(std::int64_t(a));
          keep_id.push_back(active[a]);
        }
      }
      if (!improved_pos.empty()) {
        auto pos = torch::tensor(improved_pos, torch::kLong), id = torch::tensor(improved_id, torch::kLong);
        for (std::size_t k = 0; k < p.size(); ++k) best_p[k].index_copy_(0, id, p[k].index_select(0, pos));
      }
      if (keep_pos.size() != active.size()) {
        auto pos = torch::tensor(keep_pos, torch::kLong);
        for (std::size_t k = 0; k < p.size(); ++k) {
          p[k] = p[k].index_select(0, pos);
          exp_avg[k] = exp_avg[k].index_select(0, pos);
          exp_avg_sq[k] = exp_avg_sq[k].index_select(0, pos);
        }
        Yf_a = Yf_a.index_select(0, pos);
        Yv_a = Yv_a.index_select(0, pos);
        Of_a = Of_a.index_select(0, pos);
        Ov_a = Ov_a.index_select(0, pos);
        if (per_replicate_rows) {
          Xf_a = Xf_a.index_select(0, pos);
          Xv_a = Xv_a.index_select(0, pos);
        }
        active = std::move(keep_id);
      }
    }
    for (std::int64_t r = 0; r < R; ++r)
      // Without a warm start the state is empty only when no epoch improved on +inf (max_epochs = 0
      // or a NaN loss).
      if (!has_best[std::size_t(r)])
        throw_input(fn, "training of replicate " + std::to_string(r) + " produced no finite inner-validation loss");
    if (infos && restart == 0)
      for (std::int64_t r = 0; r < R; ++r) {
        auto& w = (*infos)[std::size_t(r)].weights;
        w.inputs = int(f);
        w.hidden1 = o.hidden1;
        w.hidden2 = o.hidden2;
        w.tensors.clear();
        for (const auto& t : best_p) {
          auto c = t[r].contiguous();
          w.tensors.emplace_back(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
        }
      }
    // Predictions in chunks of replicates, so [chunk, m, h] activations stay small.
    const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t(1) << 22) / std::max<std::int64_t>(1, std::int64_t(m) * std::max(o.hidden1, o.hidden2)));
    for (std::int64_t r0 = 0; r0 < R; r0 += chunk) {
      const auto len = std::min(chunk, R - r0);
      Params pc;
      for (const auto& t : best_p) pc.push_back(t.narrow(0, r0, len));
      auto xe = per_replicate_rows ? Xev.narrow(0, r0, len) : Xev;
      auto pred = torch::sigmoid(stacked_forward(pc, xe) + Oev.narrow(0, r0, len)).to(torch::kDouble).contiguous();
      const double* pp = pred.data_ptr<double>();
      for (std::int64_t r = 0; r < len; ++r)
        for (std::size_t i = 0; i < m; ++i) avg[std::size_t(r0 + r)][i] += pp[std::size_t(r) * m + i] / o.restarts;
    }
    for (std::int64_t r = 0; r < R; ++r) epochs_sum[std::size_t(r)] += best_epoch[std::size_t(r)];
  }
  if (infos)
    for (std::int64_t r = 0; r < R; ++r) {
      auto& info = (*infos)[std::size_t(r)];
      info.parameters = mlp_parameter_count(int(f), o.hidden1, o.hidden2);
      info.mean_epochs = epochs_sum[std::size_t(r)] / o.restarts;
    }
  return avg;
}

std::vector<double> fit_predict_mlp_probe(const std::vector<double>& x_train, std::size_t n, std::size_t f,
                                          const std::vector<double>& y_train, const std::vector<double>& x_eval,
                                          std::size_t m, const MlpProbeOptions& o, MlpProbeInfo* info,
                                          const MlpOffsets* offsets) {
  check_same_size("fit_predict_mlp_probe", "y_train", y_train.size(), "n", n);
  std::vector<MlpProbeInfo> infos;
  auto out = fit_predict_mlp_probes(x_train, n, f, {&y_train}, x_eval, m, o, info ? &infos : nullptr, offsets);
  if (info) *info = std::move(infos[0]);
  return std::move(out[0]);
}

}  // namespace arcal
