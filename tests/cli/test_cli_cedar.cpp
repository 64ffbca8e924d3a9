// `arcal cedar` and `arcal cedar-study` end to end: the npz round trip (the CLI's output equals the
// library's, shapes and dtypes as in docs/interface.md), --json is one document with the schema's keys,
// the bad-input table (exit 2, one stderr line naming file, array, index and constraint, no output
// file), the clustered study on a tiny grid, and the trained-model study on a tiny synthetic run.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cedar/cedar.hpp"
#include "cedar/clustered_study.hpp"
#include "io/npz.hpp"
#include "test_util.hpp"
#include "train/synthetic_cifar.hpp"

namespace fs = std::filesystem;
using arcal::NpyArray;
using namespace arcal::cedar;

namespace {

const std::string kArcal = std::string(ARCAL_BINARY_DIR) + "/arcal";

arcal::testing::CmdResult run(const std::string& cmd, const std::string& dir, const std::string& tag = "cmd") {
  return arcal::testing::run_command(cmd, dir, tag);
}

Qkv small_qkv(std::int64_t heads) {
  ClusteredSpec s;
  s.heads = heads;
  s.n_keys = 200;
  s.chunk_size = 20;
  s.n_queries = 30;
  s.dim = 8;
  s.dispersion = 0.3;
  s.query_clusters = 2;
  s.seed = 4;
  return clustered_qkv(s);
}

std::map<std::string, NpyArray> read(const std::string& path) {
  std::map<std::string, NpyArray> m;
  for (auto& a : arcal::read_npz(path)) m.emplace(a.name, std::move(a));
  return m;
}

}  // namespace

