// `moex store list` / `moex store rm`: the expert stores offloading packed into the cache
// directory (model/store_location.h), how big they are and which model each came from, and
// removing them.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "io/store_catalog.h"
#include "model/model_identity.h"
#include "model/store_location.h"

namespace moex::cli {

namespace {

namespace fs = std::filesystem;

struct StoreCliOptions {
  std::string dir;
  bool json = false;
  std::vector<std::string> names;
  std::string model;
  bool all = false;
};

std::string Directory(const StoreCliOptions& o) {
  return o.dir.empty() ? ExpertStoreCacheDir() : o.dir;
}

std::string Gb(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return text;
}

std::string Day(uint64_t unix_seconds) {
  if (unix_seconds == 0) return "?";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &tm);
  return text;
}

int RunList(const StoreCliOptions& o) {
  const std::string dir = Directory(o);
  const std::vector<StoreEntry> stores = ListExpertStores(dir);
  uint64_t total = 0;
  for (const StoreEntry& s : stores) total += s.bytes;
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const StoreEntry& s : stores)
      list.push_back({{"name", fs::path(s.path).filename().string()},
                      {"path", s.path},
                      {"bytes", s.bytes},
                      {"arch", s.arch},
                      {"model", s.source_path},
                      {"model_exists", s.source_exists},
                      {"created_unix", s.created_unix},
                      {"problem", s.problem}});
    std::cout << nlohmann::json{{"dir", dir}, {"bytes", total}, {"stores", list}}.dump(2) << "\n";
    return 0;
  }
  if (stores.empty()) {
    std::cout << "no expert stores in " << dir << "\n";
    return 0;
  }
  std::cout << "expert stores in " << dir << " (" << stores.size() << ", " << Gb(total) << "):\n";
  for (const StoreEntry& s : stores) {
    std::cout << "  " << fs::path(s.path).filename().string() << "  " << Gb(s.bytes) << "  "
              << Day(s.created_unix) << "  ";
    if (!s.problem.empty())
      std::cout << "unusable: " << s.problem;
    else
      std::cout << s.arch << "  " << s.source_path << (s.source_exists ? "" : " (model gone)");
    std::cout << "\n";
  }
  return 0;
}

// A store named on the command line: a path, a file name in the directory, or the start of
// exactly one such name.
std::string Resolve(const std::string& dir, const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(fs::path(dir) / name, ec))) return fs::path(dir) / name;
  std::vector<std::string> matches;
  for (const StoreEntry& s : ListExpertStores(dir))
    if (fs::path(s.path).filename().string().starts_with(name)) matches.push_back(s.path);
  Check(!matches.empty(), "no expert store named ", name, " in ", dir,
        " (`moex store list` shows them)");
  std::string all;
  for (const std::string& m : matches) all += "\n  " + fs::path(m).filename().string();
  Check(matches.size() == 1, "'", name, "' names ", matches.size(), " stores in ", dir,
        "; give more of the name:", all);
  return matches.front();
}

int RunRemove(const StoreCliOptions& o) {
  const std::string dir = Directory(o);
  std::vector<std::string> paths;
  for (const std::string& name : o.names) paths.push_back(Resolve(dir, name));
  if (!o.model.empty()) {
    // Found by the content hash at the end of its name, as offloading finds it.
    const std::string id = ModelContentId(o.model);
    const std::string found = FindCachedStore(dir, id);
    Check(!found.empty(), "no expert store of ", o.model, " in ", dir, " (it would be named ",
          CachedStoreName(o.model, id), ")");
    paths.push_back(found);
  }
  if (o.all)
    for (const StoreEntry& s : ListExpertStores(dir)) paths.push_back(s.path);
  std::sort(paths.begin(), paths.end());
  paths.erase(std::unique(paths.begin(), paths.end()), paths.end());
  Check(!paths.empty() || o.all, "name the stores to remove (`moex store list` shows them), ",
        "or pass --model PATH or --all");
  if (paths.empty()) std::cout << "no expert stores in " << dir << "\n";
  for (const std::string& path : paths) {
    const uint64_t freed = RemoveExpertStore(path);
    std::cout << "removed " << path << " (" << Gb(freed) << ")\n";
  }
  return 0;
}

}  // namespace

Runner AddStoreCommand(CLI::App& app) {
  auto o = std::make_shared<StoreCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "store", "list and remove the expert stores offloading packed (in the cache directory)");
  cmd->require_subcommand(1);
  cmd->add_option("--dir", o->dir,
                  "directory of the stores (default: $XDG_CACHE_HOME/moex or ~/.cache/moex)");
  CLI::App* list = cmd->add_subcommand("list", "each store: name, size, date, the model it holds");
  list->add_flag("--json", o->json, "print JSON instead of text");
  list->fallthrough();  // `moex store list --dir D` as well as `moex store --dir D list`.
  CLI::App* rm = cmd->add_subcommand("rm", "remove stores (only files that are moex stores)");
  rm->add_option("names", o->names, "store file names (or a unique start of one), or paths");
  rm->add_option("--model", o->model, "remove the store of this model (wherever it is)");
  rm->add_flag("--all", o->all, "remove every store in the directory");
  rm->fallthrough();
  return [o, list] { return list->parsed() ? RunList(*o) : RunRemove(*o); };
}

}  // namespace moex::cli
