#include "support/shared_data.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace moex::testing {

std::filesystem::path SourceDir() { return std::filesystem::path(MOEX_SOURCE_DIR); }

std::filesystem::path SharedDataDir() { return SourceDir() / ".." / "shared" / "data"; }

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void CopyIfChanged(const std::filesystem::path& from, const std::filesystem::path& to) {
  namespace fs = std::filesystem;
  if (fs::exists(to) && ReadFile(to) == ReadFile(from)) return;
  const fs::path tmp = to.string() + ".tmp" + std::to_string(::getpid());
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing);
  fs::rename(tmp, to);
}

}  // namespace moex::testing
