#include "dist/expert_placement.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "io/input_file.h"

namespace moex::dist {

ExpertPlacement ExpertPlacement::Balanced(int num_layers, const std::vector<int>& moe_layers,
                                          int num_experts, int ranks,
                                          const std::vector<std::vector<int64_t>>& frequency) {
  Check(ranks >= 1, "an expert placement needs at least one rank, not ", ranks);
  ExpertPlacement p;
  p.ranks_ = ranks;
  p.rank_of_.assign(static_cast<size_t>(num_layers), {});
  const int cap = (num_experts + ranks - 1) / ranks;
  for (int layer : moe_layers) {
    const std::vector<int64_t>* counts = nullptr;
    if (static_cast<size_t>(layer) < frequency.size() &&
        frequency[static_cast<size_t>(layer)].size() == static_cast<size_t>(num_experts))
      counts = &frequency[static_cast<size_t>(layer)];
    std::vector<int> order(static_cast<size_t>(num_experts));
    std::iota(order.begin(), order.end(), 0);
    if (counts != nullptr)
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return (*counts)[static_cast<size_t>(a)] > (*counts)[static_cast<size_t>(b)];
      });
    std::vector<int64_t> load(static_cast<size_t>(ranks), 0);
    std::vector<int> held(static_cast<size_t>(ranks), 0);
    std::vector<int>& row = p.rank_of_[static_cast<size_t>(layer)];
    row.assign(static_cast<size_t>(num_experts), 0);
    for (int e : order) {
      int best = -1;
      for (int r = 0; r < ranks; ++r) {
        if (held[static_cast<size_t>(r)] >= cap) continue;
        if (best < 0 || load[static_cast<size_t>(r)] < load[static_cast<size_t>(best)]) best = r;
      }
      row[static_cast<size_t>(e)] = best;
      ++held[static_cast<size_t>(best)];
      // Without counts every expert weighs one, which deals them out round-robin.
      load[static_cast<size_t>(best)] += counts != nullptr ? (*counts)[static_cast<size_t>(e)] : 1;
    }
  }
  return p;
}

ExpertPlacement ExpertPlacement::FromJson(const nlohmann::json& doc) {
  Check(doc.is_object() && doc.contains("ranks") && doc["ranks"].is_number_integer() &&
            doc.contains("layers") && doc["layers"].is_array(),
        "an expert placement is {\"ranks\": N, \"layers\": [{\"layer\": L, "
        "\"rank_of_expert\": [...]}, ...]}");
  ExpertPlacement p;
  const int64_t ranks = doc["ranks"].get<int64_t>();
  Check(ranks >= 1 && ranks <= 65536, "expert placement: ranks must be 1..65536, not ", ranks);
  p.ranks_ = static_cast<int>(ranks);
  for (const nlohmann::json& entry : doc["layers"]) {
    Check(entry.is_object() && entry.contains("layer") && entry["layer"].is_number_integer() &&
              entry.contains("rank_of_expert") && entry["rank_of_expert"].is_array(),
          "expert placement: each layer entry is {\"layer\": L, \"rank_of_expert\": [...]}");
    const int64_t layer = entry["layer"].get<int64_t>();
    Check(layer >= 0 && layer < 1000000, "expert placement: layer ", layer, " is out of range");
    if (p.rank_of_.size() <= static_cast<size_t>(layer))
      p.rank_of_.resize(static_cast<size_t>(layer) + 1);
    std::vector<int>& row = p.rank_of_[static_cast<size_t>(layer)];
    Check(row.empty(), "expert placement: layer ", layer, " is listed twice");
    Check(!entry["rank_of_expert"].empty(), "expert placement: layer ", layer,
          " lists no experts");
    for (const nlohmann::json& r : entry["rank_of_expert"]) {
      Check(r.is_number_integer(), "expert placement: layer ", layer,
            ": ranks are integers, not ", r.dump());
      const int64_t rank = r.get<int64_t>();
      Check(rank >= 0 && rank < ranks, "expert placement: layer ", layer, " expert ", row.size(),
            " is on rank ", rank, ", but there are ", ranks, " ranks");
      row.push_back(static_cast<int>(rank));
    }
  }
  return p;
}

ExpertPlacement ExpertPlacement::Load(const std::string& path) {
  const std::string text = ReadInputFile(path, kMaxConfigFileBytes);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail(path, ": not valid JSON: ", e.what());
  }
  try {
    return FromJson(doc);
  } catch (const Error& e) {
    Fail(path, ": ", e.what());
  }
}

nlohmann::json ExpertPlacement::ToJson() const {
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < rank_of_.size(); ++l)
    if (!rank_of_[l].empty()) layers.push_back({{"layer", l}, {"rank_of_expert", rank_of_[l]}});
  return {{"ranks", ranks_}, {"layers", std::move(layers)}};
}

void ExpertPlacement::Validate(int num_layers, const std::vector<int>& moe_layers,
                               int num_experts, int ranks) const {
  Check(ranks_ == ranks, "the expert placement is for ", ranks_, " ranks, but the run has ",
        ranks);
  std::vector<bool> is_moe(static_cast<size_t>(num_layers), false);
  for (int l : moe_layers) is_moe[static_cast<size_t>(l)] = true;
  for (size_t l = num_layers; l < rank_of_.size(); ++l)
    Check(rank_of_[l].empty(), "the expert placement lists layer ", l, ", but the model has ",
          num_layers, " layers");
  for (int l = 0; l < num_layers; ++l) {
    const size_t n = static_cast<size_t>(l) < rank_of_.size() ? rank_of_[static_cast<size_t>(l)].size() : 0;
    if (!is_moe[static_cast<size_t>(l)]) {
      Check(n == 0, "the expert placement lists layer ", l, ", which has no routed experts");
      continue;
    }
    Check(n == static_cast<size_t>(num_experts), "the expert placement gives ", n,
          " experts of layer ", l, " a rank; the model has ", num_experts);
  }
}

int ExpertPlacement::rank_of(int layer, int expert) const {
  return rank_of_[static_cast<size_t>(layer)][static_cast<size_t>(expert)];
}

std::vector<int> ExpertPlacement::ExpertsOf(int layer, int rank) const {
  std::vector<int> out;
  const std::vector<int>& row = rank_of_[static_cast<size_t>(layer)];
  for (size_t e = 0; e < row.size(); ++e)
    if (row[e] == rank) out.push_back(static_cast<int>(e));
  return out;
}

int64_t ExpertPlacement::ExpertCount(int rank) const {
  int64_t n = 0;
  for (const std::vector<int>& row : rank_of_)
    n += std::count(row.begin(), row.end(), rank);
  return n;
}

}  // namespace moex::dist
