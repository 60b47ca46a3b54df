// MoE-Infinity (Xue et al., "MoE-Infinity: Offloading-Efficient MoE Model Serving"): the
// policy `moe-infinity`, prefetcher and evictor in one (docs/policies/moe-infinity.md).
//
//  * Tracing (§4): every request keeps an iteration-level EAM and request-level EAMs for
//    prefill and decode (expert_activation_matrix.h). A finished request's EAMs go into
//    the prefill and decode EAM collections (eam_collection.h), learned from --learn-from
//    traces and online, saved with --policy-state.
//  * Prefetching (§5.1): after each gate the pass's iteration EAM so far is matched
//    against the collection of its phase on the policy worker; the nearest `matches` EAMs
//    are summed, row-normalised and weighted by layer proximity (moe_infinity_priority.h),
//    and the top K experts of every later layer (K = the cache's slots the gate leaves
//    free) are prefetched in priority order. Queued prefetches are re-prioritised as the
//    EAM grows; those that leave the top K lose their protection (the paper's reset case
//    iii), those not routed at their gate are cancelled (case ii).
//  * Caching (§5.2): one cache holds prefetched and cached experts. A prefetched expert
//    keeps the highest eviction score until used or found unused; afterwards its score is
//    its count in the pass's request-level EAMs, raised for the initial layers.
//  * Ablations (§7.2-7.3, Tab. 2-5): model-level tracing (BrainStorm), dependency
//    prefetching, next-layer only, no proximity, prefetch only, caching only.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policy/moe_infinity/eam_collection.h"
#include "policy/moe_infinity/expert_activation_matrix.h"
#include "policy/moe_infinity/moe_infinity_priority.h"
#include "policy/moe_layers.h"
#include "policy/params.h"
#include "policy/policy.h"

namespace moex::policy {

// Prefetch prediction: request-level EAM matching, model-level counts, or none.
enum class MoeInfinityTracing { kRequest, kModel, kNone };
// Eviction: request-level EAM counts, model-level counts, LRU, or none (release after use).
enum class MoeInfinityCache { kEam, kModel, kLru, kNone };

struct MoeInfinityOptions {
  using Tracing = MoeInfinityTracing;
  using Cache = MoeInfinityCache;
  int eamc = 120;   // EAMC capacity (per phase).
  int matches = 1;  // Nearest EAMs aggregated.
  Tracing tracing = Tracing::kRequest;
  int lookahead = 0;      // Later MoE layers prefetched; 0 = all of them.
  bool proximity = true;  // Layer proximity factor 1 - (i - l)/L.
  bool prefetch = true;
  Cache cache = Cache::kEam;
  double boost = 1;           // Initial-layer raise of the cache priority.
  bool observed_rows = true;  // Match the rows seen so far only (else the whole vector).
  bool cancel = true;         // Cancel prefetches not routed at their gate.
  double slots = 1;           // Fraction of the free slots the prefetcher may fill (K).

  template <class V>
  void VisitParams(V& v) {
    v.Int("eamc", eamc, 1, 100000, "EAM collection capacity per phase (prefill, decode)");
    v.Int("matches", matches, 1, 100000, "nearest EAMs summed into the activation probabilities");
    v.Choice("tracing", tracing,
             {{Tracing::kRequest, "request"}, {Tracing::kModel, "model"}, {Tracing::kNone, "none"}},
             "prefetch prediction: request-level EAM matching, model-level counts "
             "(BrainStorm), or none (dependency: every expert alike)");
    v.Int("lookahead", lookahead, 0, 1024,
          "later MoE layers to prefetch for; 0 = all (multi-layer)");
    v.Bool("proximity", proximity, "weight layer i by 1 - (i - l)/L");
    v.Bool("prefetch", prefetch, "prefetch at all (0: caching only)");
    v.Choice("cache", cache,
             {{Cache::kEam, "eam"},
              {Cache::kModel, "model"},
              {Cache::kLru, "lru"},
              {Cache::kNone, "none"}},
             "eviction: request-level EAM counts with the initial-layer boost, "
             "model-level counts, LRU, or none (release experts after use)");
    v.Real("boost", boost, 0, 1000, "initial-layer raise: count x (1 + boost (1 - i/L))");
    v.Choice("match_rows", observed_rows, {{true, "observed"}, {false, "all"}},
             "compare the layers seen so far in the pass, or the whole flattened EAM");
    v.Bool("cancel", cancel, "cancel prefetched experts their gate did not route to");
    v.Real("slots", slots, 0, 1, "fraction of the cache's free slots the prefetcher may fill (K)");
  }
};

class MoeInfinityPolicy : public Policy {
 public:
  enum class Phase { kPrefill, kDecode };
  using Tracing = MoeInfinityTracing;
  using Cache = MoeInfinityCache;

