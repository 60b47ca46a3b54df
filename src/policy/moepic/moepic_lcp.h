// MoEpic's cache priority (paper §3.3, Eq. 4): LCP, "Least Cache Priority". Each expert
// keeps its activation frequency μ (tokens that activated it, never decayed) and its
// activation interval ν (tokens since it was last activated); its priority is
//
//     P = μ · ρ^(ν/ω)        (ω: observation window, 128; ρ ∈ (0,1): balance, 0.25)
//
// so frequency (LFU) is discounted by idleness (LRU): with the defaults the priority halves
// every 64 idle tokens. The lowest priority is evicted first. LRU, LFU and random
// priorities stand in for LCP in the paper's ablations (Table 1, Table 3 "w/o LCP").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policy/policy_state.h"

namespace moex::policy {

double LcpPriority(double mu, double nu, double rho, double omega);

class ExpertPriorities {
 public:
  enum class Kind { kLcp, kLru, kLfu, kRandom };

  ExpertPriorities(int num_layers, int num_experts, Kind kind, double rho, double omega,
                   uint64_t seed);

  // One gate of `layer` over `n_tokens` tokens: `ids` holds every token's routed experts.
  // Activated experts gain the tokens that picked them (μ) and restart their interval
  // (ν = 0); the others' intervals grow by the pass's tokens.
  void Observe(int layer, const int32_t* ids, int64_t n_ids, int64_t n_tokens);

  double Priority(int layer, int expert) const;
  // The layer's experts, highest priority first (ties: lower id).
  std::vector<int32_t> Ranking(int layer) const;
  double mu(int layer, int expert) const { return mu_[Index(layer, expert)]; }
  double nu(int layer, int expert) const { return nu_[Index(layer, expert)]; }

  void Save(StateWriter& out) const;
  void Load(StateReader& in);

 private:
  size_t Index(int layer, int expert) const {
    return static_cast<size_t>(layer) * static_cast<size_t>(num_experts_) +
           static_cast<size_t>(expert);
  }
  int num_layers_, num_experts_;
  Kind kind_;
  double rho_, omega_;
  uint64_t seed_;
  std::vector<double> mu_, nu_;
  std::vector<int64_t> gates_;  // Per layer: gates seen (the random priorities' epoch).
};

}  // namespace moex::policy
