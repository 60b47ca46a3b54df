// What every registered policy gets for free (docs/design.md, "Policies"; docs/policies.md): the
// tests below iterate the registry, so a new policy file is covered without editing them.
// For every spec (defaults and the policy's own test_specs):
//  - lossless: the offloading engine's logits and greedy tokens are bit-identical to the
//    resident engine's at 5/25/50/100 % budgets, with the policy worker synchronous and
//    asynchronous, and the host cache never exceeds its budget (per layer too: the cache
//    checks that invariant on every insert);
//  - simulator = engine: replaying the run's trace gives the engine's exact counters when
//    both run the worker synchronously;
//  - determinism: two replays give the same result;
//  - state: what a policy saved after a run loads into a fresh one and saves the same bytes.
// Policies that need the future run only in the simulator: deterministic, and never below
// Belady's bound on experts loaded.
//
// The test-only policy `test-probe` below makes every kind of decision (partial residency on
// a miss, retain, per-layer budgets, pins, ranged prefetches, re-prioritisation,
// cancellation, compute order, worker jobs, state), so the mechanism behind each is held
// to the same promises.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "policy/policy.h"
#include "policy/policy_state.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"
#include "sim/replay.h"
#include "support/engine_runs.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"
#include "trace/trace_reader.h"
#include "trace/trace_recorder.h"

namespace moex {
namespace {

using policy::Decisions;
using policy::ExpertKey;
using policy::NeuronRange;

// ---------------------------------------------------------------------------------------
// test-probe: every decision kind, deterministic in the events (it reacts to expert_done
// only through a set it reads at iteration end, so engine and simulator completion orders
// do not change its decisions).
class ProbePolicy : public policy::Policy {
 public:
  explicit ProbePolicy(const policy::PolicyFacts& f) : f_(f) {
    const size_t keys = static_cast<size_t>(f.num_layers) * static_cast<size_t>(f.num_experts);
    last_use_.assign(keys, 0);
    routed_count_.assign(keys, 0);
    pinned_.assign(static_cast<size_t>(f.num_layers), -1);
  }
  std::string name() const override { return "test-probe"; }
  bool evicts() const override { return true; }

  void OnTouch(const ExpertKey& k, bool) override { last_use_[Index(k)] = ++clock_; }
  double EvictScore(const ExpertKey& k) override { return static_cast<double>(last_use_[Index(k)]); }
  // Odd experts keep their first half on a miss; the rest streams past the cache.
  NeuronRange KeepOnMiss(const ExpertKey& k) override {
    if (k.expert % 2 == 1) return {0, f_.neurons / 2};
    return {};
  }
  void ComputeOrder(int, std::vector<ExpertKey>* experts) override {
    std::reverse(experts->begin(), experts->end());
  }

  void OnIterationBegin(const policy::IterationBeginEvent& e, Decisions* out) override {
    // Every third pass splits the cache 2:1 between alternate MoE layers; the next one
    // lifts the split again.
    if (e.iteration % 3 == 1) {
      std::vector<int64_t> weights(static_cast<size_t>(f_.num_layers), 0);
      int64_t total = 0, i = 0;
      for (int l = 0; l < f_.num_layers; ++l)
        if (f_.IsMoeLayer(l)) total += weights[static_cast<size_t>(l)] = 1 + (i++ % 2);
      out->layer_budgets.assign(weights.size(), 0);
      for (size_t l = 0; l < weights.size(); ++l)
        out->layer_budgets[l] = f_.capacity_pages * weights[l] / total * f_.page_bytes;
    } else if (e.iteration % 3 == 2) {
      out->layer_budgets.assign(static_cast<size_t>(f_.num_layers), -1);
    }
  }

  void OnGate(const policy::GateEvent& e, Decisions* out) override {
    ++gates_;
    std::set<int32_t> routed(e.ids, e.ids + e.n_tokens * e.top_k);
    for (int32_t id : routed) ++routed_count_[Index({e.layer, id})];
    // Cancel this layer's predictions that were not routed.
    for (const ExpertKey& k : predicted_)
      if (k.layer == e.layer && !routed.contains(k.expert)) out->cancel.push_back(k);
    std::erase_if(predicted_, [&](const ExpertKey& k) { return k.layer == e.layer; });
    // Keep the smallest routed expert of the layer pinned until the layer's next gate.
    const int32_t first = *routed.begin();
    if (pinned_[static_cast<size_t>(e.layer)] != first) {
      if (pinned_[static_cast<size_t>(e.layer)] >= 0)
        out->unpin.push_back({e.layer, pinned_[static_cast<size_t>(e.layer)]});
      out->pin.push_back({e.layer, first});
      pinned_[static_cast<size_t>(e.layer)] = first;
    }
    // Predict the same ids at the next MoE layer: the second half of each, raised in
    // priority on every other gate.
    const int next = f_.NextMoeLayer(e.layer);
    if (next < 0) return;
    for (int32_t id : routed) {
      policy::Prefetch p;
      p.expert = {next, id};
      p.priority = -id;
      p.range = {f_.neurons / 2, -1};
      out->prefetch.push_back(p);
      predicted_.push_back(p.expert);
      if (gates_ % 2 == 0) out->reprioritize.push_back({p.expert, static_cast<double>(id)});
    }
  }

