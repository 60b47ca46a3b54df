// Where an expert store may be written (CheckStoreTarget), unique temporaries and the
// packers' lock; end to end, `pack --out` and `--store` never destroy what is at the path,
// and concurrent packers of one store take turns.
#include "io/store_output.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/expert_store_format.h"
#include "support/run_command.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using testing::Moex;
using testing::ReadFile;
using testing::RunCommand;

std::string ErrorOf(const std::string& path) {
  try {
    CheckStoreTarget(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(StoreTarget, NewFilesAndStoresAreAcceptedEverythingElseRefused) {
  testing::TempDir dir;
  EXPECT_EQ(CheckStoreTarget(dir / "new.moex"), dir / "new.moex");

  WriteText(dir / "store.moex", std::string(kExpertStoreMagic, 8) + "rest");
  EXPECT_EQ(CheckStoreTarget(dir / "store.moex"), dir / "store.moex");

  WriteText(dir / "config.json", "{\"model_type\": \"olmoe\"}");
  EXPECT_NE(ErrorOf(dir / "config.json").find("not a moex expert store"), std::string::npos);
  EXPECT_EQ(ReadFile(dir / "config.json"), "{\"model_type\": \"olmoe\"}");
  WriteText(dir / "empty", "");
  EXPECT_NE(ErrorOf(dir / "empty").find("not a moex expert store"), std::string::npos);

  fs::create_directory(dir / "sub");
  EXPECT_NE(ErrorOf(dir / "sub").find("is a directory"), std::string::npos);
  EXPECT_NE(ErrorOf("/dev/null").find("not a regular file"), std::string::npos);

  // A link beside its target is followed; one out of the directory is refused.
  fs::create_symlink("store.moex", dir / "current.moex");
  EXPECT_EQ(fs::path(CheckStoreTarget(dir / "current.moex")),
            fs::weakly_canonical(dir.path() / "store.moex"));
  fs::create_symlink("/dev/null", dir / "null.moex");
  EXPECT_NE(ErrorOf(dir / "null.moex").find("outside its directory"), std::string::npos);
  fs::create_symlink(dir.path() / "sub" / "x", dir / "down.moex");
  EXPECT_NE(ErrorOf(dir / "down.moex").find("outside its directory"), std::string::npos);
}

TEST(StoreTarget, TemporaryNamesAreUnique) {
  EXPECT_NE(UniqueTempPath("/x/experts.moex"), UniqueTempPath("/x/experts.moex"));
  EXPECT_EQ(UniqueTempPath("/x/experts.moex").rfind("/x/experts.moex.partial.", 0), 0u);
}

// flock locks belong to an open file description, so two StoreLocks exclude each other
// even within one process.
TEST(StoreTarget, SecondLockWaitsForTheFirst) {
  testing::TempDir dir;
  std::atomic<bool> second_held{false};
  std::thread second;
  {
    const StoreLock first(dir / "s.moex");
    second = std::thread([&] {
      const StoreLock lock(dir / "s.moex");
      second_held = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(second_held.load());
  }
  second.join();
  EXPECT_TRUE(second_held.load());
  // The lock file lives only while the lock is held.
  EXPECT_FALSE(fs::exists(dir / "s.moex.lock"));
}

// Holders remove the lock file as they let go; a waiter whose file was removed under it
// must lock the new one, or two could hold "the" lock at once. Many threads, many rounds:
// never more than one inside.
TEST(StoreTarget, LockStaysExclusiveWhileItsFileComesAndGoes) {
  testing::TempDir dir;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> rounds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        const StoreLock lock(dir / "s.moex");
        if (++inside > 1) ++overlaps;
        std::this_thread::yield();
        --inside;
        ++rounds;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(rounds.load(), 400);
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_FALSE(fs::exists(dir / "s.moex.lock"));
}

std::string CopyOfTinyModel(const testing::TempDir& dir) {
  fs::copy(testing::TinyModelPath(Arch::kOlmoe), dir.path() / "m", fs::copy_options::recursive);
  return dir / "m";
}

std::vector<std::string> Leftovers(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".partial") != std::string::npos ||
        e.path().extension() == ".lock")
      names.push_back(e.path().filename().string());
  return names;
}

TEST(StoreTargetCli, PackAndStoreNeverOverwriteANonStore) {
  testing::TempDir dir;
  const std::string model = CopyOfTinyModel(dir);
  const std::string weights = ReadFile(model + "/model.safetensors");
  const std::string config = ReadFile(model + "/config.json");
  auto pack = RunCommand(Moex("pack --model " + model + " --out " + model + "/model.safetensors"));
  EXPECT_EQ(pack.exit_code, 1);
  EXPECT_NE(pack.err.find("not a moex expert store"), std::string::npos) << pack.err;
  auto gen = RunCommand(Moex("generate --model " + model +
                             " --prompt-ids 1,2 --max-tokens 2 --host-budget 10% --store " + model +
                             "/config.json"));
  EXPECT_EQ(gen.exit_code, 1);
  EXPECT_NE(gen.err.find("not a moex expert store"), std::string::npos) << gen.err;
  EXPECT_EQ(ReadFile(model + "/model.safetensors"), weights);
  EXPECT_EQ(ReadFile(model + "/config.json"), config);

  // A device node stays a device node.
  pack = RunCommand(Moex("pack --model " + model + " --out /dev/null"));
  EXPECT_EQ(pack.exit_code, 1);
  EXPECT_NE(pack.err.find("not a regular file"), std::string::npos) << pack.err;
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(StoreTargetCli, DirectoryIsRefusedAndLeavesNoPartialFile) {
  testing::TempDir dir;
  const std::string model = CopyOfTinyModel(dir);
  fs::create_directory(dir.path() / "stores");
  for (const std::string& args :
       {"pack --model " + model + " --out " + (dir / "stores"),
        "generate --model " + model + " --prompt-ids 1 --max-tokens 1 --host-budget 10% --store " +
            (dir / "stores")}) {
    const auto r = RunCommand(Moex(args));
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
    EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{});
    EXPECT_TRUE(fs::is_empty(dir.path() / "stores"));
  }
}

// Two offloaded generations and a pack of one store at once: every run succeeds with the
// resident run's tokens, and no temporary file is left behind.
TEST(StoreTargetCli, ConcurrentPackersShareOneStore) {
  testing::TempDir dir;
  const std::string model = CopyOfTinyModel(dir);
  const std::string store = dir / "shared.moex";
  const std::string gen =
      "generate --model " + model + " --prompt-ids 5,6,7 --max-tokens 4 --ignore-eos --json";
  const auto resident = RunCommand(Moex(gen));
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  const std::string offloaded = Moex(gen + " --host-budget 10% --store " + store);
  const std::string script =
      "(" + offloaded + " >" + (dir / "a.json") + " 2>" + (dir / "a.err") + "; echo $? >" +
      (dir / "a.rc") + ") & (" + offloaded + " >" + (dir / "b.json") + " 2>" + (dir / "b.err") +
      "; echo $? >" + (dir / "b.rc") + ") & (" + Moex("pack --model " + model + " --out " + store) +
      " >/dev/null 2>" + (dir / "c.err") + "; echo $? >" + (dir / "c.rc") + ") & wait";
  ASSERT_EQ(RunCommand(script).exit_code, 0);
  for (const char* run : {"a", "b", "c"})
    EXPECT_EQ(ReadFile(dir / (std::string(run) + ".rc")), "0\n")
        << run << ": " << ReadFile(dir / (std::string(run) + ".err"));
  const auto want = nlohmann::json::parse(resident.out)["tokens"];
  for (const char* run : {"a", "b"})
    EXPECT_EQ(nlohmann::json::parse(ReadFile(dir / (std::string(run) + ".json")))["tokens"], want)
        << run;
  EXPECT_EQ(Leftovers(dir.path()), std::vector<std::string>{});
  // The finished store is valid: a later run uses it without packing.
  const auto again = RunCommand(offloaded);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err.find("packing the experts"), std::string::npos) << again.err;
}

}  // namespace
}  // namespace moex
