// Routing replay (sim/routing_replay.h): a model of the trace's topology follows the recorded
// routes token for token, prompt and decode rows separately; policies see the trace's gate
// inputs; a foreign topology is refused; running past the trace starts it over and says so.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/kv_cache.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "sim/routing_replay.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "trace/trace_reader.h"
#include "trace/trace_recorder.h"

namespace moex {
namespace {

// Request 0: an 8-token prompt, then 3 decode steps. Request 1 joins: its 3-token prompt is
// batched with request 0's fourth decode step, then both decode twice.
// Returns the logits of every pass, concatenated.
std::vector<float> RunPasses(Transformer& t, const ModelConfig& c) {
  std::vector<float> logits;
  const auto keep = [&](const std::vector<float>& l) {
    logits.insert(logits.end(), l.begin(), l.end());
  };
  KvCache a(c, 64), b(c, 64);
  const std::vector<int32_t> prompt_a = {5, 9, 200, 31, 7, 64, 12, 90};
  const std::vector<int32_t> prompt_b = {77, 3, 41};
  const int64_t ra = t.BeginRequest(prompt_a);
  keep(t.Forward(std::vector<BatchItem>{{&a, prompt_a, false, ra}}));
  std::vector<int32_t> one = {11};
  for (int i = 0; i < 3; ++i) keep(t.Forward(std::vector<BatchItem>{{&a, one, false, ra}}));
  const int64_t rb = t.BeginRequest(prompt_b);
  keep(t.Forward(std::vector<BatchItem>{{&a, one, false, ra}, {&b, prompt_b, false, rb}}));
  for (int i = 0; i < 2; ++i)
    keep(t.Forward(std::vector<BatchItem>{{&a, one, false, ra}, {&b, one, false, rb}}));
  t.EndRequest(ra);
  t.EndRequest(rb);
  return logits;
}

std::vector<float> Record(const Model& model, const std::string& path, sim::TraceRouting* replay) {
  ResidentMoeExecutor resident(model);
  Transformer t(model, resident);
  trace::TraceHeader h;
  h.source = "test";
  h.model = trace::TraceModelOf(model);
  h.probs = trace::Precision::kF32;
  h.hidden = trace::Precision::kF32;
  h.router_weights = true;
  h.pooled = true;
  trace::TraceWriter writer(path, h);
  trace::TraceRecorder recorder(writer, model);
  t.AddSink(&recorder);
  t.set_routing_source(replay);
  std::vector<float> logits = RunPasses(t, model.config);
  writer.Finish();
  return logits;
}

std::vector<std::vector<float>> Pooled(const std::string& path) {
  trace::TraceReader reader(path);
  std::vector<std::vector<float>> pooled;
  trace::TraceEvent e;
  while (reader.Next(&e))
    if (e.kind == trace::TraceEvent::kIteration) pooled.push_back(e.iteration.pooled);
  return pooled;
}

std::vector<trace::TraceGate> Gates(const std::string& path) {
  trace::TraceReader reader(path);
  std::vector<trace::TraceGate> gates;
  trace::TraceEvent e;
  while (reader.Next(&e))
    if (e.kind == trace::TraceEvent::kIteration)
      for (const trace::TraceGate& g : e.iteration.gates) gates.push_back(g);
  return gates;
}

TEST(RoutingReplay, AnotherModelFollowsTheRecordedRoutes) {
  testing::TempDir dir;
  auto a = LoadModel(testing::TinyModelPath(Arch::kDeepseekMoe, DType::kBF16, 7));
  auto b = LoadModel(testing::TinyModelPath(Arch::kDeepseekMoe, DType::kBF16, 8));
  Record(*a, dir / "a.trace", nullptr);
  Record(*b, dir / "b.trace", nullptr);
  sim::TraceRouting replay(dir / "a.trace", b->config);
  Record(*b, dir / "b_replayed.trace", &replay);

  const auto want = Gates(dir / "a.trace"), own = Gates(dir / "b.trace"),
             got = Gates(dir / "b_replayed.trace");
  ASSERT_EQ(got.size(), want.size());
  bool own_differs = false;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("gate " + std::to_string(i));
    EXPECT_EQ(got[i].layer, want[i].layer);
    EXPECT_EQ(got[i].ids, want[i].ids);
    EXPECT_EQ(got[i].weights, want[i].weights);
    EXPECT_EQ(got[i].probs, want[i].probs);
    EXPECT_EQ(got[i].hidden, want[i].hidden);  // What policies see: the trace's gate input.
    own_differs |= own[i].ids != want[i].ids;
  }
  EXPECT_TRUE(own_differs);  // Without replay model b routes its own way.
  // Policies see the trace's pooled embeddings too (fmoe's semantic matching).
  EXPECT_EQ(Pooled(dir / "b_replayed.trace"), Pooled(dir / "a.trace"));
  EXPECT_NE(Pooled(dir / "b.trace"), Pooled(dir / "a.trace"));

