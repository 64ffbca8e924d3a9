// Trace export and routing interventions on the Swin preset: 28 routing points run stage by stage,
// `routing` [N, P, S] is zero-padded to the largest source count over all stages, there is no
// routing_cls (Swin has no CLS token), the file passes the trace validator, and an ablation at a
// stage-2 point changes the logits. Two 32x32 images keep it cheap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "model/intervene.hpp"
#include "model/trace_export.hpp"

using namespace arcal;

TEST(SwinTrace, PointsRunStageByStageAndPadToTheLargestSourceCount) {
  torch::manual_seed(2);
  ARViT m(make_model_config("ar-swin-tiny", 32, 3, 10, ResidualMode::Full, 2));
  TensorData data{torch::randn({2, 3, 32, 32}), torch::tensor({3, 8}, torch::kLong), 10};
  auto t = export_trace(m, data, "{}", 2);
  ASSERT_EQ(t.points, 28u);
  // Full AttnRes within a stage of L sublayers: point l sees l + 1 sources, the final op L + 1;
  // the 12-sublayer stage 2 has the most (13).
  ASSERT_EQ(t.sources, 13u);
  EXPECT_EQ(t.routing_sources[0], 1);
  EXPECT_EQ(t.routing_sources[4], 5);    // stage 0's final aggregation
  EXPECT_EQ(t.routing_sources[5], 1);    // stage 1 restarts from its own v_0
  EXPECT_EQ(t.routing_sources[22], 13);  // stage 2's final aggregation
  EXPECT_EQ(t.routing_sources[27], 5);
  EXPECT_TRUE(t.routing_cls.empty());
  for (std::size_t i = 0; i < t.n; ++i)
    for (std::size_t p = 0; p < t.points; ++p) {
      const std::size_t S = static_cast<std::size_t>(t.routing_sources[p]);
      for (std::size_t s = 0; s < t.sources; ++s)
        EXPECT_FLOAT_EQ(t.routing[(i * t.points + p) * t.sources + s], s < S ? float(1.0 / double(S)) : 0.0f);
    }
  validate_trace(t);
  const auto path =
      std::filesystem::temp_directory_path() / ("arcal_swin_trace_" + std::to_string(::getpid()) + ".npz");
  save_trace(t, path.string());
  auto back = load_trace(path.string());
  EXPECT_EQ(back.routing, t.routing);
  EXPECT_TRUE(back.routing_cls.empty());
  std::filesystem::remove(path);
}

TEST(SwinTrace, AblationAtAStagePointChangesTheLogits) {
  torch::manual_seed(4);
  ARViT m(make_model_config("ar-swin-tiny", 32, 3, 10, ResidualMode::Block, 4));
  m->eval();
  torch::NoGradGuard g;
  auto x = torch::randn({2, 3, 32, 32});
  auto base = m->forward(x);
  RoutingAblation ab;
  ab.drop_sources.assign(28, {});
  ab.drop_sources[22] = family_sources("embedding", 4);  // stage 2's final op over [b0, b1, b2, b3]
  RoutingCapture cap;
  auto ablated = m->forward(x, &cap, &ab);
  EXPECT_FLOAT_EQ(cap.alpha[22][0].abs().max().item<float>(), 0.0f);
  EXPECT_GT((ablated - base).abs().max().item<float>(), 1e-6f);
}
