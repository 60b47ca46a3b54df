#include "io/output_guard.h"

#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace moex {

namespace fs = std::filesystem;

namespace {

// `inner` is `outer` or lies below it (both made absolute, links resolved where they exist).
bool Within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // A trailing separator.
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

bool FileStartsWith(const std::string& path, const std::string& magic) {
  std::ifstream in(path, std::ios::binary);
  std::string head(magic.size(), '\0');
  return in.read(head.data(), static_cast<std::streamsize>(head.size())) && head == magic;
}

void CheckOutputPath(const std::string& path, const OutputRules& rules) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(fs::absolute(path), ec);
  Check(!ec, "cannot resolve ", rules.flag, " ", path, ": ", ec.message());
  for (const std::string& read : rules.reads) {
    if (read.empty() || read == "-") continue;
    const fs::path in = fs::weakly_canonical(fs::absolute(read), ec);
    if (ec || !fs::exists(in)) continue;
    if (fs::is_directory(in)) {
      Check(!Within(out, in), "refusing to write ", rules.flag, " ", path, ": it is inside ", read,
            ", which this command reads (write it elsewhere)");
    } else {
      Check(out != in && !(fs::exists(out) && fs::equivalent(out, in, ec)), "refusing to write ",
            rules.flag, " ", path, ": this command reads that file (write it elsewhere)");
    }
  }
  if (!fs::exists(out) || rules.force) return;
  if (fs::is_regular_file(out) && rules.same_kind && rules.same_kind(out.string())) return;
  Fail(rules.flag, " ", path, " already exists; pass --force to replace it");
}

}  // namespace moex
