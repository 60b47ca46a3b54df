// Phi-3.5-MoE (phimoe): sparsemixer routing and LongRoPE on hand-computed cases, the
// LongRoPE short/long switch against the double-precision reference across
// original_max_position_embeddings (one pass, chunked, and token by token), and the
// clear errors for configurations and checkpoints moex cannot run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/rope.h"
#include "engine/router.h"
#include "engine/sampler.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "model/random_model.h"
#include "policy/policy.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"
#include "support/policy_events.h"
#include "support/random_weight_source.h"
#include "support/reference_model.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "tiers/cache_plan.h"

namespace moex {
namespace {

ModelConfig SparseMixerConfig(int experts, double jitter) {
  ModelConfig c = RandomModelConfig(Arch::kPhiMoe, ModelSize::kTiny);
  c.num_experts = experts;
  c.router_jitter_noise = jitter;
  return c;
}

struct Routed {
  int32_t ids[2];
  float weights[2];
  std::vector<float> probs;
};

Routed RouteOne(const std::vector<float>& scores, double jitter = 0.01) {
  const ModelConfig c = SparseMixerConfig(static_cast<int>(scores.size()), jitter);
  Routing r;
  Route(scores.data(), 1, c, &r);
  EXPECT_EQ(r.top_k, 2);
  return {{r.ids[0], r.ids[1]}, {r.weights[0], r.weights[1]}, r.probs};
}

// Checks the engine (f32) and the test reference (double) against hand-computed values.
void ExpectRouting(const std::vector<float>& scores, double jitter, int i1, int i2, double w1,
                   double w2) {
  SCOPED_TRACE(::testing::Message() << "scores[0] " << scores[0] << ", jitter " << jitter);
  const Routed r = RouteOne(scores, jitter);
  EXPECT_EQ(r.ids[0], i1);
  EXPECT_EQ(r.ids[1], i2);
  EXPECT_NEAR(r.weights[0], w1, 1e-6);
  EXPECT_NEAR(r.weights[1], w2, 1e-6);
  int ids[2];
  double weights[2];
  testing::ReferenceSparseMixer(std::vector<double>(scores.begin(), scores.end()), jitter, ids,
                                weights);
  EXPECT_EQ(ids[0], i1);
  EXPECT_EQ(ids[1], i2);
  EXPECT_NEAR(weights[0], w1, 1e-6);
  EXPECT_NEAR(weights[1], w2, 1e-6);
}

TEST(SparseMixerTest, HandComputedCases) {
  // scores [3.0, 2.99, 1.0, -1.0], eps 0.01 (mask when the ratio exceeds 0.02).
  // First: i1 = 0, m1 = 3; ratios (3 - s_j) / max(|s_j|, 3) = [0, 0.0033, 0.667, 1.333],
  // so experts 2 and 3 are masked and w1 = e^0 / (e^0 + e^-0.01) = 0.5024999791668749.
  // Second: s' = [-inf, 2.99, 1, -1], i2 = 1, m2 = 2.99; ratios over s: expert 2
  // 1.99 / 2.99 = 0.666, expert 3 3.99 / 2.99 = 1.33 are masked and expert 0 is -inf, so
  // w2 = 1. Combine weights are used as they are (sum 1.5025, no renormalisation).
  ExpectRouting({3.0f, 2.99f, 1.0f, -1.0f}, 0.01, 0, 1, 0.5024999791668749, 1.0);

  // Negative maximum: [-2, -1, -1.015, -3]. i1 = 1, m1 = -1: factor = max(|s_j|, -1) =
  // |s_j|, ratios [0.5, 0, 0.01478, 0.667]: only expert 2 joins expert 1, so
  // w1 = 1 / (1 + e^-0.015) = 0.5037499296890819. Then s' = [-2, -inf, -1.015, -3],
  // i2 = 2, m2 = -1.015: ratios [0.4925, -, 0, 0.6617]: w2 = 1.
  ExpectRouting({-2.0f, -1.0f, -1.015f, -3.0f}, 0.01, 1, 2, 0.5037499296890819, 1.0);

  // Three close scores: [1, 0.995, 0.99, -5]. i1 = 0 with ratios [0, 0.005, 0.01, 1.2]:
  // w1 = 1 / (1 + e^-0.005 + e^-0.01) = 0.33500138193580153. i2 = 1, m2 = 0.995, ratio of
  // expert 2 = 0.005 / 0.995: w2 = 1 / (1 + e^-0.005) = 0.5012499973958399.
  ExpectRouting({1.0f, 0.995f, 0.99f, -5.0f}, 0.01, 0, 1, 0.33500138193580153,
                0.5012499973958399);

  // Ties go to the lower index: [2, 2, 0, 0] -> i1 = 0 with w1 = 1/2 (expert 1 ties),
  // i2 = 1 with w2 = 1. [5, 1, 1, 1] -> i1 = 0 alone (w1 = 1); i2 = 1, the first of three
  // equal scores, all unmasked: w2 = 1/3.
  ExpectRouting({2.0f, 2.0f, 0.0f, 0.0f}, 0.01, 0, 1, 0.5, 1.0);
  ExpectRouting({5.0f, 1.0f, 1.0f, 1.0f}, 0.01, 0, 1, 1.0, 1.0 / 3.0);

  // A zero maximum: (0 - 0) / max(0, 0) is NaN, and NaN > 0.02 is false, so expert 1 stays
  // in: [0, 0, -1, -1] -> w1 = 1/2; then i2 = 1, m2 = 0, experts 2 and 3 masked: w2 = 1.
  ExpectRouting({0.0f, 0.0f, -1.0f, -1.0f}, 0.01, 0, 1, 0.5, 1.0);

  // Jitter 0 masks everything below the maximum: one-hot weights.
  ExpectRouting({3.0f, 2.99f, 1.0f, -1.0f}, 0.0, 0, 1, 1.0, 1.0);
}

TEST(SparseMixerTest, SelectionOrderIsDescendingProbabilityAndProbsAreTheFullSoftmax) {
  // The second expert can weigh more than the first (above: 1.0 vs 0.5025); the ids stay
  // in selection order, which is descending in the full softmax `probs`.
  const Routed r = RouteOne({3.0f, 2.99f, 1.0f, -1.0f});
  ASSERT_EQ(r.probs.size(), 4u);
  double sum = 0;
  for (float p : r.probs) sum += p;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  const double z = std::exp(3.0) + std::exp(2.99) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_NEAR(r.probs[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(r.probs[3], std::exp(-1.0) / z, 1e-6);
  EXPECT_GT(r.probs[static_cast<size_t>(r.ids[0])], r.probs[static_cast<size_t>(r.ids[1])]);
  EXPECT_GT(r.weights[1], r.weights[0]);
}

TEST(SparseMixerTest, ManyTokensMatchTheReferenceAndSelectTheTopTwoLogits) {
  const int E = 16;
  const int64_t n = 300;
  std::vector<float> logits(static_cast<size_t>(n * E));
  uint64_t x = 12345;
  for (float& v : logits) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(x >> 40) % 2000 - 1000) / 400.0f;  // Ties too.
  }
  const ModelConfig c = SparseMixerConfig(E, 0.01);
  Routing r;
  Route(logits.data(), n, c, &r);
  ModelConfig topk = c;
  topk.router = RouterKind::kSoftmaxTopK;
  Routing t;
  Route(logits.data(), n, topk, &t);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<double> s(logits.begin() + i * E, logits.begin() + (i + 1) * E);
    int ids[2];
    double w[2];
    testing::ReferenceSparseMixer(s, 0.01, ids, w);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(r.ids[static_cast<size_t>(i * 2 + k)], ids[k]) << "token " << i;
      EXPECT_NEAR(r.weights[static_cast<size_t>(i * 2 + k)], w[k], 2e-6) << "token " << i;
      // The experts are the two largest logits, as softmax top-2 (and the next-gate
      // prefetcher, which ranks logits) picks them.
      EXPECT_EQ(r.ids[static_cast<size_t>(i * 2 + k)], t.ids[static_cast<size_t>(i * 2 + k)]);
    }
  }
  EXPECT_EQ(r.probs, t.probs);
}

