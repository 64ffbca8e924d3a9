// Subcommand registry for the arcal CLI. Each apps/arcal/cmd_*.cpp registers itself with
// ARCAL_COMMAND(name, description, setup) where setup adds options to its CLI11 subcommand and
// returns the function to run. main.cpp owns parsing and maps exceptions to exit codes.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

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

/// True when progress bars should be drawn (stdout is a terminal and --quiet was not given).
bool progress_enabled();
/// The same for a bar drawn on file descriptor fd (STDERR_FILENO for commands whose stdout carries JSON).
bool progress_enabled_on(int fd);
void set_quiet(bool quiet);

}  // namespace arcal::cli

#define ARCAL_CLI_CAT2(a, b) a##b
#define ARCAL_CLI_CAT(a, b) ARCAL_CLI_CAT2(a, b)
#define ARCAL_COMMAND(name, description, setup) \
  static ::arcal::cli::Registrar ARCAL_CLI_CAT(arcal_registrar_, __LINE__)(name, description, setup)
