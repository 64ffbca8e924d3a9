// RUN/summary.json of `arcal train` (also printed by `arcal train --json`) as a plain struct with its
// one to_json/from_json ("arcal.train_summary/1", docs/schema/train_summary.schema.json).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "results/json_fields.hpp"

namespace arcal {

inline constexpr const char* kTrainSummarySchema = "arcal.train_summary/1";

struct TrainSummary {
  double test_accuracy = 0, test_nll = 0, test_ece15 = 0;
  std::int64_t test_n = 0, steps = 0, resumed_from_step = 0;
  double epochs = 0;
  double wall_seconds = 0, train_seconds = 0, images_per_second = 0;
  int threads = 1, world_size = 1;
  std::string precision = "fp32";
  double max_parameter_divergence = 0;
  std::int64_t parameters = 0;
  /// Language model (dataset gcide): test_nll is per token in nats, test_accuracy next-token top-1,
  /// test_n the test tokens; bits per byte = test_nll / ln 2 (one token per byte); images_per_second
  /// counts sequences. Both written only for a text run (bits_per_byte > 0).
  double test_bits_per_byte = 0, tokens_per_second = 0;
};

inline void to_json(nlohmann::json& j, const TrainSummary& s) {
  j = {{"schema", kTrainSummarySchema},
       {"test_accuracy", s.test_accuracy},
       {"test_nll", s.test_nll},
       {"test_ece15", s.test_ece15},
       {"test_n", s.test_n},
       {"steps", s.steps},
       {"epochs", s.epochs},
       {"resumed_from_step", s.resumed_from_step},
       {"wall_seconds", s.wall_seconds},
       {"train_seconds", s.train_seconds},
       {"images_per_second", s.images_per_second},
       {"threads", s.threads},
       {"world_size", s.world_size},
       {"precision", s.precision},
       {"max_parameter_divergence", s.max_parameter_divergence},
       {"parameters", s.parameters}};
  if (s.test_bits_per_byte > 0) {
    j["test_bits_per_byte"] = s.test_bits_per_byte;
    j["tokens_per_second"] = s.tokens_per_second;
  }
}
/// Reads every key; summaries written before the schema string was added carry none and read the same.
inline void from_json(const nlohmann::json& j, TrainSummary& s) {
  if (j.contains("schema") && j.at("schema") != kTrainSummarySchema)
    throw nlohmann::json::type_error::create(302, "schema must be " + std::string(kTrainSummarySchema),
                                             &j.at("schema"));
  results::get_number(j, "test_accuracy", s.test_accuracy);
  results::get_number(j, "test_nll", s.test_nll);
  results::get_number(j, "test_ece15", s.test_ece15);
  results::get_to(j, "test_n", s.test_n);
  results::get_to(j, "steps", s.steps);
  results::get_number(j, "epochs", s.epochs);
  results::get_to(j, "resumed_from_step", s.resumed_from_step);
  results::get_number(j, "wall_seconds", s.wall_seconds);
  results::get_number(j, "train_seconds", s.train_seconds);
  results::get_number(j, "images_per_second", s.images_per_second);
  results::get_to(j, "threads", s.threads);
  results::get_to(j, "world_size", s.world_size);
  results::get_to(j, "precision", s.precision);
  results::get_number(j, "max_parameter_divergence", s.max_parameter_divergence);
  results::get_to(j, "parameters", s.parameters);
  if (j.contains("test_bits_per_byte")) {
    results::get_number(j, "test_bits_per_byte", s.test_bits_per_byte);
    results::get_number(j, "tokens_per_second", s.tokens_per_second);
  }
}

}  // namespace arcal
