// The hostile-input guards of src/core (issue 13): overflow-checked sizes and the array limit, flag
// ranges, capped text reading and JSON nesting, outputs compared with inputs by inode, the run
// directory lock (a second holder is refused with the first one's pid and host), the interrupt flag,
// and programs started without a shell (an argument full of shell syntax reaches the program as is).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "core/limits.hpp"
#include "core/paths.hpp"
#include "core/run_lock.hpp"
#include "core/subprocess.hpp"
#include "core/text_input.hpp"
#include "test_util.hpp"

using namespace arcal;
namespace fs = std::filesystem;

TEST(Limits, CheckedArithmeticRefusesOverflow) {
  std::uint64_t r = 7;
  EXPECT_TRUE(checked_mul(1ull << 31, 1ull << 31, r));
  EXPECT_EQ(r, 1ull << 62);
  EXPECT_FALSE(checked_mul(1ull << 32, 1ull << 32, r));
  EXPECT_EQ(r, 1ull << 62);  // untouched on overflow
  EXPECT_FALSE(checked_add(~0ull, 1, r));
  EXPECT_TRUE(checked_add(~0ull - 1, 1, r));
}

TEST(Limits, ArrayLimitNamesContextValueAndLimit) {
  const InputLimits saved = input_limits();
  InputLimits l = saved;
  l.max_array_bytes = 1000;
  l.check_available_memory = false;
  set_input_limits(l);
  EXPECT_NO_THROW(check_array_bytes(1000, "ctx", "x"));
  const auto msg =
      arcal::testing::input_error_message([] { check_array_bytes(1001, "npz: f.npz: array 'a'", "shape (1001,)"); });
  EXPECT_NE(msg.find("npz: f.npz: array 'a': shape (1001,) needs 1001 bytes, more than the limit of 1000 bytes"),
            std::string::npos)
      << msg;
  set_input_limits(saved);
}

TEST(Limits, RangesAreInclusiveAndRefuseNonFinite) {
  EXPECT_TRUE(in_range(ranges::batch_size, 1));
  EXPECT_FALSE(in_range(ranges::batch_size, 0));
  EXPECT_FALSE(in_range(ranges::train_subset, -5));
  EXPECT_FALSE(in_range(ranges::lr, 0.0));  // (0, 10]
  EXPECT_TRUE(in_range(ranges::lr, 10.0));
  EXPECT_FALSE(in_range(ranges::lr, std::nan("")));
  EXPECT_FALSE(in_range(ranges::weight_decay, HUGE_VAL));
  EXPECT_EQ(range_text(ranges::lr), "(0, 10]");
  EXPECT_EQ(range_text(ranges::epochs), "[1, 100000]");
}

TEST(TextInput, SizeCapIsCheckedBeforeReading) {
  const auto d = arcal::testing::fresh_dir("core/text");
  std::ofstream(d + "/big.json") << std::string(2000, ' ') << "{}";
  const auto msg =
      arcal::testing::input_error_message([&] { read_text_file(d + "/big.json", "fn", "config.json", 1024); });
  EXPECT_NE(msg.find("config.json is 2.0 KiB (2002 bytes), more than the limit of 1.0 KiB"), std::string::npos) << msg;
  EXPECT_EQ(read_text_file(d + "/big.json", "fn", "config.json", 4096).size(), 2002u);
  EXPECT_NE(arcal::testing::input_error_message([&] { read_text_file(d, "fn", "x", 10); }).find("is a directory"),
            std::string::npos);
}

