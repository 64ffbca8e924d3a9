#include "audit/mlp_probe.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/check.hpp"
#include "core/interrupt.hpp"
#include "core/rng.hpp"
#include "ops/adamw.hpp"
#include "ops/blas.hpp"
#include "ops/gelu.hpp"

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

/// The R replicates' training data (rows standardised by their own training set, float32), and how to
/// make their evaluation rows.
struct StackedData {
  std::size_t R = 0, n = 0, m = 0, f = 0;
  AlignedFloats Xtr;                   ///< [Rx, n, f] (Rx = 1: rows shared by every replicate)
  std::vector<float> Y;                ///< [R, n]
  std::vector<float> Otr, Oev;         ///< [R, n], [R, m] offsets (zeros without offsets: adding them changes nothing)
  std::vector<Standardisation> scale;  ///< one per training set
  const MlpRowSource* rows = nullptr;

  const float* train_rows(std::size_t r) const { return Xtr.data() + (rows->train_sets == 1 ? 0 : r) * n * f; }

  /// Replicate r's evaluation rows standardised by its training set's scale, [m, f] (checked: finite,
  /// m x f).
  AlignedFloats eval_rows(std::size_t r) const {
    const std::size_t set = rows->eval_sets == 1 ? 0 : r, tset = rows->train_sets == 1 ? 0 : r;
    std::vector<double> buffer;
    const auto& v = rows->eval(set, buffer);
    check_row_set(row_set_name(false, rows->eval_sets, set), v, m, f, "m x f");
    AlignedFloats x(m * f);
    apply_scale(scale[tset], v, m, f, x.data());
    return x;
  }
};

StackedData stack_data(const MlpRowSource& rows, std::size_t n, std::size_t f,
                       const std::vector<const std::vector<double>*>& ys, std::size_t m, const MlpOffsets* offsets) {
  StackedData d;
  d.R = ys.size();
  d.n = n;
  d.m = m;
  d.f = f;
  d.rows = &rows;
  d.Xtr.resize(rows.train_sets * n * f);
  std::vector<double> buffer;
  for (std::size_t s = 0; s < rows.train_sets; ++s) {  // one set in double at a time
    const auto& v = rows.train(s, buffer);
    check_row_set(row_set_name(true, rows.train_sets, s), v, n, f, "n x f");
    d.scale.push_back(standardise_into(v, n, f, d.Xtr.data() + s * n * f));
  }
  d.Y.resize(d.R * n);
  for (std::size_t r = 0; r < d.R; ++r)
    for (std::size_t i = 0; i < n; ++i) d.Y[r * n + i] = float((*ys[r])[i]);
  auto offset_rows = [&](const std::vector<std::vector<double>>* src, std::size_t cols) {
    std::vector<float> flat(d.R * cols, 0.0f);
    if (src)
      for (std::size_t r = 0; r < d.R; ++r) {
        const auto& row = (*src)[src->size() == 1 ? 0 : r];
        for (std::size_t i = 0; i < cols; ++i) flat[r * cols + i] = float(row[i]);
      }
    return flat;
  };
  d.Otr = offset_rows(offsets ? &offsets->train : nullptr, n);
  d.Oev = offset_rows(offsets ? &offsets->eval : nullptr, m);
  return d;
}

/// One MLP f -> h1 -> h2 -> 1 as one flat float vector in nn.Linear's layout and registration order:
/// W1 [h1, f], b1 [h1], W2 [h2, h1], b2 [h2], W3 [1, h2], b3 [1]. AdamW updates the whole vector in
/// one pass (every tensor has the same hyper-parameters, biases decayed too, as torch.optim.AdamW
/// over model.parameters() does).
struct Mlp {
  int f = 0, h1 = 0, h2 = 0;
  std::size_t o_b1 = 0, o_w2 = 0, o_b2 = 0, o_w3 = 0, o_b3 = 0, size = 0;  ///< offsets of the tensors
  AlignedFloats w;

  Mlp(int inputs, int hidden1, int hidden2) : f(inputs), h1(hidden1), h2(hidden2) {
    o_b1 = std::size_t(h1) * std::size_t(f);
    o_w2 = o_b1 + std::size_t(h1);
    o_b2 = o_w2 + std::size_t(h2) * std::size_t(h1);
    o_w3 = o_b2 + std::size_t(h2);
    o_b3 = o_w3 + std::size_t(h2);
    size = o_b3 + 1;
    w.assign(size, 0.0f);
  }
  std::array<std::size_t, 7> bounds() const { return {0, o_b1, o_w2, o_b2, o_w3, o_b3, size}; }
};

