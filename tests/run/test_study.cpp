// The study file of `arcal run`: TOML round trip of the resolved configuration, expansion into runs,
// stable hashes (FNV-1a 64 against published test vectors), and the errors that name the file and key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "run/study_file.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace arcal;

namespace {

std::string write_tmp(const std::string& name, const std::string& text) {
  const auto d = fs::path(ARCAL_BINARY_DIR) / "test_tmp" / "run";
  fs::create_directories(d);
  const auto p = (d / name).string();
  std::ofstream(p) << text;
  return p;
}

std::string error_of(const std::string& toml) {
  return arcal::testing::input_error_message([&] { parse_study_toml(write_tmp("bad.toml", toml)); });
}

}  // namespace

TEST(Study, Fnv1a64MatchesPublishedVectors) {
  // Test vectors from the FNV reference (Fowler/Noll/Vo, isthe.com/chongo/tech/comp/fnv): "" and "a".
  EXPECT_EQ(stable_hash(""), "cbf29ce484222325");
  EXPECT_EQ(stable_hash("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(stable_hash("foobar"), "85944171f73967e8");
}

TEST(Study, DefaultExpandsToThreeAttnResSeedsAndTheirStandardTwins) {
  const auto runs = expand_study(default_study());
  ASSERT_EQ(runs.size(), 6u);
  std::set<std::string> ids, hashes;
  int audited = 0;
  for (const auto& r : runs) {
    ids.insert(r.id);
    hashes.insert(r.hash);
    audited += r.audited;
    EXPECT_EQ(r.hash.size(), 16u);
    EXPECT_EQ(r.audited, r.residual != "standard");
  }
  EXPECT_EQ(ids.size(), 6u);
  EXPECT_EQ(hashes.size(), 6u);
  EXPECT_EQ(audited, 3);
  EXPECT_EQ(runs[0].id, "fashion-mnist-ar-vit-tiny-full-s0");
  EXPECT_EQ(runs[5].id, "fashion-mnist-ar-vit-tiny-standard-s2");
}

TEST(Study, PrintedConfigReadsBackToTheSameStudy) {
  StudyConfig c = default_study();
  c.name = "mine";
  c.seeds = {4, 9};
  c.residuals = {"full", "block"};
  c.train.lr = 3e-4;
  c.audit.sensitivity_effects = {0.01, 0.03};
  c.audit.sensitivity_threshold_effect = 0.03;
  c.audit.null_variants = {"confidence"};
  const std::string text = study_to_toml(c);
  const auto back = parse_study_toml(write_tmp("round.toml", text));
  EXPECT_EQ(study_to_toml(back), text);
  // Numbers print in their shortest exact form, as a person would write them.
  EXPECT_NE(text.find("weight_decay = 0.05 "), std::string::npos) << text;
  EXPECT_NE(text.find("lr = 0.0003 "), std::string::npos) << text;
  EXPECT_EQ(back.seeds, c.seeds);
  EXPECT_EQ(back.train.lr, c.train.lr);
  // Same study, same run hashes; a changed training setting changes every run's hash.
  const auto a = expand_study(c), b = expand_study(back);
  ASSERT_EQ(a.size(), 2u * 3u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].hash, b[i].hash);
  c.train.epochs += 1;
  EXPECT_NE(expand_study(c)[0].hash, a[0].hash);
}

TEST(Study, PartialFileKeepsDefaultsForEverythingElse) {
  const auto c = parse_study_toml(write_tmp("partial.toml", "name = \"x\"\n[train]\nseeds = [7]\nepochs = 1\n"));
  EXPECT_EQ(c.seeds, std::vector<std::uint64_t>{7});
  EXPECT_EQ(c.train.epochs, 1);
  EXPECT_EQ(c.train.batch_size, default_study().train.batch_size);
  EXPECT_EQ(c.audit.null_replicates, default_study().audit.null_replicates);
  EXPECT_EQ(expand_study(c).size(), 2u);
}

TEST(Study, ErrorsNameTheFileAndTheKey) {
  EXPECT_NE(error_of("[train]\nepoch = 3\n").find("unknown key 'epoch' in [train]"), std::string::npos);
  EXPECT_NE(error_of("[trainer]\n").find("unknown table or key 'trainer'"), std::string::npos);
  EXPECT_NE(error_of("[train]\nepochs = \"three\"\n").find("[train] epochs must be an integer"), std::string::npos);
  EXPECT_NE(error_of("[train]\nseeds = [1, 1]\n").find("repeated seed"), std::string::npos);
  EXPECT_NE(error_of("[model]\nresiduals = [\"standard\"]\n").find("not full or block"), std::string::npos);
  EXPECT_NE(error_of("[audit]\nnull_variants = [\"logit\"]\n").find("null_variants"), std::string::npos);
  EXPECT_NE(error_of("[audit]\nsensitivity_effects = [0.02]\n").find("sensitivity_threshold_effect"),
            std::string::npos);
  EXPECT_NE(error_of("[train\n").find("not valid TOML"), std::string::npos);
  EXPECT_NE(error_of("[train]\nepochs = 0\n").find("bad.toml"), std::string::npos);
  EXPECT_THROW(parse_study_toml("/nonexistent/study.toml"), InputError);
}

// ---- hostile study files (issue 13): the raw text is checked before toml11 parses it.

TEST(StudyLimits, NestingArraysKeysAndEncodingAreCheckedBeforeParsing) {
  auto err = [](const std::string& text) {
    return arcal::testing::input_error_message([&] { check_toml_shape(text, "s.toml"); });
  };
  EXPECT_NE(err("x = " + std::string(20000, '[') + std::string(20000, ']'))
                .find("s.toml: line 1: arrays and inline tables nested more than 64 deep"),
            std::string::npos);
  std::string tables = "x = ";
  for (int i = 0; i < 100; ++i) tables += "{a=";
  EXPECT_NE(err(tables + "1" + std::string(100, '}')).find("nested more than 64 deep"), std::string::npos);
  std::string seeds = "\n[train]\nseeds = [";
  for (int i = 0; i < 10001; ++i) seeds += std::to_string(i) + ",";
  EXPECT_NE(err(seeds + "]\n").find("line 3: an array has more than 10000 elements"), std::string::npos);
  std::string dotted = "a";
  for (int i = 0; i < 20; ++i) dotted += ".a";
  EXPECT_NE(err(dotted + " = 1\n").find("more than 16 parts"), std::string::npos);
  EXPECT_NE(err("[" + dotted + "]\n").find("more than 16 parts"), std::string::npos);
  EXPECT_NE(err("name = \"a\xff\"\n").find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(err("name = \"a\x01\"\n").find("control character 1"), std::string::npos);
  EXPECT_NE(err(std::string(2 << 20, '#')).find("more than the limit of 1.0 MiB"), std::string::npos);
  // Brackets, dots and commas inside strings and comments are not structure.
  EXPECT_NO_THROW(
      check_toml_shape("name = \"[[[[a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r]]]]\" # [[[[{{{{ a.b.c\n"
                       "[data]\ndata_dir = '''[[[\n[[[[['''\n",
                       "s.toml"));
}

TEST(StudyLimits, IntegersOutsideTheirRangeAreNotNarrowed) {
  EXPECT_NE(error_of("[train]\nepochs = 4294967297\n")
                .find("[train] epochs must be an integer in [1, 100000] (got 4294967297)"),
            std::string::npos);
  EXPECT_NE(error_of("[train]\nbatch_size = 0\n").find("batch_size"), std::string::npos);
  EXPECT_NE(error_of("name = \"..\"\n").find("name must be"), std::string::npos);
  EXPECT_NE(error_of("[model]\npresets = [\"ar-vit-huge\"]\n").find("not a known preset"), std::string::npos);
}

TEST(StudyLimits, PrintedStudyWithQuotesAndNewlinesReadsBack) {
  StudyConfig c = default_study();
  c.train.data_dir = "/data/a \"b\"\\c\nd\te";
  const std::string printed = study_to_toml(c);
  const StudyConfig back = parse_study_toml_text(printed, "printed.toml");
  EXPECT_EQ(back.train.data_dir, c.train.data_dir);
  EXPECT_EQ(study_to_toml(back), printed);
}
