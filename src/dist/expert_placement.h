// Which rank of an expert-parallel run holds each routed expert (docs/expert-parallel.md).
// Every rank builds or reads the same placement; a placement that leaves an expert without
// a rank, names a rank that does not exist or does not fit the model is refused at start-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moex::dist {

class ExpertPlacement {
 public:
  ExpertPlacement() = default;

  // Spreads the experts of each MoE layer in `moe_layers` over `ranks`: experts in
  // descending order of `frequency[layer][expert]` (routed-token counts; ties and an empty
  // table by ascending id), each to the rank with the least routed load so far among the
  // ranks holding fewer than ceil(E / ranks) of the layer's experts (ties: lowest rank). So
  // the hot experts go to different ranks and every rank holds about E / ranks experts.
  static ExpertPlacement Balanced(int num_layers, const std::vector<int>& moe_layers,
                                  int num_experts, int ranks,
                                  const std::vector<std::vector<int64_t>>& frequency = {});

  // {"ranks": N, "layers": [{"layer": L, "rank_of_expert": [r0, r1, ...]}, ...]}: one entry
  // per MoE layer. Throws Error on a malformed document; Validate checks it fits a model.
  static ExpertPlacement FromJson(const nlohmann::json& doc);
  // Reads FromJson's document from a file; throws Error naming the file.
  static ExpertPlacement Load(const std::string& path);
  nlohmann::json ToJson() const;

  // Throws Error unless the placement is for `ranks` ranks and gives every expert of every
  // MoE layer of the model (and of no other layer) exactly one rank in [0, ranks).
  void Validate(int num_layers, const std::vector<int>& moe_layers, int num_experts,
                int ranks) const;

  int ranks() const { return ranks_; }
  // The rank holding (layer, expert); the layer must be a MoE layer of the placement.
  int rank_of(int layer, int expert) const;
  bool Owns(int rank, int layer, int expert) const { return rank_of(layer, expert) == rank; }
  // The experts of `layer` held by `rank`, ascending.
  std::vector<int> ExpertsOf(int layer, int rank) const;
  // How many experts `rank` holds over all layers.
  int64_t ExpertCount(int rank) const;

 private:
  int ranks_ = 0;
  // Per decoder layer: the rank of each expert, or empty for a layer without experts.
  std::vector<std::vector<int>> rank_of_;
};

}  // namespace moex::dist
