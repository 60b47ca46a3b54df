// Most policies are a prefetcher (what to fetch ahead) plus an evictor (what to drop).
// ComposedPolicy joins one of each; both parts see every event.
#pragma once

#include <memory>
#include <string>

#include "policy/policy.h"

namespace moex::policy {

// Keeps per-expert statistics from the events and scores eviction candidates.
class Evictor {
 public:
  virtual ~Evictor() = default;
  virtual std::string name() const = 0;
  // `demand`: the expert was routed to; otherwise it was prefetched (an insertion).
  virtual void Touch(const ExpertKey& expert, bool demand) = 0;
  virtual double Score(const ExpertKey& expert) = 0;
  // After each gate's demand was served, before its routed experts are touched.
  virtual void OnGate(const GateEvent& e) {}
};

class Prefetcher {
 public:
  virtual ~Prefetcher() = default;
  virtual std::string name() const = 0;
  virtual void OnRequestBegin(const RequestBeginEvent& e, Decisions* out) {}
  virtual void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) {}
  virtual void OnGate(const GateEvent& e, Decisions* out) {}
  virtual void OnIterationEnd(Decisions* out) {}
};

class ComposedPolicy : public Policy {
 public:
  ComposedPolicy(std::unique_ptr<Prefetcher> prefetcher, std::unique_ptr<Evictor> evictor);
  std::string name() const override;
  void OnRequestBegin(const RequestBeginEvent& e, Decisions* out) override;
  void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) override;
  void OnGate(const GateEvent& e, Decisions* out) override;
  void OnIterationEnd(Decisions* out) override;
  double EvictScore(const ExpertKey& expert) override { return evictor_->Score(expert); }

 private:
  void TouchPrefetches(const Decisions& out, size_t from);

  std::unique_ptr<Prefetcher> prefetcher_;  // May be null (on-demand only).
  std::unique_ptr<Evictor> evictor_;
};

std::unique_ptr<Evictor> MakeLruEvictor(const ModelConfig& config);
std::unique_ptr<Evictor> MakeLfuEvictor(const ModelConfig& config);
std::unique_ptr<Evictor> MakeRandomEvictor(uint64_t seed);
std::unique_ptr<Evictor> MakeBeladyEvictor(const PolicyContext& context);
std::unique_ptr<Prefetcher> MakeNextGatePrefetcher(const PolicyContext& context);

}  // namespace moex::policy
