// The one event stream: a gate event's routed set, the fan-out that forwards each event to
// its sinks in order, and the Transformer, which emits every event once, to its observers
// and then to the executor's offload stack (so an observer that throws stops the event
// before the stack acts on it).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/kv_cache.h"
#include "engine/moe_executor.h"
#include "engine/transformer.h"
#include "model/model.h"
#include "policy/event_sink.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

// Writes "NAME:EVENT" for each event into a shared log.
class LoggingSink : public policy::EventSink {
 public:
  LoggingSink(std::string name, std::vector<std::string>* log)
      : name_(std::move(name)), log_(log) {}
  void OnRequestBegin(const policy::RequestBeginEvent& e) override { Log("request_begin"); }
  void OnIterationBegin(const policy::IterationBeginEvent& e) override { Log("iteration_begin"); }
  void OnGate(const policy::GateEvent& e) override {
    Log("gate" + std::to_string(e.layer));
    if (throw_at_gate) throw Error("observer failed");
  }
  void OnExpertDone(const policy::ExpertDoneEvent& e) override { Log("expert_done"); }
  void OnIterationEnd() override { Log("iteration_end"); }
  void OnRequestEnd(const policy::RequestEndEvent& e) override { Log("request_end"); }
  bool throw_at_gate = false;

 private:
  void Log(const std::string& event) { log_->push_back(name_ + ":" + event); }
  std::string name_;
  std::vector<std::string>* log_;
};

TEST(EventFanOut, ForwardsEachEventToItsSinksInOrderUntilRemoved) {
  std::vector<std::string> log;
  LoggingSink a("a", &log), b("b", &log);
  policy::EventFanOut fan;
  EXPECT_TRUE(fan.empty());
  fan.Add(&a);
  fan.Add(&b);
  fan.OnRequestBegin({});
  policy::GateEvent gate;
  gate.layer = 3;
  fan.OnGate(gate);
  fan.OnExpertDone({3, 1});
  fan.Remove(&a);
  fan.OnIterationEnd();
  fan.OnRequestEnd({});
  EXPECT_EQ(log, (std::vector<std::string>{"a:request_begin", "b:request_begin", "a:gate3",
                                           "b:gate3", "a:expert_done", "b:expert_done",
                                           "b:iteration_end", "b:request_end"}));
}

// The routed set of a gate: its distinct experts, ascending, filled once by the event's
// builder. Three tokens, top-2: {4, 1}, {1, 0}, {4, 2} route to 0, 1, 2 and 4.
TEST(GateEventRouted, SetRoutedSortsAndDropsRepeats) {
  const std::vector<int32_t> ids = {4, 1, 1, 0, 4, 2};
  policy::GateEvent e;
  e.n_tokens = 3;
  e.top_k = 2;
  e.ids = ids.data();
  EXPECT_TRUE(e.routed_experts().empty());
  std::vector<int32_t> storage = {9, 9, 9, 9, 9, 9, 9};  // Reused: what it held goes.
  policy::SetRouted(&e, &storage);
  EXPECT_EQ(std::vector<int32_t>(e.routed_experts().begin(), e.routed_experts().end()),
            (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_EQ(e.n_routed, 4);
}

// A resident executor that names a logging sink as its offload stack.
class StackedExecutor : public ResidentMoeExecutor {
 public:
  StackedExecutor(const Model& model, policy::EventSink* stack)
      : ResidentMoeExecutor(model), stack_(stack) {}
  policy::EventSink* event_sink() override { return stack_; }

 private:
  policy::EventSink* stack_;
};

TEST(TransformerEvents, ObserversSeeEachEventBeforeTheStackAndAFailureStopsIt) {
  auto model = LoadModel(testing::TinyModelPath(Arch::kOlmoe));
  std::vector<std::string> log;
  LoggingSink stack("stack", &log), observer("observer", &log);
  StackedExecutor executor(*model, &stack);
  Transformer t(*model, executor);
  t.AddSink(&observer);  // Added after the stack, yet it comes first.
  KvCache cache(model->config, 16);
  const std::vector<int32_t> prompt = {5, 9};
  const int64_t r = t.BeginRequest(prompt);
  t.Forward(std::vector<BatchItem>{{&cache, prompt, false, r}});
  t.EndRequest(r);
  std::vector<std::string> want = {"observer:request_begin", "stack:request_begin",
                                   "observer:iteration_begin", "stack:iteration_begin"};
  for (int layer = 0; layer < model->config.num_layers; ++layer) {
    if (!model->config.IsMoeLayer(layer)) continue;
    want.push_back("observer:gate" + std::to_string(layer));
    want.push_back("stack:gate" + std::to_string(layer));
  }
  for (const char* e : {"iteration_end", "request_end"}) {
    want.push_back(std::string("observer:") + e);
    want.push_back(std::string("stack:") + e);
  }
  EXPECT_EQ(log, want);

  // An observer that fails at the gate: the stack never sees that gate, and the pass still
  // ends with iteration_end for both.
  log.clear();
  observer.throw_at_gate = true;
  KvCache other(model->config, 16);
  EXPECT_THROW(t.Forward(std::vector<BatchItem>{{&other, prompt, false, -1}}), Error);
  ASSERT_GE(log.size(), 2u);
  EXPECT_EQ(std::count_if(log.begin(), log.end(),
                          [](const std::string& s) { return s.starts_with("stack:gate"); }),
            0);
  EXPECT_EQ(log[log.size() - 2], "observer:iteration_end");
  EXPECT_EQ(log.back(), "stack:iteration_end");

  t.RemoveSink(&observer);
  log.clear();
  KvCache third(model->config, 16);
  t.Forward(std::vector<BatchItem>{{&third, prompt, false, -1}});
  EXPECT_EQ(std::count_if(log.begin(), log.end(),
                          [](const std::string& s) { return s.starts_with("observer:"); }),
            0);
}

}  // namespace
}  // namespace moex
