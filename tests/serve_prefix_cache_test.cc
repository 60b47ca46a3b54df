// Prefix caching in the server, end to end on tiny models of every attention kind (GQA,
// MLA's latent cache, sliding windows with sinks, LongRoPE) resident and offloaded: a
// conversation whose turns re-send the history gets exactly the tokens a server without
// the cache gives, reuses the hand-counted number of prompt tokens (usage's
// prompt_tokens_details.cached_tokens), and /metrics counts the hits.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/server.h"
#include "support/serve_fixtures.h"
#include "support/tiny_models.h"

namespace moex::serve {
namespace {

using nlohmann::json;
using testing::RunningServer;

struct Case {
  Arch arch;
  std::string budget;
  std::string name;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

ServerOptions Options(int64_t prefix_bytes) {
  ServerOptions o;
  o.scheduler.max_running = 8;
  o.scheduler.max_batch_tokens = 12;
  o.scheduler.prefill_chunk = 4;  // Not a multiple of the block: chunks realign after a hit.
  o.scheduler.prefix_cache_bytes = prefix_bytes;
  o.scheduler.prefix_block_tokens = 3;
  return o;
}

struct Reply {
  std::vector<int32_t> tokens;
  int64_t cached = -1;
};

Reply Complete(const RunningServer& s, const std::vector<int32_t>& prompt, int max_tokens,
               double temperature = 0, int seed = 0) {
  const HttpResult r = s.Post("/v1/completions", {{"prompt", prompt},
                                                  {"max_tokens", max_tokens},
                                                  {"temperature", temperature},
                                                  {"seed", seed},
                                                  {"ignore_eos", true}});
  EXPECT_EQ(r.status, 200) << r.body << r.error;
  if (r.status != 200) return {};
  const json body = json::parse(r.body);
  return {body["choices"][0]["token_ids"].get<std::vector<int32_t>>(),
          body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>()};
}

std::vector<int32_t> Join(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class ServePrefixCache : public ::testing::TestWithParam<Case> {};

TEST_P(ServePrefixCache, ATurnThatResendsTheHistoryReusesItLosslessly) {
  cli::ModelOptions model;
  model.model = testing::TinyModelPath(GetParam().arch);
  model.host_budget = GetParam().budget;
  model.policy = "lru";
  model.policy_worker = "sync";
  RunningServer cached(model, Options(int64_t{64} << 20));
  RunningServer plain(model, Options(0));

  const std::vector<int32_t> p = {30, 31, 32, 33, 34, 35, 36, 37, 38, 39};
  struct Turn {
    std::vector<int32_t> prompt;
    int max_tokens;
    double temperature;
  };
  // Each turn's prompt depends on earlier replies, which both servers must agree on.
  std::vector<Reply> with, without;
  auto run = [&](const std::vector<int32_t>& prompt, int max_tokens, double temperature = 0) {
    with.push_back(Complete(cached, prompt, max_tokens, temperature, 5));
    without.push_back(Complete(plain, prompt, max_tokens, temperature, 5));
    EXPECT_EQ(with.back().tokens, without.back().tokens) << "turn " << with.size();
    EXPECT_EQ(without.back().cached, 0);
    return with.back().tokens;
  };
  // 1. 10 prompt tokens + 12 out. The cache then holds the rows of 21 tokens (the last
  //    reply token is never fed back): 7 blocks of 3.
  const std::vector<int32_t> t1 = run(p, 12);
  // 2. The history again and 5 new tokens (27; at most 26 reusable): the 7 blocks.
  const std::vector<int32_t> p2 = Join(Join(p, t1), {40, 41, 42, 43, 44});
  const std::vector<int32_t> t2 = run(p2, 12);
  // 3. The first 7 prompt tokens, then others (11): blocks [0, 3) and [3, 6).
  run(Join(std::vector<int32_t>(p.begin(), p.begin() + 7), {90, 91, 92, 93}), 8);
  // 4. Turn 2's history and 3 more (42 tokens): the 36 tokens of turn 2's 12 whole blocks
  //    (it fed 38). Past LongRoPE's switch (32 positions for tiny phimoe) the prompt rotates
  //    with the long set, which no cached block was computed with: nothing reused.
  run(Join(Join(p2, t2), {50, 51, 52}), 6);
  // 5. Sampled with a seed: the same draws either way; 3 blocks of the 11 tokens.
  run(Join(p, {7}), 6, 0.9);

  const bool long_rope = GetParam().arch == Arch::kPhiMoe;
  const std::vector<int64_t> expected = {0, 21, 6, long_rope ? 0 : 36, 9};
  ASSERT_EQ(with.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_EQ(with[i].cached, expected[i]) << "turn " << i + 1;

  // All five again at once: the batch shares passes, every prompt hits, same tokens.
  const std::vector<std::vector<int32_t>> prompts = {
      p, p2, Join(std::vector<int32_t>(p.begin(), p.begin() + 7), {90, 91, 92, 93}),
      Join(Join(p2, t2), {50, 51, 52}), Join(p, {7})};
  const std::vector<int> max_tokens = {12, 12, 8, 6, 6};
  std::vector<Reply> again(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] {
      again[i] = Complete(cached, prompts[i], max_tokens[i], i == 4 ? 0.9 : 0.0, 5);
    });
  for (auto& c : clients) c.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(again[i].tokens, without[i].tokens) << "concurrent request " << i;
    EXPECT_GT(again[i].cached, 0) << "concurrent request " << i;
  }

  const std::string metrics = cached.Get("/metrics").body;
  EXPECT_NE(metrics.find("moex_prefix_cache_lookups_total 10\n"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(long_rope ? "moex_prefix_cache_hits_total 8\n"
                                   : "moex_prefix_cache_hits_total 9\n"),
            std::string::npos)
      << metrics;
  const std::string off = plain.Get("/metrics").body;
  EXPECT_NE(off.find("moex_prefix_cache_lookups_total 0\n"), std::string::npos) << off;
  EXPECT_NE(off.find("moex_prefix_cache_budget_bytes 0\n"), std::string::npos) << off;
}

INSTANTIATE_TEST_SUITE_P(
    AttentionKinds, ServePrefixCache,
    ::testing::Values(Case{Arch::kQwen3Moe, "", "GqaQwen3"}, Case{Arch::kDeepseekV2, "", "Mla"},
                      Case{Arch::kGptOss, "", "SlidingWindowAndSinks"},
                      Case{Arch::kPhiMoe, "", "LongRope"},
                      Case{Arch::kOlmoe, "25%", "Offloaded25"}),
    [](const auto& info) { return info.param.name; });

// Gated DeltaNet layers (qwen3_next) keep a recurrent state that blocks of rows cannot
// restore: with the prefix cache on, a turn that re-sends the history reuses nothing and
// gets the tokens of a server without the cache; several requests at once each continue
// their own state.
TEST(ServePrefixCacheRecurrent, GatedDeltaNetReusesNothingAndAgrees) {
  cli::ModelOptions model;
  model.model = testing::TinyModelPath(Arch::kQwen3Next);
  model.policy = "lru";
  model.policy_worker = "sync";
  RunningServer cached(model, Options(int64_t{64} << 20));
  RunningServer plain(model, Options(0));
  const std::vector<int32_t> p = {30, 31, 32, 33, 34, 35, 36, 37, 38, 39};
  const Reply first = Complete(cached, p, 5);
  EXPECT_EQ(first.tokens, Complete(plain, p, 5).tokens);
  const std::vector<int32_t> again = Join(Join(p, first.tokens), {40, 41, 42});
  Reply second, second_plain, other, other_plain;
  std::thread a([&] { second = Complete(cached, again, 5); });
  std::thread b([&] { other = Complete(cached, {7, 8, 9, 10, 11, 12, 13}, 6); });
  a.join();
  b.join();
  second_plain = Complete(plain, again, 5);
  other_plain = Complete(plain, {7, 8, 9, 10, 11, 12, 13}, 6);
  EXPECT_EQ(second.tokens, second_plain.tokens);
  EXPECT_EQ(other.tokens, other_plain.tokens);
  EXPECT_EQ(second.cached, 0);
  const std::string metrics = cached.Get("/metrics").body;
  EXPECT_NE(metrics.find("moex_prefix_cache_hits_total 0\n"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace moex::serve