  const nlohmann::json j = replay.ToJson();
  EXPECT_EQ(j["outputs_meaningful"], false);
  EXPECT_EQ(j["gate_inputs_from_trace"], true);
  // Prompt rows: 8 + 3; decode rows: 3 + 1 + 2 * 2.
  EXPECT_EQ(j["replayed_tokens"]["prompt"], 11);
  EXPECT_EQ(j["replayed_tokens"]["decode"], 8);
  EXPECT_EQ(j["trace_tokens"]["prompt"], 11);
  EXPECT_EQ(j["wraps"]["decode"], 0);
}

TEST(RoutingReplay, RunningPastTheTraceStartsItOver) {
  testing::TempDir dir;
  auto a = LoadModel(testing::TinyModelPath(Arch::kOlmoe));
  Record(*a, dir / "a.trace", nullptr);
  sim::TraceRouting replay(dir / "a.trace", a->config);
  Record(*a, dir / "once.trace", &replay);
  Record(*a, dir / "twice.trace", &replay);
  const nlohmann::json j = replay.ToJson();
  EXPECT_EQ(j["replayed_tokens"]["decode"], 16);
  EXPECT_EQ(j["wraps"]["decode"], 1);
  EXPECT_EQ(j["wraps"]["prompt"], 1);
  const auto want = Gates(dir / "a.trace"), got = Gates(dir / "twice.trace");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].ids, want[i].ids) << i;
}

TEST(RoutingReplay, ForeignTopologyIsRefused) {
  testing::TempDir dir;
  auto olmoe = LoadModel(testing::TinyModelPath(Arch::kOlmoe));
  auto mixtral = LoadModel(testing::TinyModelPath(Arch::kMixtral));
  Record(*olmoe, dir / "a.trace", nullptr);
  try {
    sim::TraceRouting replay(dir / "a.trace", mixtral->config);
    ADD_FAILURE() << "a trace of another topology was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same topology"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sim::TraceRouting(dir / "missing.trace", olmoe->config), Error);
}

// The offload engine under replay: a predicting policy runs on the trace's gate inputs and
// router weights, and the offloaded run equals the resident run under the same replay.
TEST(RoutingReplay, OffloadedRunMatchesResidentUnderReplay) {
  testing::TempDir dir;
  auto a = LoadModel(testing::TinyModelPath(Arch::kOlmoe, DType::kBF16, 7));
  auto b = LoadModel(testing::TinyModelPath(Arch::kOlmoe, DType::kBF16, 9));
  Record(*a, dir / "a.trace", nullptr);

  sim::TraceRouting resident_replay(dir / "a.trace", b->config);
  const std::vector<float> want_logits = Record(*b, dir / "resident.trace", &resident_replay);

  sim::TraceRouting replay(dir / "a.trace", b->config);
  OffloadOptions o;
  o.store_path = dir / "experts.moex";
  o.host_budget = "50%";
  o.policy.spec = "nextgate";
  o.progress = false;
  o.policy.adjust_facts = [&](policy::PolicyFacts& f) { replay.AdjustFacts(f); };
  OffloadMoeExecutor offload(*b, o);
  Transformer t(*b, offload);
  trace::TraceHeader h;
  h.source = "test";
  h.model = trace::TraceModelOf(*b);
  h.hidden = trace::Precision::kF32;
  trace::TraceWriter writer(dir / "offload.trace", h);
  trace::TraceRecorder recorder(writer, *b);
  t.AddSink(&recorder);
  t.set_routing_source(&replay);
  EXPECT_EQ(RunPasses(t, b->config), want_logits);
  writer.Finish();
  const auto want = Gates(dir / "resident.trace"), got = Gates(dir / "offload.trace");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].ids, want[i].ids) << i;
    EXPECT_EQ(got[i].hidden, want[i].hidden) << i;
  }
  EXPECT_GT(offload.Metrics().total.counters.prefetch_issued, 0);
}

}  // namespace
}  // namespace moex
