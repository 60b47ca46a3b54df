#include "io/store_catalog.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/expert_store.h"
#include "io/store_output.h"

namespace moex {

namespace {

namespace fs = std::filesystem;

std::string HeaderString(const char* s, size_t cap) {
  return std::string(s, strnlen(s, cap));
}

bool ProcessRuns(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

// The files packing `path` left: PATH.partial.PID.N of any PID.
std::vector<std::pair<fs::path, long>> PartialsOf(const std::string& path) {
  std::vector<std::pair<fs::path, long>> out;
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".partial.";
  std::error_code ec;
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    out.emplace_back(entry.path(), std::strtol(name.c_str() + prefix.size(), nullptr, 10));
  }
  return out;
}

}  // namespace

std::vector<StoreEntry> ListExpertStores(const std::string& dir) {
  std::vector<StoreEntry> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (const auto& file : fs::directory_iterator(dir, ec)) {
    const std::string name = file.path().filename().string();
    std::error_code type_ec;
    if (!name.ends_with(".experts.moex") || !file.is_regular_file(type_ec)) continue;
    StoreEntry e;
    e.path = file.path().string();
    std::error_code size_ec;  // The listing's own error code stays the iterator's.
    e.bytes = file.file_size(size_ec);
    try {
      const ExpertStore store = ExpertStore::Open(e.path);
      const StoreHeader& h = store.header();
      e.arch = HeaderString(h.arch, sizeof h.arch);
      e.source_path = HeaderString(h.source_path, sizeof h.source_path);
      e.created_unix = h.created_unix;
      std::error_code exists_ec;
      e.source_exists = !e.source_path.empty() && fs::exists(e.source_path, exists_ec);
      if (fs::exists(e.path + ".corrupt", exists_ec)) e.problem = "flagged corrupt by a read";
    } catch (const Error& err) {
      e.problem = err.what();
    }
    out.push_back(std::move(e));
  }
  Check(!ec, "cannot list ", dir, ": ", ec.message());
  std::sort(out.begin(), out.end(),
            [](const StoreEntry& a, const StoreEntry& b) { return a.path < b.path; });
  return out;
}

int RemoveStalePartials(const std::string& path) {
  int removed = 0;
  for (const auto& [partial, pid] : PartialsOf(path)) {
    if (ProcessRuns(pid)) continue;
    std::error_code ec;
    if (fs::remove(partial, ec)) ++removed;
  }
  return removed;
}

uint64_t RemoveExpertStore(const std::string& path) {
  std::error_code ec;
  Check(fs::exists(fs::symlink_status(path, ec)), "no expert store at ", path);
  // The same checks as before writing one: a regular file (or a link beside it) that starts
  // with the store's magic, so `rm` never deletes anything else.
  const std::string target = CheckStoreTarget(path);
  for (const auto& [partial, pid] : PartialsOf(target))
    Check(!ProcessRuns(pid), "process ", pid, " is packing ", path,
          " now; stop it first or wait until it is done");
  const uint64_t bytes = fs::file_size(target, ec);
  Check(::unlink(target.c_str()) == 0, "cannot remove ", target, ": ", std::strerror(errno));
  if (target != path) ::unlink(path.c_str());  // The link to it.
  ::unlink((path + ".corrupt").c_str());
  RemoveStalePartials(target);
  return ec ? 0 : bytes;
}

}  // namespace moex
