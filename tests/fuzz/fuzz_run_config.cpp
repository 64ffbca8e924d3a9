// libFuzzer target: a run's config.json (JSON limits, typed train and model sections, ranges, the
// model configuration's own checks), as `arcal trace`, `intervene` and `train --resume` read it; a
// config that loads must serialise and load again to the same configuration hash.
#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "train/train_config.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return arcal::fuzz::expect_input_error_only([&] {
    const arcal::RunConfig rc = arcal::parse_run_config_text(text, "config.json");
    const nlohmann::json again = {{"train", rc.train}, {"model", rc.model}};
    const arcal::RunConfig back = arcal::parse_run_config_text(again.dump(), "again.json");
    ARCAL_ASSERT(arcal::model_config_hash(back.model) == arcal::model_config_hash(rc.model), "model config round trip");
    rc.model.routing_points();
    rc.model.sources_per_point();
  });
}
