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

int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

TEST(ResidentMemory, PackingDoesNotKeepTheSourcePages) {
  auto model = LoadModel((testing::SourceDir() / "models/olmoe-demo").string());
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0);
  ResidentMoeExecutor executor(*model);
  const int64_t grown = ResidentBytes() - before;
  const int64_t packed = static_cast<int64_t>(executor.HostCacheBytes());
  ASSERT_GT(packed, 40 << 20);  // The demo model's 50 MB of experts.
  // The packed copy, plus at most a tenth for allocator slack and pages shared with dense
  // tensors; keeping the source would add another `packed`.
  EXPECT_GE(grown, packed * 9 / 10);
  EXPECT_LE(grown, packed * 11 / 10) << "grew " << grown << " bytes for " << packed;
  std::cout << "resident set grew " << grown << " bytes for " << packed << " packed\n";
}

}  // namespace
}  // namespace moex
