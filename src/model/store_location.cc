#include "model/store_location.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "model/model_identity.h"

namespace moex {

namespace fs = std::filesystem;

std::string ExpertStoreCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return (fs::path(xdg) / "moex").string();
  const char* home = std::getenv("HOME");
  Check(home != nullptr && home[0] == '/', "cannot place the expert store: neither ",
        "XDG_CACHE_HOME nor HOME names a directory; pass --store FILE");
  return (fs::path(home) / ".cache" / "moex").string();
}

std::string CachedStoreName(const std::string& model_path, const std::string& content_id) {
  const std::string hex = content_id.starts_with("content-") ? content_id.substr(8) : content_id;
  return ModelShortName(model_path) + "-" + hex + ".experts.moex";
}

std::string FindCachedStore(const std::string& dir, const std::string& content_id) {
  const std::string hex = content_id.starts_with("content-") ? content_id.substr(8) : content_id;
  const std::string tail = "-" + hex + ".experts.moex";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().ends_with(tail)) return entry.path().string();
  return "";
}

std::string DefaultExpertStorePath(const std::string& model_path, const std::string& content_id) {
  std::error_code ec;
  const fs::path dir = ExpertStoreCacheDir();
  fs::create_directories(dir, ec);
  Check(!ec, "cannot create the expert store directory ", dir.string(), ": ", ec.message(),
        "; pass --store FILE to put the store elsewhere");
  // The content decides: a copy of the model under another name finds the store packed
  // from the first.
  if (std::string found = FindCachedStore(dir, content_id); !found.empty()) return found;
  const std::string name = CachedStoreName(model_path, content_id);
  const fs::path path = dir / name;
  Check(::access(dir.c_str(), W_OK) == 0, "the expert store directory ", dir.string(),
        " is not writable (", std::strerror(errno),
        "); pass --store FILE to put the store elsewhere");
  return path.string();
}

}  // namespace moex
