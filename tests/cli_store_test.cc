// The expert store from a user's side: the first offloaded run packs it into the cache
// directory named after the model (saying how big and where), nothing is written beside the
// model and no lock file stays; a copy of the model finds the same store; `moex store list`
// and `moex store rm` show and remove stores; an unusable cache directory is a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/run_command.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using testing::Moex;
using testing::RunCommand;

std::vector<std::string> Names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(StoreCli, PackedOnceIntoTheCacheListedAndRemoved) {
  testing::TempDir dir;
  fs::copy(testing::TinyModelPath(Arch::kOlmoe), dir.path() / "m", fs::copy_options::recursive);
  const std::vector<std::string> model_files = Names(dir.path() / "m");
  const std::string env = "env XDG_CACHE_HOME=" + (dir / "cache") + " ";
  auto run = [&](const std::string& model) {
    return RunCommand(env + Moex("generate --model " + model +
                                 " --prompt-ids 1,2 --max-tokens 2 --host-budget 50% --json"));
  };
  const auto first = run(dir / "m");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("packing the experts once: "), std::string::npos) << first.err;
  EXPECT_NE(first.err.find(" GB into " + (dir / "cache/moex/m-")), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("GB free there)"), std::string::npos) << first.err;
  EXPECT_EQ(Names(dir.path() / "m"), model_files);  // Nothing beside the model.
  const std::vector<std::string> stores = Names(dir.path() / "cache/moex");
  ASSERT_EQ(stores.size(), 1u);  // The store alone: no lock file, no temporary.
  EXPECT_TRUE(stores[0].starts_with("m-") && stores[0].ends_with(".experts.moex")) << stores[0];

  // Again, and from a copy of the model elsewhere: the store is used as it is.
  fs::copy(dir.path() / "m", dir.path() / "copy", fs::copy_options::recursive);
  for (const std::string& model : {dir / "m", dir / "copy"}) {
    const auto again = run(model);
    ASSERT_EQ(again.exit_code, 0) << again.err;
    EXPECT_EQ(again.err.find("packing"), std::string::npos) << again.err;
  }
  EXPECT_EQ(Names(dir.path() / "cache/moex"), stores);

  const auto list = RunCommand(env + Moex("store list"));
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find(stores[0]), std::string::npos) << list.out;
  EXPECT_NE(list.out.find(dir / "m"), std::string::npos) << list.out;
  const auto json = RunCommand(env + Moex("store list --json"));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["dir"], dir / "cache/moex");
  ASSERT_EQ(j["stores"].size(), 1u);
  EXPECT_EQ(j["stores"][0]["name"], stores[0]);
  EXPECT_EQ(j["stores"][0]["arch"], "olmoe");
  EXPECT_EQ(j["stores"][0]["model_exists"], true);
  EXPECT_EQ(j["stores"][0]["problem"], "");
  EXPECT_EQ(j["bytes"], fs::file_size(dir.path() / "cache/moex" / stores[0]));

  // rm: unknown names and no names are errors; a unique start of the name removes it.
  auto rm = RunCommand(env + Moex("store rm zzz"));
  EXPECT_EQ(rm.exit_code, 1);
  EXPECT_NE(rm.err.find("no expert store named zzz"), std::string::npos) << rm.err;
  rm = RunCommand(env + Moex("store rm"));
  EXPECT_EQ(rm.exit_code, 1);
  EXPECT_NE(rm.err.find("--all"), std::string::npos) << rm.err;
  rm = RunCommand(env + Moex("store rm m-"));
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(rm.out.find("removed "), std::string::npos) << rm.out;
  EXPECT_TRUE(fs::is_empty(dir.path() / "cache/moex"));
  EXPECT_EQ(RunCommand(env + Moex("store list")).out,
            "no expert stores in " + (dir / "cache/moex") + "\n");

  // --model finds a model's store wherever the cache keeps it; --dir names another directory.
  ASSERT_EQ(run(dir / "copy").exit_code, 0);
  rm = RunCommand(env + Moex("store rm --model " + (dir / "m")));
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_TRUE(fs::is_empty(dir.path() / "cache/moex"));
  // Once more: the model has no store now, which is an error naming the store it looked for.
  rm = RunCommand(env + Moex("store rm --model " + (dir / "m")));
  EXPECT_EQ(rm.exit_code, 1);
  EXPECT_NE(rm.err.find("no expert store of " + (dir / "m")), std::string::npos) << rm.err;
  EXPECT_NE(rm.err.find("(it would be named m-"), std::string::npos) << rm.err;
  EXPECT_EQ(RunCommand(Moex("store list --dir " + (dir / "cache/moex"))).out,
            "no expert stores in " + (dir / "cache/moex") + "\n");
}

TEST(StoreCli, UnusableCacheDirectoryIsAClearError) {
  testing::TempDir dir;
  std::ofstream(dir / "file") << "x";
  const auto r = RunCommand("env XDG_CACHE_HOME=" + (dir / "file") + " " +
                            Moex("generate --prompt-ids 1,2 --max-tokens 1 --host-budget 50%"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot create the expert store directory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--store FILE"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moex
