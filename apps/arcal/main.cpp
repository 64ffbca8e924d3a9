// arcal: entry point. Parses the command line with CLI11 and dispatches to the registered
// subcommand. Exit codes (docs/interface.md): 0 success, 1 failure while working, 2 bad input or
// usage, 3 interrupted by SIGINT/SIGTERM at a resumable point (the message says how to resume);
// 130/143 only when a second signal ends the process.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <new>
#include <string>
#include <string_view>

#include "command.hpp"
#include "option_lists.hpp"
#include "core/error.hpp"
#include "core/subprocess.hpp"
#include "ops/blas.hpp"
#include "torch_commands.hpp"

namespace arcal::cli {

std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
}

namespace {
bool g_quiet = false;
}
void set_quiet(bool quiet) { g_quiet = quiet; }
bool quiet() { return g_quiet; }
bool progress_enabled() { return !g_quiet && ::isatty(STDOUT_FILENO); }
bool progress_enabled_on(int fd) { return !g_quiet && ::isatty(fd); }
std::ostream& log_stream() {
  static std::ostream discard(nullptr);  // no buffer: every write is dropped
  return g_quiet ? discard : std::cerr;
}

}  // namespace arcal::cli

namespace {
std::string subcommand_name(const std::map<CLI::App*, arcal::cli::RunFn>& runs) {
  for (const auto& [sub, run] : runs)
    if (sub->parsed()) return sub->get_name();
  return "";
}
}  // namespace

#ifdef ARCAL_FRONT
namespace {
/// `arcal` holds the analysis subcommands; one of kTorchCommands (the first argument that is not an
/// option) runs `arcal-torch` from this executable's directory with the same arguments, by exec, so the
/// exit code, signals and standard streams are the child's own. Returns -1 when the command line names
/// no such command, else the exit code of a failed exec (2: this build has no arcal-torch; 1: it could
/// not be started).
int forward_torch_command(int argc, char** argv) {
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;  // --quiet before the subcommand
  if (i >= argc) return -1;
  const std::string_view name = argv[i];
  if (std::none_of(arcal::cli::kTorchCommands.begin(), arcal::cli::kTorchCommands.end(),
                   [&](const arcal::cli::ForwardedCommand& c) { return c.name == name; }))
    return -1;
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const auto target = (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "arcal-torch";
  if (::access(target.c_str(), X_OK) != 0) {
    std::cerr << "arcal: error: '" << name << "' needs LibTorch, and this arcal was built without it (no "
              << target.string() << "): install torch (" << ARCAL_TORCH_REQUIREMENT
              << ") in this environment and build again (scripts/setup.sh, or pip install --no-build-isolation .; "
                 "docs/python.md \"Installing\")\n";
    return 2;
  }
  ::execv(target.c_str(), argv);
  std::cerr << "arcal: failed: could not start " << target.string() << " for '" << name << "': " << std::strerror(errno)
            << "\n";
  return 1;
}
}  // namespace
#endif

static int run_main(int argc, char** argv) {
  using namespace arcal::cli;
  arcal::die_with_parent();  // a child of `arcal run`/`sweep` ends with its parent, even on kill -9
  arcal::reexec_with_native_openblas_kernels(argv);  // before anything else runs
  CLI::App app{"arcal: train Attention-Residual transformers and audit routing-conditional calibration", "arcal"};
  app.set_version_flag("--version", std::string("arcal ") + ARCAL_VERSION);
  app.require_subcommand(1);
  bool quiet = false;
  const char* quiet_help = "No progress bars or log lines on stderr (errors are still printed)";
  app.add_flag("--quiet,-q", quiet, quiet_help)->configurable(false);

#ifdef ARCAL_FRONT
  if (const int rc = forward_torch_command(argc, argv); rc >= 0) return rc;
#endif
  auto& registry = command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const CommandSpec& a, const CommandSpec& b) { return a.name < b.name; });
  std::map<CLI::App*, RunFn> runs;
  for (auto& spec : registry) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    sub->option_defaults()->always_capture_default();  // --help shows every default
    sub->add_flag("--quiet,-q", quiet, quiet_help);
    runs[sub] = spec.setup(*sub);
  }
  // Hidden: the command option lists of docs/interface.md (option_lists.hpp; ctest command_option_lists).
  std::string lists_file;
  bool lists_update = false;
  CLI::App* lists = app.add_subcommand("options-markdown", "Check (or --update) the command option lists of FILE");
  lists->group("");
  lists->add_option("file", lists_file, "docs/interface.md")->required();
  lists->add_flag("--update", lists_update, "Rewrite the lists");
#ifdef ARCAL_FRONT
  for (const auto& c : kTorchCommands)  // listed in --help; a command line naming one never gets here
    app.add_subcommand(std::string(c.name), std::string(c.description) + " [arcal-torch]");