TEST(SparseMixerTest, RefusesTopKOtherThanTwo) {
  ModelConfig c = SparseMixerConfig(8, 0.01);
  c.num_experts_per_tok = 3;
  const std::vector<float> logits(8, 0.0f);
  Routing r;
  try {
    Route(logits.data(), 1, c, &r);
    ADD_FAILURE() << "top-3 sparsemixer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("top-2 only"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.Validate(), Error);
}

TEST(SparseMixerTest, NextGatePrefetchPredictsTheSparseMixerPair) {
  // The prefetcher ranks the next router's logits (it has no routing code of its own);
  // sparsemixer on the same logits selects exactly the experts it predicts.
  ModelConfig c = RandomModelConfig(Arch::kPhiMoe, ModelSize::kTiny);
  c.hidden_size = 8;
  c.num_layers = 2;
  RandomWeightSource src(c, DType::kF32, 5, 1.0f);
  policy::PolicyWorker worker(policy::PolicyWorker::Mode::kSync);
  const tiers::CacheGeometry g{c.num_layers, c.num_experts, c.moe_intermediate_size,
                               c.moe_intermediate_size, 64, 4 * 2};
  policy::PolicyFacts facts = tiers::MakePolicyFacts(c, g, 64, &src, 0);
  facts.worker = &worker;
  const TensorView* w = src.Find(RouterTensorName(c.arch, 1));
  ASSERT_NE(w, nullptr);
  const int E = c.num_experts;
  for (int trial = 0; trial < 50; ++trial) {
    auto p = policy::MakePolicy("nextgate", facts);
    std::vector<float> h(8);
    for (int j = 0; j < 8; ++j) h[static_cast<size_t>(j)] = std::sin(0.7f * trial + 1.3f * j);
    std::vector<float> logits(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) {
      float acc = 0;  // The prefetcher's own f32 loop, so both see the same logits.
      for (int j = 0; j < 8; ++j) {
        float v;
        std::memcpy(&v, w->data + 4 * (e * 8 + j), 4);
        acc += v * h[static_cast<size_t>(j)];
      }
      logits[static_cast<size_t>(e)] = acc;
    }
    Routing r;
    Route(logits.data(), 1, c, &r);
    std::vector<int32_t> layer0 = {0, 1};
    policy::GateEvent g;
    g.layer = 0;
    g.n_tokens = 1;
    g.top_k = 2;
    g.num_experts = E;
    g.ids = layer0.data();
    g.hidden = h.data();
    g.d = 8;
    policy::Decisions d;
    p->OnGate(testing::Routed(g), &d);
    ASSERT_EQ(d.prefetch.size(), 2u);
    EXPECT_EQ(d.prefetch[0].expert.expert, r.ids[0]) << "trial " << trial;
    EXPECT_EQ(d.prefetch[1].expert.expert, r.ids[1]) << "trial " << trial;
  }
}

TEST(LongRopeTest, HandComputedAngles) {
  // head_dim 4, theta 100: theta^(2i/4) = [1, 10].
  LongRope lr;
  lr.short_factor = {1.0f, 2.0f};
  lr.long_factor = {4.0f, 8.0f};
  lr.short_mscale = 1.0f;
  lr.long_mscale = 1.5f;
  lr.original_max_position_embeddings = 8;
  const RopeTable rope(4, 100.0f, &lr);
  ASSERT_EQ(rope.half(), 2);
  float cs[2], sn[2];
  // Short (the pass ends at 8 = original): inv_freq = [1 / (1 * 1), 1 / (2 * 10)] =
  // [1, 0.05]; position 3: angles [3, 0.15], mscale 1.
  EXPECT_FALSE(rope.UsesLong(8));
  rope.Angles(3, 8, cs, sn);
  EXPECT_NEAR(cs[0], std::cos(3.0), 1e-6);
  EXPECT_NEAR(sn[0], std::sin(3.0), 1e-6);
  EXPECT_NEAR(cs[1], std::cos(0.15), 1e-6);
  EXPECT_NEAR(sn[1], std::sin(0.15), 1e-6);
  // Long (the pass ends at 9 > 8): inv_freq = [1 / 4, 1 / (8 * 10)]; angles [0.75, 0.0375],
  // cos and sin times 1.5.
  EXPECT_TRUE(rope.UsesLong(9));
  rope.Angles(3, 9, cs, sn);
  EXPECT_NEAR(cs[0], 1.5 * std::cos(0.75), 1e-6);
  EXPECT_NEAR(sn[0], 1.5 * std::sin(0.75), 1e-6);
  EXPECT_NEAR(cs[1], 1.5 * std::cos(0.0375), 1e-6);
  EXPECT_NEAR(sn[1], 1.5 * std::sin(0.0375), 1e-6);

  // Plain RoPE ignores the length: inv_freq = [1, 0.1].
  const RopeTable plain(4, 100.0f);
  EXPECT_FALSE(plain.UsesLong(1 << 30));
  plain.Angles(3, 1 << 30, cs, sn);
  EXPECT_FLOAT_EQ(cs[0], std::cos(3.0f));
  EXPECT_FLOAT_EQ(sn[1], std::sin(0.3f));

  LongRope bad = lr;
  bad.long_factor.push_back(1.0f);
  EXPECT_THROW(RopeTable(4, 100.0f, &bad), Error);
}

// A tiny phimoe model (original_max_position_embeddings = 32) run as HF would across the
// short/long switch, against the double-precision reference with the same passes.
class PhiMoeBoundaryTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    model_ = LoadModel(testing::TinyModelPath(Arch::kPhiMoe, GetParam()));
    ASSERT_TRUE(model_->config.longrope.has_value());
    ASSERT_EQ(model_->config.longrope->original_max_position_embeddings, 32);
    for (int i = 0; i < 40; ++i) ids_.push_back(static_cast<int32_t>((i * 37 + 5) % 512));
  }
  void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                   const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    double max_ref = 0, max_err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(want[i]));
      max_err = std::max(max_err, std::abs(want[i] - static_cast<double>(got[i])));
    }
    EXPECT_LT(max_err, 1e-4 * std::max(1.0, max_ref)) << what << ": max |logit| " << max_ref
                                                      << ", max error " << max_err;
  }
  std::unique_ptr<Model> model_;
  std::vector<int32_t> ids_;
};

