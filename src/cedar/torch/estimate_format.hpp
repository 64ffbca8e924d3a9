// How the CEDAR trained-model studies (vit_study.hpp, lm_prefill_study.hpp) write an Estimate: as
// "value [low, high]" in their markdown tables and as {"value", "ci": [low, high]} in their JSON.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>

#include "calib/metrics.hpp"

namespace arcal::cedar {

inline std::string estimate_text(const Estimate& e, int digits = 4) {
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", e.value, digits, e.ci.low, digits, e.ci.high, digits);
}

inline nlohmann::json estimate_json(const Estimate& e) { return {{"value", e.value}, {"ci", {e.ci.low, e.ci.high}}}; }

}  // namespace arcal::cedar
