// Batched generation, KV-cache consistency, stop tokens and sampling.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/sampler.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

struct Engine {
  explicit Engine(Arch arch)
      : model(LoadModel(testing::TinyModelPath(arch))),
        executor(*model),
        transformer(*model, executor) {}
  std::unique_ptr<Model> model;
  ResidentMoeExecutor executor;
  Transformer transformer;
};

GenerationRequest Request(std::vector<int32_t> prompt, int max_tokens, float temperature = 0.0f,
                          uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  return r;
}

class GenerationTest : public ::testing::TestWithParam<Arch> {};

TEST_P(GenerationTest, BatchedGenerationEqualsOneSequenceAtATime) {
  Engine e(GetParam());
  Generator generator(e.transformer);
  const std::vector<GenerationRequest> requests = {
      Request({5, 9, 200, 31}, 12), Request({77}, 9),
      Request({1, 2, 3, 4, 5, 6, 7, 8, 9}, 12, 0.8f, 3), Request({400, 401}, 5, 1.0f, 11)};
  const auto together = generator.Generate(requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto alone = generator.Generate({requests[i]});
    EXPECT_EQ(alone[0].tokens, together[i].tokens) << "request " << i;
    EXPECT_EQ(alone[0].finish_reason, together[i].finish_reason);
  }
}

