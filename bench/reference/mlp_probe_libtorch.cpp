// The LibTorch probe trainer that audit/mlp_probe.cpp (arcal's own, on OpenBLAS) replaced, kept as the
// reference for bench/CMakeLists.txt's arcal_libtorch_probes: an `arcal` whose audit trains its probes with
// this file instead (it defines every symbol of audit/mlp_probe.hpp that the audit uses, so the linker
// takes it in place of the library's member). Code as it was at 7951796, includes renamed.
#include "audit/mlp_probe.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/rng.hpp"
#include "model/fused.hpp"
#include "train/adamw.hpp"

namespace arcal {

namespace {
// The audit held LibTorch's intra-op threads at 1 around the probes (one fit per worker thread, and
// results independent of the thread count); this binary does it once at start.
const int kOneIntraOpThread = (at::set_num_threads(1), 1);
}  // namespace

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

/// GELU of the hidden layers: arcal's fused GELU (model/fused.hpp: one pass that also stores gelu'(x)
/// for the backward) while the fused operators are on, else LibTorch's. At hidden width 64 the
/// elementwise GELU costs about what a layer's product does: LibTorch 1.13 runs its float forward
/// through a oneDNN eltwise primitive and its backward as a second erf pass, about a quarter of the
/// audit's refit time (bench/README.md, "The probes' GELU").
torch::Tensor hidden_gelu(const torch::Tensor& x) { return fused_operators_enabled() ? fused_gelu(x) : torch::gelu(x); }

/// Logits [R, B] of the stacked MLPs on rows x [Rx, B, f]: Rx = 1 (rows shared by every replicate) or
/// Rx = R (each replicate its own rows).
torch::Tensor stacked_forward(const Params& p, const torch::Tensor& x) {
  const auto R = p[0].size(0);
  auto h = hidden_gelu(torch::baddbmm(p[1].unsqueeze(1), x.size(0) == R ? x : x.expand({R, x.size(1), x.size(2)}),
                                      p[0].transpose(1, 2)));
  h = hidden_gelu(torch::baddbmm(p[3].unsqueeze(1), h, p[2].transpose(1, 2)));
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
  const std::vector<std::vector<std::int64_t>> shapes{
      {1, w.hidden1, w.inputs}, {1, w.hidden1}, {1, w.hidden2, w.hidden1}, {1, w.hidden2}, {1, 1, w.hidden2}, {1, 1}};
  Params p;
  for (std::size_t i = 0; i < 6; ++i)
    p.push_back(torch::from_blob(const_cast<float*>(w.tensors[i].data()), shapes[i], torch::kFloat).clone());
  return p;
}

}  // namespace

std::vector<std::vector<double>> fit_predict_mlp_probes(const std::vector<double>& x_train, std::size_t n,
                                                        std::size_t f,
                                                        const std::vector<const std::vector<double>*>& ys,
                                                        const std::vector<double>& x_eval, std::size_t m,
                                                        const MlpProbeOptions& o, std::vector<MlpProbeInfo>* infos,
                                                        const MlpOffsets* offsets) {
  return fit_predict_mlp_probes_rows({&x_train}, n, f, ys, {&x_eval}, m, o, infos, offsets);
}