TEST(TextInput, JsonNestingIsCountedOutsideStrings) {
  EXPECT_NO_THROW(check_json_nesting(
      "{\"a\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"[[[\"}", "fn", "x"));
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  const auto msg = arcal::testing::input_error_message([&] { check_json_nesting("\n" + deep, "fn", "f.json"); });
  EXPECT_NE(msg.find("f.json: line 2: arrays and objects nested more than 64 deep"), std::string::npos) << msg;
  EXPECT_NE(arcal::testing::input_error_message([] {
              parse_json_text("{\"a\": ", "fn", "f.json");
            }).find("f.json is not valid JSON"),
            std::string::npos);
}

TEST(TextInput, TypedJsonFieldsNameTheKey) {
  const auto j = nlohmann::json::parse(R"({"dim": "64", "big": 4294967296, "neg": -1, "x": 1.5})");
  EXPECT_NE(arcal::testing::input_error_message([&] {
              json_int(j, "dim", "cfg", ranges::epochs);
            }).find("cfg: key 'dim' must be an integer in [1, 100000], but is \"64\""),
            std::string::npos);
  EXPECT_NE(arcal::testing::input_error_message([&] {
              json_int(j, "big", "cfg", IntRange{0, 2147483647});
            }).find("key 'big'"),
            std::string::npos);
  EXPECT_NE(arcal::testing::input_error_message([&] { json_uint64(j, "neg", "cfg"); }).find("must be an integer >= 0"),
            std::string::npos);
  EXPECT_NE(
      arcal::testing::input_error_message([&] { json_string(j, "missing", "cfg"); }).find("key 'missing' is missing"),
      std::string::npos);
  EXPECT_EQ(json_real(j, "x", "cfg"), 1.5);
}

TEST(Paths, OutputIsComparedWithInputsByInode) {
  const auto d = arcal::testing::fresh_dir("core/paths");
  std::ofstream(d + "/in.npz") << "data";
  fs::create_directories(d + "/sub");
  fs::create_symlink(d + "/in.npz", d + "/link.npz");
  fs::create_hard_link(d + "/in.npz", d + "/hard.npz");
  for (const std::string& out : {d + "/in.npz", d + "/sub/../in.npz", d + "/link.npz", d + "/hard.npz"}) {
    const auto msg =
        arcal::testing::input_error_message([&] { check_output_not_input("--out", out, {d + "/in.npz"}); });
    EXPECT_NE(msg.find("is the input " + d + "/in.npz"), std::string::npos) << out << ": " << msg;
  }
  EXPECT_NO_THROW(check_output_not_input("--out", d + "/new.npz", {d + "/in.npz"}));
  EXPECT_NE(arcal::testing::input_error_message([&] {
              check_output_file("--out", d + "/in.npz", false);
            }).find("pass --force"),
            std::string::npos);
  EXPECT_NO_THROW(check_output_file("--out", d + "/in.npz", true));
  EXPECT_NE(
      arcal::testing::input_error_message([&] { check_output_file("--out", d + "/sub", true); }).find("is a directory"),
      std::string::npos);
  EXPECT_TRUE(path_within(d + "/sub/x", d));
  EXPECT_TRUE(path_within(d, d));
  EXPECT_FALSE(path_within(d, d + "/sub"));
  EXPECT_FALSE(path_within(d + "/subx", d + "/sub"));
}

TEST(Paths, ShellQuoteForMessages) {
  EXPECT_EQ(shell_quote("runs/a-b_1.x"), "runs/a-b_1.x");
  EXPECT_EQ(shell_quote("runs/a b"), "'runs/a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(RunLock, SecondHolderIsRefusedNamingTheFirst) {
  const auto d = arcal::testing::fresh_dir("core/lock");
  {
    DirLock first(d, "arcal train");
    // flock locks belong to the open file, so a second DirLock in this process conflicts too.
    const auto msg = arcal::testing::input_error_message([&] { DirLock second(d, "arcal train"); });
    EXPECT_NE(msg.find(d + " is in use by another arcal process (pid " + std::to_string(::getpid()) + " on host "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("arcal train, since "), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(DirLock again(d, "arcal run"));  // released with the first
}

TEST(Interrupt, FirstSignalOnlySetsTheFlag) {
  reset_interrupt();
  install_interrupt_handlers();
  EXPECT_FALSE(interrupt_requested());
  ::raise(SIGTERM);
  EXPECT_TRUE(interrupt_requested());
  EXPECT_STREQ(interrupt_signal_name(), "SIGTERM");
  reset_interrupt();
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
}

TEST(Subprocess, ArgumentsReachTheProgramWithoutAShell) {
  const auto d = arcal::testing::fresh_dir("core/spawn");
  const std::string evil = "x'; touch " + d + "/INJECTED; echo '$(touch " + d + "/INJECTED2)";
  SpawnOptions o;
  o.cwd = d;
  o.stdout_path = d + "/out.txt";
  EXPECT_EQ(run_program({"printf", "%s", evil}, o), 0);
  EXPECT_EQ(arcal::testing::slurp(d + "/out.txt"), evil);
  EXPECT_FALSE(fs::exists(d + "/INJECTED"));
  EXPECT_FALSE(fs::exists(d + "/INJECTED2"));
  EXPECT_EQ(run_program({"false"}), 1);
  EXPECT_THROW(run_program({"/nonexistent/program"}), std::runtime_error);
}

// `rm -r RUN` while a checkpoint is written deletes the temporary before the rename (the files go
// before the directory): the rename's ENOENT then names the race, as a missing directory does, not a
// bare "No such file or directory" (a hostile case that depended on where the removal landed).
TEST(AtomicFile, ATemporaryDeletedBeforeTheRenameNamesTheRemoval) {
  const fs::path dir = fs::temp_directory_path() / ("arcal_atomic_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "checkpoint.pt").string();
  try {
    write_atomic_with(path, [](const std::string& tmp) {
      std::ofstream(tmp) << "bytes";
      fs::remove(tmp);  // what rm -r does to the directory's files first
    });
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist (was it removed while arcal was working?)"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  write_file_atomic(path, "ok");  // an ordinary write still works
  EXPECT_TRUE(fs::exists(path));
  fs::remove_all(dir);
}
