// Runs a shell command for end-to-end tests, capturing stdout and stderr.
#pragma once

#include <string>

namespace moex::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

CommandResult RunCommand(const std::string& command);

// The moex binary under test.
std::string MoexBinary();
// A command line running it with `args`.
std::string Moex(const std::string& args);

}  // namespace moex::testing