namespace {

constexpr const char* kProbeFn = "fit_predict_mlp_probes";

/// One row set of a fit: size rows x f, finite. name is "x_train" or "x_eval", with [r] when there is
/// one set per replicate.
void check_row_set(const std::string& name, const std::vector<double>& v, std::size_t rows, std::size_t f,
                   const char* shape) {
  const char* fn = kProbeFn;
  check_same_size(fn, name.c_str(), v.size(), shape, rows * f);
  for (std::size_t i = 0; i < v.size(); ++i) check_finite(fn, name.c_str(), i, v[i]);
}

std::string row_set_name(bool train, std::size_t sets, std::size_t r) {
  const std::string name = train ? "x_train" : "x_eval";
  return sets == 1 ? name : name + "[" + std::to_string(r) + "]";
}

/// The checks of a fit that do not read the rows: 1 or R row sets, at least 10 training rows, labels
/// 0/1 (probabilities with soft_labels), a warm start of the network's shape and offsets of the rows'
/// sizes. Throws InputError naming the argument.
void check_probe_inputs(std::size_t train_sets, std::size_t n, std::size_t f,
                        const std::vector<const std::vector<double>*>& ys, std::size_t eval_sets, std::size_t m,
                        const MlpProbeOptions& o, const MlpOffsets* offsets) {
  const char* fn = kProbeFn;
  if (f == 0) throw_input(fn, "no features (f = 0)");
  if (ys.empty()) throw_input(fn, "no label vectors (ys is empty)");
  for (const auto& [name, sets] : {std::pair<const char*, std::size_t>{"x_train", train_sets}, {"x_eval", eval_sets}})
    if (sets != 1 && sets != ys.size())
      throw_input(fn, std::string(name) + " has " + std::to_string(sets) + " row sets, but must have 1 or " +
                          std::to_string(ys.size()) + " (one per label vector)");
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
    const std::vector<std::size_t> sizes{
        f * std::size_t(o.hidden1), std::size_t(o.hidden1), std::size_t(o.hidden1) * std::size_t(o.hidden2),
        std::size_t(o.hidden2),     std::size_t(o.hidden2), 1};
    for (std::size_t i = 0; i < 6; ++i)
      if (o.warm_start->tensors[i].size() != sizes[i])
        throw_input(fn, "warm_start tensor " + std::to_string(i) + " has " +
                            std::to_string(o.warm_start->tensors[i].size()) + " values, but the network's has " +
                            std::to_string(sizes[i]));
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
}

/// Rows per block of a forward pass over `rows` rows for `replicates` replicates of width h: activations
/// of about 2^22 values (16 MiB) at a time, whatever N.
std::int64_t row_block(std::int64_t replicates, int h) {
  return std::max<std::int64_t>(1, (std::int64_t(1) << 22) / std::max<std::int64_t>(1, replicates * h));
}

/// stacked_forward over row blocks (row_block), so inner-validation and evaluation passes at large n do
/// not hold [R, n, h] activations. Each row's logit is that of the unblocked pass.
torch::Tensor stacked_forward_blocked(const Params& p, const torch::Tensor& x, int h) {
  const auto rows = x.size(1), block = row_block(p[0].size(0), h);
  if (rows <= block) return stacked_forward(p, x);
  std::vector<torch::Tensor> parts;
  for (std::int64_t i0 = 0; i0 < rows; i0 += block)
    parts.push_back(stacked_forward(p, x.narrow(1, i0, std::min(block, rows - i0))));
  return torch::cat(parts, 1);
}

/// The standardisation of one training set: mean and 1/sd per column. A column constant on the
/// training rows (a class never predicted in this half, a routing point that varies only elsewhere)
/// carries nothing the fit could learn: it enters as 0 on both sides (1/sd = 0, also when the mean's
/// rounding leaves a sd of 1e-17), so its untrained weights never touch the evaluation rows.
struct Standardisation {
  std::vector<double> mean, inv;  ///< [f]
};

/// out[i, k] = float((v[i, k] - mean[k]) · inv[k]).
void apply_scale(const Standardisation& sc, const std::vector<double>& v, std::size_t rows, std::size_t f, float* out) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t k = 0; k < f; ++k) out[i * f + k] = float((v[i * f + k] - sc.mean[k]) * sc.inv[k]);
}

/// Standardises rows v [rows, f] (double) by their own column means and population sd, written as
/// float32 to out [rows, f]; returns the scale. Two passes in double, no temporaries of the rows' size.
Standardisation standardise_into(const std::vector<double>& v, std::size_t rows, std::size_t f, float* out) {
  Standardisation sc;
  sc.mean.assign(f, 0.0);
  sc.inv.assign(f, 0.0);
  std::vector<double> ss(f, 0.0);
  std::vector<bool> varies(f, false);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t k = 0; k < f; ++k) {
      sc.mean[k] += v[i * f + k];
      if (v[i * f + k] != v[k]) varies[k] = true;
    }
  for (std::size_t k = 0; k < f; ++k) sc.mean[k] /= double(rows);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t k = 0; k < f; ++k) {
      const double c = v[i * f + k] - sc.mean[k];
      ss[k] += c * c;
    }
  for (std::size_t k = 0; k < f; ++k) {
    const double sd = std::sqrt(ss[k] / double(rows));
    sc.inv[k] = varies[k] && sd > 0 ? 1.0 / sd : 0.0;
  }
  apply_scale(sc, v, rows, f, out);
  return sc;
}

