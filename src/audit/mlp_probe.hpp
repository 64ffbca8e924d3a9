// The MLP correctness probe of method.md §6.3: features -> P(correct), 2 hidden layers x 64 with
// GELU, AdamW, early stopping on an inner 20 % split, 5 seeded restarts whose probabilities are
// averaged. Capacity matching picks hidden widths whose parameter count is within 2 % of a target.
// Refits of the sensitivity and exact-null audits (method.md §6.5-6.6) may train on soft targets and
// start from the weights of an earlier fit (warm start). Inputs are plain row-major vectors; the
// trainer is arcal's own (float32, products on the BLAS of ops/blas.hpp, GELU and AdamW of src/ops):
// no LibTorch, so the audit runs beside any torch or none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace arcal {

/// Trained weights of one MLP (its parameter tensors in registration order, flattened float32), so a
/// later fit on the same inputs can start from them.
struct MlpWeights {
  int inputs = 0, hidden1 = 0, hidden2 = 0;
  std::vector<std::vector<float>> tensors;
};

struct MlpProbeOptions {
  int hidden1 = 64, hidden2 = 64;
  int restarts = 5;
  double lr = 1e-3;
  double weight_decay = 1e-4;
  int max_epochs = 200;
  int patience = 10;       ///< epochs without inner-validation improvement before stopping
  double inner_val = 0.2;  ///< fraction of the training rows held out for early stopping
  int batch_size = 256;
  std::uint64_t seed = 0;
  /// Targets may lie anywhere in [0, 1] (binary cross-entropy with soft targets) instead of {0, 1}.
  bool soft_labels = false;
  /// Every restart starts from these weights instead of a seeded random initialisation (the inner
  /// split and batch order still follow the restart's seed). Must match (f, hidden1, hidden2).
  const MlpWeights* warm_start = nullptr;
  /// Worker threads over independent fits where a caller has several (fit_probe_design_replicates:
  /// one per probe and fold). Results do not depend on it: every fit is seeded on its own. The BLAS's
  /// own threads are the caller's (audit_pipeline holds them at 1 beside workers).
  int threads = 1;
};

/// Fixed logit offsets added to the network's output (method.md §6.7, correction probes): the model is
/// P(correct) = σ(offset + MLP(x)), the offset is not trained, and a cold start sets the output layer to
/// zero so the starting point is the offset itself (it competes with the trained epochs in early
/// stopping). train [1 or R][n] and eval [1 or R][m]: one offset shared by every replicate, or one each.
struct MlpOffsets {
  std::vector<std::vector<double>> train, eval;
};

struct MlpProbeInfo {
  std::int64_t parameters = 0;
  double mean_epochs = 0;  ///< epochs to the best inner-validation loss, averaged over restarts
  MlpWeights weights;      ///< best-epoch weights of restart 0
};

/// Number of parameters of an MLP with `inputs` -> h1 -> h2 -> 1.
std::int64_t mlp_parameter_count(int inputs, int hidden1, int hidden2);

/// Hidden widths (h, h) for `inputs` whose parameter count is closest to `target`; if no square
/// choice is within 2 %, h2 is adjusted by one-unit steps. Returns {h1, h2}.
std::pair<int, int> capacity_matched_widths(int inputs, std::int64_t target);

/// Fits one MLP per label vector ys[r] ([n] each, R = ys.size() >= 1) on the same rows x_train [n, f]
/// and returns [R][m] P(correct) for x_eval [m, f]. The R fits share the feature standardisation, each
/// restart's inner split, batch order and starting weights (options.warm_start, or one seeded
/// initialisation) — common random numbers — and each stops on its own inner-validation loss. Each
/// replicate is trained on its own (its own AdamW state, its own early stopping), so replicate r's
/// result does not depend on R or on the other label vectors. The initialisation is drawn from a
/// generator seeded by the restart alone, so concurrent fits on other threads cannot change it.
/// infos, if given, gets R entries.
/// offsets, if given, turns every fit into a correction of fixed logits (MlpOffsets).
/// Throws InputError as fit_predict_mlp_probe, naming ys[r] for a bad label, or on offsets of the
/// wrong shape or non-finite.
std::vector<std::vector<double>> fit_predict_mlp_probes(
    const std::vector<double>& x_train, std::size_t n, std::size_t f, const std::vector<const std::vector<double>*>& ys,
    const std::vector<double>& x_eval, std::size_t m, const MlpProbeOptions& options,
    std::vector<MlpProbeInfo>* infos = nullptr, const MlpOffsets* offsets = nullptr);

