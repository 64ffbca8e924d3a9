// The links-and-ownership rule of core/ownership.hpp (issue 55): arcal never writes through a symbolic
// link or into a file with a second hard link, removes only temporaries whose name and marker name a
// process that no longer runs, and compares output paths as resolved paths, not as spellings.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/ownership.hpp"
#include "core/paths.hpp"
#include "core/run_lock.hpp"
#include "test_util.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {

using arcal::testing::slurp;

void put(const std::string& p, const std::string& text) { std::ofstream(p) << text; }

/// A tag of this pid with another start time: the pid runs, but not the process the tag names.
std::string reused_pid_tag() {
  const std::string& t = process_tag();
  const std::size_t dash = t.find('-');
  return t.substr(0, dash) + "-" + std::to_string(std::stoull(t.substr(dash + 1)) + 1);
}

/// The tag of a child that has exited.
std::string dead_tag() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return std::to_string(pid) + "-12345";
}

}  // namespace

TEST(Ownership, TagNamesThisProcessAndOnlyIt) {
  const std::string& t = process_tag();
  ASSERT_EQ(t.substr(0, t.find('-')), std::to_string(::getpid()));
  EXPECT_TRUE(tag_alive(t));
  EXPECT_FALSE(tag_alive(reused_pid_tag()));  // a reused pid is not the same process
  EXPECT_FALSE(tag_alive(dead_tag()));
  EXPECT_TRUE(tag_alive("2024"));  // not a tag: never treated as dead
  EXPECT_TRUE(tag_alive("12-ab"));
  EXPECT_EQ(tag_after("report.tmp-12-34", "report.tmp-"), "12-34");
  EXPECT_EQ(tag_after("report.old-2024", "report.old-"), "");
  EXPECT_EQ(tag_after("report.old-2024-x", "report.old-"), "");
}

TEST(Ownership, NeverWritesThroughALinkOrIntoASharedFile) {
  const std::string d = arcal::testing::fresh_dir("own_links");
  const std::string notes = d + "/notes.txt";
  put(notes, "my notes\n");
  fs::create_symlink(notes, d + "/link");
  EXPECT_THROW(open_own_file("t", d + "/link", O_WRONLY | O_TRUNC), InputError);
  fs::create_hard_link(notes, d + "/hard");
  EXPECT_THROW(open_own_file("t", d + "/hard", O_WRONLY | O_APPEND), InputError);
  EXPECT_EQ(slurp(notes), "my notes\n");

  // The run lock: a link at DIR/.lock is refused and its target keeps its content.
  const std::string run = d + "/run";
  fs::create_directory(run);
  fs::create_symlink(notes, run + "/.lock");
  try {
    DirLock lock(run, "test");
    ADD_FAILURE() << "a symbolic link as the lock file was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  }
  EXPECT_EQ(slurp(notes), "my notes\n");

  // The marker: a dangling link by its name is neither the marker nor followed.
  const std::string out = d + "/out";
  fs::create_directory(out);
  fs::create_symlink(d + "/created-through-link", out + "/" + kOutputMarker);
  EXPECT_FALSE(has_output_marker(out));
  EXPECT_EQ(foreign_entry(out, {}), kOutputMarker);  // the directory is not empty, nor arcal's
  EXPECT_THROW(mark_output_dir(out, "test"), InputError);
  EXPECT_FALSE(fs::exists(d + "/created-through-link"));

  // A user's own regular DIR/.lock (a directory taken with --force) keeps its content.
  const std::string forced = d + "/forced";
  fs::create_directory(forced);
  put(forced + "/.lock", "user's lock notes\n");
  { DirLock lock(forced, "test"); }
  EXPECT_EQ(slurp(forced + "/.lock"), "user's lock notes\n");
}

TEST(Ownership, RemovesOnlyTemporariesItCanProveItMade) {
  const std::string d = arcal::testing::fresh_dir("own_stale");
  const std::string dead = dead_tag(), live = reused_pid_tag();
  // Files: NAME.tmp.TAG of a dead process goes; a user's NAME.tmp.2024 and a running writer's stay.
  put(d + "/x.json.tmp." + dead, "stale");
  put(d + "/x.json.tmp.2024", "user's");
  put(d + "/x.json.tmp." + process_tag() + "x", "not a tag");
  write_file_atomic(d + "/x.json", "{}");
  EXPECT_FALSE(fs::exists(d + "/x.json.tmp." + dead));
  EXPECT_TRUE(fs::exists(d + "/x.json.tmp.2024"));
  EXPECT_TRUE(fs::exists(d + "/x.json.tmp." + process_tag() + "x"));
  EXPECT_EQ(slurp(d + "/x.json"), "{}");

  // Directories: the name's tag and the marker's must agree, and that process must be gone.
  auto dir_with_marker = [&](const std::string& name, const std::string& tag) {
    fs::create_directory(d + "/" + name);
    put(d + "/" + name + "/" + kOutputMarker, "made by arcal report (process " + tag + "); ...\n");
    return d + "/" + name;
  };
  EXPECT_TRUE(stale_owned_dir(dir_with_marker("r.tmp-" + dead, dead), "r.tmp-"));
  EXPECT_FALSE(stale_owned_dir(dir_with_marker("r.tmp-" + live, dead), "r.tmp-"));  // marker of another process
  fs::create_directory(d + "/report.old-2024");
  EXPECT_FALSE(stale_owned_dir(d + "/report.old-2024", "report.old-"));
  fs::create_directory(d + "/r.tmp-" + std::string(dead).replace(0, 1, "9"));  // a tag, but no marker
  EXPECT_FALSE(stale_owned_dir(d + "/r.tmp-" + std::string(dead).replace(0, 1, "9"), "r.tmp-"));
  make_owned_dir(d + "/r.tmp-" + process_tag(), "test");  // this process's: alive
  EXPECT_FALSE(stale_owned_dir(d + "/r.tmp-" + process_tag(), "r.tmp-"));
}

TEST(Ownership, OutputsAreComparedAsResolvedPaths) {
  const std::string d = arcal::testing::fresh_dir("own_paths");
  const fs::path cwd = fs::current_path();
  fs::current_path(d);
  fs::create_directory("sub");
  EXPECT_TRUE(same_path("G.npz", d + "/G.npz"));  // neither exists yet
  EXPECT_TRUE(same_path("G.npz", "./sub/../G.npz"));
  EXPECT_FALSE(same_path("G.npz", "sub/G.npz"));
  EXPECT_THROW(check_distinct_outputs({{"--out", "G.npz"}, {"--save", d + "/G.npz"}}), InputError);
  EXPECT_NO_THROW(check_distinct_outputs({{"--out", "G.npz"}, {"--save", "H.json"}, {"--figures", ""}}));
  fs::current_path(cwd);
}
