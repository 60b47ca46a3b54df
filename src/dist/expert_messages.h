// The messages of expert parallelism, as bytes (docs/expert-parallel.md). Rank 0 sends a
// worker rank the input rows of the worker's experts for one MoE layer, grouped by expert;
// the worker answers with the output rows in the same order, and its counters. Decoding
// checks every size, so a damaged or mismatched message is a clear error, never a bad read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace moex::dist {

enum class MessageKind : uint32_t {
  kHello = 1,     // worker -> rank 0 at start-up: which model it opened.
  kVerdict = 2,   // rank 0 -> worker: the placement, or why the run is refused.
  kLayer = 3,     // rank 0 -> worker: compute these experts on these rows.
  kOutputs = 4,   // worker -> rank 0: their output rows.
  kShutdown = 5,  // rank 0 -> worker: the run is over.
  kFailure = 6,   // worker -> rank 0: the request failed, with the reason.
  kEvents = 7,    // rank 0 -> worker: policy events (event_messages.h) as the text; no answer.
  kReady = 8,     // worker -> rank 0 at start-up: its experts are loaded (or kFailure: why not).
};

// A worker's counters since it started, sent with every answer.
struct WorkerCounters {
  int64_t experts_computed = 0;  // (layer, expert) computations.
  int64_t rows_computed = 0;     // (token, expert) rows.
  double compute_ms = 0;         // Time in its kernels.
  int64_t peak_rss_bytes = 0;    // Its process's peak resident set (VmHWM).
  int64_t expert_bytes = 0;      // Expert weights it holds in memory (its cache when offloaded).
  // Its own expert store, when its experts are offloaded (all 0 when resident).
  int64_t hits = 0;          // Routed experts wholly in its cache at the gate.
  int64_t misses = 0;        // Routed experts it had to read (some of).
  int64_t bytes_read = 0;    // From its store.
  double store_wait_ms = 0;  // Its compute waited for reads.
};

// One expert's rows within a layer message.
struct ExpertSpan {
  int32_t expert = 0;
  int64_t rows = 0;
};

// kLayer: `experts` in message order; each of their rows names, in `token_of_row`, one of
// the distinct token rows in `rows` (a token routed to three of the rank's experts travels
// once). kOutputs: `token_of_row` is empty and `rows` holds the experts' output rows back to
// back in message order. Rows are `d_model` floats.
struct LayerMessage {
  MessageKind kind = MessageKind::kLayer;
  int32_t layer = 0;
  std::vector<ExpertSpan> experts;
  WorkerCounters counters;                // kOutputs only.
  int64_t token_rows = 0;                 // kLayer: how many distinct token rows `rows` has.
  std::span<const int32_t> token_of_row;  // kLayer only; into the decoded bytes or the caller's.
  std::span<const float> rows;            // Into the decoded bytes (or the caller's buffer).
};

// A text message (every kind but kLayer and kOutputs; kEvents carries bytes as its text).
struct TextMessage {
  MessageKind kind = MessageKind::kHello;
  std::string text;
  WorkerCounters counters;
};

std::vector<std::byte> EncodeLayer(const LayerMessage& m);
std::vector<std::byte> EncodeText(const TextMessage& m);

// The kind of an encoded message; throws Error when it is too short or not a moex message.
MessageKind KindOf(std::span<const std::byte> bytes);
// Decodes kLayer/kOutputs; the spans point into `bytes`, which must be 4-byte aligned (a
// vector's are). Throws Error naming what is wrong: row counts that do not match the bytes,
// a token index out of range, a buffer not aligned.
LayerMessage DecodeLayer(std::span<const std::byte> bytes, int64_t d_model);
TextMessage DecodeText(std::span<const std::byte> bytes);

}  // namespace moex::dist
