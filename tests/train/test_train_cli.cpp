// arcal train end to end on small Fashion-MNIST subsets: exact resume after SIGKILL mid-epoch
// (weights identical to an uninterrupted run), and the bad-input table (missing or corrupt data,
// unknown preset or dataset, inconsistent block size): non-zero exit, a one-line error naming the
// file or flag, and no RUN/ file that looks complete.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/atomic_file.hpp"
#include "io/trace.hpp"
#include "train/trainer.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {

const std::string kArcal = std::string(ARCAL_BINARY_DIR) + "/arcal";

std::string tmpdir(const std::string& name) {
  auto d = fs::path(ARCAL_BINARY_DIR) / "test_tmp" / name;
  fs::remove_all(d);
  fs::create_directories(d.parent_path());
  return d.string();
}

struct CmdResult {
  int code;
  std::string err;
};

CmdResult run(const std::string& args) {
  // One file per process: ctest -j runs test processes side by side.
  const std::string errfile = std::string(ARCAL_BINARY_DIR) + "/test_tmp/stderr_" + std::to_string(::getpid()) + ".txt";
  const std::string cmd = kArcal + " " + args + " > /dev/null 2> " + errfile;
  int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(errfile)};
}

const char* kSmall =
    "train --train-subset 1280 --batch-size 64 --max-steps 40 --checkpoint-every 5 --threads 1 --seed 3 --quiet";