/// The R replicates' training data as tensors (rows standardised by their own training rows), and how to
/// make their evaluation rows.
struct StackedData {
  std::int64_t R = 0;
  torch::Tensor Xtr;       ///< [Rx, n, f] float32 (Rx = 1: rows shared by every replicate)
  torch::Tensor Y;         ///< [R, n] float32
  torch::Tensor Otr, Oev;  ///< [R, n], [R, m] float32 offsets (zeros without offsets: adding them changes nothing)
  bool per_replicate_rows = false;     ///< Rx = R
  std::vector<Standardisation> scale;  ///< one per training set
  const MlpRowSource* rows = nullptr;
  std::size_t m = 0, f = 0;

  /// Replicate r's evaluation rows standardised by its training set's scale, [1, m, f] float32
  /// (checked: finite, m x f).
  torch::Tensor eval_rows(std::size_t r) const {
    const std::size_t set = rows->eval_sets == 1 ? 0 : r, tset = rows->train_sets == 1 ? 0 : r;
    std::vector<double> buffer;
    const auto& v = rows->eval(set, buffer);
    check_row_set(row_set_name(false, rows->eval_sets, set), v, m, f, "m x f");
    auto x = torch::empty({1, long(m), long(f)}, torch::kFloat);
    apply_scale(scale[tset], v, m, f, x.data_ptr<float>());
    return x;
  }
};

StackedData stack_data(const MlpRowSource& rows, std::size_t n, std::size_t f,
                       const std::vector<const std::vector<double>*>& ys, std::size_t m, const MlpOffsets* offsets) {
  StackedData d;
  const auto R = d.R = static_cast<std::int64_t>(ys.size());
  d.rows = &rows;
  d.m = m;
  d.f = f;
  d.per_replicate_rows = rows.train_sets > 1;
  d.Xtr = torch::empty({long(rows.train_sets), long(n), long(f)}, torch::kFloat);
  std::vector<double> buffer;
  for (std::size_t s = 0; s < rows.train_sets; ++s) {  // one set in double at a time
    const auto& v = rows.train(s, buffer);
    check_row_set(row_set_name(true, rows.train_sets, s), v, n, f, "n x f");
    d.scale.push_back(standardise_into(v, n, f, d.Xtr[long(s)].data_ptr<float>()));
  }
  std::vector<float> yflat(std::size_t(R) * n);
  for (std::int64_t r = 0; r < R; ++r)
    for (std::size_t i = 0; i < n; ++i) yflat[std::size_t(r) * n + i] = float((*ys[std::size_t(r)])[i]);
  d.Y = torch::from_blob(yflat.data(), {R, long(n)}, torch::kFloat).clone();
  auto offset_tensor = [&](const std::vector<std::vector<double>>* rows, std::size_t cols) {
    if (!rows) return torch::zeros({R, long(cols)}, torch::kFloat);
    std::vector<float> flat(std::size_t(R) * cols);
    for (std::int64_t r = 0; r < R; ++r) {
      const auto& src = (*rows)[rows->size() == 1 ? 0 : std::size_t(r)];
      for (std::size_t i = 0; i < cols; ++i) flat[std::size_t(r) * cols + i] = float(src[i]);
    }
    return torch::from_blob(flat.data(), {R, long(cols)}, torch::kFloat).clone();
  };
  d.Otr = offset_tensor(offsets ? &offsets->train : nullptr, n);
  d.Oev = offset_tensor(offsets ? &offsets->eval : nullptr, m);
  return d;
}

/// The still-training replicates' parameters, AdamW moments and rows (fit and inner-validation).
struct ActiveSet {
  std::vector<std::int64_t> ids;  ///< original replicate indices
  Params p, exp_avg, exp_avg_sq;
  /// The fit rows are not copied: X (the stacked training rows, [Rx, n, f]) read through fit_rows
  /// (the fit rows' indices into n) and, with per-replicate rows, active (the active replicates'
  /// indices into Rx; undefined while all are active).
  torch::Tensor X, fit_rows, active;
  torch::Tensor Xv, Yf, Yv, Of, Ov;
  std::int64_t step = 0;  ///< AdamW steps taken
};

