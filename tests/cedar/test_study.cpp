// The clustered-attention study (cedar/clustered_study.hpp) on a small grid: the seed's > 98 % reduction at low
// dispersion, its failure at high dispersion, the non-increasing error flags, the variable budget,
// the generator's determinism and the config checks.
#include <gtest/gtest.h>

#include "cedar/clustered_study.hpp"
#include "test_util.hpp"

namespace {

using namespace arcal::cedar;

StudyConfig small_config() {
  StudyConfig c;
  c.heads = 1;
  c.n_keys = 1024;
  c.chunk_size = 32;
  c.n_queries = 64;
  c.dim = 32;
  c.dispersions = {0.05, 0.2, 1.6};
  c.temperatures = {1.0};
  c.query_clusters = {1, 2};
  c.budgets = {1, 4};
  c.error_targets = {0.3};
  c.seed = 2;
  return c;
}

TEST(CedarStudy, ReductionHoldsAtLowDispersionAndFailsAtHigh) {
  const StudyResult r = run_clustered_study(small_config());
  ASSERT_EQ(r.cells.size(), 3u * 2u * 2u);
  ASSERT_EQ(r.by_dispersion.size(), 3u);
  EXPECT_GT(r.by_dispersion[0].min_reduction, 0.98);
  EXPECT_TRUE(r.by_dispersion[0].holds);
  EXPECT_FALSE(r.by_dispersion[2].holds);
  EXPECT_TRUE(r.has_failure);
  double first_failing = -1;
  for (const auto& d : r.by_dispersion)
    if (!d.holds && first_failing < 0) first_failing = d.dispersion;
  EXPECT_EQ(r.first_failure.dispersion, first_failing);
  for (const auto& s : r.settings) {
    EXPECT_TRUE(s.cedar_monotone) << "dispersion " << s.dispersion << " clusters " << s.query_clusters;
    ASSERT_EQ(s.variable.size(), 1u);
    EXPECT_LE(s.variable[0].mean_expanded, 4.0);
  }
  for (const auto& c : r.cells) {
    EXPECT_LT(c.err_cedar, c.err_topk);
    EXPECT_LE(c.mean_expanded, double(c.budget));
  }
  const auto j = study_json(r);
  EXPECT_EQ(j["cells"].size(), r.cells.size());
  EXPECT_NE(study_markdown(r, "").find("| dispersion | temperature | A |"), std::string::npos);
  EXPECT_EQ(study_json(run_clustered_study(small_config()))["cells"], j["cells"]);  // deterministic
}

TEST(CedarStudy, GeneratorIsSeededAndChecked) {
  ClusteredSpec s;
  s.n_keys = 256;
  s.chunk_size = 32;
  s.n_queries = 8;
  s.dim = 4;
  const Qkv a = clustered_qkv(s), b = clustered_qkv(s);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.q, b.q);
  s.seed = 1;
  EXPECT_NE(clustered_qkv(s).k, a.k);
  using arcal::testing::input_error_message;
  s.dispersion = -1;
  EXPECT_NE(input_error_message([&] { clustered_qkv(s); }).find("dispersion is -1"), std::string::npos);
  s.dispersion = 0.1;
  s.query_clusters = 9;
  EXPECT_NE(input_error_message([&] { clustered_qkv(s); }).find("query_clusters is 9"), std::string::npos);
  StudyConfig c = small_config();
  c.temperatures = {};
  EXPECT_NE(input_error_message([&] { validate_study_config(c); }).find("at least one value"), std::string::npos);
  c = small_config();
  c.budgets = {1, 33};
  EXPECT_NE(input_error_message([&] { validate_study_config(c); }).find("budgets[1] is 33"), std::string::npos);
}

}  // namespace