TEST_P(PhiMoeBoundaryTest, OnePassOnEitherSideOfTheSwitch) {
  ResidentMoeExecutor executor(*model_);
  Transformer transformer(*model_, executor);
  for (size_t len : {size_t{32}, size_t{33}, size_t{40}}) {
    const std::vector<int32_t> ids(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(len));
    KvCache cache(model_->config, 64);
    BatchItem item{&cache, ids, true};
    ExpectClose(transformer.Forward({&item, 1}),
                testing::ReferenceLogits(model_->config, *model_->weights, ids),
                "one pass of " + std::to_string(len));
  }
  // Sanity: the long set changes the logits (32 tokens short vs the same 32 within 33).
  const std::vector<double> short_ref =
      testing::ReferenceLogits(model_->config, *model_->weights, {ids_.begin(), ids_.begin() + 32});
  const std::vector<double> long_ref =
      testing::ReferenceLogits(model_->config, *model_->weights, {ids_.begin(), ids_.begin() + 33});
  double diff = 0;
  for (size_t i = 0; i < short_ref.size(); ++i) diff = std::max(diff, std::abs(short_ref[i] - long_ref[i]));
  EXPECT_GT(diff, 1e-2);
}

TEST_P(PhiMoeBoundaryTest, DecodingPastTheSwitchKeepsShortKeysInTheCache) {
  // Prefill 30 tokens (short), then one token per pass: passes ending at 31 and 32 stay
  // short, from 33 on the new token rotates with the long set while earlier keys keep theirs.
  ResidentMoeExecutor executor(*model_);
  Transformer transformer(*model_, executor);
  KvCache cache(model_->config, 64);
  const int64_t vocab = model_->config.vocab_size;
  std::vector<int64_t> passes = {30};
  BatchItem prefill{&cache, std::span<const int32_t>(ids_.data(), 30), true};
  std::vector<float> got = transformer.Forward({&prefill, 1});
  for (size_t i = 30; i < ids_.size(); ++i) {
    BatchItem one{&cache, std::span<const int32_t>(&ids_[i], 1), false};
    const std::vector<float> step = transformer.Forward({&one, 1});
    got.insert(got.end(), step.begin(), step.end());
    passes.push_back(1);
  }
  ASSERT_EQ(got.size(), ids_.size() * static_cast<size_t>(vocab));
  ExpectClose(got, testing::ReferenceLogits(model_->config, *model_->weights, ids_, passes),
              "prefill 30 + 10 single steps");
  // Not the same as one pass: the switch is per pass.
  const std::vector<double> one_pass = testing::ReferenceLogits(model_->config, *model_->weights, ids_);
  double diff = 0;
  for (size_t i = 0; i < one_pass.size(); ++i)
    diff = std::max(diff, std::abs(one_pass[i] - static_cast<double>(got[i])));
  EXPECT_GT(diff, 1e-2);
}