/// One epoch of minibatch AdamW over the fit rows in a fresh order drawn from rng; the loss is the sum
/// of the replicates' mean losses, so replicate r's gradient is that of its own loss.
void adamw_epoch(ActiveSet& a, std::vector<std::int64_t>& order, Rng& rng, const MlpProbeOptions& o) {
  const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // torch's AdamW defaults
  const auto nf = static_cast<std::int64_t>(order.size());
  std::iota(order.begin(), order.end(), 0);
  rng.shuffle(order);
  auto ord = torch::tensor(order, torch::kLong);
  for (std::int64_t s = 0; s < nf; s += o.batch_size) {
    poll_interrupt();  // Ctrl-C from Python stops a probe fit within about a step
    auto idx = ord.narrow(0, s, std::min<std::int64_t>(o.batch_size, nf - s));
    for (auto& t : a.p) t.requires_grad_(true);
    torch::Tensor loss;
    {
      torch::AutoGradMode enable(true);
      auto x = a.X.index_select(1, a.fit_rows.index_select(0, idx));
      if (a.active.defined()) x = x.index_select(0, a.active);
      loss = replicate_bce(stacked_forward(a.p, x) + a.Of.index_select(1, idx), a.Yf.index_select(1, idx)).sum();
      loss.backward();
    }
    // AdamW as torch::optim::AdamW (decoupled decay, then the bias-corrected Adam step), in the
    // trainer's one pass per tensor (train/adamw.hpp) instead of nine LibTorch calls.
    ++a.step;
    for (std::size_t k = 0; k < a.p.size(); ++k) {
      adamw_update(a.p[k], a.p[k].grad(), a.exp_avg[k], a.exp_avg_sq[k], o.lr, o.weight_decay, beta1, beta2, eps,
                   a.step);
      a.p[k].mutable_grad().reset();
    }
  }
}

/// Early stopping per replicate: the best inner-validation loss so far, its epoch and weights.
struct BestState {
  Params p;
  std::vector<double> loss;
  std::vector<int> epoch, since;
  std::vector<bool> has;
};

/// After an epoch: replicates whose inner-validation loss improved by more than 1e-6 store their
/// weights; those without improvement for `patience` epochs leave the active set (the cost of an
/// epoch stays proportional to the replicates still improving).
void early_stopping_step(ActiveSet& a, BestState& best, int epoch, int patience, bool per_replicate_rows, int h) {
  auto vl = replicate_bce(stacked_forward_blocked(a.p, a.Xv, h) + a.Ov, a.Yv).to(torch::kDouble).contiguous();
  std::vector<std::int64_t> improved_pos, improved_id, keep_pos, keep_id;
  for (std::size_t i = 0; i < a.ids.size(); ++i) {
    const auto r = std::size_t(a.ids[i]);
    const double v = vl.data_ptr<double>()[i];
    bool keep = true;
    if (v < best.loss[r] - 1e-6) {
      best.loss[r] = v;
      best.epoch[r] = epoch + 1;
      best.since[r] = 0;
      best.has[r] = true;
      improved_pos.push_back(std::int64_t(i));
      improved_id.push_back(a.ids[i]);
    } else if (++best.since[r] >= patience) {
      keep = false;
    }
    if (keep) {
      keep_pos.push_back(std::int64_t(i));
      keep_id.push_back(a.ids[i]);
    }
  }
  if (!improved_pos.empty()) {
    auto pos = torch::tensor(improved_pos, torch::kLong), id = torch::tensor(improved_id, torch::kLong);
    for (std::size_t k = 0; k < a.p.size(); ++k) best.p[k].index_copy_(0, id, a.p[k].index_select(0, pos));
  }
  if (keep_pos.size() != a.ids.size()) {
    auto pos = torch::tensor(keep_pos, torch::kLong);
    for (std::size_t k = 0; k < a.p.size(); ++k) {
      a.p[k] = a.p[k].index_select(0, pos);
      a.exp_avg[k] = a.exp_avg[k].index_select(0, pos);
      a.exp_avg_sq[k] = a.exp_avg_sq[k].index_select(0, pos);
    }
    a.Yf = a.Yf.index_select(0, pos);
    a.Yv = a.Yv.index_select(0, pos);
    a.Of = a.Of.index_select(0, pos);
    a.Ov = a.Ov.index_select(0, pos);
    if (per_replicate_rows) {
      a.active = a.active.defined() ? a.active.index_select(0, pos) : pos;
      a.Xv = a.Xv.index_select(0, pos);
    }
    a.ids = std::move(keep_id);
  }
}

