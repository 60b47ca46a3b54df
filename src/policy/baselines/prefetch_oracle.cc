// The oracle prefetcher: knows the future routing (the simulator's FutureDemand) and fetches
// exactly the experts Belady's MIN would fetch, each as early as it can without harm.
//
// It first replays MIN over the whole future at the cache's capacity (whole experts): every
// miss of MIN is a fetch of expert X needed at gate g that evicts V, the cached expert used
// farthest ahead. That fetch can start as soon as V's last use before g is computed: from
// then on V is dead weight, so fetching X into its place costs no extra miss ("conservative"
// integrated prefetching and caching: Cao, Felten, Karlin and Li, SIGMETRICS 1995). Fetches into
// free slots may start at once. The prefetcher then issues each fetch when its gate comes, with a
// priority that falls with the distance to its use, so the link fetches them in order of need. With
// Belady's eviction, `oracle+belady` moves MIN's bytes (the fewest any policy can move) with the
// transfers started as early as MIN allows: the bound every policy is measured against. Eagerly
// filling the cache with the soonest-needed experts instead moves up to twice MIN's bytes at small
// budgets, since it evicts experts before MIN would.
#include <algorithm>
#include <limits>
#include <vector>

#include "core/error.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

struct ScheduledFetch {
  int64_t victim_gate = -1;  // The victim's last use before the fetch (-1: a free slot).
  ExpertKey victim;
  int64_t needed_at = 0;  // The gate that routes to the expert.
  ExpertKey expert;
};

// MIN's fetches over `gates` with room for `capacity` whole experts, in order of issue.
std::vector<ScheduledFetch> MinSchedule(const FutureDemand& future, int num_layers, int num_experts,
                                        int64_t capacity) {
  const size_t keys = static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts);
  auto index = [num_experts](const ExpertKey& k) { return KeyIndex(k, num_experts); };
  std::vector<std::vector<int64_t>> uses(keys);
  const auto& gates = future.gates;
  for (size_t g = 0; g < gates.size(); ++g)
    for (const ExpertKey& k : gates[g]) uses[index(k)].push_back(static_cast<int64_t>(g));
  std::vector<size_t> next(keys, 0);  // Per expert: first use not yet passed.
  std::vector<int64_t> last_use(keys, -1);
  std::vector<size_t> cached;  // Keys, ascending.
  std::vector<char> in_cache(keys, 0);
  std::vector<ScheduledFetch> schedule;
  auto next_use = [&](size_t i, int64_t g) {
    size_t& n = next[i];
    while (n < uses[i].size() && uses[i][n] < g) ++n;
    return n < uses[i].size() ? uses[i][n] : kNever;
  };
  for (size_t g = 0; g < gates.size(); ++g) {
    const int64_t now = static_cast<int64_t>(g);
    for (const ExpertKey& k : gates[g]) {
      const size_t x = index(k);
      if (in_cache[x]) continue;
      ScheduledFetch fetch{-1, {}, now, k};
      if (static_cast<int64_t>(cached.size()) >= capacity) {
        // The victim: farthest next use, never used again first; ties go to the lower key,
        // as the cache breaks ties of Belady's scores. This gate's experts are pinned.
        size_t victim = keys;
        int64_t farthest = -1;
        for (size_t i : cached) {
          const int64_t use = next_use(i, now);
          if (use == now) continue;
          if (use > farthest) {
            farthest = use;
            victim = i;
          }
        }
        if (victim == keys) continue;  // Every slot holds this gate's experts: streamed.
        in_cache[victim] = 0;
        cached.erase(std::lower_bound(cached.begin(), cached.end(), victim));
        fetch.victim_gate = last_use[victim];
        fetch.victim = {static_cast<int>(victim / static_cast<size_t>(num_experts)),
                        static_cast<int>(victim % static_cast<size_t>(num_experts))};
      }
      in_cache[x] = 1;
      cached.insert(std::lower_bound(cached.begin(), cached.end(), x), x);
      schedule.push_back(fetch);
    }
    for (const ExpertKey& k : gates[g]) last_use[index(k)] = now;
  }
  std::stable_sort(schedule.begin(), schedule.end(),
                   [](const ScheduledFetch& a, const ScheduledFetch& b) {
                     return a.victim_gate < b.victim_gate;
                   });
  return schedule;
}