TEST_P(PhiMoeBoundaryTest, ChunkedPrefillWithPromptLengthRotatesAsOnePass) {
  // The generator prefills in chunks with rope_length = prompt length; the result equals
  // HF's single prefill pass over the 40-token prompt (all long).
  ResidentMoeExecutor executor(*model_);
  Transformer transformer(*model_, executor);
  KvCache cache(model_->config, 64);
  std::vector<float> got;
  for (size_t begin = 0; begin < ids_.size(); begin += 16) {
    const size_t n = std::min<size_t>(16, ids_.size() - begin);
    BatchItem chunk{&cache, std::span<const int32_t>(&ids_[begin], n), true, -1,
                    static_cast<int64_t>(ids_.size())};
    const std::vector<float> part = transformer.Forward({&chunk, 1});
    got.insert(got.end(), part.begin(), part.end());
  }
  ExpectClose(got, testing::ReferenceLogits(model_->config, *model_->weights, ids_),
              "three chunks of a 40-token prompt");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PhiMoeBoundaryTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(PhiMoeGenerationTest, GeneratorPrefillMatchesOnePassAcrossTheSwitch) {
  // A 40-token prompt prefilled in chunks of 16 by the generator gives the first token of
  // one 40-token pass (HF's prefill), and batched generation equals one at a time.
  auto model = LoadModel(testing::TinyModelPath(Arch::kPhiMoe));
  ResidentMoeExecutor executor(*model);
  Transformer transformer(*model, executor);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>((i * 91 + 11) % 512));
  KvCache cache(model->config, 64);
  BatchItem all{&cache, prompt, false};
  const std::vector<float> logits = transformer.Forward({&all, 1});
  const int32_t want = ArgMax(logits);
  Generator chunked(transformer, 16);
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 6;
  const auto alone = chunked.Generate({r});
  EXPECT_EQ(alone[0].tokens[0], want);
  GenerationRequest shorter;
  shorter.prompt = {7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26,
                    27, 28, 29, 30, 31, 32, 33, 34, 35, 36};  // 30 + 6 tokens: crosses 32.
  shorter.max_tokens = 6;
  const auto together = chunked.Generate({r, shorter});
  EXPECT_EQ(together[0].tokens, alone[0].tokens);
  EXPECT_EQ(together[1].tokens, chunked.Generate({shorter})[0].tokens);
}