  void OnExpertDone(const policy::ExpertDoneEvent& e, Decisions*) override {
    done_.insert({e.layer, e.expert});
  }

  void OnIterationEnd(Decisions* out) override {
    // Even experts computed in this pass keep only their first half.
    for (const ExpertKey& k : done_)
      if (k.expert % 2 == 0) out->retain.push_back({k, {0, f_.neurons / 2}});
    done_.clear();
    // The worker finds each layer's most routed expert so far; its Apply prefetches them.
    struct Counts {
      std::vector<int64_t> routed;  // [layer × expert]
      int layers = 0, experts = 0;
    };
    f_.worker->Submit(
        Counts{routed_count_, f_.num_layers, f_.num_experts},
        [](const Counts& c) {
          std::vector<ExpertKey> top;
          for (int l = 0; l < c.layers; ++l) {
            const auto row = c.routed.begin() + static_cast<std::ptrdiff_t>(l) * c.experts;
            const auto best = std::max_element(row, row + c.experts);
            if (*best > 0) top.push_back({l, static_cast<int32_t>(best - row)});
          }
          return top;
        },
        [](const std::vector<ExpertKey>& top, Decisions* d) {
          for (const ExpertKey& k : top) d->prefetch.push_back({k, policy::Tier::kHost, 1, {}});
        },
        5.0);
  }

  void SaveState(policy::StateWriter& out) const override {
    out.I64(gates_);
    out.U64(routed_count_.size());
    for (int64_t c : routed_count_) out.I64(c);
  }
  void LoadState(policy::StateReader& in) override {
    gates_ = in.I64();
    Check(in.U64() == routed_count_.size(), in.origin(), ": test-probe state of another shape");
    for (int64_t& c : routed_count_) c = in.I64();
  }

 private:
  size_t Index(const ExpertKey& k) const {
    return static_cast<size_t>(k.layer) * static_cast<size_t>(f_.num_experts) +
           static_cast<size_t>(k.expert);
  }

