// MoEpic's cache configurator (paper §3.4, Algorithm 1): chooses, per MoE layer, the cache
// budget V_i (in whole experts) and the split ratio θ_i (the share of each cached expert
// kept resident: its top segment), so that the exposed (non-overlapped) expert loading
// time summed over the layers is smallest.
//
// The exposed-latency model (Eqs. 5-7), with m_i the expected activated experts already in
// memory when layer i's router runs (the relaxation of §3.4.2: α_i + β_i·θ_i ≈ m_i,
// β_i·(1-θ_i) + γ_i ≈ K - m_i):
//   T_hide = m·T_exp,  T_miss = (K-m)·T_load,  exposed = max(0, T_miss - T_hide)
//   T_wind(1) = T_head + T_att,  T_wind(i+1) = T_moe - min(T_hide, T_miss) + T_att
// The per-layer sub-problem (Eqs. 9-11): for a budget V and a window, search the cache size
// C (θ = V/C) maximising
//   m = K·H(C)·θ + Σ_{y≤Y} (1 - PH(y,C)·θ)·P(y),  Σ_{y≤Y} (1 - PH(y,C)·θ)·T_load ≤ T_wind
// from online statistics: H(C) the hit rate of a cache of the C highest-priority experts,
// P(y) how often the y-th predicted expert is activated, PH(y,C) how often it is cached.
// The budget is then moved ζ·V_e at a time from the layer where less costs least to the
// layer where more gains most, until a move no longer lowers the total (a fixed point).
#pragma once

#include <cstdint>
#include <vector>

#include "policy/policy_facts.h"
#include "policy/policy_state.h"

namespace moex::policy {

// The online statistics of one MoE layer (Algorithm 1, line 7), as rank histograms so
// that H and PH are known for every cache size C at once: a cache of size C holds the C
// highest-priority experts, so an activated expert of priority rank r hits every C > r.
class LayerStatistics {
 public:
  explicit LayerStatistics(int num_experts = 0);
  // One gate: `priority_rank[x]` is expert x's rank by cache priority before this gate,
  // `routed` the activated experts (each once), `predicted` the experts in descending
  // predicted score (empty when nothing was predicted for this gate).
  void Observe(const std::vector<int32_t>& priority_rank, const std::vector<int32_t>& routed,
               const std::vector<int32_t>& predicted);

  int num_experts() const { return n_; }
  int64_t gates() const { return gates_; }
  double K() const;               // Mean activated experts per gate (top-k for batch 1).
  double H(int C) const;          // Hit rate of a cache of the C highest-priority experts.
  double P(int y) const;          // y from 1: the y-th predicted expert is activated.
  double PH(int y, int C) const;  // The y-th predicted expert is in a cache of size C.

  void Save(StateWriter& out) const;
  void Load(StateReader& in);

  // For tests: set the counts directly.
  int64_t gates_ = 0, activated_ = 0, predicted_gates_ = 0;
  std::vector<int64_t> hit_rank_;   // [N] activated experts by priority rank.
  std::vector<int64_t> pred_hit_;   // [N] by predicted rank: activated.
  std::vector<int64_t> pred_rank_;  // [N*N] predicted rank y, priority rank r.

 private:
  int n_ = 0;
};

// Algorithm 1's inputs besides the statistics: the latency metrics and the geometry.
struct ConfiguratorInputs {
  double t_att = 0;             // T_comp^att: one layer's attention (ms).
  double t_exp = 0;             // T_comp^exp = T_comp^moe / K: one expert (ms).
  double t_head = 0;            // T_comp^head (ms).
  double t_load = 0;            // T_load^exp: one whole expert over the link (ms).
  int num_experts = 0;          // N.
  int chunks = 1;               // Chunks per expert: θ is a whole number of chunks over this.
  int max_prefetch = 0;         // Experts the prefetch buffer holds (bounds Y).
  int fixed_top_chunks = -1;    // ≥ 0: θ fixed (ablations), only C follows from V.
  int max_iterations = 100000;  // A guard: each iteration strictly lowers the total.
};

struct LayerChoice {
  double budget = 0;      // V_i in whole experts.
  int cache_size = 0;     // C_i.
  int top_chunks = 0;     // θ_i·chunks.
  double m = 0;           // Expected activated experts in memory at the gate.
  double window_ms = 0;   // T_wind.
  double exposed_ms = 0;  // 𝒯_i.
  double theta(int chunks) const { return static_cast<double>(top_chunks) / chunks; }
};

struct Configuration {
  std::vector<LayerChoice> layers;  // Per MoE layer.
  double exposed_ms = 0;            // Σ 𝒯_i.
  int iterations = 0;               // Budget moves accepted.
};

// Eq. (11) for one layer: the cache size (and so θ) that maximises m_i.
LayerChoice SolveLayer(const LayerStatistics& s, double budget, double window_ms,
                       const ConfiguratorInputs& in);
// ExpertSplit (Algorithm 1, lines 29-35): every layer's θ_i in turn, each layer's window
// following from the one before.
Configuration ExpertSplit(const std::vector<LayerStatistics>& stats,
                          const std::vector<double>& budgets, const ConfiguratorInputs& in);
// VramAllocation (lines 13-25) from the current budgets (warm start), moving ζ·V_e per
// step; returns the final budgets' split.
Configuration AllocateBudgets(const std::vector<LayerStatistics>& stats,
                              std::vector<double> budgets, double zeta,
                              const ConfiguratorInputs& in);

}  // namespace moex::policy
