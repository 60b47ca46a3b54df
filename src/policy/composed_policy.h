// A spec's parts joined into one Policy: every part sees every event (in spec order) and
// may decide; the last part is the evictor: it scores eviction candidates, is told of every
// use of an expert (OnTouch: routed experts at each gate, and every prefetch a part asks
// for, so a prefetched expert counts as recently inserted and LRU does not evict it before
// use), and decides what a miss keeps. ComputeOrder passes through every part in order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "policy/policy.h"

namespace moex::policy {

class ComposedPolicy : public Policy {
 public:
  struct Part {
    std::string name;  // Canonical: registered name and non-default parameters.
    std::unique_ptr<Policy> policy;
  };
  explicit ComposedPolicy(std::vector<Part> parts);

  std::string name() const override { return name_; }
  void OnRequestBegin(const RequestBeginEvent& e, Decisions* out) override;
  void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) override;
  void OnGate(const GateEvent& e, Decisions* out) override;
  void OnExpertDone(const ExpertDoneEvent& e, Decisions* out) override;
  void OnIterationEnd(Decisions* out) override;
  void OnRequestEnd(const RequestEndEvent& e, Decisions* out) override;

  bool evicts() const override { return true; }
  void OnTouch(const ExpertKey& expert, bool demand) override { evictor().OnTouch(expert, demand); }
  double EvictScore(const ExpertKey& expert) override { return evictor().EvictScore(expert); }
  NeuronRange KeepOnMiss(const ExpertKey& expert) override { return evictor().KeepOnMiss(expert); }
  bool decides_admission() const override { return parts_.back().policy->decides_admission(); }
  bool Admit(const ExpertKey& expert, double lowest_score) override {
    return evictor().Admit(expert, lowest_score);
  }
  void ComputeOrder(int layer, std::vector<ExpertKey>* experts) override;
  // The first part that regroups decides.
  bool RegroupPasses(const std::vector<PassCandidate>& candidates, int groups,
                     std::vector<int>* group) override;

  void OnLearnBegin() override;
  void OnLearnEnd() override;
  void SaveState(StateWriter& out) const override;
  void LoadState(StateReader& in) override;
  void ReportJson(nlohmann::json* report) const override;

  size_t num_parts() const { return parts_.size(); }
  Policy& part(size_t i) { return *parts_[i].policy; }

 private:
  Policy& evictor() { return *parts_.back().policy; }
  // Calls `event` on every part; tells the evictor about the prefetches they asked for.
  template <typename Fn>
  void ForEachPart(Decisions* out, Fn event);

  std::vector<Part> parts_;
  std::string name_;
};

}  // namespace moex::policy