/// One seeded initialisation with nn.Linear's distributions (kaiming_uniform_ with a = sqrt 5 on the
/// weight, i.e. U(±1/sqrt(fan_in)), and U(±1/sqrt(fan_in)) on the bias), layer by layer, from a
/// generator seeded by `seed` alone.
Mlp seeded_init(int f, int h1, int h2, std::uint64_t seed) {
  Mlp net(f, h1, h2);
  Rng rng(derive_seed(seed, 0x1417));
  const auto b = net.bounds();
  const std::array<int, 3> fan_in{f, h1, h2};
  for (std::size_t layer = 0; layer < 3; ++layer) {
    const double bound = 1 / std::sqrt(double(fan_in[layer]));
    for (std::size_t i = b[2 * layer]; i < b[2 * layer + 2]; ++i) net.w[i] = float(bound * (2 * rng.uniform() - 1));
  }
  return net;
}

Mlp warm_mlp(const MlpWeights& ws) {
  Mlp net(ws.inputs, ws.hidden1, ws.hidden2);
  const auto b = net.bounds();
  for (std::size_t k = 0; k < 6; ++k) std::copy(ws.tensors[k].begin(), ws.tensors[k].end(), net.w.begin() + long(b[k]));
  return net;
}

MlpWeights to_weights(const Mlp& net) {
  MlpWeights ws;
  ws.inputs = net.f;
  ws.hidden1 = net.h1;
  ws.hidden2 = net.h2;
  const auto b = net.bounds();
  for (std::size_t k = 0; k < 6; ++k)
    ws.tensors.emplace_back(net.w.begin() + long(b[k]), net.w.begin() + long(b[k + 1]));
  return ws;
}

/// Binary cross-entropy of logit z against target y in [0, 1], in the overflow-free form.
inline double bce(double z, double y) { return std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z))); }

/// Activations of one pass over up to `cap` rows, kept between batches.
struct Workspace {
  AlignedFloats z1, d1, z2, d2, logit, g3, grad, xb;
  void reserve(const Mlp& net, std::size_t cap) {
    z1.resize(cap * std::size_t(net.h1));
    d1.resize(z1.size());
    z2.resize(cap * std::size_t(net.h2));
    d2.resize(z2.size());
    logit.resize(cap);
    g3.resize(cap);
    grad.resize(net.size);
    xb.resize(cap * std::size_t(net.f));
  }
};

/// Logits (without offsets) of rows x [rows, f] into ws.logit; with `keep`, ws keeps gelu'(z) of both
/// hidden layers and their activations for a backward.
void forward(const Mlp& net, const float* x, std::size_t rows, Workspace& ws, bool keep) {
  const int B = int(rows), f = net.f, h1 = net.h1, h2 = net.h2;
  const float* w = net.w.data();
  float* a1 = ws.z1.data();
  sgemm_rm(false, true, B, h1, f, 1.0f, x, f, w, f, 0.0f, a1, h1);
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < h1; ++j) a1[std::size_t(i) * h1 + j] += w[net.o_b1 + std::size_t(j)];
  gelu_forward(a1, a1, keep ? ws.d1.data() : nullptr, std::size_t(B) * h1);
  float* a2 = ws.z2.data();
  sgemm_rm(false, true, B, h2, h1, 1.0f, a1, h1, w + net.o_w2, h1, 0.0f, a2, h2);
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < h2; ++j) a2[std::size_t(i) * h2 + j] += w[net.o_b2 + std::size_t(j)];
  gelu_forward(a2, a2, keep ? ws.d2.data() : nullptr, std::size_t(B) * h2);
  const float* w3 = w + net.o_w3;
  for (int i = 0; i < B; ++i) {
    float s = w[net.o_b3];
    const float* row = a2 + std::size_t(i) * h2;
    for (int j = 0; j < h2; ++j) s += row[j] * w3[j];
    ws.logit[std::size_t(i)] = s;
  }
}

