// The expert placement of expert parallelism: hand-computed balanced placements, the file
// form, and the refusals of a placement that does not fit the model or the run.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "dist/expert_placement.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

namespace moex::dist {
namespace {

using testing::ErrorOf;

std::vector<int> Row(const ExpertPlacement& p, int layer, int experts) {
  std::vector<int> row;
  for (int e = 0; e < experts; ++e) row.push_back(p.rank_of(layer, e));
  return row;
}

TEST(ExpertPlacementTest, WithoutCountsExpertsAreDealtOutInIdOrder) {
  const ExpertPlacement p = ExpertPlacement::Balanced(3, {1, 2}, 5, 2);
  EXPECT_EQ(Row(p, 1, 5), (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(Row(p, 2, 5), (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(p.ExpertsOf(1, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(p.ExpertCount(0), 6);
  EXPECT_EQ(p.ExpertCount(1), 4);
}

TEST(ExpertPlacementTest, HotExpertsGoToDifferentRanksAndEachRankHoldsItsShare) {
  // Counts 10, 40, 30, 20 on two ranks, at most two experts each. By descending count:
  // expert 1 (40) -> rank 0; expert 2 (30) -> rank 1 (load 0 < 40); expert 3 (20) -> rank 1
  // (30 < 40); expert 0 (10) -> rank 0, as rank 1 is full.
  const ExpertPlacement p = ExpertPlacement::Balanced(1, {0}, 4, 2, {{10, 40, 30, 20}});
  EXPECT_EQ(Row(p, 0, 4), (std::vector<int>{0, 0, 1, 1}));
  // Three ranks, cap 2: 40 -> r0, 30 -> r1, 20 -> r2, 10 -> r2 (load 20 is least).
  const ExpertPlacement q = ExpertPlacement::Balanced(1, {0}, 4, 3, {{10, 40, 30, 20}});
  EXPECT_EQ(Row(q, 0, 4), (std::vector<int>{2, 0, 1, 2}));
}

TEST(ExpertPlacementTest, TheFileFormRoundTripsAndFitsTheModel) {
  const ExpertPlacement p = ExpertPlacement::Balanced(4, {1, 3}, 6, 3, {{}, {6, 5, 4, 3, 2, 1}});
  const ExpertPlacement q = ExpertPlacement::FromJson(p.ToJson());
  EXPECT_EQ(q.ToJson(), p.ToJson());
  EXPECT_NO_THROW(q.Validate(4, {1, 3}, 6, 3));
  testing::TempDir dir;
  std::ofstream(dir / "p.json") << p.ToJson().dump();
  EXPECT_EQ(ExpertPlacement::Load(dir / "p.json").ToJson(), p.ToJson());
}

TEST(ExpertPlacementTest, APlacementThatDoesNotFitIsRefusedWithTheReason) {
  const ExpertPlacement p = ExpertPlacement::Balanced(4, {1, 3}, 6, 2);
  EXPECT_NE(ErrorOf([&] {
              p.Validate(4, {1, 3}, 6, 3);
            }).find("is for 2 ranks, but the run has 3"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              p.Validate(4, {1, 3}, 8, 2);
            }).find("gives 6 experts of layer 1"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              p.Validate(4, {1, 2, 3}, 6, 2);
            }).find("0 experts of layer 2"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { p.Validate(4, {3}, 6, 2); }).find("layer 1, which has no routed"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { p.Validate(2, {1}, 6, 2); }).find("the model has 2 layers"),
            std::string::npos);
}

TEST(ExpertPlacementTest, MalformedFilesAreRefusedNamingWhatIsWrong) {
  const auto error = [](const char* text) {
    return ErrorOf([&] { ExpertPlacement::FromJson(nlohmann::json::parse(text)); });
  };
  EXPECT_NE(error("[]").find("an expert placement is"), std::string::npos);
  EXPECT_NE(error(R"({"ranks": 0, "layers": []})").find("ranks must be"), std::string::npos);
  EXPECT_NE(error(R"({"ranks": 2, "layers": [{"layer": 1, "rank_of_expert": [0, 2]}]})")
                .find("expert 1 is on rank 2, but there are 2 ranks"),
            std::string::npos);
  EXPECT_NE(error(R"({"ranks": 2, "layers": [{"layer": 1, "rank_of_expert": [0]},
                                            {"layer": 1, "rank_of_expert": [1]}]})")
                .find("listed twice"),
            std::string::npos);
  EXPECT_NE(error(R"({"ranks": 2, "layers": [{"layer": -1, "rank_of_expert": [0]}]})")
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(error(R"({"ranks": 2, "layers": [{"layer": 0, "rank_of_expert": ["a"]}]})")
                .find("ranks are integers"),
            std::string::npos);
  testing::TempDir dir;
  std::ofstream(dir / "bad.json") << "{ not json";
  EXPECT_NE(ErrorOf([&] { ExpertPlacement::Load(dir / "bad.json"); }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ExpertPlacement::Load(dir / "missing.json"); }).find("missing.json"),
            std::string::npos);
}

// Mutations of a valid placement document: each parses or is refused with an Error, and
// one that parses and validates gives every expert a rank in range.
TEST(ExpertPlacementTest, MutatedDocumentsNeverCrash) {
  const std::string base = ExpertPlacement::Balanced(3, {0, 2}, 4, 2).ToJson().dump();
  std::mt19937_64 rng(45);
  const std::string alphabet = "0123456789-[]{},:\" abcrlyens";
  int valid = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string s = base;
    for (int m = 0; m < 3; ++m) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          s.erase(at, 1);
          break;
        default:
          s.insert(at, 1, alphabet[rng() % alphabet.size()]);
      }
    }
    const nlohmann::json doc = nlohmann::json::parse(s, nullptr, false);
    if (doc.is_discarded()) continue;
    try {
      const ExpertPlacement p = ExpertPlacement::FromJson(doc);
      p.Validate(3, {0, 2}, 4, 2);
      for (int l : {0, 2})
        for (int e = 0; e < 4; ++e) ASSERT_TRUE(p.rank_of(l, e) == 0 || p.rank_of(l, e) == 1);
      ++valid;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(valid, 0);
}

}  // namespace
}  // namespace moex::dist