TEST(PhiMoeGgufTest, GgufGivesTheLogitsOfTheHfCheckpoint) {
  // The same random weights written as an HF directory and as GGUF (biases, LayerNorm
  // weights and biases, LongRoPE factors as rope_factors_long/short, moex's mscale keys).
  testing::TempDir dir;
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kPhiMoe, ModelSize::kTiny);
  o.seed = 3;
  o.out = (dir.path() / "hf").string();
  WriteRandomModel(o);
  o.format = "gguf";
  o.out = (dir.path() / "m.gguf").string();
  WriteRandomModel(o);
  auto hf = LoadModel((dir.path() / "hf").string());
  auto gguf = LoadModel(o.out);
  EXPECT_EQ(gguf->config.ToHfJson().dump(), hf->config.ToHfJson().dump());
  std::vector<int32_t> ids;
  for (int i = 0; i < 36; ++i) ids.push_back(static_cast<int32_t>((i * 53 + 2) % 512));
  std::vector<std::vector<float>> logits;
  for (Model* m : {hf.get(), gguf.get()}) {
    ResidentMoeExecutor executor(*m);
    Transformer transformer(*m, executor);
    KvCache cache(m->config, 64);
    BatchItem item{&cache, ids, true};
    logits.push_back(transformer.Forward({&item, 1}));
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    max_ref = std::max(max_ref, std::abs(static_cast<double>(logits[0][i])));
    max_err = std::max(max_err, std::abs(static_cast<double>(logits[0][i]) - logits[1][i]));
  }
  // Same stored values; only the router and norms are widened to f32 in the GGUF.
  EXPECT_LT(max_err, 1e-5 * std::max(1.0, max_ref)) << max_err;
}

