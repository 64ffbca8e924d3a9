// The language model through the trainer and the tracer (issue 27): the text split (byte sequences of
// dict-gcide, split by document), a short ar-lm-tiny training whose summary carries bits per byte,
// an interrupted-and-resumed run that equals the uninterrupted one, and the per-token trace (one row
// per next-token prediction, labels the next byte, cluster the sequence, routing rows summing to 1)
// read back by numpy. Skips itself without Debian's dict-gcide.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/atomic_file.hpp"
#include "data/tensor_data.hpp"
#include "io/text_corpus.hpp"
#include "model/trace_export.hpp"
#include "train/trainer.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {

bool have_gcide() { return fs::exists(kGcideDict) && fs::exists(kGcideIndex); }

TrainConfig tiny_lm(std::int64_t steps) {
  TrainConfig c;
  c.dataset = "gcide";
  c.model = "ar-lm-tiny";
  c.residual = "block";
  c.block_size = 2;
  c.context = 32;
  c.train_subset = 256;
  c.val_fraction = 0.002;
  c.batch_size = 8;
  c.max_steps = steps;
  c.epochs = 1;
  c.sbece_weight = 0;
  c.checkpoint_every = 3;
  c.seed = 4;
  return c;
}

}  // namespace

TEST(LmData, TextSplitsAreByteSequencesOfDisjointDocuments) {
  if (!have_gcide()) GTEST_SKIP() << "no dict-gcide";
  const DatasetSplits d = load_text_dataset("", 0.01, 0, 3, 64);
  for (const TensorData* s : {&d.train, &d.val, &d.test}) {
    EXPECT_TRUE(s->text);
    EXPECT_EQ(s->classes, 256);
    EXPECT_EQ(s->images.scalar_type(), torch::kUInt8);
    EXPECT_EQ(s->images.size(1), 65);
  }
  // Documents of test and validation never reach training (sequences start in their own split's documents).
  std::set<std::int64_t> train_docs;
  for (std::int64_t i = 0; i < d.train.size(); ++i) train_docs.insert(d.train.labels[i].item<std::int64_t>());
  for (std::int64_t i = 0; i < d.test.size(); ++i)
    EXPECT_EQ(train_docs.count(d.test.labels[i].item<std::int64_t>()), 0u);
  // The test split holds about 1 % of the corpus' documents: 1,262 of 126,240 at ~300 bytes each.
  EXPECT_GT(d.test.size(), 2000);
  EXPECT_LT(d.test.size(), 12000);
  auto x = lm_inputs(d.test.images.narrow(0, 0, 2)), y = lm_targets(d.test.images.narrow(0, 0, 2));
  EXPECT_TRUE(x.narrow(1, 1, 63).equal(y.narrow(1, 0, 63)));  // targets are the inputs shifted by one
  EXPECT_THROW(load_text_dataset("", 0.3, 0, 3, 64), InputError);
  EXPECT_THROW(load_text_dataset("/nonexistent", 0.01, 0, 3, 64), InputError);
}