  // facts.worker must be set: matching and EAMC insertion run there.
  MoeInfinityPolicy(const PolicyFacts& facts, MoeInfinityOptions options);
  ~MoeInfinityPolicy() override;

  std::string name() const override { return "moe-infinity"; }
  bool evicts() const override { return true; }

  void OnRequestBegin(const RequestBeginEvent& e, Decisions* out) override;
  void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) override;
  void OnGate(const GateEvent& e, Decisions* out) override;
  void OnExpertDone(const ExpertDoneEvent& e, Decisions* out) override;
  void OnIterationEnd(Decisions* out) override;
  void OnRequestEnd(const RequestEndEvent& e, Decisions* out) override;

  void OnTouch(const ExpertKey& expert, bool demand) override;
  double EvictScore(const ExpertKey& expert) override;

  void OnLearnEnd() override;
  void SaveState(StateWriter& out) const override;
  void LoadState(StateReader& in) override;

  // Inspection (tests). The collections belong to the worker's jobs: these wait for it.
  const EamCollection& Collection(Phase phase) const;
  // A running request's request-level EAM of a phase, or null.
  const ExpertActivationMatrix* RequestEam(int64_t request, Phase phase) const;
  bool IsProtected(const ExpertKey& expert) const { return protected_.contains(expert); }
  // Eviction scores at or above this belong to protected (prefetched, unused) experts.
  static constexpr double kProtectedScore = 1e12;

 private:
  struct RequestTrace {
    int64_t prompt_len = 0;
    int64_t consumed = 0;    // Tokens of passes that ended.
    bool in_prefill = true;  // Phase of the current pass.
    ExpertActivationMatrix prefill, decode, iteration;
  };
  struct Segment {
    int64_t request;
    int64_t tokens;
  };
  struct Matching;  // What the worker's jobs own.
  // The worker's jobs (PolicyWorker::Submit's snapshot form), each on its query alone.
  struct PrefetchQuery;
  struct CollectionInsert;
  static std::vector<PrefetchCandidate> RankPrefetch(const PrefetchQuery& q);
  static bool Insert(const CollectionInsert& q);

  RequestTrace& Trace(int64_t request, int64_t prompt_len);
  void SubmitPrefetch(int ordinal, std::vector<float> row, int slots_free);
  void ApplyPrefetch(int64_t pass, int slots_free, const std::vector<PrefetchCandidate>& ranked,
                     Decisions* out);
  double QueryCostUs(int ordinal, int nonzero, Phase phase) const;

  PolicyFacts facts_;
  MoeInfinityOptions opt_;
  MoeLayers moe_;

  std::map<int64_t, RequestTrace> requests_;
  std::vector<Segment> pass_;  // Requests of the pass in progress, in token order.
  bool in_pass_ = false;
  int64_t pass_seq_ = 0;  // Counts passes (learning included), so stale worker results are dropped.
  bool pass_prefill_ = false;  // Most of the pass's tokens are prompt tokens.
  int current_ = -1;           // MoE ordinal of the pass's latest gate.

  ExpertActivationMatrix model_eam_;       // Every pass ever (model-level tracing).
  ExpertActivationMatrix cache_counts_;    // The pass's requests' EAMs of their phase.
  std::map<ExpertKey, double> protected_;  // Prefetched this pass, not yet used: priority.
  std::vector<uint64_t> last_touch_;
  uint64_t clock_ = 0;
  int eamc_size_[2] = {0, 0};  // Driver-side count of stored EAMs (for modelled costs).

  std::shared_ptr<Matching> matching_;
};

}  // namespace moex::policy
