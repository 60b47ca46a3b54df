#include "sim/routing_replay.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/tensor_names.h"
#include "sim/replay.h"

namespace moex::sim {

TraceRouting::TraceRouting(const std::string& trace_path, const ModelConfig& config)
    : reader_(std::make_unique<trace::TraceReader>(trace_path)) {
  const trace::TraceHeader& h = reader_->header();
  const trace::TraceModel& m = h.model;
  std::vector<int> engine_moe;
  for (int l = 0; l < config.num_layers; ++l)
    if (config.IsMoeLayer(l)) engine_moe.push_back(l);
  Check(m.num_layers == config.num_layers && m.moe_layers == engine_moe &&
            m.num_experts == config.num_experts && m.top_k == config.num_experts_per_tok,
        "--replay-routing: trace ", trace_path, " has ", m.num_layers, " layers (",
        m.moe_layers.size(), " MoE) of ", m.num_experts, " experts, top-", m.top_k,
        "; the model has ", config.num_layers, " layers (", engine_moe.size(), " MoE) of ",
        config.num_experts, " experts, top-", config.num_experts_per_tok,
        ": routing replay needs the same topology");
  trace_config_ = TraceConfig(h);
  top_k_ = m.top_k;
  num_experts_ = m.num_experts;
  hidden_d_ = m.hidden_size;
  has_hidden_ = h.hidden != trace::Precision::kNone;
  has_probs_ = h.probs != trace::Precision::kNone;
  has_router_ = h.router_weights && !reader_->tensors().empty();
  has_pooled_ = h.pooled;
  streams_.resize(static_cast<size_t>(m.num_layers));

  trace::TraceEvent e;
  std::vector<char> decode;
  while (reader_->Next(&e)) {
    if (e.kind != trace::TraceEvent::kIteration) continue;
    const trace::TraceIteration& it = e.iteration;
    decode.clear();
    for (int64_t count : it.token_counts)
      decode.insert(decode.end(), static_cast<size_t>(count), count == 1);
    if (has_pooled_ &&
        it.pooled.size() == it.token_counts.size() * static_cast<size_t>(hidden_d_)) {
      for (size_t r = 0; r < it.token_counts.size(); ++r) {
        Stream& s = pooled_[it.token_counts[r] == 1 ? kDecode : kPrompt];
        const auto row = it.pooled.begin() + static_cast<std::ptrdiff_t>(r * hidden_d_);
        s.hidden.insert(s.hidden.end(), row, row + hidden_d_);
        ++s.rows;
      }
    }
    for (const trace::TraceGate& g : it.gates) {
      Check(g.n_tokens == static_cast<int64_t>(decode.size()), "--replay-routing: trace ",
            trace_path, ": a gate of iteration ", it.iteration, " has ", g.n_tokens,
            " tokens, the iteration ", decode.size());
      for (int64_t t = 0; t < g.n_tokens; ++t) {
        Stream& s = streams_[static_cast<size_t>(g.layer)]
                            [decode[static_cast<size_t>(t)] ? kDecode : kPrompt];
        const auto row = [t](const std::vector<float>& v, int64_t width) {
          return v.begin() + static_cast<std::ptrdiff_t>(t * width);
        };
        s.ids.insert(s.ids.end(), g.ids.begin() + t * top_k_, g.ids.begin() + (t + 1) * top_k_);
        s.weights.insert(s.weights.end(), row(g.weights, top_k_), row(g.weights, top_k_) + top_k_);
        if (has_probs_)
          s.probs.insert(s.probs.end(), row(g.probs, num_experts_),
                         row(g.probs, num_experts_) + num_experts_);
        if (has_hidden_)
          s.hidden.insert(s.hidden.end(), row(g.hidden, hidden_d_),
                          row(g.hidden, hidden_d_) + hidden_d_);
        ++s.rows;
      }
    }
  }
  first_moe_ = engine_moe.empty() ? -1 : engine_moe.front();
  Check(first_moe_ >= 0 && streams_[static_cast<size_t>(first_moe_)][kPrompt].rows +
                                   streams_[static_cast<size_t>(first_moe_)][kDecode].rows >
                               0,
        "--replay-routing: trace ", trace_path, " has no gates to replay");
}

void TraceRouting::Override(int layer, std::span<const char> decode, Routing* routing) {
  const int64_t n = routing->n_tokens;
  Check(static_cast<int64_t>(decode.size()) == n, "routing replay: ", decode.size(),
        " token kinds for ", n, " tokens");
  std::array<Stream, 2>& streams = streams_[static_cast<size_t>(layer)];
  const bool probs = has_probs_ && static_cast<int64_t>(routing->probs.size()) == n * num_experts_;
  if (has_hidden_) gate_input_.resize(static_cast<size_t>(n * hidden_d_));
  for (int64_t t = 0; t < n; ++t) {
    int kind = decode[static_cast<size_t>(t)] ? kDecode : kPrompt;
    if (streams[static_cast<size_t>(kind)].rows == 0)
      kind = 1 - kind;  // The trace has none of this kind.
    Stream& s = streams[static_cast<size_t>(kind)];
    if (s.next == s.rows) {
      s.next = 0;
      if (layer == first_moe_) ++wraps_[static_cast<size_t>(kind)];
    }
    const int64_t r = s.next++;
    std::memcpy(&routing->ids[static_cast<size_t>(t * top_k_)],
                &s.ids[static_cast<size_t>(r * top_k_)],
                sizeof(int32_t) * static_cast<size_t>(top_k_));
    std::memcpy(&routing->weights[static_cast<size_t>(t * top_k_)],
                &s.weights[static_cast<size_t>(r * top_k_)],
                sizeof(float) * static_cast<size_t>(top_k_));
    if (probs)
      std::memcpy(&routing->probs[static_cast<size_t>(t * num_experts_)],
                  &s.probs[static_cast<size_t>(r * num_experts_)],
                  sizeof(float) * static_cast<size_t>(num_experts_));
    if (has_hidden_)
      std::memcpy(&gate_input_[static_cast<size_t>(t * hidden_d_)],
                  &s.hidden[static_cast<size_t>(r * hidden_d_)],
                  sizeof(float) * static_cast<size_t>(hidden_d_));
    if (layer == first_moe_) ++replayed_[static_cast<size_t>(kind)];
  }
  if (has_hidden_) {
    routing->gate_input = gate_input_.data();
    routing->gate_input_d = hidden_d_;
  }
}

bool TraceRouting::OverridePooled(std::span<const int64_t> token_counts, std::vector<float>* pooled,
                                  int64_t* d) {
  if (!has_pooled_ || pooled_[kPrompt].rows + pooled_[kDecode].rows == 0) return false;
  pooled->resize(token_counts.size() * static_cast<size_t>(hidden_d_));
  for (size_t r = 0; r < token_counts.size(); ++r) {
    int kind = token_counts[r] == 1 ? kDecode : kPrompt;
    if (pooled_[static_cast<size_t>(kind)].rows == 0) kind = 1 - kind;
    Stream& s = pooled_[static_cast<size_t>(kind)];
    if (s.next == s.rows) s.next = 0;
    const int64_t row = s.next++;
    std::memcpy(pooled->data() + r * static_cast<size_t>(hidden_d_),
                &s.hidden[static_cast<size_t>(row * hidden_d_)],
                sizeof(float) * static_cast<size_t>(hidden_d_));
  }
  *d = hidden_d_;
  return true;
}

void TraceRouting::AdjustFacts(policy::PolicyFacts& facts) const {
  if (!carries_gate_inputs()) {
    facts.router_weights = nullptr;  // The model's router does not pick the replayed experts.
    return;
  }
  facts.hidden_size = static_cast<int>(hidden_d_);
  const trace::TraceTensors* tensors = &reader_->tensors();
  const std::string router = TensorNamesFor(trace_config_).router;
  const int experts = num_experts_;
  const int64_t d = hidden_d_;
  facts.router_weights = [tensors, router, experts, d](int layer) {
    const TensorView& w = tensors->Get(TensorNames::Layer(layer, router), {experts, d});
    return TensorToF32(w);
  };
}

nlohmann::json TraceRouting::ToJson() const {
  int64_t prompt_rows = 0, decode_rows = 0;
  for (const auto& s : streams_) {
    prompt_rows = std::max(prompt_rows, s[kPrompt].rows);
    decode_rows = std::max(decode_rows, s[kDecode].rows);
  }
  return {{"trace", reader_->path()},
          {"outputs_meaningful", false},
          {"gate_inputs_from_trace", carries_gate_inputs()},
          {"replayed_tokens", {{"prompt", replayed_[kPrompt]}, {"decode", replayed_[kDecode]}}},
          {"trace_tokens", {{"prompt", prompt_rows}, {"decode", decode_rows}}},
          {"wraps", {{"prompt", wraps_[kPrompt]}, {"decode", wraps_[kDecode]}}}};
}

}  // namespace moex::sim