/// Gradient of the batch's mean BCE into ws.grad, after forward(keep = true) on the same rows x; the
/// output-layer gradient g3 = (sigmoid(logit + offset) - y) / B is in ws.g3. The hidden activations
/// (ws.z1, ws.z2) are overwritten.
void backward(const Mlp& net, const float* x, std::size_t rows, Workspace& ws) {
  const int B = int(rows), f = net.f, h1 = net.h1, h2 = net.h2;
  const float* w = net.w.data();
  float* g = ws.grad.data();
  const float* a1 = ws.z1.data();
  float* a2 = ws.z2.data();
  // Output layer: dW3 = g3^T A2, db3 = sum g3; then dZ2 = (g3 w3^T) * gelu'(z2), in place of A2.
  float* dw3 = g + net.o_w3;
  std::fill(dw3, dw3 + h2, 0.0f);
  float db3 = 0;
  for (int i = 0; i < B; ++i) {
    const float gi = ws.g3[std::size_t(i)];
    db3 += gi;
    float* row = a2 + std::size_t(i) * h2;
    const float* d2 = ws.d2.data() + std::size_t(i) * h2;
    for (int j = 0; j < h2; ++j) {
      dw3[j] += gi * row[j];
      row[j] = gi * w[net.o_w3 + std::size_t(j)] * d2[j];
    }
  }
  g[net.o_b3] = db3;
  const float* dz2 = a2;
  // Second layer: dW2 = dZ2^T A1 [h2, h1], db2 = column sums of dZ2; dA1 = dZ2 W2 [B, h1].
  sgemm_rm(true, false, h2, h1, B, 1.0f, dz2, h2, a1, h1, 0.0f, g + net.o_w2, h1);
  float* db2 = g + net.o_b2;
  std::fill(db2, db2 + h2, 0.0f);
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < h2; ++j) db2[j] += dz2[std::size_t(i) * h2 + j];
  float* dz1 = ws.z1.data();  // A1 is no longer needed
  sgemm_rm(false, false, B, h1, h2, 1.0f, dz2, h2, w + net.o_w2, h1, 0.0f, dz1, h1);
  for (std::size_t k = 0; k < std::size_t(B) * h1; ++k) dz1[k] *= ws.d1[k];
  // First layer: dW1 = dZ1^T X [h1, f], db1 = column sums of dZ1.
  sgemm_rm(true, false, h1, f, B, 1.0f, dz1, h1, x, f, 0.0f, g, f);
  float* db1 = g + net.o_b1;
  std::fill(db1, db1 + h1, 0.0f);
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < h1; ++j) db1[j] += dz1[std::size_t(i) * h1 + j];
}

constexpr std::size_t kEvalBlock = 4096;  ///< rows per block of an evaluation pass

/// Mean BCE of the network on rows x [rows, f] with targets y and offsets o, in blocks.
double mean_loss(const Mlp& net, const float* x, const float* y, const float* o, std::size_t rows, Workspace& ws) {
  double total = 0;
  for (std::size_t i0 = 0; i0 < rows; i0 += kEvalBlock) {
    const std::size_t len = std::min(kEvalBlock, rows - i0);
    forward(net, x + i0 * std::size_t(net.f), len, ws, false);
    for (std::size_t i = 0; i < len; ++i) total += bce(double(ws.logit[i]) + double(o[i0 + i]), double(y[i0 + i]));
  }
  return total / double(rows);
}

/// One restart's result for one replicate: the best inner-validation state.
struct BestState {
  Mlp net;
  double loss = std::numeric_limits<double>::infinity();
  int epoch = 0;
  bool has = false;
};

/// The rows of one restart's inner split, shared by every replicate: validation rows first in the
/// seeded permutation, the rest fitted. rng continues to draw the epochs' batch orders.
struct InnerSplit {
  std::vector<std::size_t> val, fit;
};

InnerSplit inner_split(std::size_t n, double inner_val, Rng& rng) {
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), std::size_t(0));
  rng.shuffle(perm);
  const std::size_t n_val = std::max<std::size_t>(1, static_cast<std::size_t>(inner_val * double(n)));
  return {std::vector<std::size_t>(perm.begin(), perm.begin() + long(n_val)),
          std::vector<std::size_t>(perm.begin() + long(n_val), perm.end())};
}