  policy::PolicyFacts f_;
  int64_t clock_ = 0, gates_ = 0;
  std::vector<int64_t> last_use_, routed_count_;
  std::vector<int32_t> pinned_;
  std::vector<ExpertKey> predicted_;
  std::set<ExpertKey> done_;
};

MOEX_REGISTER_POLICY({
    .name = "test-probe",
    .roles = policy::kPrefetches | policy::kEvicts,
    .doc = "test only: makes every kind of decision so the conformance tests cover them",
    .source = "tests/policy_conformance_test.cc",
    .make = [](const policy::PolicyFacts& f,
               const policy::Params&) -> std::unique_ptr<policy::Policy> {
      return std::make_unique<ProbePolicy>(f);
    },
});

// ---------------------------------------------------------------------------------------

// Every spec the registry asks to be tested: each policy with its defaults, then its
// test_specs.
std::vector<std::string> SpecsWhere(bool needs_future) {
  std::vector<std::string> specs;
  for (const policy::PolicyInfo* p : policy::RegisteredPolicies()) {
    if (p->needs_future != needs_future) continue;
    specs.push_back(p->name);
    for (const std::string& s : p->test_specs) specs.push_back(s);
  }
  return specs;
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

std::vector<GenerationRequest> Requests() {
  GenerationRequest a, b, c;
  a.prompt = {5, 9, 200, 31, 7, 64, 12, 90};
  a.max_tokens = 12;
  b.prompt = {77, 3};
  b.max_tokens = 5;
  c.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  c.max_tokens = 9;
  return {a, b, c};
}

void RunRequests(Transformer& t) {
  Generator g(t);
  const auto r = Requests();
  g.Generate({r[0], r[1]});
  g.Generate({r[2]});
}

// The resident run of Requests(), recorded with everything a policy may need.
void RecordRun(const Model& model, const std::string& path) {
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
  RunRequests(t);
  writer.Finish();
}

sim::HardwareProfile TestHardware() {
  sim::HardwareProfile hw;
  hw.name = "test";
  hw.compute_gb_per_s = 10;
  hw.compute_tflops = 1;
  hw.link_gb_per_s = 1;
  return hw;
}

// The counters without what depends on when transfers land (prefetch_late, and in_time and
// GoodPred of the predictions): the engine's follow its real reads, the simulator's its link
// model; every other count is a function of the events and must agree exactly.
nlohmann::json Counts(nlohmann::json j) {
  if (j.is_object()) {
    for (const char* timed : {"prefetch_late", "in_time", "goodpred"}) j.erase(timed);
    for (auto& [key, value] : j.items()) value = Counts(value);
  } else if (j.is_array()) {
    for (auto& value : j) value = Counts(value);
  }
  return j;
}

constexpr const char* kBudgets[] = {"5%", "25%", "50%", "100%"};

class EnginePolicyConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(EnginePolicyConformance, LosslessAtEveryBudgetAndWorkerMode) {
  // OLMoE: every layer MoE. DeepSeek: a dense first layer and shared experts.
  for (Arch arch : {Arch::kOlmoe, Arch::kDeepseekMoe}) {
    auto model = LoadModel(testing::ChunkedTinyModelPath(arch));
    const std::vector<int32_t> prompt = {3, 141, 59, 26, 53, 58, 97, 93, 23, 84};
    ResidentMoeExecutor resident(*model);
    const std::vector<float> want_logits = testing::PrefillLogits(*model, resident, prompt);
    const auto want_tokens = testing::GreedyTokens(*model, resident);
    testing::TempDir dir;
    for (const char* budget : kBudgets) {
      for (auto worker : {policy::PolicyWorker::Mode::kSync, policy::PolicyWorker::Mode::kAsync}) {
        SCOPED_TRACE(std::string(ArchName(arch)) + " " + GetParam() + " at " + budget + ", " +
                     policy::PolicyWorker::ModeName(worker) + " worker");
        OffloadOptions o;
        o.store_path = dir / "experts.moex";
        o.host_budget = budget;
        o.policy.spec = GetParam();
        o.policy.worker = worker;
        o.policy.seed = 5;
        o.chunk_neurons = testing::kChunkNeurons;
        o.progress = false;
        OffloadMoeExecutor offload(*model, o);
        EXPECT_EQ(testing::PrefillLogits(*model, offload, prompt), want_logits);
        EXPECT_EQ(testing::GreedyTokens(*model, offload), want_tokens);
        const tiers::OffloadMetrics m = offload.Metrics();
        EXPECT_LE(m.peak_host_cache_bytes, m.budget_bytes);
        EXPECT_GT(m.total.counters.misses, 0);
      }
    }
  }
}

TEST_P(EnginePolicyConformance, SimulatorGivesTheEnginesCountersAndIsDeterministic) {
  for (Arch arch : {Arch::kOlmoe, Arch::kDeepseekMoe}) {
    testing::TempDir dir;
    auto model = LoadModel(testing::ChunkedTinyModelPath(arch));
    RecordRun(*model, dir / "run.trace");
    trace::TraceReader reader(dir / "run.trace");
    for (const char* budget : kBudgets) {
      SCOPED_TRACE(std::string(ArchName(arch)) + " " + GetParam() + " at " + budget);
      OffloadOptions o;
      o.store_path = dir / "experts.moex";
      o.host_budget = budget;
      o.policy.spec = GetParam();
      o.policy.worker = policy::PolicyWorker::Mode::kSync;
      o.policy.seed = 3;
      o.chunk_neurons = testing::kChunkNeurons;
      o.progress = false;
      OffloadMoeExecutor offload(*model, o);
      Transformer t(*model, offload);
      RunRequests(t);
      const tiers::OffloadMetrics engine = offload.Metrics();

      sim::ReplayOptions so;
      so.policy.spec = GetParam();
      so.budget = budget;
      so.policy.seed = 3;
      so.chunk_neurons = testing::kChunkNeurons;
      so.policy.worker = policy::PolicyWorker::Mode::kSync;
      so.hardware = TestHardware();
      const sim::ReplayResult r = sim::Replay(reader, so);
      EXPECT_EQ(r.budget_bytes, engine.budget_bytes);
      EXPECT_EQ(r.policy, engine.policy);
      EXPECT_EQ(Counts(tiers::CountersJson(r.total, r.page_bytes)),
                Counts(tiers::CountersJson(engine.total.counters, engine.page_bytes)));
      EXPECT_EQ(r.policy_timing.worker_jobs, engine.policy_timing.worker_jobs);
      EXPECT_EQ(r.policy_timing.budget_refused, engine.policy_timing.budget_refused);
      EXPECT_EQ(Counts(r.predictions), Counts(engine.predictions));

      // The simulator's own mode (modelled worker) is repeatable to the last counter.
      so.policy.worker = policy::PolicyWorker::Mode::kModelled;
      const sim::ReplayResult a = sim::Replay(reader, so), b = sim::Replay(reader, so);
      EXPECT_EQ(tiers::CountersJson(a.total, a.page_bytes),
                tiers::CountersJson(b.total, b.page_bytes));
      EXPECT_EQ(a.total_ms, b.total_ms);
    }
  }
}

TEST_P(EnginePolicyConformance, SavedStateLoadsIntoAFreshPolicy) {
  testing::TempDir dir;
  auto model = LoadModel(testing::ChunkedTinyModelPath(Arch::kOlmoe));
  RecordRun(*model, dir / "run.trace");
  trace::TraceReader reader(dir / "run.trace");
  std::string saved, resaved;
  sim::ReplayOptions so;
  so.policy.spec = GetParam();
  so.hardware = TestHardware();
  so.on_finish = [&](const policy::Policy& p, const policy::PolicyFacts& facts) {
    saved = policy::EncodePolicyState(p, facts);
    std::unique_ptr<policy::Policy> fresh = policy::MakePolicy(GetParam(), facts);
    policy::DecodePolicyState(*fresh, facts,
                              {reinterpret_cast<const std::byte*>(saved.data()), saved.size()},
                              "saved state");
    resaved = policy::EncodePolicyState(*fresh, facts);
  };
  sim::Replay(reader, so);
  ASSERT_FALSE(saved.empty());
  EXPECT_EQ(resaved, saved);
}

INSTANTIATE_TEST_SUITE_P(Registry, EnginePolicyConformance,
                         ::testing::ValuesIn(SpecsWhere(false)), ParamName);

// The probe exercised what it was written for (otherwise the tests above prove little).
TEST(PolicyConformanceProbe, ExercisesEveryMechanism) {
  testing::TempDir dir;
  auto model = LoadModel(testing::ChunkedTinyModelPath(Arch::kOlmoe));
  RecordRun(*model, dir / "run.trace");
  trace::TraceReader reader(dir / "run.trace");
  sim::ReplayOptions so;
  so.policy.spec = "test-probe";
  so.budget = "50%";
  so.chunk_neurons = testing::kChunkNeurons;
  so.policy.worker = policy::PolicyWorker::Mode::kSync;
  so.hardware = TestHardware();
  const sim::ReplayResult r = sim::Replay(reader, so);
  EXPECT_GT(r.total.partial_hits, 0);
  EXPECT_GT(r.total.chunks_streamed, 0);
  EXPECT_GT(r.total.prefetch_issued, 0);
  EXPECT_GT(r.total.prefetch_cancelled, 0);
  EXPECT_GT(r.policy_timing.worker_jobs, 0);
  EXPECT_GT(r.total.hits, 0);
}

class FuturePolicyConformance : public ::testing::TestWithParam<std::string> {};

// Simulator-only policies: refused by the engine, repeatable in the simulator, and (like
// every policy) never loading fewer experts than Belady's MIN (with bypass) misses.
TEST_P(FuturePolicyConformance, DeterministicAndBoundedByBelady) {
  testing::TempDir dir;
  auto model = LoadModel(testing::ChunkedTinyModelPath(Arch::kOlmoe));
  RecordRun(*model, dir / "run.trace");
  trace::TraceReader reader(dir / "run.trace");
  const policy::FutureDemand future = sim::ReadFutureDemand(reader);
  for (const char* budget : kBudgets) {
    SCOPED_TRACE(GetParam() + std::string(" at ") + budget);
    OffloadOptions o;
    o.store_path = dir / "experts.moex";
    o.host_budget = budget;
    o.policy.spec = GetParam();
    o.progress = false;
    EXPECT_THROW(OffloadMoeExecutor(*model, o), Error);

    sim::ReplayOptions so;
    so.budget = budget;
    so.hardware = TestHardware();
    so.policy.spec = "belady:bypass=true";  // MIN for a cache that may bypass bounds them all.
    const sim::ReplayResult best = sim::Replay(reader, so, &future);
    so.policy.spec = GetParam();
    const sim::ReplayResult a = sim::Replay(reader, so, &future);
    const sim::ReplayResult b = sim::Replay(reader, so, &future);
    EXPECT_EQ(tiers::CountersJson(a.total, a.page_bytes),
              tiers::CountersJson(b.total, b.page_bytes));
    EXPECT_LE(best.total.misses, a.total.misses + a.total.prefetch_issued);
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, FuturePolicyConformance,
                         ::testing::ValuesIn(SpecsWhere(true)), ParamName);

}  // namespace
}  // namespace moex