TEST(LmTrain, ShortRunReportsBitsPerByteAndResumesExactly) {
  if (!have_gcide()) GTEST_SKIP() << "no dict-gcide";
  const auto dir = fs::path(ARCAL_BINARY_DIR) / "test_tmp" / "lm_train";
  fs::remove_all(dir);
  const std::string whole = (dir / "whole").string(), split = (dir / "split").string();
  const auto summary = train_run(tiny_lm(6), whole, false);
  const double bpb = summary.at("test_bits_per_byte").get<double>();
  EXPECT_NEAR(bpb, summary.at("test_nll").get<double>() / std::log(2.0), 1e-12);
  EXPECT_GT(bpb, 1.0);
  EXPECT_LT(bpb, 8.5);  // uniform over 256 bytes is 8 bits; six steps from a small init stay near it
  EXPECT_GT(summary.at("tokens_per_second").get<double>(), 0.0);
  EXPECT_GT(summary.at("test_n").get<std::int64_t>(), 10000);  // tokens, not sequences
  // The same run stopped after step 4 (its checkpoint holds step 3) and resumed gives the same model.
  TrainEvents stop;
  stop.on_step = [](std::int64_t step, std::int64_t, int, double, double, double) {
    if (step == 4) throw std::runtime_error("stopped at step 4");
  };
  EXPECT_THROW(train_run(tiny_lm(6), split, false, stop), std::runtime_error);
  ASSERT_TRUE(fs::exists(split + "/checkpoint.pt"));
  EXPECT_FALSE(fs::exists(split + "/summary.json"));
  const auto resumed = train_run(tiny_lm(6), split, true);
  EXPECT_DOUBLE_EQ(resumed.at("test_nll").get<double>(), summary.at("test_nll").get<double>());
  // The log's validation record carries bits per byte.
  std::ifstream log(whole + "/log.jsonl");
  std::string line, last;
  while (std::getline(log, line))
    if (!line.empty()) last = line;
  const auto rec = nlohmann::json::parse(last);
  EXPECT_NEAR(rec.at("val_bits_per_byte").get<double>(), rec.at("val_nll").get<double>() / std::log(2.0), 1e-12);

  // The token trace: rows s * T + t, labels the next byte, cluster s, routing of the token itself.
  TrainConfig tc;
  auto model = load_trained_model(whole, &tc);
  const DatasetSplits data =
      load_dataset(tc.dataset, tc.data_dir, tc.val_fraction, tc.train_subset, tc.seed, tc.context);
  const TensorData few = select_sequences(data.test, 5);
  ASSERT_EQ(few.size(), 5);
  EXPECT_TRUE(few.images[1].equal(data.test.images[data.test.size() / 5]));  // evenly spaced
  const Trace t = export_trace(model, few, "{}", 64);
  ASSERT_EQ(t.n, 5u * 32u);
  ASSERT_EQ(t.classes, 256u);
  ASSERT_EQ(t.cluster.size(), t.n);
  const auto targets = lm_targets(few.images);
  for (std::size_t i = 0; i < t.n; ++i) {
    EXPECT_EQ(t.cluster[i], static_cast<std::int64_t>(i / 32));
    EXPECT_EQ(t.labels[i], targets[static_cast<long>(i / 32)][static_cast<long>(i % 32)].item<std::int64_t>());
  }
  // The trace's logits are the model's, token for token.
  torch::NoGradGuard ng;
  const auto logits = model->forward(lm_inputs(few.images)).to(torch::kDouble);
  for (std::size_t i : {std::size_t{0}, std::size_t{37}, t.n - 1})
    for (long k : {0L, 101L, 255L})
      EXPECT_NEAR(t.logits[i * 256 + static_cast<std::size_t>(k)],
                  logits[static_cast<long>(i / 32)][static_cast<long>(i % 32)][k].item<double>(), 1e-5);
  // Per-token routing (Block AttnRes, S = 2: the points read 1..3 sources), each row a distribution.
  ASSERT_GT(t.points, 0u);
  for (std::size_t i = 0; i < t.n; ++i)
    for (std::size_t p = 0; p < t.points; ++p) {
      double sum = 0;
      for (int s = 0; s < t.routing_sources[p]; ++s) sum += t.routing[(i * t.points + p) * t.sources + std::size_t(s)];
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
}

TEST(LmTrain, TraceCliWritesATokenTraceThatNumpyReads) {
  if (!have_gcide()) GTEST_SKIP() << "no dict-gcide";
  const std::string bin = std::string(ARCAL_BINARY_DIR) + "/arcal";
  const auto dir = fs::path(ARCAL_BINARY_DIR) / "test_tmp" / "lm_trace_cli";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string run = (dir / "run").string(), npz = (dir / "test.npz").string();
  ASSERT_EQ(std::system((bin +
                         " train --dataset gcide --model ar-lm-tiny --residual full --context 32 --train-subset 128"
                         " --batch-size 8 --max-steps 2 --val-fraction 0.002 --quiet --out " +
                         run + " > /dev/null")
                            .c_str()),
            0);
  ASSERT_EQ(
      std::system((bin + " trace --quiet --run " + run + " --sequences 24 --out " + npz + " > /dev/null").c_str()), 0);
  const std::string py =
      std::string(ARCAL_TEST_PYTHON) +
      " -c \"\nimport json, numpy as np\n"
      "d = np.load('" +
      npz +
      "')\n"
      "assert d['logits'].shape == (24 * 32, 256), d['logits'].shape\n"
      "assert d['cluster'].dtype == np.int64 and (d['cluster'] == np.repeat(np.arange(24), 32)).all()\n"
      "assert d['routing'].shape[0] == 24 * 32 and 'routing_cls' not in d\n"
      "m = json.loads(str(d['meta']))\n"
      "assert m['task'] == 'lm' and m['cluster'] == 'sequence' and m['sequences'] == 24, m\n\"";
  EXPECT_EQ(std::system(py.c_str()), 0);
  // A language-model run audits with the clustered diagnostic (and no exact null).
  const std::string audit = (dir / "audit").string();
  EXPECT_EQ(std::system(
                (bin + " audit --quiet --permutations 99 --no-probes --out " + audit + " " + npz + " > /dev/null 2>&1")
                    .c_str()),
            0);
  const auto res = nlohmann::json::parse(read_file(audit + "/results.json"));
  EXPECT_EQ(res.at("verdict").at("dependence").at("variant"), "clustered");
}