#endif
  // A first argument that is neither an option nor a subcommand: name it (CLI11 would only say that a
  // subcommand is required).
  if (argc > 1 && argv[1][0] != '-' && std::string_view(argv[1]) != "options-markdown" &&
      std::none_of(registry.begin(), registry.end(), [&](const CommandSpec& c) { return c.name == argv[1]; }) &&
      std::none_of(kTorchCommands.begin(), kTorchCommands.end(),
                   [&](const ForwardedCommand& c) { return c.name == argv[1]; })) {
    std::cerr << "arcal: error: unknown subcommand '" << argv[1] << "' (arcal --help lists them)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line, like every other arcal error (CLI11's own printer adds a "Run with --help" line).
    std::cerr << "arcal: error: " << e.what() << "\n";
    return 2;
  }
  set_quiet(quiet);
  if (lists->parsed()) return option_lists(app, registry, lists_file, lists_update);
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const arcal::InputError& e) {
    std::cerr << "arcal: error: " << e.what() << "\n";
    return 2;
  } catch (const arcal::Interrupted& e) {
    std::cerr << "arcal: " << e.what() << "\n";
    return 3;
  } catch (const CLI::Error& e) {  // an option read back with a wrong conversion
    std::cerr << "arcal: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // Readers name the file and array themselves (a runtime_error below); this is what is left.
    std::cerr << "arcal: failed: out of memory (std::bad_alloc) while running arcal " << subcommand_name(runs)
              << " (an input larger than this machine can hold? see the limits in docs/interface.md)\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "arcal: failed: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    // LibTorch's c10::Error appends a C++ backtrace to its message ("Exception raised from ..."): the
    // user gets the message (e.g. the allocator's "you tried to allocate N bytes"), not the frames.
    std::string what = e.what();
    const auto frames = what.find("\nException raised from");
    if (frames != std::string::npos) what.resize(frames);
    std::cerr << "arcal: failed: " << what << "\n";
    return 1;
  } catch (...) {
    std::cerr << "arcal: failed: unknown error\n";
    return 1;
  }
  return 2;
}

namespace {
/// Ends the process with `code` without running the libraries' exit handlers: under memory pressure
/// OpenBLAS's shutdown joins a worker thread that retries a failed buffer allocation forever, so a
/// plain return from main never exited (`ulimit -v 600000`). Everything arcal writes is complete and
/// renamed before this point, and locks are dropped by the kernel.
/// Standard output carries results (--json, --print-config, tables), so a write that failed there
/// (a full disk, /dev/full, a closed pipe's reader) is a failure: exit 1 with a message, never 0 with
/// nothing written.
[[noreturn]] void finish(int code) {
  errno = 0;
  std::cout.flush();
  const bool cout_failed = std::cout.fail();
  const int flushed = std::fflush(stdout);
  const int err = errno;
  if ((cout_failed || flushed != 0 || std::ferror(stdout)) && code == 0) {
    std::string msg = "arcal: failed: cannot write the results to standard output";
    if (err != 0) msg += std::string(": ") + std::strerror(err);
    msg += " (is the disk full, or the reader gone?)\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg.data(), msg.size());
    code = 1;
  }
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
}  // namespace

namespace {
/// Out of memory before main: LibTorch's static initialisation (which runs before any code of the
/// executable's own) allocates several hundred MB of address space, and under `ulimit -v 700000` its
/// std::bad_alloc was uncaught (abort, rc 134). This handler, installed from .preinit_array (which the
/// dynamic loader runs before every shared library's initialisers), turns that into exit 1 with a
/// message; main removes it at once, so later allocations throw std::bad_alloc as usual and the
/// readers name the file and array. Only async-signal-safe calls: libc and libstdc++ may not be
/// initialised yet.
void out_of_memory_at_startup() {
  static const char msg[] =
      "arcal: failed: out of memory while starting (LibTorch's initialisation), before any work: is "
      "`ulimit -v` set too low? (LibTorch needs several hundred MB of address space)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  ::_exit(1);
}
/// tcmalloc (the executable's allocator when the build found it, CMakeLists.txt ARCAL_TCMALLOC) writes
/// "src/central_freelist.cc:330] tcmalloc: allocation failed N" to stderr before it returns null; the
/// out-of-memory is then reported by arcal itself ("arcal: failed: ... out of memory ..."), as the
/// first line of stderr. Its other messages (a corrupted heap before an abort) pass through.
void tcmalloc_log(const char* msg, int length) {
  static const char kFailed[] = "tcmalloc: allocation failed";
  if (length > 0 && memmem(msg, std::size_t(length), kFailed, sizeof kFailed - 1)) return;
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, std::size_t(std::max(length, 0)));
}
void install_startup_oom_handler(int, char**, char**) {
  std::set_new_handler(out_of_memory_at_startup);
  // tcmalloc::log_message_writer, a statically initialised function pointer, so setting it before
  // the libraries' initialisers is safe; absent with glibc's malloc.
  using Writer = void (*)(const char*, int);
  if (void* w = ::dlsym(RTLD_DEFAULT, "_ZN8tcmalloc18log_message_writerE")) *static_cast<Writer*>(w) = tcmalloc_log;
}
}  // namespace
__attribute__((section(".preinit_array"),
               used)) static void (*const arcal_preinit)(int, char**, char**) = install_startup_oom_handler;

int main(int argc, char** argv) {
  std::set_new_handler(nullptr);  // from here on std::bad_alloc is thrown and caught in run_main
  int rc = 1;
  try {
    rc = run_main(argc, argv);
  } catch (const std::bad_alloc&) {
    // Before run_main's own handlers: building the command line (CLI11's options) under a tight
    // `ulimit -v` (found by the hostile cases' 600000 KB limit once the binary grew).
    static const char msg[] = "arcal: failed: out of memory while setting up the command line, before any work\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(1);
  }
  finish(rc);
}
