// Clear errors for command lines CLI11 cannot place: the first argument it did not expect,
// named in command-line order, with a hint when it is a llama.cpp flag that moex spells
// differently or does not need.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace moex::cli {

// The message for CLI11's ExtrasError: `command` is the deepest subcommand parsed, argv the
// whole command line.
std::string UnexpectedArgumentMessage(const CLI::App& command, int argc, const char* const* argv);

// What moex offers instead of a llama.cpp flag it does not have ("" when it is not one).
std::string LlamaCppFlagHint(const std::string& flag);

// Checked before CLI11 parses: a llama.cpp flag `command` does not have, which CLI11 would
// misread (`-ngl 99` as `-n gl`), gives its message; "" when there is none.
std::string LlamaCppFlagMessage(const CLI::App& command, int argc, const char* const* argv);

}  // namespace moex::cli