TEST(CliCedar, RoundTripMatchesTheLibraryAndJsonHasTheSchemaKeys) {
  const auto dir = arcal::testing::fresh_dir("cli/cedar_roundtrip");
  const Qkv x = small_qkv(2);
  arcal::write_npz(dir + "/in.npz",
                   {NpyArray::from_float("q", x.q, {2, 30, 8}), NpyArray::from_float("k", x.k, {2, 200, 8}),
                    NpyArray::from_float("v", x.v, {2, 200, 8})},
                   true);
  const auto r =
      run(kArcal + " cedar --qkv " + dir + "/in.npz --method cedar --chunk-size 20 --budget 3 --causal --out " + dir +
              "/out.npz --vs-dense --json",
          dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // exactly one document
  for (const char* key : {"schema", "method", "n_queries", "n_keys", "chunk_size", "budget", "mean_expanded",
                          "kernel_seconds", "relative_error_vs_dense"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["schema"], "arcal.cedar/1");
  EXPECT_EQ(j["n_queries"], 30);
  EXPECT_EQ(j["n_keys"], 200);
  EXPECT_EQ(j["chunk_size"], 20);
  EXPECT_EQ(j["budget"], 3);
  EXPECT_EQ(j["causal"], true);
  auto out = read(dir + "/out.npz");
  ASSERT_EQ(out.at("out").shape, (std::vector<std::size_t>{2, 30, 8}));
  EXPECT_EQ(out.at("out").dtype, arcal::DType::f4);
  ASSERT_EQ(out.at("expanded").shape, (std::vector<std::size_t>{2, 30}));
  EXPECT_EQ(out.at("expanded").dtype, arcal::DType::i4);
  // The library on the same data (results do not depend on the thread count).
  Options o;
  o.method = Method::cedar;
  o.budget = 3;
  o.causal = true;
  std::vector<float> lib(x.q.size());
  std::vector<std::int32_t> exp(60);
  const Stats st =
      attention(x.q.data(), x.k.data(), x.v.data(), x.shape, fixed_chunks(200, 20), o, lib.data(), exp.data());
  EXPECT_EQ(out.at("out").as_float(), lib);
  const auto e = out.at("expanded").as_int64();
  for (std::size_t i = 0; i < exp.size(); ++i) EXPECT_EQ(e[i], exp[i]);
  EXPECT_DOUBLE_EQ(j["mean_expanded"].get<double>(), st.mean_expanded);
}

TEST(CliCedar, TwoDimensionalInputWithChunkStarts) {
  const auto dir = arcal::testing::fresh_dir("cli/cedar_2d");
  const Qkv x = small_qkv(1);
  arcal::write_npz(
      dir + "/in.npz",
      {NpyArray::from_float("q", x.q, {30, 8}), NpyArray::from_float("k", x.k, {200, 8}),
       NpyArray::from_float("v", x.v, {200, 8}), NpyArray::from_int64("chunk_starts", {0, 1, 40, 41, 120}, {5})},
      false);
  const auto r =
      run(kArcal + " cedar --qkv " + dir + "/in.npz --method topk --budget 2 --out " + dir + "/out.npz --json", dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["chunk_size"].is_null());
  EXPECT_EQ(j["chunks"], 5);
  EXPECT_EQ(read(dir + "/out.npz").at("out").shape, (std::vector<std::size_t>{1, 30, 8}));
}

TEST(CliCedar, BadInputsExitTwoWithNamedMessages) {
  const auto dir = arcal::testing::fresh_dir("cli/cedar_bad");
  const Qkv x = small_qkv(2);
  auto q = NpyArray::from_float("q", x.q, {2, 30, 8});
  auto k = NpyArray::from_float("k", x.k, {2, 200, 8});
  auto v = NpyArray::from_float("v", x.v, {2, 200, 8});
  std::vector<float> nan_k = x.k;
  nan_k[(1 * 200 + 17) * 8 + 3] = std::nanf("");
  std::vector<float> short_v(x.v.begin(), x.v.begin() + 2 * 199 * 8);
  struct Case {
    std::string name;
    std::vector<NpyArray> arrays;
    std::string flags, expect;
  };
  const std::vector<Case> cases = {
      {"nan", {q, NpyArray::from_float("k", nan_k, {2, 200, 8}), v}, "", "k[1, 17, 3] is nan, but must be finite"},
      {"missing", {q, k}, "", "array 'v' is missing"},
      {"dtype",
       {NpyArray::from_int64("q", std::vector<std::int64_t>(480, 1), {2, 30, 8}), k, v},
       "",
       "dtype <i8, but must be float32"},
      {"ndim", {NpyArray::from_float("q", x.q, {480}), k, v}, "", "must be [H, Nq, d] or [Nq, d]"},
      {"kv", {q, k, NpyArray::from_float("v", short_v, {2, 199, 8})}, "", "they must match"},
      {"width",
       {NpyArray::from_float("q", std::vector<float>(2 * 30 * 4, 0.f), {2, 30, 4}), k, v},
       "",
       "head width d = 4"},
      {"starts", {q, k, v, NpyArray::from_int64("chunk_starts", {0, 50, 40}, {3})}, "", "chunk_starts[2] is 40"},
      {"starts_range",
       {q, k, v, NpyArray::from_int64("chunk_starts", {0, 250}, {2})},
       "",
       "less than the number of keys N = 200"},
      {"starts_and_size",
       {q, k, v, NpyArray::from_int64("chunk_starts", {0, 50}, {2})},
       "--chunk-size 10",
       "give either"},
      {"method", {q, k, v}, "--method sparse", "'sparse' is not one of"},
      {"topk0", {q, k, v}, "--method topk --budget 0", "keeps no key"},
      {"target", {q, k, v}, "--method topk --error-target 0.1", "method cedar only"},
      {"causal",
       {k, NpyArray::from_float("k", std::vector<float>(2 * 20 * 8, 0.f), {2, 20, 8}),
        NpyArray::from_float("v", std::vector<float>(2 * 20 * 8, 0.f), {2, 20, 8})},
       "--causal",
       "must be <= N = 20"},
  };
  for (const Case& c : cases) {
    std::vector<NpyArray> arrays = c.arrays;
    if (c.name == "causal") arrays[0] = NpyArray::from_float("q", std::vector<float>(2 * 30 * 8, 0.f), {2, 30, 8});
    const std::string in = dir + "/" + c.name + ".npz", out = dir + "/" + c.name + "_out.npz";
    arcal::write_npz(in, arrays, false);
    const auto r = run(kArcal + " cedar --qkv " + in + " --out " + out + " " + c.flags, dir, c.name);
    EXPECT_EQ(r.code, 2) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.name << ": " << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.name;
  }
  // The output may not overwrite the input.
  arcal::write_npz(dir + "/same.npz", {q, k, v}, false);
  const auto r = run(kArcal + " cedar --qkv " + dir + "/same.npz --out " + dir + "/same.npz", dir, "same");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is the input"), std::string::npos) << r.err;
  // An existing output is replaced only with --force (then atomically).
  arcal::write_npz(dir + "/taken.npz", {NpyArray::from_float("x", {1.f}, {1})}, false);
  const auto taken = run(kArcal + " cedar --qkv " + dir + "/same.npz --out " + dir + "/taken.npz", dir, "taken");
  EXPECT_EQ(taken.code, 2);
  EXPECT_NE(taken.err.find("pass --force"), std::string::npos) << taken.err;
  EXPECT_EQ(read(dir + "/taken.npz").count("out"), 0u);
  const auto forced =
      run(kArcal + " cedar --qkv " + dir + "/same.npz --out " + dir + "/taken.npz --force", dir, "forced");
  EXPECT_EQ(forced.code, 0) << forced.err;
  EXPECT_EQ(read(dir + "/taken.npz").count("out"), 1u);
  // Numeric flags are range-checked before the file is read (NaN included).
  for (const std::string flags : {"--chunk-size 0", "--budget -1", "--error-target nan", "--threads -2"}) {
    const auto bad = run(kArcal + " cedar --qkv " + dir + "/same.npz --out " + dir + "/flag.npz " + flags, dir, "flag");
    EXPECT_EQ(bad.code, 2) << flags;
    EXPECT_FALSE(fs::exists(dir + "/flag.npz")) << flags;
  }
}

TEST(CliCedarStudy, TinyGridWritesResultsCsvFigureAndMarkdown) {
  const auto dir = arcal::testing::fresh_dir("cli/cedar_study");
  const auto r = run(kArcal + " cedar-study --out " + dir +
                         "/s --keys 512 --queries 32 --dim 16 --heads 1 --chunk-size 32"
                         " --dispersions 0.05,1.6 --temperatures 1 --query-clusters 2 --budgets 1,2"
                         " --error-targets 0.5 --json",
                     dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "arcal.cedar_study/1");
  const auto& c = j["clustered"];
  ASSERT_EQ(c["cells"].size(), 4u);
  ASSERT_EQ(c["by_dispersion"].size(), 2u);
  EXPECT_GT(c["by_dispersion"][0]["min_reduction"].get<double>(), 0.98);  // low dispersion: the seed's claim
  EXPECT_TRUE(c["by_dispersion"][0]["holds"].get<bool>());
  EXPECT_FALSE(c["by_dispersion"][1]["holds"].get<bool>());  // dispersion 1.6: chunks are no longer clusters
  EXPECT_EQ(c["holds_up_to_dispersion"], 0.05);
  EXPECT_EQ(c["first_failure"]["dispersion"], 1.6);
  EXPECT_EQ(nlohmann::json::parse(arcal::testing::slurp(dir + "/s/results.json")), j);
  for (const char* f :
       {"cedar_study.csv", "cedar_study.md", "figures/cedar_error_vs_budget.svg", "figures/cedar_error_vs_budget.png",
        "figures/cedar_error_vs_budget.gp", "figures/cedar_error_vs_budget.dat"})
    EXPECT_TRUE(fs::exists(dir + "/s/" + f)) << f;
  const std::string csv = arcal::testing::slurp(dir + "/s/cedar_study.csv");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);  // header + 4 cells
  EXPECT_NE(arcal::testing::slurp(dir + "/s/cedar_study.md").find("It first fails at dispersion 1.6"),
            std::string::npos);
  // Invalid grids are refused before anything runs.
  const auto bad =
      run(kArcal + " cedar-study --out " + dir + "/b --keys 512 --chunk-size 32 --budgets 17,2", dir, "bad");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("budgets[0] is 17"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir + "/b"));
  // An earlier study's results are replaced only with --force.
  const auto again =
      run(kArcal + " cedar-study --out " + dir + "/s --keys 64 --chunk-size 32 --query-clusters 1 --budgets 1", dir,
          "again");
  EXPECT_EQ(again.code, 2);
  EXPECT_NE(again.err.find("pass --force"), std::string::npos) << again.err;
  EXPECT_EQ(nlohmann::json::parse(arcal::testing::slurp(dir + "/s/results.json")), j);
}

