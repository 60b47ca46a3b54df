// The routing trace format (docs/trace-format.md): what the router did, request by request
// and iteration by iteration, so the simulator can replay it through the policies. A file
// is a magic, a version, a JSON header, then length-prefixed, checksummed records ending in
// an end record, so a truncated or corrupt file is detected, never half-read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moex::trace {

constexpr char kTraceMagic[8] = {'M', 'O', 'E', 'X', 'T', 'R', 'C', '\n'};
// Version 2 adds a checksum of the JSON header after it; version 1 files are still read.
constexpr uint32_t kTraceVersion = 2;
constexpr uint32_t kOldestTraceVersion = 1;

enum class RecordTag : uint32_t {
  kTensor = 1,        // A named f32 tensor (router weights, for predicting policies).
  kRequestBegin = 2,  // Request id and prompt token ids.
  kIteration = 3,     // One forward pass: requests, tokens, and every MoE layer's gate.
  kRequestEnd = 4,
  kEnd = 5,  // Record count; its absence means the file was cut short.
};

// How a float array is stored: f32 exactly, f16 / bf16 (half the bytes), or not at all.
enum class Precision : uint8_t { kNone, kF32, kF16, kBF16 };
const char* PrecisionName(Precision p);
Precision ParsePrecision(const std::string& name);  // Throws Error listing valid names.
size_t PrecisionBytes(Precision p);

// The shape facts the simulator needs to size a cache and cost a step, whatever produced the
// trace (a model here, or an imported log of a model we only know by name).
struct TraceModel {
  std::string name;
  nlohmann::json config;  // The HF config.json when known (rebuilds the ModelConfig), else null.
  int num_layers = 0;     // Decoder layers: the index space of gate layers.
  std::vector<int> moe_layers;
  int num_experts = 0;
  int top_k = 0;
  int hidden_size = 0;
  int expert_neurons = 0;    // F: neuron records per expert.
  int64_t record_bytes = 0;  // Bytes of one neuron record (gate row | up row | down column).
  int block_neurons = 0;     // The expert store's block: the granule of chunked transfers.
  std::string dtype;

  int64_t expert_bytes() const { return record_bytes * expert_neurons; }
};

struct TraceHeader {
  std::string source;  // "moex trace record", "import vllm-jsonl", ...
  TraceModel model;
  Precision probs = Precision::kNone;   // Full gate probabilities per token.
  Precision hidden = Precision::kNone;  // Gate input hidden state per token.
  bool pooled = false;                  // Mean input embedding per request and iteration (f32).
  bool router_weights = false;          // kTensor records (router weights) precede events.
  nlohmann::json info;                  // Free-form: prompts, generation settings, notes.
};

nlohmann::json HeaderToJson(const TraceHeader& h);
// Throws Error when the header's model.config disagrees with its shape (layers, experts,
// top-k, widths, MoE layers).
void CheckConfigMatchesShape(const TraceModel& model);
TraceHeader HeaderFromJson(const nlohmann::json& j);  // Throws Error on a missing field.

struct TraceGate {
  int layer = 0;
  int64_t n_tokens = 0;
  int top_k = 0;
  std::vector<int32_t> ids;    // [n_tokens, top_k], descending probability.
  std::vector<float> weights;  // [n_tokens, top_k] combine weights (always f32).
  std::vector<float> probs;    // [n_tokens, num_experts] if the trace has them.
  std::vector<float> hidden;   // [n_tokens, hidden_size] if the trace has them.
};

struct TraceIteration {
  int64_t iteration = 0;
  std::vector<int64_t> requests;      // Requests in this pass, in batch order.
  std::vector<int64_t> token_counts;  // Tokens of each request in this pass.
  std::vector<int32_t> tokens;        // All tokens, request after request.
  std::vector<float> pooled;          // [requests, hidden_size] if the trace has them.
  std::vector<TraceGate> gates;       // One per MoE layer, in layer order.
};

struct TraceEvent {
  enum Kind { kRequestBegin, kIteration, kRequestEnd };
  Kind kind = kRequestBegin;
  int64_t request = 0;          // kRequestBegin, kRequestEnd.
  std::vector<int32_t> prompt;  // kRequestBegin.
  TraceIteration iteration;     // kIteration.
};

}  // namespace moex::trace

namespace moex::trace {

// Record payload codecs (the writer and reader share them; tests use them directly).
std::vector<std::byte> EncodeEvent(const TraceEvent& e, const TraceHeader& h);
// `tag` says which kind the payload holds; throws Error naming `where` when it is malformed.
TraceEvent DecodeEvent(RecordTag tag, const std::byte* data, size_t size, const TraceHeader& h,
                       const std::string& where);

}  // namespace moex::trace
