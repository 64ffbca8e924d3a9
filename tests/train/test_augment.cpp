// The training batches' augmentation (data/tensor_data.hpp: random crop of the batch padded with
// zero pixels, and a horizontal flip) against the same transform written with LibTorch's own tensor
// operations image by image, from the same draws: bitwise equal, for one and three channels, with
// and without padding; and the draws do what they say (a flip reverses rows, a crop shifts them).
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "data/tensor_data.hpp"

namespace arcal {
namespace {

// The reference: pad with the normalised zero pixel, then per image a narrowed window and a flip.
torch::Tensor augment_with_torch_ops(const torch::Tensor& batch, int pad, std::uint64_t seed,
                                     const std::vector<float>& mean, const std::vector<float>& sd) {
  const auto B = batch.size(0), C = batch.size(1), H = batch.size(2), W = batch.size(3);
  auto fill = torch::tensor(mean).neg().div(torch::tensor(sd)).view({1, C, 1, 1});
  auto padded = fill.expand({B, C, H + 2 * pad, W + 2 * pad}).clone();
  padded.narrow(2, pad, H).narrow(3, pad, W).copy_(batch);
  auto out = torch::empty_like(batch);
  Rng rng(seed);
  for (std::int64_t b = 0; b < B; ++b) {
    const auto dy = static_cast<std::int64_t>(rng.below(2 * pad + 1));
    const auto dx = static_cast<std::int64_t>(rng.below(2 * pad + 1));
    const bool flip = rng.uniform() < 0.5;
    auto crop = padded[b].narrow(1, dy, H).narrow(2, dx, W);
    out[b].copy_(flip ? crop.flip({2}) : crop);
  }
  return out;
}

TEST(Augment, BatchIsTheTorchOperatorsImageByImage) {
  struct Case {
    const char* dataset;
    std::vector<float> mean, sd;
    std::int64_t C, H, W;
    int pad;
  };
  const Case cases[] = {{"fashion-mnist", {0.2860f}, {0.3530f}, 1, 28, 28, 4},
                        {"cifar10", {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}, 3, 8, 8, 4},
                        {"fashion-mnist", {0.2860f}, {0.3530f}, 1, 5, 5, 0},
                        {"fashion-mnist", {0.2860f}, {0.3530f}, 1, 6, 6, 7}};  // pad beyond the image
  for (const auto& c : cases) {
    torch::manual_seed(4);
    const auto batch = torch::randn({37, c.C, c.H, c.W});
    for (std::uint64_t seed : {1ull, 977ull}) {
      const auto ours = augment_batch(batch, c.pad, seed, c.dataset);
      const auto ref = augment_with_torch_ops(batch, c.pad, seed, c.mean, c.sd);
      EXPECT_TRUE(torch::equal(ours, ref)) << c.dataset << " pad " << c.pad << " seed " << seed;
    }
  }
}

TEST(Augment, FlipsReverseRowsAndCropsShiftThem) {
  // Without padding every image is itself or its mirror image, and both occur.
  torch::manual_seed(5);
  const auto batch = torch::randn({64, 1, 6, 6});
  const auto out = augment_batch(batch, 0, 11, "fashion-mnist");
  int flipped = 0, same = 0;
  for (std::int64_t b = 0; b < 64; ++b) {
    if (torch::equal(out[b], batch[b]))
      ++same;
    else if (torch::equal(out[b], batch[b].flip({2})))
      ++flipped;
  }
  EXPECT_EQ(same + flipped, 64);
  EXPECT_GT(same, 10);
  EXPECT_GT(flipped, 10);
  // With padding, every output pixel is an input pixel of the same image or the fill value.
  const auto padded = augment_batch(batch, 2, 11, "fashion-mnist");
  const float fill = -0.2860f / 0.3530f;
  for (std::int64_t b = 0; b < 4; ++b) {
    const auto img = batch[b].flatten();
    for (std::int64_t i = 0; i < 36; ++i) {
      const float v = padded[b].flatten()[i].item<float>();
      EXPECT_TRUE(v == fill || (img == v).any().item<bool>()) << "image " << b << " pixel " << i;
    }
  }
}

TEST(Augment, RejectsAnythingButAFloatImageBatch) {
  EXPECT_THROW(augment_batch(torch::zeros({2, 1, 4, 4}, torch::kDouble), 1, 0, "fashion-mnist"), InputError);
  EXPECT_THROW(augment_batch(torch::zeros({2, 4, 4}), 1, 0, "fashion-mnist"), InputError);
  EXPECT_THROW(augment_batch(torch::zeros({2, 3, 4, 4}), 1, 0, "fashion-mnist"), InputError);  // 3 channels, 1 expected
}

}  // namespace
}  // namespace arcal
