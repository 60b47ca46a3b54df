#include "trace/trace_recorder.h"

#include <filesystem>

#include "core/error.h"
#include "io/expert_store_format.h"
#include "model/tensor_names.h"

namespace moex::trace {

TraceModel TraceModelOf(const Model& model) {
  const ModelConfig& c = model.config;
  TraceModel m;
  m.name = std::filesystem::path(model.path).filename().string();
  if (m.name.empty()) m.name = std::filesystem::path(model.path).parent_path().filename().string();
  m.config = c.ToHfJson();
  m.num_layers = c.num_layers;
  for (int l = 0; l < c.num_layers; ++l)
    if (c.IsMoeLayer(l)) m.moe_layers.push_back(l);
  m.num_experts = c.num_experts;
  m.top_k = c.num_experts_per_tok;
  m.hidden_size = c.hidden_size;
  m.expert_neurons = static_cast<int>(model.expert_shape.neurons);
  m.record_bytes = static_cast<int64_t>(model.expert_shape.RecordBytes());
  m.block_neurons = static_cast<int>(StoreBlockNeurons(
      static_cast<uint64_t>(m.record_bytes), static_cast<uint32_t>(m.expert_neurons),
      static_cast<uint32_t>(model.expert_shape.GroupNeurons())));
  m.dtype = model.ExpertDTypeLabel();
  return m;
}

TraceRecorder::TraceRecorder(TraceWriter& writer, const Model& model) : writer_(writer) {
  if (!writer.header().router_weights) return;
  const TensorNames names = TensorNamesFor(model.config);
  for (int l : writer.header().model.moe_layers) {
    const auto& layer = model.layers[static_cast<size_t>(l)];
    Check(layer.router != nullptr, "layer ", l, " has no router");
    writer_.WriteTensor(*layer.router);
    // DeepSeek-V3's score correction and gpt-oss's router Linear bias, for the predictors
    // that choose as the router does (PolicyFacts::router_bias, router_logit_bias).
    const auto write_bias = [&](const std::vector<float>& values, const std::string& name) {
      if (values.empty()) return;
      TensorView bias;
      bias.name = TensorNames::Layer(l, name);
      bias.dtype = DType::kF32;
      bias.shape = {1, static_cast<int64_t>(values.size())};
      bias.data = reinterpret_cast<const std::byte*>(values.data());
      bias.nbytes = values.size() * sizeof(float);
      writer_.WriteTensor(bias);
    };
    write_bias(layer.router_bias, names.router_bias);
    write_bias(layer.router_logit_bias, names.router_linear_bias);
  }
}

void TraceRecorder::OnRequestBegin(const policy::RequestBeginEvent& e) {
  TraceEvent t;
  t.kind = TraceEvent::kRequestBegin;
  t.request = e.request;
  t.prompt.assign(e.prompt, e.prompt + e.prompt_len);
  writer_.Write(t);
}

void TraceRecorder::OnIterationBegin(const policy::IterationBeginEvent& e) {
  pending_ = TraceEvent{};
  pending_.kind = TraceEvent::kIteration;
  TraceIteration& it = pending_.iteration;
  it.iteration = e.iteration;
  it.requests.assign(e.requests, e.requests + e.n_requests);
  it.token_counts.assign(e.token_counts, e.token_counts + e.n_requests);
  it.tokens.assign(e.tokens, e.tokens + e.n_tokens);
  if (writer_.header().pooled) it.pooled.assign(e.pooled, e.pooled + e.n_requests * e.d);
  in_iteration_ = true;
  tokens_ += e.n_tokens;
}

void TraceRecorder::OnGate(const policy::GateEvent& e) {
  Check(in_iteration_, "trace recorder: gate outside an iteration");
  const TraceHeader& h = writer_.header();
  TraceGate g;
  g.layer = e.layer;
  g.n_tokens = e.n_tokens;
  g.top_k = e.top_k;
  const int64_t slots = e.n_tokens * e.top_k;
  g.ids.assign(e.ids, e.ids + slots);
  g.weights.assign(e.weights, e.weights + slots);
  if (h.probs != Precision::kNone) {
    Check(e.probs != nullptr, "trace recorder: the gate has no probabilities");
    g.probs.assign(e.probs, e.probs + e.n_tokens * e.num_experts);
  }
  if (h.hidden != Precision::kNone) g.hidden.assign(e.hidden, e.hidden + e.n_tokens * e.d);
  pending_.iteration.gates.push_back(std::move(g));
}

void TraceRecorder::OnIterationEnd() {
  if (!in_iteration_) return;
  in_iteration_ = false;
  writer_.Write(pending_);
  ++iterations_;
}

void TraceRecorder::OnRequestEnd(const policy::RequestEndEvent& e) {
  TraceEvent t;
  t.kind = TraceEvent::kRequestEnd;
  t.request = e.request;
  writer_.Write(t);
}

}  // namespace moex::trace
