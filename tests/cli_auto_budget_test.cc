// --host-budget auto: the arithmetic by hand, the memory reading, and the commands.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/auto_budget.h"
#include "support/run_command.h"
#include "support/tiny_models.h"

namespace moex::cli {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kMiB = int64_t{1} << 20;

TEST(AutoBudget, LeavesRoomForDenseWeightsKvCacheAndAMargin) {
  // 16 GiB available: margin 10 % = 1.6 GiB; 16 - 2 - 1 - 1.6 = 11.4 GiB for experts.
  AutoBudget a = ComputeAutoBudget(16 * kGiB, 2 * kGiB, kGiB, 30 * kGiB);
  EXPECT_EQ(a.margin, 16 * kGiB / 10);
  EXPECT_EQ(a.budget, 16 * kGiB - 2 * kGiB - kGiB - 16 * kGiB / 10);
  EXPECT_FALSE(a.fits);
  EXPECT_EQ(a.Describe(),
            "11.4 GiB for experts (of 16.0 GiB available: dense weights 2.0 GiB, KV cache "
            "1.0 GiB, margin 1.6 GiB; all experts take 30.0 GiB)");
  // Small machines keep at least 512 MiB; everything fitting means no offloading.
  a = ComputeAutoBudget(2 * kGiB, 256 * kMiB, 0, kGiB);
  EXPECT_EQ(a.margin, 512 * kMiB);
  EXPECT_EQ(a.budget, 2 * kGiB - 256 * kMiB - 512 * kMiB);
  EXPECT_TRUE(a.fits);
  // Less than nothing left: 0, never negative.
  EXPECT_EQ(ComputeAutoBudget(kGiB, 2 * kGiB, 0, kGiB).budget, 0);
}

TEST(AutoBudget, ReadsTheMemoryAvailable) {
  const int64_t available = AvailableMemoryBytes();
  EXPECT_GT(available, 64 * kMiB);
  EXPECT_EQ(FormatBytes(512 * kMiB), "512 MiB");
}

TEST(AutoBudget, TheCommandsSayWhatAutoChoseAndRefuseABudgetBeyondMemory) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  // The tiny model fits: auto keeps every expert resident and says so.
  auto r = testing::RunCommand(testing::Moex("generate --model " + model +
                                             " --prompt-ids 1 -n 1 --host-budget auto --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--host-budget auto: every expert fits"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["offload"]["policy"], "resident");
  // More than this machine has.
  r = testing::RunCommand(
      testing::Moex("generate --model " + model + " --prompt-ids 1 -n 1 --host-budget 900TiB"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("of memory available"), std::string::npos) << r.err;
}

TEST(AutoBudget, AModelLargerThanMemoryIsOffloadedByDefault) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  // As if the machine had the margin (512 MiB) plus the model's files: the experts less the
  // KV cache (of a 3-token context) fit, so nearly all are cached, the rest read from the
  // store.
  const int64_t limit = 512 * kMiB + ModelFileBytes(model);
  const std::string env = "MOEX_MEMORY_LIMIT=" + std::to_string(limit) + " ";
  auto r = testing::RunCommand(env + testing::Moex("generate --model " + model +
                                                   " --prompt-ids 1,2 -n 1 -c 3 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("does not fit in memory, so experts are offloaded"), std::string::npos)
      << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["offload"].value("policy", ""), "resident");
  EXPECT_GT(j["memory"]["host_cache_bytes"].get<int64_t>(), 0);
  // The same tokens as resident.
  const auto resident = testing::RunCommand(
      testing::Moex("generate --model " + model + " --prompt-ids 1,2 -n 1 --json"));
  EXPECT_EQ(nlohmann::json::parse(resident.out)["tokens"], j["tokens"]);
  // Far too little: a clear error, not a run that thrashes.
  r = testing::RunCommand("MOEX_MEMORY_LIMIT=1000000 " +
                          testing::Moex("generate --model " + model + " --prompt-ids 1 -n 1"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the model does not fit in memory"), std::string::npos) << r.err;
  r = testing::RunCommand("MOEX_MEMORY_LIMIT=lots " +
                          testing::Moex("generate --model " + model + " --prompt-ids 1 -n 1"));
  EXPECT_NE(r.err.find("MOEX_MEMORY_LIMIT must be a byte count"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moex::cli
