// fMoE (Yu et al., "fMoE: Fine-Grained Expert Offloading for Large Mixture-of-Experts
// Serving"): the policy `fmoe`, prefetcher and evictor in one (docs/policies/fmoe.md).
//
//  * Expert maps (§4.1): every request of every pass records its map, the gate's probability
//    distribution at each MoE layer (the mean over the request's tokens of the pass), and its
//    semantic embedding (the pass's pooled input embedding, or the prompt's).
//  * Expert Map Store (§4.4, expert_map_store.h): capacity `store`, deduplicated by the
//    redundancy score (d/L semantic, (L − d)/L trajectory); learned from --learn-from traces
//    and online, saved with --policy-state.
//  * Search (§4.2) on the policy worker (§4.3's publish–subscribe): at iteration begin the
//    semantic search guides MoE layers 1..d; after the gate of layer l the trajectory search
//    over layers 1..l guides layer l + d.
//  * Selection (§4.3, fmoe_selection.h): per target layer, the smallest set of experts of the
//    matched distribution reaching δ = clip(1 − score, 0, 1), at least top-K; prefetched
//    with priority p / (l − l_now), re-prioritised as l_now advances.
//  * Cache (§4.5): a prefetched expert is kept until its gate; otherwise the lowest
//    p · freq is evicted first (LFU weighted by the matched map's probability, no recency).
//    Misses load on demand ahead of every prefetch (the platform's queue).
//  * Ablations: search=semantic / trajectory, a fixed δ, no deduplication.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policy/fmoe/expert_map_store.h"
#include "policy/moe_layers.h"
#include "policy/params.h"
#include "policy/policy.h"

namespace moex::policy {

// Which searches guide prefetching: semantic for the first d layers and trajectory after
// (both), or one only.
enum class FmoeSearch { kBoth, kSemantic, kTrajectory };
// Which pooled embedding the semantic search matches: the pass's, or the prompt's.
enum class FmoeSemantic { kIteration, kPrompt };

struct FmoeOptions {
  using Search = FmoeSearch;
  using Semantic = FmoeSemantic;
  int store = 1000;  // Expert Map Store capacity C.
  int distance = 3;  // Prefetch distance d (MoE layers).
  Search search = Search::kBoth;
  double delta = -1;  // < 0: δ = clip(1 − score, 0, 1); else fixed δ.
  bool dedup = true;  // Replace the most redundant map (else oldest).
  Semantic semantic = Semantic::kIteration;
  bool cancel = false;  // Cancel prefetches their gate did not route to.

  template <class V>
  void VisitParams(V& v) {
    v.Int("store", store, 1, 100000, "Expert Map Store capacity C (iterations)");
    v.Int("distance", distance, 1, 1024,
          "prefetch distance d: MoE layers between a search and its target");
    v.Choice("search", search,
             {{Search::kBoth, "both"},
              {Search::kSemantic, "semantic"},
              {Search::kTrajectory, "trajectory"}},
             "semantic for the first d layers and trajectory after (both), or one only");
    v.Real("delta", delta, -1, 1,
           "selection threshold: < 0 = clip(1 - score, 0, 1) per target (Eq. 6-8); "
           "else this fixed probability mass (0 = top-K only)");
    v.Bool("dedup", dedup, "full store: replace the most redundant map (else the oldest)");
    v.Choice("semantic", semantic,
             {{Semantic::kIteration, "iteration"}, {Semantic::kPrompt, "prompt"}},
             "semantic embedding: the pass's pooled input embedding, or the prompt's");
    v.Bool("cancel", cancel, "cancel prefetched experts their gate did not route to");
  }
};

class FmoePolicy : public Policy {
 public:
  // facts.worker must be set: searches and store updates run there.
  FmoePolicy(const PolicyFacts& facts, FmoeOptions options);
  ~FmoePolicy() override;

  std::string name() const override { return "fmoe"; }
  bool evicts() const override { return true; }

  void OnRequestBegin(const RequestBeginEvent& e, Decisions* out) override;
  void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) override;
  void OnGate(const GateEvent& e, Decisions* out) override;
  void OnIterationEnd(Decisions* out) override;
  void OnRequestEnd(const RequestEndEvent& e, Decisions* out) override;