/// One restart of replicate r: the restart's seeded inner split and batch orders (the same for every
/// replicate), starting weights `start` (an offset model's output layer at zero when cold, so it starts
/// at the offset), minibatch AdamW with early stopping on the inner-validation loss.
BestState fit_replicate(const StackedData& d, std::size_t r, const MlpProbeOptions& o, std::uint64_t seed,
                        const Mlp& start, bool start_competes) {
  const std::size_t f = d.f;
  Rng rng(seed);
  const InnerSplit split = inner_split(d.n, o.inner_val, rng);
  const float* X = d.train_rows(r);
  const float* Y = d.Y.data() + r * d.n;
  const float* O = d.Otr.data() + r * d.n;
  // The validation rows, their targets and offsets, gathered once.
  const std::size_t nv = split.val.size();
  AlignedFloats xv(nv * f);
  std::vector<float> yv(nv), ov(nv);
  for (std::size_t i = 0; i < nv; ++i) {
    const std::size_t row = split.val[i];
    std::copy(X + row * f, X + (row + 1) * f, xv.begin() + long(i * f));
    yv[i] = Y[row];
    ov[i] = O[row];
  }
  Mlp net = start;
  AlignedFloats m(net.size, 0.0f), v(net.size, 0.0f);
  const std::size_t batch = std::size_t(std::max(1, o.batch_size));
  Workspace ws;
  ws.reserve(net, std::max(batch, std::min(kEvalBlock, nv)));
  BestState best{net, std::numeric_limits<double>::infinity(), 0, false};
  if (start_competes) {
    // The starting point competes with the trained epochs, so a refit can keep the warm weights and a
    // correction can keep "no change".
    best.loss = mean_loss(net, xv.data(), yv.data(), ov.data(), nv, ws);
    best.has = true;
  }
  std::vector<std::size_t> order(split.fit.size());
  std::vector<float> yb(batch);
  std::int64_t step = 0;
  int since = 0;
  for (int epoch = 0; epoch < o.max_epochs; ++epoch) {
    std::iota(order.begin(), order.end(), std::size_t(0));
    rng.shuffle(order);
    for (std::size_t s = 0; s < order.size(); s += batch) {
      poll_interrupt();  // Ctrl-C from Python stops a probe fit within about a step
      const std::size_t len = std::min(batch, order.size() - s);
      for (std::size_t i = 0; i < len; ++i) {
        const std::size_t row = split.fit[order[s + i]];
        std::copy(X + row * f, X + (row + 1) * f, ws.xb.begin() + long(i * f));
        yb[i] = Y[row];
        ws.g3[i] = O[row];  // the offset, replaced by the output gradient below
      }
      forward(net, ws.xb.data(), len, ws, true);
      for (std::size_t i = 0; i < len; ++i) {
        const float z = ws.logit[i] + ws.g3[i];
        ws.g3[i] = (1.0f / (1.0f + std::exp(-z)) - yb[i]) / float(len);
      }
      backward(net, ws.xb.data(), len, ws);
      ++step;
      const auto sc = adamw_scalars_float(o.lr, o.weight_decay, 0.9, 0.999, 1e-8, step);  // torch's defaults
      adamw_kernel(net.w.data(), ws.grad.data(), m.data(), v.data(), 0, std::int64_t(net.size), sc);
    }
    const double vl = mean_loss(net, xv.data(), yv.data(), ov.data(), nv, ws);
    if (vl < best.loss - 1e-6) {
      best.net = net;
      best.loss = vl;
      best.epoch = epoch + 1;
      best.has = true;
      since = 0;
    } else if (++since >= o.patience) {
      break;
    }
  }
  // Without a warm start the state is empty only when no epoch improved on +inf (max_epochs = 0 or a
  // NaN loss).
  if (!best.has)
    throw_input(kProbeFn, "training of replicate " + std::to_string(r) + " produced no finite inner-validation loss");
  return best;
}

/// Adds best[r]'s predicted probabilities on replicate r's evaluation rows, / restarts, to avg[r].
/// Rows shared by every replicate are standardised once; otherwise each replicate's rows are made
/// (MlpRowSource::eval), run and dropped in turn.
void add_predictions(std::vector<std::vector<double>>& avg, const std::vector<BestState>& best, const StackedData& d,
                     const MlpProbeOptions& o) {
  const bool shared = d.rows->train_sets == 1 && d.rows->eval_sets == 1;
  AlignedFloats xe;
  if (shared) xe = d.eval_rows(0);
  Workspace ws;
  ws.reserve(best[0].net, std::min(kEvalBlock, std::max<std::size_t>(1, d.m)));
  for (std::size_t r = 0; r < d.R; ++r) {
    if (!shared) xe = d.eval_rows(r);
    const float* oe = d.Oev.data() + r * d.m;
    for (std::size_t i0 = 0; i0 < d.m; i0 += kEvalBlock) {
      const std::size_t len = std::min(kEvalBlock, d.m - i0);
      forward(best[r].net, xe.data() + i0 * d.f, len, ws, false);
      for (std::size_t i = 0; i < len; ++i)
        avg[r][i0 + i] += 1.0 / (1.0 + std::exp(-(double(ws.logit[i]) + double(oe[i0 + i])))) / o.restarts;
    }
  }
}

}  // namespace

