#include "model/model_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/checksum.h"
#include "core/error.h"
#include "io/gguf_split_name.h"

namespace moex {

namespace {

namespace fs = std::filesystem;

constexpr uint64_t kHeadBytes = 1 << 20;  // Headers: safetensors' JSON, GGUF's metadata.
constexpr uint64_t kSampleBytes = 4096;
constexpr int kSamples = 16;

// Reads [offset, offset + n) of `fd` completely into `out` (appended).
void AppendRange(int fd, const std::string& path, uint64_t offset, uint64_t n,
                 std::vector<std::byte>& out) {
  const size_t at = out.size();
  out.resize(at + n);
  uint64_t done = 0;
  while (done < n) {
    const ssize_t got =
        ::pread(fd, out.data() + at + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    Check(got > 0, "cannot read ", path, " to identify the model: ",
          got < 0 ? std::strerror(errno) : "the file is shorter than its size");
    done += static_cast<uint64_t>(got);
  }
}

uint64_t FileDigest(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  Check(fd >= 0, "cannot open ", path, " to identify the model: ", std::strerror(errno));
  std::vector<std::byte> bytes;
  try {
    const off_t end = ::lseek(fd, 0, SEEK_END);
    Check(end >= 0, "cannot size ", path, ": ", std::strerror(errno));
    const uint64_t size = static_cast<uint64_t>(end);
    bytes.resize(sizeof size);
    std::memcpy(bytes.data(), &size, sizeof size);
    AppendRange(fd, path, 0, std::min(size, kHeadBytes), bytes);
    if (size > kHeadBytes + kSampleBytes) {
      // Evenly spaced over the rest, the last one ending at the end of the file.
      const uint64_t span = size - kHeadBytes - kSampleBytes;
      for (int i = 0; i < kSamples; ++i)
        AppendRange(fd, path, kHeadBytes + span * static_cast<uint64_t>(i) / (kSamples - 1),
                    kSampleBytes, bytes);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return Checksum64(bytes);
}

std::string Sanitized(const std::string& name) {
  std::string out;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  if (out.size() > 80) out.resize(80);
  while (!out.empty() && out.front() == '.') out.erase(out.begin());  // No hidden files.
  return out.empty() ? "model" : out;
}

}  // namespace

std::vector<std::string> ModelFiles(const std::string& model_path) {
  std::error_code ec;
  if (fs::is_regular_file(model_path, ec)) return GgufPartPaths(model_path);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(model_path, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string ext = entry.path().extension().string();
    if (name == "config.json" || ext == ".safetensors" || ext == ".gguf")
      files.push_back(entry.path().string());
  }
  Check(!ec, "cannot list model directory ", model_path, ": ", ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

std::string ModelContentId(const std::string& model_path) {
  std::error_code ec;
  const bool directory = fs::is_directory(model_path, ec);
  std::vector<std::byte> all;
  for (const std::string& file : ModelFiles(model_path)) {
    if (directory) {
      // In a directory the names say which file holds what (the safetensors index).
      const std::string name = fs::path(file).filename().string() + "\n";
      const auto* p = reinterpret_cast<const std::byte*>(name.data());
      all.insert(all.end(), p, p + name.size());
    }
    const uint64_t digest = FileDigest(file);
    const auto* p = reinterpret_cast<const std::byte*>(&digest);
    all.insert(all.end(), p, p + sizeof digest);
  }
  char hex[32];
  std::snprintf(hex, sizeof hex, "content-%016llx",
                static_cast<unsigned long long>(Checksum64(all)));
  return hex;
}

std::string ModelShortName(const std::string& model_path) {
  std::error_code ec;
  fs::path path = fs::weakly_canonical(fs::absolute(model_path, ec), ec);
  if (fs::is_regular_file(path, ec)) {
    std::string name = path.filename().string();
    if (const std::optional<GgufSplitName> split = ParseGgufSplitName(name))
      name = split->prefix;
    else if (name.ends_with(".gguf"))
      name.resize(name.size() - 5);
    return Sanitized(name);
  }
  const std::string repo = path.parent_path().parent_path().filename().string();
  if (path.parent_path().filename() == "snapshots" && repo.starts_with("models--"))
    return Sanitized(repo.substr(repo.rfind("--") + 2));
  return Sanitized(path.filename().string());
}

}  // namespace moex