bool fmnist_installed() { return fs::exists(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz"); }

}  // namespace

TEST(TrainResume, KilledMidEpochAndResumedEqualsUninterrupted) {
  if (!fmnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  const auto a = tmpdir("resume_a"), b = tmpdir("resume_b");
  ASSERT_EQ(run(std::string(kSmall) + " --residual block --out " + a).code, 0);

  // Same run, killed with SIGKILL as soon as its first checkpoint (step 5 of a 20-step epoch) exists.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string out = "--out=" + b;
    execl(kArcal.c_str(), "arcal", "train", "--train-subset", "1280", "--batch-size", "64", "--max-steps", "40",
          "--checkpoint-every", "5", "--threads", "1", "--seed", "3", "--quiet", "--residual", "block", out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!fs::exists(b + "/checkpoint.pt") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run finished before it could be killed";
  ASSERT_FALSE(fs::exists(b + "/summary.json"));
  ASSERT_FALSE(fs::exists(b + "/model.pt"));

  // Without --resume the half-finished run is protected.
  EXPECT_EQ(run(std::string(kSmall) + " --residual block --out " + b).code, 2);
  ASSERT_EQ(run("train --resume --threads 1 --quiet --out " + b).code, 0);

  auto summary = nlohmann::json::parse(read_file(b + "/summary.json"));
  EXPECT_GT(summary["resumed_from_step"].get<int>(), 0);
  EXPECT_LT(summary["resumed_from_step"].get<int>(), 20);  // mid-epoch
  auto ma = load_trained_model(a), mb = load_trained_model(b);
  auto pa = ma->named_parameters(), pb = mb->named_parameters();
  double worst = 0;
  for (auto& kv : pa) worst = std::max(worst, (kv.value() - pb[kv.key()]).abs().max().item<double>());
  EXPECT_EQ(worst, 0.0) << "max abs parameter difference after resume";
  // The log holds one record per evaluation, none duplicated by the resume.
  std::ifstream log(b + "/log.jsonl");
  int lines = 0;
  for (std::string line; std::getline(log, line);) lines += !line.empty();
  EXPECT_EQ(lines, 2);
}

TEST(TrainCli, BadInputFailsCleanlyWithoutCompleteLookingFiles) {
  const auto d = tmpdir("bad_input");
  fs::create_directories(d + "/data");
  struct Case {
    std::string args, expect;
  };
  // A data directory with a wrong-magic image file.
  {
    std::vector<std::uint8_t> hdr = {0, 0, 8, 1, 0, 0, 0, 1, 0, 0, 0, 28, 0, 0, 0, 28};
    gzFile f = gzopen((d + "/data/train-images-idx3-ubyte.gz").c_str(), "wb");
    gzwrite(f, hdr.data(), static_cast<unsigned>(hdr.size()));
    gzclose(f);
    std::vector<std::uint8_t> lab = {0, 0, 8, 1, 0, 0, 0, 1, 3};
    f = gzopen((d + "/data/train-labels-idx1-ubyte.gz").c_str(), "wb");
    gzwrite(f, lab.data(), static_cast<unsigned>(lab.size()));
    gzclose(f);
  }
  const std::vector<Case> cases = {
      {"--data-dir " + d + "/nowhere", "train-images-idx3-ubyte.gz: cannot open"},
      {"--data-dir " + d + "/data", "magic number is 2049, but must be 2051"},
      {"--model ar-vit-huge",
       "--model: ar-vit-huge not in {ar-vit-tiny,ar-deit-small,ar-swin-tiny,ar-lm-tiny,ar-lm-tiny-nope}"},
      {"--dataset imagenet", "--dataset: imagenet not in {fashion-mnist,cifar10,cifar100,gcide}"},
      {"--residual block --block-size 13", "--block-size: 13 must be in [1, 12]"},
      {"--residual sideways", "--residual: sideways not in {full,block,standard}"},
      {"--sbece-temperature -0.5", "--sbece-temperature: -0.5 is outside (0, 100]"},
  };
  int i = 0;
  for (const auto& c : cases) {
    const std::string out = d + "/run" + std::to_string(i++);
    auto r = run("train --max-steps 1 --quiet " + c.args + " --out " + out);
    EXPECT_EQ(r.code, 2) << c.args;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.args << " -> " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one-line error: " << r.err;
    EXPECT_FALSE(fs::exists(out + "/summary.json"));
    EXPECT_FALSE(fs::exists(out + "/model.pt"));
    EXPECT_FALSE(fs::exists(out + "/config.json")) << "nothing written before the input was validated";
  }
}

TEST(TrainCli, TraceWrittenByTheTrainingIsArcalTraceBitForBit) {
  if (!fmnist_installed()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  // arcal train --trace: the training process writes the test trace from the model in memory, and the
  // same forward pass gives summary.json's test metrics. Both must be what the separate commands
  // (a training without --trace, then arcal trace on its model.pt) write.
  const auto d = tmpdir("train_trace");
  const std::string a = d + "/a", b = d + "/b";
  ASSERT_EQ(run(std::string(kSmall) + " --residual full --out " + a + " --trace " + a + ".npz").code, 0);
  ASSERT_EQ(run(std::string(kSmall) + " --residual full --out " + b).code, 0);
  ASSERT_EQ(run("trace --quiet --run " + b + " --out " + b + ".npz").code, 0);
  const auto sa = nlohmann::json::parse(read_file(a + "/summary.json")),
             sb = nlohmann::json::parse(read_file(b + "/summary.json"));
  for (const char* k : {"test_accuracy", "test_nll", "test_ece15", "test_n"}) EXPECT_EQ(sa[k], sb[k]) << k;
  const auto ta = load_trace(a + ".npz"), tb = load_trace(b + ".npz");
  EXPECT_EQ(ta.n, 10000u);
  EXPECT_EQ(ta.points, 13u);
  EXPECT_EQ(ta.logits, tb.logits);
  EXPECT_EQ(ta.labels, tb.labels);
  EXPECT_EQ(ta.routing, tb.routing);
  EXPECT_EQ(ta.routing_cls, tb.routing_cls);
  EXPECT_EQ(ta.routing_entropy, tb.routing_entropy);
  EXPECT_EQ(ta.routing_depth_mean, tb.routing_depth_mean);
  EXPECT_EQ(ta.routing_depth_var, tb.routing_depth_var);
  auto ma = nlohmann::json::parse(ta.meta_json), mb = nlohmann::json::parse(tb.meta_json);
  EXPECT_EQ(ma["run_dir"], a);
  EXPECT_EQ(ma["run"], "a");
  for (auto* m : {&ma, &mb}) m->erase("run"), m->erase("run_dir");
  EXPECT_EQ(ma, mb);

  // A trace file that exists, or a split that is not one, is refused before anything is trained.
  auto r = run(std::string(kSmall) + " --residual full --out " + d + "/c --trace " + a + ".npz");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--trace"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d + "/c/config.json"));
  r = run(std::string(kSmall) + " --residual full --out " + d + "/c --trace " + d + "/c.npz --trace-split train");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--trace-split: 'train': expected test or val"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d + "/c/config.json"));
  r = run(std::string(kSmall) + " --residual full --val-fraction 0 --out " + d + "/c --trace " + d +
          "/c.npz --trace-split val");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--trace-split: the val split of this run is empty"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(d + "/c/config.json"));
}
