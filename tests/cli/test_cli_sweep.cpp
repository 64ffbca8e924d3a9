// arcal sweep on a study of every preset: --list numbers the runs with their arcal train command
// lines, --dry-run sizes them (the published-architecture parameter counts for the standard runs),
// --index trains exactly one run into arcal run's layout and a second call skips it, and bad input
// (an index past the grid, an unknown preset in the study) exits 2 naming the flag or key.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../train/synthetic_cifar.hpp"
#include "core/atomic_file.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kArcal = std::string(ARCAL_BINARY_DIR) + "/arcal";

struct Result {
  int code;
  std::string out, err;
};

Result sh(const std::string& cmd) {
  const std::string base = std::string(ARCAL_BINARY_DIR) + "/test_tmp/sweep_" + std::to_string(::getpid());
  const int status = std::system(("(" + cmd + ") > " + base + ".out 2> " + base + ".err").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, arcal::read_file(base + ".out"),
          arcal::read_file(base + ".err")};
}

}  // namespace

TEST(Sweep, ListsSizesAndTrainsOneRunOfAStudy) {
  const auto root = fs::path(ARCAL_BINARY_DIR) / "test_tmp" / ("sweep_" + std::to_string(::getpid()));
  fs::remove_all(root);
  arcal::testing::write_synthetic_cifar10((root / "data").string(), 20, 3);
  const auto toml = (root / "study.toml").string();
  std::ofstream(toml)
      << "name = \"scale\"\n[data]\ndatasets = [\"cifar10\"]\ndata_dir = \"" << (root / "data").string()
      << "\"\n[model]\npresets = [\"ar-vit-tiny\", \"ar-deit-small\", \"ar-swin-tiny\"]\n"
         "residuals = [\"block\"]\nblock_size = 4\n[train]\nseeds = [0]\nepochs = 1\ntrain_subset = 32\n"
         "max_steps = 2\nbatch_size = 8\n";
  const std::string base = kArcal + " sweep --config " + toml + " --out " + (root / "out").string();

  auto r = sh(base + " --dry-run --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto doc = nlohmann::json::parse(r.out);  // exactly one document on stdout
  EXPECT_EQ(doc["schema"], "arcal.sweep/1");
  EXPECT_EQ(doc["total_runs"], 6);
  auto rows = doc["runs"];
  ASSERT_EQ(rows.size(), 6u);  // 3 presets x (block + standard twin) x 1 seed
  EXPECT_EQ(rows[0]["id"], "cifar10-ar-vit-tiny-block-s0");
  EXPECT_EQ(rows[3]["id"], "cifar10-ar-deit-small-standard-s0");
  EXPECT_EQ(rows[3]["parameters"], 21342346);  // DeiT-S at 32x32 / 10 classes
  EXPECT_EQ(rows[5]["parameters"], 27505108);  // Swin-T at 32x32 / 10 classes
  EXPECT_EQ(rows[4]["routing_points"], 28);
  for (const auto& row : rows) EXPECT_EQ(row["status"], "to train");

  r = sh(base + " --list");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("arcal train --dataset cifar10 --model ar-swin-tiny --residual standard"), std::string::npos)
      << r.out;

  r = sh(base + " --index 1 --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  rows = nlohmann::json::parse(sh(base + " --list --json").out)["runs"];
  const std::string dir = rows[1]["dir"];
  EXPECT_TRUE(fs::exists(dir + "/summary.json")) << dir;
  EXPECT_EQ(rows[1]["status"], "trained");
  EXPECT_EQ(rows[0]["status"], "to train");  // only the chosen index ran
  r = sh(base + " --index 1 --threads 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("trained (skipped)"), std::string::npos) << r.err;  // progress lines: stderr

  r = sh(base + " --index 6");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--index: 6 is outside [0, 6)"), std::string::npos) << r.err;
  r = sh(base + " --precision fp8 --list");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--precision: 'fp8'"), std::string::npos) << r.err;
  std::ofstream((root / "bad.toml").string()) << "[model]\npresets = [\"ar-vit-huge\"]\n";
  r = sh(kArcal + " sweep --config " + (root / "bad.toml").string() + " --list");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("ar-vit-huge"), std::string::npos) << r.err;
  fs::remove_all(root);
}
