// The policy interface: pure decision logic over the event stream (docs/design.md, "Principles").
// A policy never sees the engine, the cache or the clock; it sees events and plain facts
// (PolicyFacts) and answers with Decisions. The cache consults EvictScore, KeepOnMiss and
// ComputeOrder in a deterministic order, so a replay of the same events makes the same
// decisions. Calls are synchronous and must be cheap: heavy work goes to the PolicyWorker.
//
// A policy is named by a spec (policy_spec.h) and built by the registry (registry.h); a
// spec may compose several parts (`nextgate+lfu`), each itself a Policy (ComposedPolicy).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "policy/events.h"
#include "policy/policy_facts.h"
#include "policy/policy_state.h"

namespace moex::policy {

class Policy {
 public:
  virtual ~Policy() = default;
  // The canonical spec: registered name and the parameters that differ from their defaults.
  virtual std::string name() const = 0;

  // The event stream. Decisions go to `out`; the driver applies them after the call.
  virtual void OnRequestBegin(const RequestBeginEvent& e, Decisions* out) {}
  virtual void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) {}
  // After the gate's demand was served (routed experts pinned, misses inserted).
  virtual void OnGate(const GateEvent& e, Decisions* out) {}
  virtual void OnExpertDone(const ExpertDoneEvent& e, Decisions* out) {}
  virtual void OnIterationEnd(Decisions* out) {}
  virtual void OnRequestEnd(const RequestEndEvent& e, Decisions* out) {}

  // Eviction. A policy that evicts scores candidates: lower scores are evicted first
  // (ties: lower key); called once per candidate in ascending key order each time the
  // cache must free space. OnTouch tells it the cache's use of an expert: routed to
  // (`demand`, once per gate in ascending id order) or asked for by a prefetch.
  virtual bool evicts() const { return false; }
  virtual void OnTouch(const ExpertKey& expert, bool demand) {}
  virtual double EvictScore(const ExpertKey& expert) { return 0; }

  // The neurons of a demanded, missing expert to keep in the cache; the rest is read for
  // this use only (streamed past the cache). Default: the whole expert. Called once per
  // demanded miss, before the gate's OnGate, so it also tells the policy which layer's gate
  // is being served.
  virtual NeuronRange KeepOnMiss(const ExpertKey& expert) { return {}; }
  // Admission (bypass). A policy that decides admission is asked, for a demanded miss whose
  // insertion would evict something, whether to insert it at all: `lowest_score` is the
  // lowest EvictScore among the experts it would compete with (unpinned, resident). Not
  // admitted, the expert is computed from staging pages for this use only (counted as
  // `bypassed`), and nothing is evicted. Default: every miss is admitted.
  virtual bool decides_admission() const { return false; }
  virtual bool Admit(const ExpertKey& expert, double lowest_score) { return true; }
  // May reorder a layer's demanded experts (given: cached first, then by id). The executor
  // still computes whatever has landed first; this orders fetch issue and ties.
  virtual void ComputeOrder(int layer, std::vector<ExpertKey>* experts) {}

  // Token regrouping (ExpertFlow §3.3): the server offers the requests ready to run and the
  // number of consecutive passes (`groups`) they may be split into; *group arrives holding
  // the scheduler's own split (admission order, balanced). A policy that predicts routing
  // may set (*group)[i] in [0, groups) for candidate i so that each pass activates fewer
  // experts (policy/common/token_regrouping.h clusters predicted paths), and return true.
  // Regrouping changes only when a request runs, never what it computes. Default: false
  // (the scheduler keeps its split).
  virtual bool RegroupPasses(const std::vector<PassCandidate>& candidates, int groups,
                             std::vector<int>* group) {
    return false;
  }

  // Learning from past traces (--learn-from): between these calls the events come from a
  // recorded trace, with no cache behind them, and decisions are discarded. They keep
  // learning(), so an override calls them (Policy::OnLearnBegin first, OnLearnEnd first).
  virtual void OnLearnBegin() { learning_ = true; }
  virtual void OnLearnEnd() { learning_ = false; }
  // Between OnLearnBegin and OnLearnEnd.
  bool learning() const { return learning_; }

  // What the policy learned, for --policy-state. Policies without state write nothing.
  virtual void SaveState(StateWriter& out) const {}
  virtual void LoadState(StateReader& in) {}

  // What the policy wants shown in a run's report (`policy_report`, e.g. MoEpic's per-layer
  // budgets and splits): fields added to the object `report`. Default: nothing.
  virtual void ReportJson(nlohmann::json* report) const {}

 private:
  bool learning_ = false;
};

}  // namespace moex::policy
