// Importers: routing logs captured outside moex (vLLM hooks, HF Switch router captures)
// converted into routing traces that `moex sim` replays. The mapping choices (what is a
// request, an iteration, a prompt; which model shape) are in docs/trace-format.md.
#pragma once

#include <cstdint>
#include <string>

namespace moex::trace {

struct ImportOptions {
  std::string format;    // "vllm-jsonl" or "switch-json".
  std::string input;     // The routing log.
  std::string metadata;  // switch-json: the capture metadata (prompt spans); optional.
  std::string output;    // The trace to write.
  // vllm-jsonl: "token" replays every logged token as its own one-token pass (batch-1
  // decode); "pass" keeps each logged forward pass (tokens between token_idx resets) whole.
  std::string iterations = "token";
  // vllm-jsonl: a run of at least this many consecutive tokens routed identically is vLLM's
  // profiling pass over dummy inputs, not traffic, and is dropped; 0 keeps every line.
  int warmup_run = 256;
};

struct ImportSummary {
  int64_t requests = 0;
  int64_t tokens = 0;
  int layers = 0;
  int64_t iterations = 0;
  int64_t dropped_tokens = 0;  // Warm-up tokens left out (vllm-jsonl).
};

// Throws moex::Error naming the file and line (or JSON path) of malformed input.
ImportSummary ImportRoutingLog(const ImportOptions& options);

}  // namespace moex::trace