// ---------------------------------------------------------------------------------------
// Configuration and checkpoint errors.

nlohmann::json TinyPhiJson() {
  return RandomModelConfig(Arch::kPhiMoe, ModelSize::kTiny).ToHfJson();
}

void ExpectConfigError(const nlohmann::json& j, const std::string& fragment) {
  try {
    ModelConfig::FromHfJson(j);
    ADD_FAILURE() << "accepted; expected an error containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(PhiMoeConfigTest, ParsesAndRoundTrips) {
  const ModelConfig want = RandomModelConfig(Arch::kPhiMoe, ModelSize::kTiny);
  const ModelConfig c = ModelConfig::FromHfJson(want.ToHfJson());
  EXPECT_EQ(c.norm, NormKind::kLayerNorm);
  EXPECT_EQ(c.router, RouterKind::kSparseMixer);
  EXPECT_DOUBLE_EQ(c.router_jitter_noise, 0.01);
  EXPECT_TRUE(c.attention_bias && c.attention_out_bias && c.lm_head_bias);
  ASSERT_TRUE(c.longrope.has_value());
  EXPECT_EQ(c.longrope->short_factor, want.longrope->short_factor);
  EXPECT_EQ(c.longrope->long_factor, want.longrope->long_factor);
  EXPECT_EQ(c.longrope->long_mscale, want.longrope->long_mscale);
  EXPECT_EQ(c.longrope->original_max_position_embeddings, 32);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.ToHfJson().dump(), want.ToHfJson().dump());

  const ModelConfig full = RandomModelConfig(Arch::kPhiMoe, ModelSize::kFull);
  EXPECT_EQ(full.head_dim, 128);
  EXPECT_EQ(full.longrope->short_factor.size(), 64u);
  EXPECT_EQ(full.longrope->original_max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(full.longrope->long_mscale, 1.243163121016122f);
  EXPECT_EQ(ModelConfig::FromHfJson(full.ToHfJson()).ToHfJson().dump(), full.ToHfJson().dump());

  // rope_scaling null: plain RoPE. Missing mscales: HF's attention factor.
  nlohmann::json j = TinyPhiJson();
  j["rope_scaling"] = nullptr;
  EXPECT_FALSE(ModelConfig::FromHfJson(j).longrope.has_value());
  j = TinyPhiJson();
  j["rope_scaling"].erase("short_mscale");
  j["rope_scaling"].erase("long_mscale");
  const ModelConfig fallback = ModelConfig::FromHfJson(j);
  const double factor = std::sqrt(1 + std::log(512.0 / 32) / std::log(32.0));
  EXPECT_FLOAT_EQ(fallback.longrope->short_mscale, static_cast<float>(factor));
  EXPECT_FLOAT_EQ(fallback.longrope->long_mscale, static_cast<float>(factor));
}

TEST(PhiMoeConfigTest, RejectsBadConfigsClearly) {
  nlohmann::json j = TinyPhiJson();
  j["rope_scaling"]["short_factor"].erase(0);
  ExpectConfigError(j, "rope_scaling.short_factor has 7 entries, expected head_dim / 2 = 8");
  j = TinyPhiJson();
  j["rope_scaling"]["long_factor"].push_back(1.0);
  ExpectConfigError(j, "rope_scaling.long_factor has 9 entries");
  j = TinyPhiJson();
  j["rope_scaling"]["long_factor"][3] = "x";
  ExpectConfigError(j, "long_factor must hold numbers only");
  j = TinyPhiJson();
  j["rope_scaling"]["long_factor"][3] = -1.0;
  ExpectConfigError(j, "entries must be finite and > 0");
  j = TinyPhiJson();
  j["rope_scaling"]["short_factor"] = 1.0;
  ExpectConfigError(j, "short_factor must be a list of numbers");
  j = TinyPhiJson();
  j["rope_scaling"]["long_mscale"] = "big";
  ExpectConfigError(j, "'long_mscale' must be a number");
  j = TinyPhiJson();
  j["rope_scaling"]["type"] = "yarn";
  ExpectConfigError(j, "rope_scaling type 'yarn' is supported for deepseek_v2, deepseek_v3 and "
                       "gpt_oss only, not phimoe");
  j = TinyPhiJson();
  j["rope_scaling"]["type"] = "dynamic";
  ExpectConfigError(j, "rope_scaling type 'dynamic' is not supported");
  j = TinyPhiJson();
  j["rope_scaling"].erase("original_max_position_embeddings");
  j.erase("original_max_position_embeddings");
  ExpectConfigError(j, "longrope needs original_max_position_embeddings");
  j = TinyPhiJson();
  j["original_max_position_embeddings"] = 64;
  ExpectConfigError(j, "original_max_position_embeddings is 64 but rope_scaling says 32");
  j = TinyPhiJson();
  j["num_experts_per_tok"] = 3;
  ExpectConfigError(j, "sparsemixer routing (phimoe) is defined for num_experts_per_tok = 2 only, got 3");
  j = TinyPhiJson();
  j["router_jitter_noise"] = -0.5;
  ExpectConfigError(j, "router_jitter_noise must be a finite number >= 0");
  j = TinyPhiJson();
  j["hidden_act"] = "gelu";
  ExpectConfigError(j, "hidden_act must be \"silu\"");
  j = TinyPhiJson();
  j["head_dim"] = 8;
  ExpectConfigError(j, "phimoe needs head_dim (8) = hidden_size / num_attention_heads");
  // LongRoPE on another architecture is refused rather than run as plain RoPE.
  nlohmann::json mixtral = RandomModelConfig(Arch::kMixtral, ModelSize::kTiny).ToHfJson();
  mixtral["rope_scaling"] = TinyPhiJson()["rope_scaling"];
  ExpectConfigError(mixtral, "is supported for phimoe only");
}

// Writes a tiny phimoe checkpoint whose weights follow `written` and whose config.json
// says `claimed`; loading must name the missing tensor.
void ExpectMissingTensor(const ModelConfig& written, const ModelConfig& claimed,
                         const std::string& tensor) {
  testing::TempDir dir;
  RandomModelOptions o;
  o.config = written;
  o.out = (dir.path() / "m").string();
  WriteRandomModel(o);
  {
    std::ofstream out(dir.path() / "m" / "config.json");
    out << claimed.ToHfJson().dump(2);
  }
  try {
    LoadModel(o.out);
    ADD_FAILURE() << "loaded without " << tensor;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor '" + tensor + "'"), std::string::npos)
        << e.what();
  }
}

TEST(PhiMoeConfigTest, MissingBiasTensorsAreNamed) {
  const ModelConfig c = RandomModelConfig(Arch::kPhiMoe, ModelSize::kTiny);
  ModelConfig no_lm_bias = c;
  no_lm_bias.lm_head_bias = false;
  ExpectMissingTensor(no_lm_bias, c, "lm_head.bias");
  ModelConfig no_o_bias = c;
  no_o_bias.attention_out_bias = false;
  ExpectMissingTensor(no_o_bias, c, "model.layers.0.self_attn.o_proj.bias");
  ModelConfig rms = c;
  rms.norm = NormKind::kRms;  // Written without any norm bias.
  ExpectMissingTensor(rms, c, "model.norm.bias");
}

TEST(PhiMoeConfigTest, SequencesBeyondTheSlidingWindowAreRefused) {
  // moex has no sliding-window attention; up to the window it changes nothing (HF masks
  // key j for query i only when i - j >= window), beyond it moex refuses.
  testing::TempDir dir;
  RandomModelOptions o;
  o.config = RandomModelConfig(Arch::kPhiMoe, ModelSize::kTiny);
  o.config.sliding_window = 8;
  o.out = (dir.path() / "m").string();
  WriteRandomModel(o);
  auto model = LoadModel(o.out);
  EXPECT_EQ(model->config.sliding_window, 8);
  ResidentMoeExecutor executor(*model);
  Transformer transformer(*model, executor);
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  KvCache ok(model->config, 16);
  BatchItem eight{&ok, std::span<const int32_t>(ids.data(), 8), false};
  EXPECT_NO_THROW(transformer.Forward({&eight, 1}));
  KvCache too_long(model->config, 16);
  BatchItem nine{&too_long, ids, false};
  try {
    transformer.Forward({&nine, 1});
    ADD_FAILURE() << "9 tokens ran with a sliding window of 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the model's sliding_window of 8"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moex