/// fit_predict_mlp_probes where the replicates may also differ in their rows: x_trains and x_evals hold
/// one row set shared by every replicate or one per replicate ([n, f] and [m, f] each; e.g. other
/// cross-fit splits, or features permuted per replicate), each standardised by its own training rows.
/// Replicate r's result equals a fit on its rows alone. Throws as fit_predict_mlp_probes, naming the
/// row set.
std::vector<std::vector<double>> fit_predict_mlp_probes_rows(const std::vector<const std::vector<double>*>& x_trains,
                                                             std::size_t n, std::size_t f,
                                                             const std::vector<const std::vector<double>*>& ys,
                                                             const std::vector<const std::vector<double>*>& x_evals,
                                                             std::size_t m, const MlpProbeOptions& options,
                                                             std::vector<MlpProbeInfo>* infos = nullptr,
                                                             const MlpOffsets* offsets = nullptr);

/// Row sets made on demand, so a caller with many replicates never holds every replicate's rows in
/// double precision at once: train_sets and eval_sets are 1 (one set shared by every replicate) or R
/// (one per replicate). train(s, buffer) and eval(s, buffer) return set s's rows ([n, f] and [m, f],
/// row-major): a reference to rows the caller keeps, or to buffer after filling it. Training rows are
/// asked for once per set before the fit and evaluation rows once per set and restart after it, so
/// evaluation rows are checked (finite, of size m x f) only then.
struct MlpRowSource {
  std::size_t train_sets = 1, eval_sets = 1;
  std::function<const std::vector<double>&(std::size_t set, std::vector<double>&buffer)> train, eval;
};

/// fit_predict_mlp_probes_rows with the rows from a source. Memory: the training rows of every
/// replicate as float32 (4·Rx·n·f bytes, plus a copy of the inner-validation fifth), one set of rows in
/// double at a time, and activations in blocks of about 2^22 values: never a double-precision copy of
/// the whole stack.
std::vector<std::vector<double>> fit_predict_mlp_probes_source(const MlpRowSource& rows, std::size_t n, std::size_t f,
                                                               const std::vector<const std::vector<double>*>& ys,
                                                               std::size_t m, const MlpProbeOptions& options,
                                                               std::vector<MlpProbeInfo>* infos = nullptr,
                                                               const MlpOffsets* offsets = nullptr);

/// Fits on (x_train [n, f], y_train [n] in {0,1}) and returns P(correct) for x_eval [m, f]
/// (fit_predict_mlp_probes with one label vector).
/// Features are standardised with the training rows' mean and sd (constant columns are refused).
/// Throws InputError on shape mismatch, n < 10, non-finite or constant features, labels not in {0,1}
/// (not in [0,1] with soft_labels), or a warm start whose shape does not match.
std::vector<double> fit_predict_mlp_probe(const std::vector<double>& x_train, std::size_t n, std::size_t f,
                                          const std::vector<double>& y_train, const std::vector<double>& x_eval,
                                          std::size_t m, const MlpProbeOptions& options, MlpProbeInfo* info = nullptr,
                                          const MlpOffsets* offsets = nullptr);

/// The trainer's arithmetic on one minibatch, for tests against an independent implementation: the mean
/// binary cross-entropy of σ(offsets[i] + MLP(x[i])) against y[i] over `rows` rows x [rows, f] and its
/// gradient with respect to the weights, written to grad in MlpWeights' order (W1, b1, W2, b2, W3, b3
/// flattened; resized to the parameter count). Throws InputError on weights of the wrong shape.
double mlp_batch_loss_gradient(const MlpWeights& weights, const std::vector<float>& x, const std::vector<float>& y,
                               const std::vector<float>& offsets, std::size_t rows, std::vector<float>& grad);

}  // namespace arcal