std::vector<std::vector<double>> fit_predict_mlp_probes_source(const MlpRowSource& rows, std::size_t n, std::size_t f,
                                                               const std::vector<const std::vector<double>*>& ys,
                                                               std::size_t m, const MlpProbeOptions& o,
                                                               std::vector<MlpProbeInfo>* infos,
                                                               const MlpOffsets* offsets) {
  check_probe_inputs(rows.train_sets, n, f, ys, rows.eval_sets, m, o, offsets);
  const StackedData d = stack_data(rows, n, f, ys, m, offsets);
  const std::size_t R = d.R;
  std::vector<std::vector<double>> avg(R, std::vector<double>(m, 0.0));
  std::vector<double> epochs_sum(R, 0.0);
  if (infos) infos->assign(R, MlpProbeInfo{});
  for (int restart = 0; restart < o.restarts; ++restart) {
    const std::uint64_t seed = derive_seed(o.seed, static_cast<std::uint64_t>(restart));
    Mlp start = o.warm_start ? warm_mlp(*o.warm_start) : seeded_init(int(f), o.hidden1, o.hidden2, seed);
    if (offsets && !o.warm_start)  // a correction starts as "no change": the output layer at zero
      std::fill(start.w.begin() + long(start.o_w3), start.w.end(), 0.0f);
    std::vector<BestState> best;
    best.reserve(R);
    for (std::size_t r = 0; r < R; ++r)
      best.push_back(fit_replicate(d, r, o, seed, start, o.warm_start != nullptr || offsets != nullptr));
    if (infos && restart == 0)
      for (std::size_t r = 0; r < R; ++r) (*infos)[r].weights = to_weights(best[r].net);
    add_predictions(avg, best, d, o);
    for (std::size_t r = 0; r < R; ++r) epochs_sum[r] += best[r].epoch;
  }
  if (infos)
    for (std::size_t r = 0; r < R; ++r) {
      auto& info = (*infos)[r];
      info.parameters = mlp_parameter_count(int(f), o.hidden1, o.hidden2);
      info.mean_epochs = epochs_sum[r] / o.restarts;
    }
  return avg;
}

double mlp_batch_loss_gradient(const MlpWeights& weights, const std::vector<float>& x, const std::vector<float>& y,
                               const std::vector<float>& offsets, std::size_t rows, std::vector<float>& grad) {
  const char* fn = "mlp_batch_loss_gradient";
  const Mlp shape(weights.inputs, weights.hidden1, weights.hidden2);
  const auto b = shape.bounds();
  if (weights.tensors.size() != 6)
    throw_input(fn, "weights has " + std::to_string(weights.tensors.size()) + " tensors, but must have 6");
  for (std::size_t k = 0; k < 6; ++k)
    check_same_size(fn, "weights tensor", weights.tensors[k].size(), "its shape", b[k + 1] - b[k]);
  check_same_size(fn, "x", x.size(), "rows x f", rows * std::size_t(weights.inputs));
  check_same_size(fn, "y", y.size(), "rows", rows);
  check_same_size(fn, "offsets", offsets.size(), "rows", rows);
  const Mlp net = warm_mlp(weights);
  const AlignedFloats xa(x.begin(), x.end());
  Workspace ws;
  ws.reserve(net, std::max<std::size_t>(1, rows));
  forward(net, xa.data(), rows, ws, true);
  double loss = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    const float z = ws.logit[i] + offsets[i];
    loss += bce(double(z), double(y[i]));
    ws.g3[i] = (1.0f / (1.0f + std::exp(-z)) - y[i]) / float(rows);
  }
  backward(net, xa.data(), rows, ws);
  grad.assign(ws.grad.begin(), ws.grad.end());
  return loss / double(rows);
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