TEST_P(GenerationTest, IncrementalDecodeIsBitIdenticalToFullPrefill) {
  Engine e(GetParam());
  const std::vector<int32_t> ids = {3, 141, 59, 26, 53, 58, 97, 93};
  const int64_t vocab = e.model->config.vocab_size;
  KvCache full(e.model->config, 16);
  BatchItem all{&full, ids, true};
  const std::vector<float> prefill = e.transformer.Forward({&all, 1});
  KvCache step(e.model->config, 16);
  for (size_t i = 0; i < ids.size(); ++i) {
    BatchItem one{&step, std::span<const int32_t>(&ids[i], 1), false};
    const std::vector<float> logits = e.transformer.Forward({&one, 1});
    ASSERT_EQ(0, std::memcmp(logits.data(), &prefill[i * vocab], sizeof(float) * vocab))
        << "position " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, GenerationTest,
                         ::testing::Values(Arch::kOlmoe, Arch::kMixtral, Arch::kQwen2Moe,
                                           Arch::kQwen3Moe, Arch::kDeepseekMoe, Arch::kPhiMoe,
                                           Arch::kDeepseekV2, Arch::kDeepseekV3, Arch::kGlm4Moe,
                                           Arch::kGptOss, Arch::kMiniMaxM2, Arch::kQwen3Next,
                                           Arch::kQwen35Moe, Arch::kLlama4),
                         [](const ::testing::TestParamInfo<Arch>& info) {
                           return std::string(ArchName(info.param));
                         });

TEST(GeneratorTest, StopsAtStopTokenAndAtLength) {
  Engine e(Arch::kOlmoe);
  Generator generator(e.transformer);
  const auto free_run = generator.Generate({Request({10, 20, 30}, 6)});
  ASSERT_EQ(free_run[0].tokens.size(), 6u);
  EXPECT_EQ(free_run[0].finish_reason, "length");
  GenerationRequest stop = Request({10, 20, 30}, 6);
  stop.stop_ids = {free_run[0].tokens[2]};
  const auto stopped = generator.Generate({stop});
  // Greedy decoding repeats the free run up to the first occurrence of the stop token.
  size_t first = 0;
  while (free_run[0].tokens[first] != stop.stop_ids[0]) ++first;
  EXPECT_EQ(stopped[0].finish_reason, "stop");
  EXPECT_EQ(stopped[0].tokens, std::vector<int32_t>(free_run[0].tokens.begin(),
                                                    free_run[0].tokens.begin() + first + 1));
}

TEST(GeneratorTest, RejectsPromptsBeyondTheContext) {
  Engine e(Arch::kOlmoe);
  Generator generator(e.transformer);
  const int context = e.model->config.max_position_embeddings;
  EXPECT_THROW(generator.Generate({Request(std::vector<int32_t>(context, 1), 1)}), Error);
  EXPECT_THROW(generator.Generate({Request({}, 1)}), Error);
  EXPECT_THROW(generator.Generate({Request({1, 1000000}, 1)}), Error);
}

TEST(SamplerTest, PenaltiesAndLogitBiasAdjustAsOpenAiDefinesThem) {
  SamplingParams p;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.logit_bias = {{1, 3.0f}, {4, -100.0f}, {9, 1.0f}};  // 9: outside, ignored.
  std::vector<float> logits = {1, 1, 1, 1, 1};
  const std::vector<int32_t> generated = {2, 0, 2, 2, 7};  // 7: outside, ignored.
  AdjustLogits(p, generated, 0, logits);
  // Token 0: once, 1 - 0.25 - 0.5; token 1: bias 3; token 2: three times, 1 - 0.75 - 0.5;
  // token 3: untouched; token 4: bias -100.
  EXPECT_EQ(logits, (std::vector<float>{0.25f, 4.0f, -0.25f, 1.0f, -99.0f}));
  EXPECT_TRUE(p.AdjustsLogits());
  EXPECT_FALSE(SamplingParams{}.AdjustsLogits());
  // A -100 bias all but bans a token, even for greedy sampling.
  SamplingParams ban;
  ban.logit_bias = {{3, -100.0f}};
  std::vector<float> l = {0, 0, 0, 50, 0};
  AdjustLogits(ban, {}, 0, l);
  EXPECT_NE(ArgMax(l), 3);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesSkipThePrompt) {
  SamplingParams p;
  p.presence_penalty = 1.0f;
  std::vector<float> logits = {0, 0, 0};
  // Prompt {0, 1}, generated {1}: only token 1 was generated.
  AdjustLogits(p, std::vector<int32_t>{0, 1, 1}, 2, logits);
  EXPECT_EQ(logits, (std::vector<float>{0, -1, 0}));
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.repeat_last_n = 3;
  EXPECT_TRUE(p.AdjustsLogits());
  std::vector<float> logits = {4, -4, 4, 4, 4};
  // Context {3, 0, 1, 0}: the last three are {0, 1, 0}, so token 3 is outside the window;
  // a token seen twice is penalised once (as llama.cpp and Hugging Face do), and the
  // prompt counts (its first two tokens here).
  AdjustLogits(p, std::vector<int32_t>{3, 0, 1, 0}, 2, logits);
  EXPECT_EQ(logits, (std::vector<float>{2, -8, 4, 4, 4}));
  // -1: the whole context.
  p.repeat_last_n = -1;
  logits = {4, -4, 4, 4, 4};
  AdjustLogits(p, std::vector<int32_t>{3, 0, 1, 0}, 2, logits);
  EXPECT_EQ(logits, (std::vector<float>{2, -8, 4, 2, 4}));
  // 0 turns it off.
  p.repeat_last_n = 0;
  EXPECT_FALSE(p.AdjustsLogits());
}

TEST(SamplerTest, MinPKeepsOnlyTokensNearTheMostLikely) {
  // Probabilities after softmax at temperature 1: token 0 has e^0 = 1 relative to the
  // best, token 1 e^-1 = 0.37, token 2 e^-3 = 0.05. min_p 0.2 keeps tokens 0 and 1.
  const std::vector<float> logits = {0, -1, -3};
  SamplingParams p{1.0f, 0, 1.0f, 5};
  p.min_p = 0.2f;
  Sampler s(p);
  std::array<int, 3> seen{};
  for (int i = 0; i < 2000; ++i) ++seen[static_cast<size_t>(s.Sample(logits))];
  EXPECT_EQ(seen[2], 0);
  EXPECT_GT(seen[1], 400);  // 0.37 / 1.37 = 27% of draws.
  EXPECT_GT(seen[0], 1200);
  // min_p 1 is greedy (ties aside).
  p.min_p = 1.0f;
  Sampler greedy(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(greedy.Sample(logits), 0);
}

TEST(SamplerTest, GreedyTakesTheFirstMaximum) {
  EXPECT_EQ(ArgMax(std::vector<float>{1, 3, 3, 2}), 1);
  Sampler greedy(SamplingParams{});
  EXPECT_EQ(greedy.Sample(std::vector<float>{0, -1, 5, 5}), 2);
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  const std::vector<float> logits = {0.5f, 2.0f, 1.9f, -3.0f};
  Sampler top_k(SamplingParams{1.0f, 1, 1.0f, 42});
  Sampler top_p(SamplingParams{1.0f, 0, 0.01f, 42});
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(top_k.Sample(logits), 1);
    EXPECT_EQ(top_p.Sample(logits), 1);
  }
}

TEST(SamplerTest, SameSeedSameDrawsAndFrequenciesFollowSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4
  Sampler a(SamplingParams{1.0f, 0, 1.0f, 9}), b(SamplingParams{1.0f, 0, 1.0f, 9});
  int ones = 0;
  for (int i = 0; i < 4000; ++i) {
    const int32_t x = a.Sample(logits);
    EXPECT_EQ(x, b.Sample(logits));
    ones += x;
  }
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);  // ~4.5 standard deviations.
}

TEST(SamplerTest, RejectsBadParameters) {
  EXPECT_THROW(Sampler(SamplingParams{-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, -2, 1.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(Sampler(SamplingParams{1.0f, 0, 1.5f, 0}), Error);
  SamplingParams bad;
  bad.min_p = 1.5f;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = {};
  bad.repetition_penalty = 0.0f;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = {};
  bad.repeat_last_n = -2;
  EXPECT_THROW(Sampler{bad}, Error);
}

}  // namespace
}  // namespace moex
