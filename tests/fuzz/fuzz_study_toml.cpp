// libFuzzer target: the study file of `arcal run` (raw-text limits, toml11, typed keys, ranges),
// then the resolved study printed as TOML must read back to the same study (what --print-config
// promises) and expand into runs.
#include "fuzz_common.hpp"
#include "run/study_file.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  arcal::StudyConfig study;
  bool ok = false;
  arcal::fuzz::expect_input_error_only([&] {
    study = arcal::parse_study_toml_text(text, "fuzz.toml");
    ok = true;
  });
  if (!ok) return 0;
  const std::string printed = arcal::study_to_toml(study);
  arcal::StudyConfig again;
  try {
    again = arcal::parse_study_toml_text(printed, "printed.toml");
  } catch (const arcal::InputError& e) {
    ARCAL_ASSERT(false, (std::string("the printed study does not parse: ") + e.what()).c_str());
  }
  ARCAL_ASSERT(arcal::study_to_toml(again) == printed, "the printed study reads back to itself");
  arcal::expand_study(study);
  arcal::study_audit_hash(study);
  return 0;
}