/// One restart for every replicate: a seeded inner split shared by the replicates, starting weights
/// (seeded, or the warm start; an offset model's output layer at zero so that it starts at the
/// offset), minibatch AdamW with early stopping. Returns the best-epoch state.
BestState fit_restart(const StackedData& d, std::size_t n, std::size_t f, const MlpProbeOptions& o, std::uint64_t seed,
                      bool has_offsets) {
  const auto R = d.R;
  const int h = std::max(o.hidden1, o.hidden2);
  std::vector<std::int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(seed);
  rng.shuffle(perm);
  const std::size_t n_val = std::max<std::size_t>(1, static_cast<std::size_t>(o.inner_val * double(n)));
  auto val_idx = torch::tensor(std::vector<std::int64_t>(perm.begin(), perm.begin() + n_val), torch::kLong);
  std::vector<std::int64_t> fit_rows(perm.begin() + n_val, perm.end());
  auto fit_idx = torch::tensor(fit_rows, torch::kLong);

  ActiveSet a;
  a.Xv = d.Xtr.index_select(1, val_idx);
  a.X = d.Xtr;
  a.fit_rows = fit_idx;
  a.Yv = d.Y.index_select(1, val_idx);
  a.Yf = d.Y.index_select(1, fit_idx);
  a.Ov = d.Otr.index_select(1, val_idx);
  a.Of = d.Otr.index_select(1, fit_idx);
  // Starting weights (shared by every replicate), their AdamW moments, and the best-epoch state.
  a.p = o.warm_start ? warm_params(*o.warm_start) : seeded_init(int(f), o.hidden1, o.hidden2, seed);
  if (has_offsets && !o.warm_start) {
    // A correction starts as "no change": the output layer at zero, so the start is the offset.
    a.p[4].zero_();
    a.p[5].zero_();
  }
  for (auto& t : a.p)
    t = t.expand([&] {
           auto s = t.sizes().vec();
           s[0] = R;
           return s;
         }())
            .contiguous();
  BestState best;
  for (auto& t : a.p) {
    best.p.push_back(t.clone());
    a.exp_avg.push_back(torch::zeros_like(t));
    a.exp_avg_sq.push_back(torch::zeros_like(t));
  }
  best.loss.assign(std::size_t(R), std::numeric_limits<double>::infinity());
  best.epoch.assign(std::size_t(R), 0);
  best.since.assign(std::size_t(R), 0);
  best.has.assign(std::size_t(R), false);
  if (o.warm_start || has_offsets) {
    // The starting point competes with the trained epochs, so a refit can keep the warm weights and
    // a correction can keep "no change".
    auto vl = replicate_bce(stacked_forward_blocked(a.p, a.Xv, h) + a.Ov, a.Yv).to(torch::kDouble).contiguous();
    for (std::int64_t r = 0; r < R; ++r) {
      best.loss[std::size_t(r)] = vl.data_ptr<double>()[r];
      best.has[std::size_t(r)] = true;
    }
  }
  a.ids.resize(static_cast<std::size_t>(R));
  std::iota(a.ids.begin(), a.ids.end(), 0);
  std::vector<std::int64_t> order(fit_rows.size());
  for (int epoch = 0; epoch < o.max_epochs && !a.ids.empty(); ++epoch) {
    adamw_epoch(a, order, rng, o);
    early_stopping_step(a, best, epoch, o.patience, d.per_replicate_rows, h);
  }
  for (std::int64_t r = 0; r < R; ++r)
    // Without a warm start the state is empty only when no epoch improved on +inf (max_epochs = 0
    // or a NaN loss).
    if (!best.has[std::size_t(r)])
      throw_input(kProbeFn, "training of replicate " + std::to_string(r) + " produced no finite inner-validation loss");
  return best;
}

/// Adds the restart's predicted probabilities on the evaluation rows, / restarts, to avg [R][m]. Rows
/// shared by every replicate are standardised once and run in chunks of replicates; otherwise each
/// replicate's rows are made (MlpRowSource::eval), run and dropped in turn. Row blocks keep the
/// activations near 2^22 values.
void add_predictions(std::vector<std::vector<double>>& avg, const Params& best_p, const StackedData& d, std::size_t m,
                     const MlpProbeOptions& o) {
  const auto R = d.R;
  const int h = std::max(o.hidden1, o.hidden2);
  auto run = [&](std::int64_t r0, std::int64_t len, const torch::Tensor& xe) {
    Params pc;
    for (const auto& t : best_p) pc.push_back(t.narrow(0, r0, len));
    auto pred =
        torch::sigmoid(stacked_forward_blocked(pc, xe, h) + d.Oev.narrow(0, r0, len)).to(torch::kDouble).contiguous();
    const double* pp = pred.data_ptr<double>();
    for (std::int64_t r = 0; r < len; ++r)
      for (std::size_t i = 0; i < m; ++i) avg[std::size_t(r0 + r)][i] += pp[std::size_t(r) * m + i] / o.restarts;
  };
  if (d.rows->train_sets == 1 && d.rows->eval_sets == 1) {
    const auto xe = d.eval_rows(0);
    const std::int64_t chunk =
        std::max<std::int64_t>(1, (std::int64_t(1) << 22) / std::max<std::int64_t>(1, std::int64_t(m) * h));
    for (std::int64_t r0 = 0; r0 < R; r0 += chunk) run(r0, std::min(chunk, R - r0), xe);
  } else {
    for (std::int64_t r = 0; r < R; ++r) run(r, 1, d.eval_rows(std::size_t(r)));
  }
}

}  // namespace

