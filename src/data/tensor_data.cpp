#include "data/tensor_data.hpp"

#include <algorithm>
#include <numeric>

#include "core/check.hpp"
#include "core/rng.hpp"
#include "io/text_corpus.hpp"

namespace arcal {

namespace {
struct Norm {
  std::vector<float> mean, std;
};
Norm dataset_norm(const std::string& dataset) {
  if (dataset == "fashion-mnist") return {{0.2860f}, {0.3530f}};
  if (dataset == "cifar10") return {{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};
  if (dataset == "cifar100") return {{0.5071f, 0.4865f, 0.4409f}, {0.2673f, 0.2564f, 0.2762f}};
  throw_input("--dataset",
              "'" + dataset + "' is not a known dataset; expected fashion-mnist, cifar10, cifar100 or gcide (text)");
}

TensorData take(const TensorData& d, const std::vector<std::int64_t>& idx) {
  auto index = torch::tensor(idx, torch::kLong);
  return {d.images.index_select(0, index).contiguous(), d.labels.index_select(0, index).contiguous(), d.classes};
}
}  // namespace

std::string default_data_dir(const std::string& dataset) {
  if (dataset == "fashion-mnist") return kFashionMnistDir;
  if (dataset == "gcide") return "/usr/share/dictd";
  return "";
}

bool is_text_dataset(const std::string& name) { return name == "gcide"; }

torch::Tensor lm_inputs(const torch::Tensor& sequences) {
  return sequences.narrow(1, 0, sequences.size(1) - 1).to(torch::kLong);
}

torch::Tensor lm_targets(const torch::Tensor& sequences) {
  return sequences.narrow(1, 1, sequences.size(1) - 1).to(torch::kLong);
}

namespace {
TensorData text_split(const TokenSequences& seq) {
  TensorData d;
  d.text = true;
  d.classes = 256;
  d.images =
      torch::from_blob(const_cast<std::uint8_t*>(seq.tokens.data()), {seq.count, seq.length}, torch::kUInt8).clone();
  std::vector<std::int64_t> doc(seq.document_of.begin(), seq.document_of.end());
  d.labels = torch::tensor(doc, torch::kLong);
  return d;
}
}  // namespace

DatasetSplits load_text_dataset(const std::string& data_dir, double val_fraction, std::int64_t train_subset,
                                std::uint64_t seed, int context) {
  if (!(val_fraction > 0.0 && val_fraction <= 0.25))
    throw_input("--val-fraction",
                "is " + std::to_string(val_fraction) +
                    "; the text corpus needs a fraction in (0, 0.25] (the test split takes as many documents)");
  if (context < 2) throw_input("--context", std::to_string(context) + " must be >= 2");
  if (train_subset < 0)
    throw_input("--train-subset", std::to_string(train_subset) + " must be >= 0 (0 = the whole training split)");
  const std::string dir = data_dir.empty() ? default_data_dir("gcide") : data_dir;
  const TextCorpus corpus = read_dictd_corpus(dir + "/gcide.dict.dz", dir + "/gcide.index");
  // The split is the corpus' own, the same for every run seed (as a dataset's official test split), so
  // the runs of a study are scored on the same test documents and AttnRes and its twin pair up.
  const DocumentSplit split = split_documents(corpus.documents.size(), val_fraction, val_fraction, kTextSplitSeed);
  DatasetSplits s;
  s.name = "gcide";
  s.train = text_split(pack_sequences(corpus, split.train, context + 1));
  s.val = text_split(pack_sequences(corpus, split.validation, context + 1));
  s.test = text_split(pack_sequences(corpus, split.test, context + 1));
  for (const auto* part : {&s.train, &s.val, &s.test})
    if (part->size() == 0)
      throw_input("load_dataset", corpus.source + ": a split holds no sequence of " + std::to_string(context + 1) +
                                      " bytes (corpus too small for --context and --val-fraction)");
  if (train_subset > 0 && train_subset < s.train.size()) {
    std::vector<std::int64_t> perm(static_cast<std::size_t>(s.train.size()));
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(derive_seed(seed, 0x5B5E));
    rng.shuffle(perm);
    perm.resize(static_cast<std::size_t>(train_subset));
    std::sort(perm.begin(), perm.end());
    s.train = take(s.train, perm);
    s.train.text = true;
  }
  return s;
}

TensorData to_tensor_data(const ImageSet& set, const std::string& dataset) {
  const Norm norm = dataset_norm(dataset);
  auto pixels = torch::from_blob(const_cast<std::uint8_t*>(set.pixels.data()),
                                 {static_cast<long>(set.n), set.channels, set.height, set.width}, torch::kUInt8)
                    .to(torch::kFloat)
                    .div_(255.0);
  auto mean = torch::tensor(norm.mean).view({1, -1, 1, 1});
  auto stdv = torch::tensor(norm.std).view({1, -1, 1, 1});
  TensorData out;
  out.images = ((pixels - mean) / stdv).contiguous();
  out.labels = torch::tensor(set.labels, torch::kLong);
  out.classes = set.classes;
  return out;
}

DatasetSplits load_dataset(const std::string& name, const std::string& data_dir, double val_fraction,
                           std::int64_t train_subset, std::uint64_t seed, int context) {
  if (is_text_dataset(name)) return load_text_dataset(data_dir, val_fraction, train_subset, seed, context);
  dataset_norm(name);  // validates the name before touching files
  std::string dir = data_dir.empty() ? default_data_dir(name) : data_dir;
  if (dir.empty()) throw_input("--data-dir", "dataset '" + name + "' has no default location; pass --data-dir");
  ImageSet train_set, test_set;
  if (name == "fashion-mnist") {
    train_set = load_fashion_mnist(dir, true);
    test_set = load_fashion_mnist(dir, false);
  } else {
    const bool c100 = name == "cifar100";
    train_set = load_cifar(dir, c100, true);
    test_set = load_cifar(dir, c100, false);
  }
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    throw_input("load_dataset", "val_fraction is " + std::to_string(val_fraction) + ", but must be in [0, 1)");
  if (train_subset < 0)
    throw_input("--train-subset", std::to_string(train_subset) + " must be >= 0 (0 = the whole training split)");
  if (test_set.n == 0) throw_input("load_dataset", name + " in " + dir + ": the test split is empty");
  if (test_set.channels != train_set.channels || test_set.height != train_set.height ||
      test_set.width != train_set.width)
    throw_input("load_dataset", name + " in " + dir + ": test images are " + std::to_string(test_set.channels) + "x" +
                                    std::to_string(test_set.height) + "x" + std::to_string(test_set.width) +
                                    " but training images " + std::to_string(train_set.channels) + "x" +
                                    std::to_string(train_set.height) + "x" + std::to_string(train_set.width));
  if (train_set.height != train_set.width)
    throw_input("load_dataset", name + " in " + dir + ": images are " + std::to_string(train_set.height) + "x" +
                                    std::to_string(train_set.width) + "; the models need square images");
  TensorData all = to_tensor_data(train_set, name);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(all.size()));
  std::iota(perm.begin(), perm.end(), 0);
  Rng rng(derive_seed(seed, 0xDA7A));
  rng.shuffle(perm);
  const auto n_val = static_cast<std::size_t>(val_fraction * double(perm.size()) + 0.5);
  std::vector<std::int64_t> val_idx(perm.begin(), perm.begin() + n_val);
  std::vector<std::int64_t> train_idx(perm.begin() + n_val, perm.end());
  if (train_subset > 0 && static_cast<std::size_t>(train_subset) < train_idx.size()) train_idx.resize(train_subset);
  if (train_idx.empty()) throw_input("load_dataset", name + ": the training split is empty");
  DatasetSplits s;
  s.name = name;
  s.train = take(all, train_idx);
  s.val = n_val > 0 ? take(all, val_idx) : TensorData{};
  s.test = to_tensor_data(test_set, name);
  return s;
}

// One pass over the batch's floats: out[b, c, y, x] = padded[b, c, dy + y, dx + x'] with x' = W-1-x
// when image b is flipped, where padded is the batch with `pad` fill pixels around it (the draws,
// per image dy, dx, flip, in that order). Per-image LibTorch calls (select, two narrows, flip, copy)
// cost about 770 dispatches for a batch of 128, 5 % of a training step of the tiny ViT.
torch::Tensor augment_batch(const torch::Tensor& batch_in, int pad, std::uint64_t seed, const std::string& dataset) {
  const Norm norm = dataset_norm(dataset);
  if (batch_in.dim() != 4 || batch_in.scalar_type() != torch::kFloat)
    throw_input("augment_batch", "the batch must be a float (B, C, H, W) tensor");
  const auto batch = batch_in.contiguous();
  const auto B = batch.size(0), C = batch.size(1), H = batch.size(2), W = batch.size(3);
  if (static_cast<std::size_t>(C) != norm.mean.size())
    throw_input("augment_batch", dataset + " images have " + std::to_string(norm.mean.size()) +
                                     " channels, the batch has " + std::to_string(C));
  auto out = torch::empty_like(batch);
  const float* src = batch.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  Rng rng(seed);
  for (std::int64_t b = 0; b < B; ++b) {
    const auto dy = static_cast<std::int64_t>(rng.below(2 * pad + 1)) - pad;
    const auto dx = static_cast<std::int64_t>(rng.below(2 * pad + 1)) - pad;
    const bool flip = rng.uniform() < 0.5;
    for (std::int64_t c = 0; c < C; ++c) {
      const float fill = -norm.mean[std::size_t(c)] / norm.std[std::size_t(c)];  // a zero pixel, normalised
      const float* plane = src + (b * C + c) * H * W;
      float* o = dst + (b * C + c) * H * W;
      for (std::int64_t y = 0; y < H; ++y) {
        const std::int64_t sy = y + dy;
        for (std::int64_t x = 0; x < W; ++x) {
          const std::int64_t sx = (flip ? W - 1 - x : x) + dx;
          o[y * W + x] = sy >= 0 && sy < H && sx >= 0 && sx < W ? plane[sy * W + sx] : fill;
        }
      }
    }
  }
  return out;
}

}  // namespace arcal
