// Subcommand registry for the arcal CLI. Each apps/arcal/cmd_*.cpp registers itself with
// ARCAL_COMMAND(name, description, setup) where setup adds options to its CLI11 subcommand and
// returns the function to run. main.cpp owns parsing and maps exceptions to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/progress.hpp"

namespace arcal::cli {

using RunFn = std::function<int()>;
using SetupFn = std::function<RunFn(CLI::App&)>;

struct CommandSpec {
  std::string name;
  std::string description;
  SetupFn setup;
};

std::vector<CommandSpec>& command_registry();

struct Registrar {
  Registrar(std::string name, std::string description, SetupFn setup) {
    command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

// Output conventions (docs/interface.md "Output conventions"): stdout carries results only (with
// --json exactly one JSON document); progress bars and log lines go to stderr, and --quiet silences
// them; errors are printed by main.cpp whatever --quiet says.

/// True when progress bars should be drawn (stdout is a terminal and --quiet was not given).
bool progress_enabled();
/// The same for a bar drawn on file descriptor fd (STDERR_FILENO for commands whose stdout carries JSON).
bool progress_enabled_on(int fd);
void set_quiet(bool quiet);
/// True when --quiet was given.
bool quiet();
/// Where a subcommand's log lines go ("resuming from step 200", "wrote F", the resolved
/// configuration): stderr, or a stream that discards them under --quiet.
std::ostream& log_stream();
/// A progress bar on stderr, drawn when stderr is a terminal and --quiet was not given (on the heap:
/// a ProgressBar finishes its line when destroyed, so it is never copied).
inline std::unique_ptr<arcal::ProgressBar> stderr_progress_bar(std::string label, long long total) {
  return std::make_unique<arcal::ProgressBar>(std::move(label), total, progress_enabled_on(STDERR_FILENO), stderr);
}

}  // namespace arcal::cli

#define ARCAL_CLI_CAT2(a, b) a##b
#define ARCAL_CLI_CAT(a, b) ARCAL_CLI_CAT2(a, b)
#define ARCAL_COMMAND(name, description, setup) \
  static ::arcal::cli::Registrar ARCAL_CLI_CAT(arcal_registrar_, __LINE__)(name, description, setup)
