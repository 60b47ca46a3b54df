#include "support/run_command.h"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "support/temp_dir.h"

namespace moex::testing {

namespace {
std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

CommandResult RunCommand(const std::string& command) {
  TempDir dir;
  const std::string out = dir / "out", err = dir / "err";
  const int status = std::system((command + " >" + out + " 2>" + err + " </dev/null").c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

std::string MoexBinary() {
  return MOEX_BINARY;
}

std::string Moex(const std::string& args) {
  return MoexBinary() + " " + args;
}

}  // namespace moex::testing