std::vector<std::vector<double>> fit_predict_mlp_probes_source(const MlpRowSource& rows, std::size_t n, std::size_t f,
                                                               const std::vector<const std::vector<double>*>& ys,
                                                               std::size_t m, const MlpProbeOptions& o,
                                                               std::vector<MlpProbeInfo>* infos,
                                                               const MlpOffsets* offsets) {
  check_probe_inputs(rows.train_sets, n, f, ys, rows.eval_sets, m, o, offsets);
  torch::NoGradGuard outer_guard;
  const StackedData d = stack_data(rows, n, f, ys, m, offsets);
  const auto R = d.R;
  std::vector<std::vector<double>> avg(std::size_t(R), std::vector<double>(m, 0.0));
  std::vector<double> epochs_sum(std::size_t(R), 0.0);
  if (infos) infos->assign(std::size_t(R), MlpProbeInfo{});
  for (int restart = 0; restart < o.restarts; ++restart) {
    const std::uint64_t seed = derive_seed(o.seed, static_cast<std::uint64_t>(restart));
    const BestState best = fit_restart(d, n, f, o, seed, offsets != nullptr);
    if (infos && restart == 0)
      for (std::int64_t r = 0; r < R; ++r) {
        auto& w = (*infos)[std::size_t(r)].weights;
        w.inputs = int(f);
        w.hidden1 = o.hidden1;
        w.hidden2 = o.hidden2;
        w.tensors.clear();
        for (const auto& t : best.p) {
          auto c = t[r].contiguous();
          w.tensors.emplace_back(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
        }
      }
    add_predictions(avg, best.p, d, m, o);
    for (std::int64_t r = 0; r < R; ++r) epochs_sum[std::size_t(r)] += best.epoch[std::size_t(r)];
  }
  if (infos)
    for (std::int64_t r = 0; r < R; ++r) {
      auto& info = (*infos)[std::size_t(r)];
      info.parameters = mlp_parameter_count(int(f), o.hidden1, o.hidden2);
      info.mean_epochs = epochs_sum[std::size_t(r)] / o.restarts;
    }
  return avg;
}

std::vector<std::vector<double>> fit_predict_mlp_probes_rows(
    const std::vector<const std::vector<double>*>& x_trains, std::size_t n, std::size_t f,
    const std::vector<const std::vector<double>*>& ys, const std::vector<const std::vector<double>*>& x_evals,
    std::size_t m, const MlpProbeOptions& o, std::vector<MlpProbeInfo>* infos, const MlpOffsets* offsets) {
  // Every row set is checked before the fit, so bad evaluation rows cost no training.
  check_probe_inputs(x_trains.size(), n, f, ys, x_evals.size(), m, o, offsets);
  for (const auto* part : {&x_trains, &x_evals}) {
    const bool train = part == &x_trains;
    for (std::size_t r = 0; r < part->size(); ++r) {
      const std::string name = row_set_name(train, part->size(), r);
      if (!(*part)[r]) throw_input(kProbeFn, name + " is null");
      check_row_set(name, *(*part)[r], train ? n : m, f, train ? "n x f" : "m x f");
    }
  }
  MlpRowSource rows;
  rows.train_sets = x_trains.size();
  rows.eval_sets = x_evals.size();
  rows.train = [&](std::size_t s, std::vector<double>&) -> const std::vector<double>& { return *x_trains[s]; };
  rows.eval = [&](std::size_t s, std::vector<double>&) -> const std::vector<double>& { return *x_evals[s]; };
  return fit_predict_mlp_probes_source(rows, n, f, ys, m, o, infos, offsets);
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
