// The training family's option table (train/train_config.hpp over core/options.hpp): the typed JSON
// reads back to the same configuration, integers must fit their field exactly, unknown keys and bad
// values are named, the identity hash follows what changes a run and nothing else, and "auto"
// precision resolves by the processor.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "test_util.hpp"
#include "train/train_config.hpp"

namespace arcal {
namespace {

TEST(TrainOptions, TypedJsonReadsBackToTheSameConfiguration) {
  TrainConfig c;
  c.dataset = "cifar10";
  c.lr = 3e-4;
  c.seed = 18446744073709551615ull;  // the largest seed survives the round trip exactly
  c.max_steps = 999999999999LL;      // near the top of its range
  c.precision = "bf16";
  const nlohmann::json j = c;
  const TrainConfig back = train_config_from_json(j, "t");
  EXPECT_EQ(nlohmann::json(back), j);
  EXPECT_EQ(back.seed, c.seed);
  EXPECT_EQ(back.max_steps, c.max_steps);
  // Every option of the table is a key of the JSON, and nothing else.
  EXPECT_EQ(j.size(), train_option_table().size());
}

TEST(TrainOptions, IntegersMustFitAndKeysMustExist) {
  auto message = [](const nlohmann::json& j) {
    return testing::input_error_message([&] { train_config_from_json(j, "RUN/config.json: train"); });
  };
  EXPECT_NE(message({{"epochs", 4294967299LL}}).find("'epochs' is 4294967299, but must be an integer in"),
            std::string::npos);
  EXPECT_NE(message({{"epochs", 2.5}}).find("'epochs' is 2.5, but must be an integer"), std::string::npos);
  EXPECT_NE(message({{"seed", -1}}).find("'seed' is -1"), std::string::npos);
  EXPECT_NE(message({{"epoch", 3}}).find("unknown option 'epoch'"), std::string::npos);
  EXPECT_NE(message({{"lr", "fast"}}).find("'lr' is \"fast\", but must be a number"), std::string::npos);
  EXPECT_NE(message({{"epochs", 0}}).find("epochs = 0 is outside [1, 100000]"), std::string::npos);
  EXPECT_NE(message({{"residual", "sideways"}}).find("residual = \"sideways\" is not one of"), std::string::npos);
}

TEST(TrainOptions, IdentityHashFollowsWhatChangesARun) {
  TrainConfig a;
  const auto h = options_hash(train_option_table(), a);
  TrainConfig b = a;
  b.threads = 8;
  b.device = "cuda";
  b.data_dir = "/elsewhere";
  b.checkpoint_every = 7;
  EXPECT_EQ(options_hash(train_option_table(), b), h);  // where and how fast, not what
  for (auto change : std::vector<std::function<void(TrainConfig&)>>{
           [](TrainConfig& c) { c.lr = 2e-3; }, [](TrainConfig& c) { c.seed = 1; },
           [](TrainConfig& c) { c.precision = "bf16"; }, [](TrainConfig& c) { c.sbece_weight = 0.1; },
           [](TrainConfig& c) { c.train_subset = 100; }}) {
    TrainConfig c = a;
    change(c);
    EXPECT_NE(options_hash(train_option_table(), c), h);
  }
  EXPECT_EQ(h.size(), 16u);
}

TEST(TrainOptions, AutoPrecisionResolvesByTheProcessor) {
  EXPECT_EQ(resolve_precision("auto", "cuda"), "fp32");
  EXPECT_EQ(resolve_precision("auto", "cpu"), cpu_has_native_bf16() ? "bf16" : "fp32");
  for (const char* p : {"fp32", "bf16", "fp16"}) EXPECT_EQ(resolve_precision(p, "cpu"), p);
}

}  // namespace
}  // namespace arcal
