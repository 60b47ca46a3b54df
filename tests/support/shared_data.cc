#include "support/shared_data.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

namespace moex::testing {

std::filesystem::path SourceDir() { return std::filesystem::path(MOEX_SOURCE_DIR); }

std::filesystem::path SharedDataDir() { return SourceDir() / ".." / "shared" / "data"; }

namespace {

// Prints, at the end of the test program, how many tests were skipped for lack of
// ../shared/data, so a run without it never looks like a full pass.
class SharedDataSkipSummary : public ::testing::Environment {
 public:
  void Add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++count_;
    if (first_.empty()) first_ = what;
  }
  void TearDown() override {
    if (count_ == 0) return;
    std::printf("moex tests: %d test(s) skipped because ../shared/data is missing (%s, first: "
                "%s); put the data there, or run with CI=true to make them fail\n",
                count_, SharedDataDir().string().c_str(), first_.c_str());
  }

 private:
  std::mutex mutex_;
  int count_ = 0;
  std::string first_;
};

SharedDataSkipSummary* Summary() {
  static SharedDataSkipSummary* summary = [] {
    auto* s = new SharedDataSkipSummary;
    ::testing::AddGlobalTestEnvironment(s);  // gtest owns it.
    return s;
  }();
  return summary;
}

// Registered before main() runs the tests: environments added later are not torn down.
[[maybe_unused]] SharedDataSkipSummary* const kRegistered = Summary();

}  // namespace

bool SharedDataRequired() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && (std::string(ci) == "true" || std::string(ci) == "1");
}

void CountSharedDataSkip(const std::string& what) { Summary()->Add(what); }

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