struct OracleOptions {
  int64_t lookahead = 0;

  template <class V>
  void VisitParams(V& v) {
    v.Int("lookahead", lookahead, 0, 1e9, "most fetches on their way at once (0: no limit)");
  }
};

class OraclePrefetcher : public Policy {
 public:
  OraclePrefetcher(const PolicyFacts& f, const OracleOptions& o) : lookahead_(o.lookahead) {
    Check(f.future != nullptr,
          "policy oracle needs the future routing, which only `moex sim` has (it replays a "
          "recorded trace); the engine cannot run it");
    schedule_ = MinSchedule(*f.future, f.num_layers, f.num_experts, f.capacity_experts);
  }
  std::string name() const override { return "oracle"; }

  void OnIterationBegin(const IterationBeginEvent&, Decisions* out) override {
    if (!learning()) Issue(out);
  }
  // After gate `served_` - 1's demand: its experts are pinned until each is computed, so a
  // fetch whose victim was last used there waits for that victim's OnExpertDone.
  void OnGate(const GateEvent&, Decisions* out) override {
    if (learning()) return;
    ++served_;
    Issue(out);
  }
  void OnExpertDone(const ExpertDoneEvent& e, Decisions* out) override {
    if (learning()) return;
    done_.push_back({e.layer, e.expert});
    Issue(out);
  }

 private:
  // Issues, in the order MIN needs them, the scheduled fetches whose victim is dead: last
  // used by a gate before the one in compute, or by that gate and computed already. Keeps
  // at most `lookahead` on their way (0: no limit).
  void Issue(Decisions* out) {
    const int64_t in_compute = served_ - 1;
    if (in_compute != done_gate_) {
      done_.clear();
      done_gate_ = in_compute;
    }
    while (next_ < schedule_.size()) {
      const ScheduledFetch& s = schedule_[next_];
      if (s.victim_gate > in_compute) return;
      if (s.victim_gate >= 0 && s.victim_gate == in_compute &&
          std::find(done_.begin(), done_.end(), s.victim) == done_.end())
        return;  // Fetches behind it wait too, so MIN's order of fetches is kept.
      if (lookahead_ > 0) {
        std::erase_if(outstanding_, [in_compute](int64_t at) { return at <= in_compute; });
        if (static_cast<int64_t>(outstanding_.size()) >= lookahead_) return;
        outstanding_.push_back(s.needed_at);
      }
      if (s.needed_at > in_compute) {  // Else it was already demanded.
        Prefetch p;
        p.expert = s.expert;
        p.priority = -static_cast<double>(s.needed_at);  // Sooner use, higher priority.
        out->prefetch.push_back(p);
      }
      ++next_;
    }
  }

  int64_t lookahead_;
  std::vector<ScheduledFetch> schedule_;
  size_t next_ = 0;
  int64_t served_ = 0;                // Gates served so far.
  std::vector<ExpertKey> done_;       // Experts of the gate in compute computed so far.
  int64_t done_gate_ = -1;            // The gate `done_` belongs to.
  std::vector<int64_t> outstanding_;  // Needed-at gates of issued fetches (lookahead only).
};

MOEX_REGISTER_POLICY({
    .name = "oracle",
    .roles = kPrefetches,
    .doc = "prefetch exactly Belady's MIN fetches, each as soon as its victim is dead (needs "
           "the future; oracle+belady is the bound)",
    .source = "the bound for prefetching (EVALUATION.md); Cao et al. 1995, conservative",
    .params = ParamSpecsOf<OracleOptions>(),
    .needs_future = true,
    .test_specs = {"oracle+belady", "oracle:lookahead=4+belady"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<OraclePrefetcher>(f, p.As<OracleOptions>());
    },
});

}  // namespace
}  // namespace moex::policy