TEST(CliCedarStudy, TrainedModelStudyOnATinySyntheticRun) {
  // A ViT with patch 4 on synthetic 32x32 CIFAR-shaped images: 65 tokens, CLS + 8 rows of 8 patches.
  const auto dir = arcal::testing::fresh_dir("cli/cedar_model");
  arcal::testing::write_synthetic_cifar10(dir + "/data", 40, 3);
  auto r = run(kArcal + " train --dataset cifar10 --data-dir " + dir +
                   "/data --model ar-vit-tiny --residual standard"
                   " --patch 4 --train-subset 128 --epochs 1 --max-steps 2 --batch-size 64 --seed 1 --quiet --out " +
                   dir + "/run",
               dir, "train");
  ASSERT_EQ(r.code, 0) << r.err;
  r = run(kArcal + " cedar-study --out " + dir +
              "/s --keys 256 --queries 16 --dim 8 --heads 1 --chunk-size 32"
              " --dispersions 0.1 --temperatures 1 --query-clusters 1 --budgets 1 --error-targets 0.5 --no-figure"
              " --run " +
              dir + "/run --model-budgets 1,3 --model-subset 40 --bootstrap 20 --json",
          dir, "study");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto m = nlohmann::json::parse(r.out)["model"];
  EXPECT_EQ(m["tokens"], 65);
  EXPECT_EQ(m["chunks"], 9);
  EXPECT_EQ(m["n"], 40);
  EXPECT_LT(m["dense_backend_vs_libtorch_max_abs_logit"].get<double>(), 1e-4);
  ASSERT_EQ(m["arms"].size(), 6u);  // dense, summary, topk/cedar at B = 1 and 3
  EXPECT_EQ(m["arms"][0]["method"], "dense");
  EXPECT_EQ(m["arms"][0]["delta_vs_dense"]["nll"]["value"], 0.0);
  EXPECT_EQ(m["arms"][0]["agreement_with_dense"], 1.0);
  for (const auto& a : m["arms"]) {
    EXPECT_TRUE(a.contains("ece_after_dense_temperature"));
    if (a["method"] == "topk" || a["method"] == "cedar") {
      EXPECT_LE(a["mean_expanded"].get<double>(), a["budget"].get<double>());
    }
  }
  EXPECT_TRUE(fs::exists(dir + "/s/cedar_model.csv"));
  EXPECT_NE(arcal::testing::slurp(dir + "/s/cedar_study.md").find("## CEDAR inside a trained model"),
            std::string::npos);
}
