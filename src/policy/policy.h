// The policy interface: pure decision logic over the event stream (DESIGN.md, principle 1).
// A policy never sees the engine, the cache or the clock; the cache consults EvictScore and
// ComputeOrder, always in a deterministic order, so a replay of the same events makes the
// same decisions. Calls are synchronous and must be cheap: the forward pass never waits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/weight_source.h"
#include "model/model_config.h"
#include "policy/events.h"
#include "policy/future_demand.h"

namespace moex::policy {

// Static facts a policy may use (never the mutable state of the engine).
struct PolicyContext {
  ModelConfig config;
  int64_t expert_bytes = 0;
  int64_t capacity_experts = 0;           // Whole experts the host cache can hold.
  const WeightSource* weights = nullptr;  // For router weights (speculation); may be null.
  uint64_t seed = 0;
  const FutureDemand* future = nullptr;  // The simulator's look-ahead (Belady); null in the engine.
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;

  virtual void OnRequestBegin(const RequestBeginEvent& e, Decisions* out) {}
  virtual void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) {}
  virtual void OnGate(const GateEvent& e, Decisions* out) {}
  virtual void OnExpertDone(const ExpertDoneEvent& e, Decisions* out) {}
  virtual void OnIterationEnd(Decisions* out) {}
  virtual void OnRequestEnd(const RequestEndEvent& e, Decisions* out) {}

  // Lower scores are evicted first (ties: lower key). Called once per candidate in
  // ascending key order each time the cache must free space.
  virtual double EvictScore(const ExpertKey& expert) = 0;
  // May reorder a layer's demanded experts (given: cached first, then by id). The executor
  // still computes whatever has landed first; this orders fetch issue and ties.
  virtual void ComputeOrder(int layer, std::vector<ExpertKey>* experts) {}
};

// Names: "lru", "lfu", "random", "ondemand" (= lru), "belady" (simulator only), optionally
// prefixed by a prefetcher: "nextgate+lru" (or plain "nextgate" = nextgate+lru). Throws
// Error listing valid names.
std::unique_ptr<Policy> MakePolicy(const std::string& name, const PolicyContext& context);
std::vector<std::string> PolicyNames();

}  // namespace moex::policy
