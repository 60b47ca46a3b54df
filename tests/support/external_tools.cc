#include "support/external_tools.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "support/shared_data.h"

namespace moex::testing {

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

std::string ProgramMissing(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    if (!dir.empty() && ::access((std::filesystem::path(dir) / program).c_str(), X_OK) == 0)
      return "";
  return program + " is not installed (scripts/install-deps.sh installs it)";
}

std::filesystem::path ServeClientsDir() {
  return SourceDir() / "tests" / "serve_clients";
}

std::string ServeClientsMissing(const std::vector<std::string>& packages) {
  if (std::string why = ProgramMissing("node"); !why.empty()) return why;
  for (const std::string& p : packages)
    if (!std::filesystem::exists(ServeClientsDir() / "node_modules" / p / "package.json"))
      return "npm package " + p + " is not installed in " + ServeClientsDir().string() +
             " (run tests/serve_clients/install.sh)";
  return "";
}

}  // namespace moex::testing
