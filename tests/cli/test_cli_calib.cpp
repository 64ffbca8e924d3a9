// `arcal metrics` and `arcal calibrate` end to end, with numpy as the other client: files written by
// numpy (tests/reference/cli_reference.py), metric values checked against NumPy's computation of the
// same definitions, calibrate's G.npz loaded back by numpy, and the bad-input table (exit code 2, one
// line on stderr naming the file and the array/index, no output file).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/atomic_file.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kArcal = std::string(ARCAL_BINARY_DIR) + "/arcal";
const std::string kRef = std::string(ARCAL_TEST_PYTHON) + " " + ARCAL_SOURCE_DIR + "/tests/reference/cli_reference.py ";

std::string tmpdir(const std::string& name) { return arcal::testing::fresh_dir("cli/" + name); }

arcal::testing::CmdResult run(const std::string& cmd, const std::string& dir, const std::string& tag = "cmd") {
  return arcal::testing::run_command(cmd, dir, tag);
}

nlohmann::json python_json(const std::string& args, const std::string& dir) {
  const auto r = run(kRef + args, dir);
  EXPECT_EQ(r.code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

}  // namespace

TEST(CliMetrics, JsonKeysAndValuesMatchNumpy) {
  const auto dir = tmpdir("metrics");
  const std::string f = dir + "/t.npz";
  ASSERT_EQ(run(kRef + "make " + f + " 3000 5 4 1.7", dir).code, 0);
  const auto r = run(kArcal + " metrics " + f + " --json --bootstrap 50 --seed 3", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"n", "classes", "bins", "accuracy", "ece", "mce", "rmsce", "ada_ece", "classwise_ece",
                          "debiased_ece", "smece", "smece_sigma", "nll", "brier", "auroc", "ci"})
    EXPECT_TRUE(j.contains(key)) << "missing key " << key;
  EXPECT_EQ(j["n"], 3000);
  EXPECT_EQ(j["classes"], 5);
  EXPECT_EQ(j["bins"], 15);
  const auto want = python_json("metrics " + f + " 15", dir);
  for (const auto& [name, v] : want.items()) {
    // 1e-9 relative: both sides compute in double from the same float32 logits; only summation
    // order and the last ulp of the softmax differ.
    const double got = j[name].get<double>(), ref = v.get<double>();
    EXPECT_NEAR(got, ref, 1e-9 * std::max(std::fabs(ref), 1e-12)) << name;
    const auto& ci = j["ci"][name];
    if (name == "mce" || name == "smece_sigma") {  // no interval (method.md §4; smECE has relplot's)
      EXPECT_TRUE(ci.is_null()) << name;
      continue;
    }
    ASSERT_TRUE(ci.is_array()) << name;
    EXPECT_LE(ci[0].get<double>(), ci[1].get<double>()) << name;
  }
  EXPECT_GT(j["ece"].get<double>(), 0.05);  // TEMP = 1.7: clearly overconfident
}

TEST(CliCalibrate, EveryMethodWritesNumpyReadableLowerEceFile) {
  const auto dir = tmpdir("calibrate");
  const std::string f = dir + "/t.npz";
  ASSERT_EQ(run(kRef + "make " + f + " 4000 4 9 2.0", dir).code, 0);
  const auto before = python_json("metrics " + f + " 15", dir);
  const double ece0 = before["ece"].get<double>();
  ASSERT_GT(ece0, 0.1);
  for (const char* m : {"temperature", "platt", "isotonic", "histogram", "nw", "qats", "vector", "matrix"}) {
    SCOPED_TRACE(m);
    const std::string g = dir + "/g_" + m + ".npz";
    const auto r = run(kArcal + " calibrate " + f + " --method " + m + " --out " + g, dir);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = python_json("inspect " + g, dir);
    EXPECT_EQ(j["method"], m);
    EXPECT_EQ(j["arrays"]["probs"]["dtype"], "float64");
    EXPECT_EQ(j["arrays"]["labels"]["dtype"], "int64");
    const auto shape = j["arrays"]["probs"]["shape"];
    EXPECT_EQ(shape[1], 4);
    EXPECT_EQ(j["arrays"]["labels"]["shape"][0], shape[0]);
    EXPECT_NEAR(shape[0].get<double>(), 2000, 4);  // the evaluation half of a class-stratified split
    EXPECT_TRUE(j["arrays"].contains("meta"));
    EXPECT_GE(j["min"].get<double>(), 0.0);
    EXPECT_LE(j["max"].get<double>(), 1.0);
    EXPECT_LT(j["rowsum_err"].get<double>(), 1e-9);
    // Miscalibrated by a factor-2 temperature with ECE > 0.1; any of these calibrators fitted on 2000
    // examples should at least halve it on the other 2000.
    EXPECT_LT(j["ece"].get<double>(), 0.5 * ece0);
  }
}

TEST(CliCalib, BadInputsExitTwoWithOneLineNamingFileAndIndex) {
  const auto dir = tmpdir("bad");
  const std::string good = dir + "/good.npz", trunc = dir + "/trunc.npz", nan = dir + "/nan.npz",
                    range = dir + "/range.npz", missing = dir + "/missing.npz";
  ASSERT_EQ(run(kRef + "make " + good + " 200 3 1 1.0", dir).code, 0);
  {
    const std::string bytes = arcal::read_file(good);
    std::ofstream(trunc, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  ASSERT_EQ(run(kRef + "bad " + nan + " nan_logits", dir).code, 0);
  ASSERT_EQ(run(kRef + "bad " + range + " label_range", dir).code, 0);
  struct Case {
    std::string file;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {trunc, {trunc}}, {nan, {nan, "logits[3, 1]", "nan"}}, {range, {range, "labels[5]", "4"}}, {missing, {missing}}};
  for (const auto& c : cases) {
    for (const std::string sub : {"metrics", "calibrate"}) {
      SCOPED_TRACE(sub + " " + c.file);
      const std::string out = dir + "/out.npz";
      fs::remove(out);
      const std::string cmd =
          kArcal + " " + sub + " " + c.file + (sub == "metrics" ? " --json" : " --method temperature --out " + out);
      const auto r = run(cmd, dir);
      EXPECT_EQ(r.code, 2);
      EXPECT_EQ(lines(r.err), 1) << r.err;
      for (const auto& s : c.mentions) EXPECT_NE(r.err.find(s), std::string::npos) << "'" << s << "' not in: " << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_FALSE(fs::exists(out));
    }
  }
}
