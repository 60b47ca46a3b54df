#include "policy/composed_policy.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moex::policy {

ComposedPolicy::ComposedPolicy(std::vector<Part> parts) : parts_(std::move(parts)) {
  Check(!parts_.empty() && parts_.back().policy->evicts(),
        "a composed policy needs an evicting last part");
  for (const Part& p : parts_) name_ += (name_.empty() ? "" : "+") + p.name;
}

template <typename Fn>
void ComposedPolicy::ForEachPart(Decisions* out, Fn event) {
  for (Part& p : parts_) {
    const size_t from = out->prefetch.size();
    event(*p.policy);
    if (learning()) continue;
    for (size_t i = from; i < out->prefetch.size(); ++i)
      evictor().OnTouch(out->prefetch[i].expert, false);
  }
}

void ComposedPolicy::OnRequestBegin(const RequestBeginEvent& e, Decisions* out) {
  ForEachPart(out, [&](Policy& p) { p.OnRequestBegin(e, out); });
}

void ComposedPolicy::OnIterationBegin(const IterationBeginEvent& e, Decisions* out) {
  ForEachPart(out, [&](Policy& p) { p.OnIterationBegin(e, out); });
}

void ComposedPolicy::OnGate(const GateEvent& e, Decisions* out) {
  // The evictor sees the gate first, then each routed expert is touched once, in ascending
  // id order, then the other parts see the gate (the order the baselines were defined in).
  Policy& ev = evictor();
  const size_t from = out->prefetch.size();
  ev.OnGate(e, out);
  if (!learning()) {
    for (int32_t id : e.routed_experts()) ev.OnTouch({e.layer, id}, true);
    for (size_t i = from; i < out->prefetch.size(); ++i) ev.OnTouch(out->prefetch[i].expert, false);
  }
  for (size_t i = 0; i + 1 < parts_.size(); ++i) {
    const size_t before = out->prefetch.size();
    parts_[i].policy->OnGate(e, out);
    if (learning()) continue;
    for (size_t j = before; j < out->prefetch.size(); ++j)
      ev.OnTouch(out->prefetch[j].expert, false);
  }
}

void ComposedPolicy::OnExpertDone(const ExpertDoneEvent& e, Decisions* out) {
  ForEachPart(out, [&](Policy& p) { p.OnExpertDone(e, out); });
}

void ComposedPolicy::OnIterationEnd(Decisions* out) {
  ForEachPart(out, [&](Policy& p) { p.OnIterationEnd(out); });
}

void ComposedPolicy::OnRequestEnd(const RequestEndEvent& e, Decisions* out) {
  ForEachPart(out, [&](Policy& p) { p.OnRequestEnd(e, out); });
}

void ComposedPolicy::ComputeOrder(int layer, std::vector<ExpertKey>* experts) {
  for (Part& p : parts_) p.policy->ComputeOrder(layer, experts);
}

bool ComposedPolicy::RegroupPasses(const std::vector<PassCandidate>& candidates, int groups,
                                   std::vector<int>* group) {
  for (Part& p : parts_) {
    if (p.policy->RegroupPasses(candidates, groups, group)) return true;
  }
  return false;
}

void ComposedPolicy::OnLearnBegin() {
  Policy::OnLearnBegin();
  for (Part& p : parts_) p.policy->OnLearnBegin();
}

void ComposedPolicy::OnLearnEnd() {
  for (Part& p : parts_) p.policy->OnLearnEnd();
  Policy::OnLearnEnd();
}

// Each part's state as a named, length-prefixed blob, so a part reads exactly its own.
void ComposedPolicy::SaveState(StateWriter& out) const {
  out.U64(parts_.size());
  for (const Part& p : parts_) {
    StateWriter part;
    p.policy->SaveState(part);
    out.String(p.name);
    out.String(part.bytes());
  }
}

void ComposedPolicy::LoadState(StateReader& in) {
  const uint64_t n = in.U64();
  Check(n == parts_.size(), in.origin(), ": policy state has ", n, " parts, policy ", name_,
        " has ", parts_.size());
  for (Part& p : parts_) {
    const std::string name = in.String();
    Check(name == p.name, in.origin(), ": policy state part '", name, "' where '", p.name,
          "' was expected");
    const std::string bytes = in.String();
    StateReader part({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()},
                     in.origin() + " (" + p.name + ")");
    p.policy->LoadState(part);
    part.ExpectEnd();
  }
}

// Every part adds its fields to the same object (parts report under their own keys).
void ComposedPolicy::ReportJson(nlohmann::json* report) const {
  for (const Part& p : parts_) p.policy->ReportJson(report);
}

}  // namespace moex::policy
