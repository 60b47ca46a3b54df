// The oracle prefetcher: knows the future routing (the simulator's FutureDemand) and keeps
// the experts of the coming gates on their way, as early as the budget allows: after each
// gate it asks for the soonest-needed distinct experts of the gates ahead, as many as fit
// beside the gate in use, each with a priority that falls with the distance to its next
// use, so the link fetches them in order of need. With Belady's eviction, whose victims are
// the experts needed farthest ahead, `oracle+belady` is the bound every policy is measured
// against: the demand a perfect predictor and a perfect cache would still leave.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

class OraclePrefetcher : public Policy {
 public:
  OraclePrefetcher(const PolicyFacts& f, const Params& p)
      : facts_(f), lookahead_(p.Int("lookahead")) {
    Check(f.future != nullptr,
          "policy oracle needs the future routing, which only `moex sim` has (it replays a "
          "recorded trace); the engine cannot run it");
    seen_.assign(static_cast<size_t>(f.num_layers) * static_cast<size_t>(f.num_experts), 0);
  }
  std::string name() const override { return "oracle"; }

  void OnIterationBegin(const IterationBeginEvent&, Decisions* out) override {
    if (!learning_) Ahead(0, out);
  }
  void OnGate(const GateEvent& e, Decisions* out) override {
    if (learning_) return;
    const size_t in_use = cursor_ < static_cast<int64_t>(facts_.future->gates.size())
                              ? facts_.future->gates[static_cast<size_t>(cursor_)].size()
                              : 0;
    ++cursor_;
    Ahead(static_cast<int64_t>(in_use), out);
  }
  void OnLearnBegin() override { learning_ = true; }
  void OnLearnEnd() override { learning_ = false; }

 private:
  // Prefetches the distinct experts of the gates from the cursor on, in order of next use,
  // until they would fill the cache beside the `pinned` experts of the gate in use.
  void Ahead(int64_t pinned, Decisions* out) {
    const auto& gates = facts_.future->gates;
    int64_t room = facts_.capacity_experts - pinned;
    if (lookahead_ > 0) room = std::min(room, lookahead_);
    ++stamp_;
    for (size_t g = static_cast<size_t>(cursor_); g < gates.size() && room > 0; ++g) {
      for (const ExpertKey& k : gates[g]) {
        uint32_t& s = seen_[static_cast<size_t>(k.layer) * static_cast<size_t>(facts_.num_experts) +
                            static_cast<size_t>(k.expert)];
        if (s == stamp_) continue;
        s = stamp_;
        Prefetch p;
        p.expert = k;
        p.priority = -static_cast<double>(g);  // Sooner use, higher priority.
        out->prefetch.push_back(p);
        if (--room == 0) break;
      }
    }
  }

  PolicyFacts facts_;
  int64_t lookahead_;
  int64_t cursor_ = 0;  // Index of the next gate in the future.
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  bool learning_ = false;
};

MOEX_REGISTER_POLICY({
    .name = "oracle",
    .roles = kPrefetches,
    .doc = "prefetch the experts of the coming gates in order of need, as many as the budget "
           "holds (needs the future; oracle+belady is the bound)",
    .source = "the bound for prefetching (EVALUATION.md)",
    .params = {{.name = "lookahead",
                .type = ParamType::kInt,
                .default_value = "0",
                .min = 0,
                .max = 1e9,
                .doc = "most experts kept on their way at once (0: as many as the cache holds)"}},
    .needs_future = true,
    .test_specs = {"oracle+belady", "oracle:lookahead=4+belady"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<OraclePrefetcher>(f, p);
    },
});

}  // namespace
}  // namespace moex::policy