  void OnTouch(const ExpertKey& expert, bool demand) override;
  double EvictScore(const ExpertKey& expert) override;

  void OnLearnEnd() override;
  void SaveState(StateWriter& out) const override;
  void LoadState(StateReader& in) override;
  void ReportJson(nlohmann::json* report) const override;

  // Inspection (tests). The store belongs to the worker's jobs: this waits for it.
  const ExpertMapStore& Store() const;
  bool IsProtected(const ExpertKey& expert) const { return protected_.contains(expert); }
  // The matched probability the eviction score uses for an expert (1/J before any match).
  double GuideProbability(const ExpertKey& expert) const;
  int64_t Frequency(const ExpertKey& expert) const;
  // Eviction scores at or above this belong to prefetched experts whose gate has not come.
  static constexpr double kProtectedScore = 1e12;

  // What a search found for one request: the matched distributions of its target layers.
  struct Guide {
    int ordinal = 0;  // Target MoE layer.
    double score = 0;
    std::vector<float> probs;  // [J]
  };

 private:
  struct Segment {
    int64_t request = 0;
    int64_t tokens = 0;
    std::vector<float> sem;
    std::vector<float> map;  // [L·J], filled gate by gate.
  };
  struct Protected {
    int ordinal = 0;
    double p = 0;
    double priority = 0;
  };
  struct Matching;  // What the worker's jobs own.
  // The worker's jobs (PolicyWorker::Submit's snapshot form): each computes on its query
  // alone; the apply steps below them read and update the policy.
  struct SemanticQuery;
  struct TrajectoryQuery;
  struct StoreInsert;
  struct Searched {
    std::vector<Guide> guides;
    double us = 0;  // Measured search time.
  };
  static Searched SearchSemantic(const SemanticQuery& q);
  static Searched SearchTrajectory(const TrajectoryQuery& q);
  static double Insert(const StoreInsert& q);

  void ClearProtected();
  size_t Index(const ExpertKey& k) const;
  void SubmitSemantic();
  void SubmitTrajectory(int ordinal);
  void CountSearches(const std::vector<Guide>& guides, double job_us, bool semantic);
  // Selects and prefetches each guide's experts (Eq. 6-8, PRI^prefetch) for targets ahead.
  void ApplyGuides(const std::vector<Guide>& guides, Decisions* out);
  void PrefetchSemanticTarget(int target, Decisions* out);

  PolicyFacts facts_;
  FmoeOptions opt_;
  MoeLayers moe_;

  std::vector<Segment> pass_;  // Requests of the pass in progress, in token order.
  bool in_pass_ = false;
  int64_t pass_seq_ = 0;  // Counts passes (learning included), so stale results are dropped.
  int current_ = -1;      // MoE ordinal of the pass's latest gate.
  int gates_seen_ = 0;
  std::map<int64_t, std::vector<float>> prompt_sem_;  // semantic=prompt: first pass's pooled.
  // search=semantic: each request's semantically matched whole map for this pass.
  std::vector<Guide> semantic_maps_;

  std::vector<float> guide_;   // [L·J] matched probability per expert, for eviction.
  std::vector<int64_t> freq_;  // [num_layers·J] demand uses (cache visits).
  std::map<ExpertKey, Protected> protected_;
  std::vector<double> protected_score_;  // [num_layers·J] its eviction score, or -1.
  int store_size_ = 0;                   // Driver-side count of stored maps (for modelled costs).

  // Statistics for the report.
  int64_t served_passes_ = 0;
  int64_t semantic_searches_ = 0, trajectory_searches_ = 0;
  double semantic_score_sum_ = 0, trajectory_score_sum_ = 0;
  int64_t targets_ = 0, experts_selected_ = 0;
  double match_us_ = 0, insert_us_ = 0;
  int64_t match_jobs_ = 0, insert_jobs_ = 0;

  std::shared_ptr<Matching> matching_;
};

}  // namespace moex::policy
