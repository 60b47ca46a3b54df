// Loading a model resident packs its experts neuron-major; the mapped source pages it read
// must leave the resident set, or every model needs twice its expert bytes of RAM.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <string>

#include "engine/moe_executor.h"
#include "model/model.h"
#include "support/shared_data.h"

namespace moex {
namespace {

// A resident-set field of /proc/self/status ("RssAnon", "RssFile"), in bytes.
int64_t ResidentBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  return -1;
}

// Anonymous and file-backed pages are counted apart: how many mapped file pages loading
// already left resident depends on the kernel (6.x maps page-cache folios of up to 2 MB at
// a fault, so dense tensors next to the experts bring expert pages in too).
TEST(ResidentMemory, PackingDoesNotKeepTheSourcePages) {
  auto model = LoadModel((testing::SourceDir() / "models/olmoe-demo").string());
  const int64_t anon_before = ResidentBytes("RssAnon"), file_before = ResidentBytes("RssFile");
  ASSERT_GE(anon_before, 0);
  ASSERT_GE(file_before, 0);
  ResidentMoeExecutor executor(*model);
  const int64_t anon_grown = ResidentBytes("RssAnon") - anon_before;
  const int64_t file_grown = ResidentBytes("RssFile") - file_before;
  const int64_t packed = static_cast<int64_t>(executor.HostCacheBytes());
  ASSERT_GT(packed, 40 << 20);  // The demo model's 50 MB of experts.
  // The packed copy, plus at most a tenth for allocator slack.
  EXPECT_GE(anon_grown, packed * 9 / 10);
  EXPECT_LE(anon_grown, packed * 11 / 10) << "anonymous memory grew " << anon_grown;
  // Packing read every source page; keeping them would add another `packed` of file pages.
  EXPECT_LE(file_grown, packed / 10) << "file pages grew " << file_grown;
  std::cout << "anonymous memory grew " << anon_grown << " bytes for " << packed
            << " packed; file pages " << file_grown << "\n";
}

}  // namespace
}  // namespace moex
