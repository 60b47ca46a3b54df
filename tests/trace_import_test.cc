// Importers turn routing logs captured elsewhere into traces: hand-written logs read back
// exactly, every malformed log gives an Error naming the file and line (or JSON path), the
// real logs in ../shared/data/routing import with their known counts and replay.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/expert_store_format.h"
#include "sim/replay.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"
#include "trace/trace_import.h"
#include "trace/trace_reader.h"

namespace moex {
namespace {

using trace::ImportOptions;
using trace::ImportRoutingLog;
using trace::ImportSummary;
using trace::TraceEvent;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::vector<TraceEvent> ReadAll(const std::string& path) {
  trace::TraceReader reader(path);
  std::vector<TraceEvent> events;
  TraceEvent e;
  while (reader.Next(&e)) events.push_back(e);
  return events;
}

ImportOptions Vllm(const testing::TempDir& dir, const std::string& log) {
  WriteText(dir / "log.jsonl", log);
  ImportOptions o;
  o.format = "vllm-jsonl";
  o.input = dir / "log.jsonl";
  o.output = dir / "out.trace";
  return o;
}

std::string Route(const std::string& req, int token, int layer, const std::string& ids,
                  const std::string& weights) {
  return R"({"type": "route", "req_id": ")" + req + R"(", "token_idx": )" + std::to_string(token) +
         R"(, "layer": )" + std::to_string(layer) + R"(, "topk_ids": [)" + ids +
         R"(], "topk_weights": [)" + weights + "]}\n";
}

// Two requests interleaved, two logged layers (given out of order), layer after layer per
// token; the model is unknown, so its shape is unit experts.
const std::string kMeta =
    R"({"type": "meta", "model_id": "acme/mystery-moe", "layers_logged": [3, 2], "top_k": 2, "num_experts": 8})"
    "\n";
std::string TwoRequestLog() {
  return kMeta + Route("a", 0, 2, "1, 2", "0.75, 0.25") + Route("a", 0, 3, "3, 4", "0.5, 0.5") +
         Route("b", 0, 2, "5, 6", "0.625, 0.375") + Route("b", 0, 3, "7, 0", "0.875, 0.125") +
         Route("a", 1, 2, "2, 1", "0.5, 0.25") + Route("a", 1, 3, "4, 3", "1, 0");
}

void ExpectGate(const trace::TraceGate& g, int layer, std::vector<int32_t> ids,
                std::vector<float> weights) {
  EXPECT_EQ(g.layer, layer);
  EXPECT_EQ(g.top_k, 2);
  EXPECT_EQ(g.n_tokens, static_cast<int64_t>(ids.size() / 2));
  EXPECT_EQ(g.ids, ids);
  EXPECT_EQ(g.weights, weights);
  EXPECT_TRUE(g.probs.empty());
  EXPECT_TRUE(g.hidden.empty());
}

TEST(TraceImportVllm, TokenModeReplaysEachTokenAsItsOwnPass) {
  testing::TempDir dir;
  const ImportOptions o = Vllm(dir, TwoRequestLog());
  const ImportSummary s = ImportRoutingLog(o);
  EXPECT_EQ(s.requests, 2);
  EXPECT_EQ(s.tokens, 3);
  EXPECT_EQ(s.iterations, 3);
  EXPECT_EQ(s.layers, 2);
  EXPECT_EQ(s.dropped_tokens, 0);

  trace::TraceReader reader(o.output);
  const trace::TraceHeader& h = reader.header();
  EXPECT_EQ(h.source, "import vllm-jsonl");
  EXPECT_EQ(h.model.name, "acme/mystery-moe");
  EXPECT_TRUE(h.model.config.is_null());
  EXPECT_EQ(h.model.num_layers, 4);
  EXPECT_EQ(h.model.moe_layers, (std::vector<int>{2, 3}));
  EXPECT_EQ(h.model.num_experts, 8);
  EXPECT_EQ(h.model.top_k, 2);
  EXPECT_EQ(h.model.hidden_size, 1);
  EXPECT_EQ(h.model.expert_neurons, 1);
  EXPECT_EQ(h.probs, trace::Precision::kNone);
  EXPECT_EQ(h.hidden, trace::Precision::kNone);
  EXPECT_EQ(h.info["meta"]["model_id"], "acme/mystery-moe");
  // The simulator accepts logged layers 2..3 as the MoE tail of a 4-layer model.
  EXPECT_EQ(sim::TraceConfig(h).num_layers, 4);

  const std::vector<TraceEvent> e = ReadAll(o.output);
  ASSERT_EQ(e.size(), 7u);
  EXPECT_EQ(e[0].kind, TraceEvent::kRequestBegin);
  EXPECT_EQ(e[0].request, 0);
  EXPECT_TRUE(e[0].prompt.empty());
  ASSERT_EQ(e[1].kind, TraceEvent::kIteration);
  EXPECT_EQ(e[1].iteration.iteration, 0);
  EXPECT_EQ(e[1].iteration.requests, (std::vector<int64_t>{0}));
  EXPECT_EQ(e[1].iteration.token_counts, (std::vector<int64_t>{1}));
  EXPECT_EQ(e[1].iteration.tokens.size(), 1u);
  ASSERT_EQ(e[1].iteration.gates.size(), 2u);
  ExpectGate(e[1].iteration.gates[0], 2, {1, 2}, {0.75f, 0.25f});
  ExpectGate(e[1].iteration.gates[1], 3, {3, 4}, {0.5f, 0.5f});
  EXPECT_EQ(e[2].kind, TraceEvent::kRequestBegin);
  EXPECT_EQ(e[2].request, 1);
  ASSERT_EQ(e[3].kind, TraceEvent::kIteration);
  EXPECT_EQ(e[3].iteration.requests, (std::vector<int64_t>{1}));
  ExpectGate(e[3].iteration.gates[0], 2, {5, 6}, {0.625f, 0.375f});
  ExpectGate(e[3].iteration.gates[1], 3, {7, 0}, {0.875f, 0.125f});
  EXPECT_EQ(e[4].kind, TraceEvent::kRequestEnd);  // b has no more tokens.
  EXPECT_EQ(e[4].request, 1);
  ASSERT_EQ(e[5].kind, TraceEvent::kIteration);
  EXPECT_EQ(e[5].iteration.iteration, 2);
  EXPECT_EQ(e[5].iteration.requests, (std::vector<int64_t>{0}));
  ExpectGate(e[5].iteration.gates[0], 2, {2, 1}, {0.5f, 0.25f});
  ExpectGate(e[5].iteration.gates[1], 3, {4, 3}, {1.0f, 0.0f});
  EXPECT_EQ(e[6].kind, TraceEvent::kRequestEnd);
  EXPECT_EQ(e[6].request, 0);
}

TEST(TraceImportVllm, PassModeKeepsForwardPassesWhole) {
  testing::TempDir dir;
  ImportOptions o = Vllm(dir, TwoRequestLog());
  o.iterations = "pass";
  const ImportSummary s = ImportRoutingLog(o);
  EXPECT_EQ(s.requests, 2);
  EXPECT_EQ(s.tokens, 3);
  EXPECT_EQ(s.iterations, 1);  // No (request, token, layer) repeats: one pass.
  const std::vector<TraceEvent> e = ReadAll(o.output);
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[0].kind, TraceEvent::kRequestBegin);
  EXPECT_EQ(e[1].kind, TraceEvent::kRequestBegin);
  ASSERT_EQ(e[2].kind, TraceEvent::kIteration);
  const trace::TraceIteration& it = e[2].iteration;
  EXPECT_EQ(it.requests, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(it.token_counts, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(it.tokens.size(), 3u);
  ASSERT_EQ(it.gates.size(), 2u);
  // Request after request: a's two tokens, then b's.
  ExpectGate(it.gates[0], 2, {1, 2, 2, 1, 5, 6}, {0.75f, 0.25f, 0.5f, 0.25f, 0.625f, 0.375f});
  ExpectGate(it.gates[1], 3, {3, 4, 4, 3, 7, 0}, {0.5f, 0.5f, 1.0f, 0.0f, 0.875f, 0.125f});
  EXPECT_EQ(e[3].kind, TraceEvent::kRequestEnd);
  EXPECT_EQ(e[4].kind, TraceEvent::kRequestEnd);
}

// vLLM >= 0.7 restarts token_idx at every forward pass: a repeated (request, token, layer)
// starts the next pass rather than being a duplicate.
TEST(TraceImportVllm, TokenIndexRestartStartsANewPass) {
  testing::TempDir dir;
  const std::string meta =
      R"({"type": "meta", "model_id": "x", "layers_logged": [0], "top_k": 2, "num_experts": 4})"
      "\n";
  ImportOptions o =
      Vllm(dir, meta + Route("r", 0, 0, "0, 1", "1, 0") + Route("r", 1, 0, "1, 2", "1, 0") +
                    Route("r", 0, 0, "2, 3", "1, 0") + Route("r", 1, 0, "3, 0", "1, 0") +
                    Route("r", 2, 0, "0, 2", "1, 0"));
  o.iterations = "pass";
  ImportSummary s = ImportRoutingLog(o);
  EXPECT_EQ(s.requests, 1);
  EXPECT_EQ(s.tokens, 5);
  EXPECT_EQ(s.iterations, 2);
  std::vector<TraceEvent> e = ReadAll(o.output);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[1].iteration.token_counts, (std::vector<int64_t>{2}));
  EXPECT_EQ(e[1].iteration.gates[0].ids, (std::vector<int32_t>{0, 1, 1, 2}));
  EXPECT_EQ(e[2].iteration.token_counts, (std::vector<int64_t>{3}));
  EXPECT_EQ(e[2].iteration.gates[0].ids, (std::vector<int32_t>{2, 3, 3, 0, 0, 2}));

  o.iterations = "token";
  s = ImportRoutingLog(o);
  EXPECT_EQ(s.iterations, 5);
  EXPECT_EQ(s.requests, 1);
}

TEST(TraceImportVllm, DropsWarmupRunsOfIdenticalRouting) {
  testing::TempDir dir;
  std::string warmup =
      R"({"type": "meta", "model_id": "x", "layers_logged": [0], "top_k": 2, "num_experts": 4})"
      "\n";
  for (int t = 0; t < 300; ++t) warmup += Route("r", t, 0, "1, 0", "0.5, 0.5");
  const std::string log = warmup + Route("r", 0, 0, "2, 3", "0.5, 0.5") +
                          Route("r", 1, 0, "2, 3", "0.5, 0.5") +
                          Route("r", 2, 0, "0, 1", "0.5, 0.5");
  ImportOptions o = Vllm(dir, log);
  ImportSummary s = ImportRoutingLog(o);
  EXPECT_EQ(s.dropped_tokens, 300);
  EXPECT_EQ(s.tokens, 3);  // Two identical real tokens are far below the run length.
  const std::vector<TraceEvent> e = ReadAll(o.output);
  ASSERT_EQ(e.size(), 5u);
  EXPECT_EQ(e[1].iteration.iteration, 0);
  EXPECT_EQ(e[1].iteration.gates[0].ids, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(trace::TraceReader(o.output).header().info["dropped_tokens"], 300);

  o.warmup_run = 0;
  s = ImportRoutingLog(o);
  EXPECT_EQ(s.dropped_tokens, 0);
  EXPECT_EQ(s.tokens, 303);

  // A log of nothing but warm-up is refused rather than written empty.
  o.warmup_run = 256;
  WriteText(o.input, warmup);
  EXPECT_THROW(ImportRoutingLog(o), Error);
}

TEST(TraceImportVllm, KnownModelsGetTheirPublishedShapes) {
  testing::TempDir dir;
  const std::string route = Route("r", 0, 0, "0, 1, 2, 3, 4, 5, 6, 7", "1, 0, 0, 0, 0, 0, 0, 0");
  ImportOptions o = Vllm(
      dir,
      R"({"type": "meta", "model_id": "allenai/OLMoE-1B-7B-0924", "layers_logged": [0], "top_k": 8})"
      "\n" +
          route);
  ImportRoutingLog(o);
  {
    const trace::TraceModel m = trace::TraceReader(o.output).header().model;
    EXPECT_EQ(m.num_experts, 64);
    EXPECT_EQ(m.num_layers, 1);
    EXPECT_EQ(m.moe_layers, (std::vector<int>{0}));
    EXPECT_EQ(m.hidden_size, 2048);
    EXPECT_EQ(m.expert_neurons, 1024);
    EXPECT_EQ(m.record_bytes, 3 * 2048 * 2);
    EXPECT_EQ(m.block_neurons, static_cast<int>(StoreBlockNeurons(3 * 2048 * 2, 1024)));
    EXPECT_EQ(m.dtype, "bf16");
  }
  o = Vllm(
      dir,
      R"({"type": "meta", "model_id": "Qwen/Qwen1.5-MoE-A2.7B-Chat", "layers_logged": [0, 1], "top_k": 4})"
      "\n" +
          Route("r", 0, 0, "59, 1, 2, 3", "0.4, 0.3, 0.2, 0.1") +
          Route("r", 0, 1, "0, 1, 2, 3", "0.4, 0.3, 0.2, 0.1"));
  ImportRoutingLog(o);
  {
    const trace::TraceModel m = trace::TraceReader(o.output).header().model;
    EXPECT_EQ(m.num_experts, 60);
    EXPECT_EQ(m.num_layers, 2);
    EXPECT_EQ(m.expert_neurons, 1408);
    EXPECT_EQ(m.record_bytes, 3 * 2048 * 2);
  }
  // Unknown model, no num_experts: as many as the log uses.
  o = Vllm(dir, R"({"type": "meta", "model_id": "who/knows", "layers_logged": [0], "top_k": 2})"
                "\n" +
                    Route("r", 0, 0, "4, 11", "0.5, 0.5"));
  ImportRoutingLog(o);
  EXPECT_EQ(trace::TraceReader(o.output).header().model.num_experts, 12);
}

// Each malformed line gives an Error naming the file and the line at fault.
TEST(TraceImportVllm, MalformedLogsNameFileAndLine) {
  testing::TempDir dir;
  const std::string meta = kMeta;
  const std::string a0 =
      Route("a", 0, 2, "1, 2", "0.5, 0.5") + Route("a", 0, 3, "1, 2", "0.5, 0.5");
  struct Case {
    const char* what;
    std::string log;
    std::string where;  // Expected in the message after the file name.
  };
  const std::vector<Case> cases = {
      {"bad JSON", meta + a0 + "{\"type\": \"route\", \n", ":4:"},
      {"not an object", meta + "[1, 2]\n", ":2:"},
      {"missing topk_ids",
       meta +
           R"({"type": "route", "req_id": "a", "token_idx": 0, "layer": 2, "topk_weights": [1, 0]})"
           "\n",
       ":2:"},
      {"missing req_id",
       meta +
           R"({"type": "route", "token_idx": 0, "layer": 2, "topk_ids": [1, 2], "topk_weights": [1, 0]})"
           "\n",
       ":2:"},
      {"id out of range", meta + Route("a", 0, 2, "1, 8", "0.5, 0.5"), ":2:"},
      {"negative id", meta + Route("a", 0, 2, "-1, 2", "0.5, 0.5"), ":2:"},
      {"fractional id", meta + Route("a", 0, 2, "1.5, 2", "0.5, 0.5"), ":2:"},
      {"repeated id", meta + Route("a", 0, 2, "3, 3", "0.5, 0.5"), ":2:"},
      {"top-k mismatch", meta + a0 + Route("a", 1, 2, "1, 2, 3", "0.5, 0.25, 0.25"), ":4:"},
      {"too few weights", meta + Route("a", 0, 2, "1, 2", "1"), ":2:"},
      {"weight not a number", meta + Route("a", 0, 2, "1, 2", "\"x\", 1"), ":2:"},
      {"weight beyond float", meta + Route("a", 0, 2, "1, 2", "1e300, 1"), ":2:"},
      {"layer not logged", meta + Route("a", 0, 1, "1, 2", "0.5, 0.5"), ":2:"},
      {"negative token_idx", meta + Route("a", -1, 2, "1, 2", "0.5, 0.5"), ":2:"},
      {"token without layer 3", meta + a0 + Route("a", 1, 2, "1, 2", "0.5, 0.5"), ":4:"},
      {"route before meta", Route("a", 0, 2, "1, 2", "0.5, 0.5") + meta, ":1:"},
      {"second meta", meta + meta, ":2:"},
      {"unknown type",
       meta + R"({"type": "stats"})"
              "\n",
       ":2:"},
      {"meta without top_k",
       R"({"type": "meta", "model_id": "x", "layers_logged": [0]})"
       "\n",
       ":1:"},
      {"meta top_k zero",
       R"({"type": "meta", "model_id": "x", "layers_logged": [0], "top_k": 0})"
       "\n",
       ":1:"},
      {"meta top_k above experts",
       R"({"type": "meta", "model_id": "x", "layers_logged": [0], "top_k": 9, "num_experts": 8})"
       "\n",
       ":1:"},
      {"meta without layers",
       R"({"type": "meta", "model_id": "x", "layers_logged": [], "top_k": 1})"
       "\n",
       ":1:"},
      {"meta repeated layer",
       R"({"type": "meta", "model_id": "x", "layers_logged": [0, 0], "top_k": 1})"
       "\n",
       ":1:"},
      {"layer beyond the known model",
       R"({"type": "meta", "model_id": "allenai/OLMoE-1B-7B-0924", "layers_logged": [16], "top_k": 8})"
       "\n",
       ":1:"},
      {"no route lines", meta, ""},
      {"empty file", "", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const ImportOptions o = Vllm(dir, c.log);
    try {
      ImportRoutingLog(o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(o.input + c.where), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(o.output));
  }
}

TEST(TraceImport, BadOptionsAreErrors) {
  testing::TempDir dir;
  ImportOptions o = Vllm(dir, TwoRequestLog());
  o.format = "csv";
  EXPECT_THROW(ImportRoutingLog(o), Error);
  o.format = "vllm-jsonl";
  o.iterations = "step";
  EXPECT_THROW(ImportRoutingLog(o), Error);
  o.iterations = "token";
  o.metadata = dir / "meta.json";
  EXPECT_THROW(ImportRoutingLog(o), Error);
  o.metadata.clear();
  o.input = dir / "missing.jsonl";
  EXPECT_THROW(ImportRoutingLog(o), Error);
}

// --- switch-json ---------------------------------------------------------------------

const char* kSwitchTrace = R"({
  "expertsPerLayer": 4, "layers": 2, "topK": 1, "tokens": 3, "version": 2,
  "source": {"model": {"id": "google/switch-base-8"}},
  "selections": [[[3], [0]], [[1], [2]], [[2], [2]]]
})";

const char* kSwitchMeta = R"({
  "prompt_spans": [
    {"id": "p0", "token_start": 0, "token_end_exclusive": 2, "non_padding_tokens": 2},
    {"id": "p1", "token_start": 2, "token_end_exclusive": 3}
  ],
  "sparse_encoder_block_indices": [1, 3]
})";

ImportOptions Switch(const testing::TempDir& dir, const std::string& trace,
                     const std::string& meta) {
  WriteText(dir / "trace.json", trace);
  ImportOptions o;
  o.format = "switch-json";
  o.input = dir / "trace.json";
  if (!meta.empty()) {
    WriteText(dir / "meta.json", meta);
    o.metadata = dir / "meta.json";
  }
  o.output = dir / "out.trace";
  return o;
}

TEST(TraceImportSwitch, EachPromptIsOneRequestInOnePass) {
  testing::TempDir dir;
  const ImportOptions o = Switch(dir, kSwitchTrace, kSwitchMeta);
  const ImportSummary s = ImportRoutingLog(o);
  EXPECT_EQ(s.requests, 2);
  EXPECT_EQ(s.tokens, 3);
  EXPECT_EQ(s.layers, 2);
  EXPECT_EQ(s.iterations, 2);

  trace::TraceReader reader(o.output);
  const trace::TraceHeader& h = reader.header();
  EXPECT_EQ(h.source, "import switch-json");
  EXPECT_EQ(h.model.name, "google/switch-base-8");
  EXPECT_EQ(h.model.num_layers, 2);
  EXPECT_EQ(h.model.moe_layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(h.model.num_experts, 4);
  EXPECT_EQ(h.model.top_k, 1);
  EXPECT_EQ(h.model.hidden_size, 768);
  EXPECT_EQ(h.model.expert_neurons, 3072);
  EXPECT_EQ(h.model.record_bytes, 2 * 768 * 4);
  EXPECT_EQ(h.model.dtype, "f32");
  EXPECT_EQ(h.info["layer_blocks"], nlohmann::json({1, 3}));
  EXPECT_EQ(h.info["prompt_spans"][1]["id"], "p1");

  const std::vector<TraceEvent> e = ReadAll(o.output);
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[0].kind, TraceEvent::kRequestBegin);
  EXPECT_EQ(e[0].prompt.size(), 2u);  // Placeholder ids: the pass replays as prefill.
  const trace::TraceIteration& a = e[1].iteration;
  EXPECT_EQ(a.requests, (std::vector<int64_t>{0}));
  EXPECT_EQ(a.token_counts, (std::vector<int64_t>{2}));
  ASSERT_EQ(a.gates.size(), 2u);
  EXPECT_EQ(a.gates[0].layer, 0);
  EXPECT_EQ(a.gates[0].n_tokens, 2);
  EXPECT_EQ(a.gates[0].ids, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(a.gates[0].weights, (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(a.gates[1].layer, 1);
  EXPECT_EQ(a.gates[1].ids, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(e[2].kind, TraceEvent::kRequestEnd);
  EXPECT_EQ(e[3].prompt.size(), 1u);
  const trace::TraceIteration& b = e[4].iteration;
  EXPECT_EQ(b.requests, (std::vector<int64_t>{1}));
  EXPECT_EQ(b.gates[0].ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(b.gates[1].ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(e[5].kind, TraceEvent::kRequestEnd);
  EXPECT_EQ(e[5].request, 1);
}

TEST(TraceImportSwitch, WithoutMetadataEveryTokenIsOneRequest) {
  testing::TempDir dir;
  const ImportOptions o = Switch(dir, kSwitchTrace, "");
  const ImportSummary s = ImportRoutingLog(o);
  EXPECT_EQ(s.requests, 1);
  EXPECT_EQ(s.tokens, 3);
  const std::vector<TraceEvent> e = ReadAll(o.output);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[1].iteration.gates[0].ids, (std::vector<int32_t>{3, 1, 2}));
}

TEST(TraceImportSwitch, MalformedInputNamesFileAndPlace) {
  testing::TempDir dir;
  struct Case {
    const char* what;
    std::string trace, meta;
    std::string where;  // Expected in the message, after the file at fault.
    bool in_meta = false;
  };
  const std::string ok = kSwitchTrace;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = ok;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::string meta = kSwitchMeta;
  auto meta_with = [&](const std::string& from, const std::string& to) {
    std::string s = meta;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  const std::vector<Case> cases = {
      {"bad JSON", with("\"layers\": 2,", "\"layers\": 2"), meta, ":2:"},
      {"id out of range", with("[[1], [2]]", "[[4], [2]]"), meta, ": selections[1][0]"},
      {"top-k mismatch", with("[[1], [2]]", "[[1, 2], [2]]"), meta, ": selections[1][0]"},
      {"wrong layer count", with("[[1], [2]]", "[[1]]"), meta, ": selections[1]"},
      {"missing layers", with("\"layers\": 2,", ""), meta, ": top level"},
      {"token count", with("\"tokens\": 3", "\"tokens\": 4"), meta, ": top level"},
      {"version", with("\"version\": 2", "\"version\": 3"), meta, ": top level"},
      {"not an object", "[]", meta, ": top level"},
      {"meta bad JSON", ok, "{", ":1:", true},
      {"span gap", ok, meta_with("\"token_start\": 2", "\"token_start\": 1"), ": prompt_spans[1]",
       true},
      {"span beyond", ok, meta_with("\"token_end_exclusive\": 3", "\"token_end_exclusive\": 4"),
       ": prompt_spans[1]", true},
      {"spans short", ok,
       meta_with(R"(,
    {"id": "p1", "token_start": 2, "token_end_exclusive": 3})",
                 ""),
       ": prompt_spans:", true},
      {"padding count", ok, meta_with("\"non_padding_tokens\": 2", "\"non_padding_tokens\": 5"),
       ": prompt_spans[0]", true},
      {"block count", ok, meta_with("[1, 3]", "[1, 3, 5]"), ": sparse_encoder_block_indices", true},
      {"no spans", ok, "{}", ": top level", true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const ImportOptions o = Switch(dir, c.trace, c.meta);
    try {
      ImportRoutingLog(o);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      const std::string file = c.in_meta ? o.metadata : o.input;
      EXPECT_NE(std::string(e.what()).find(file + c.where), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(o.output));
  }
}

// --- The real logs ---------------------------------------------------------------------

std::filesystem::path RoutingDir() {
  return testing::SharedDataDir() / "routing";
}

sim::ReplayOptions TestReplay(const std::string& policy, const std::string& budget) {
  sim::ReplayOptions o;
  o.policy.spec = policy;
  o.budget = budget;
  o.hardware.name = "test";
  o.hardware.compute_gb_per_s = 10;
  o.hardware.compute_tflops = 1;
  o.hardware.link_gb_per_s = 1;
  return o;
}

TEST(TraceImportReal, OlmoeGsm8kLog) {
  const auto log = RoutingDir() / "olmoe-1b-7b-0924_layer0_gsm8k_vllm.jsonl";
  if (!std::filesystem::exists(log)) MOEX_SKIP_WITHOUT_SHARED_DATA(log);
  testing::TempDir dir;
  ImportOptions o{"vllm-jsonl", log.string(), "", dir / "olmoe.trace"};
  const ImportSummary s = ImportRoutingLog(o);
  // 6519 lines: vLLM's 2048-token profiling pass, then 4471 tokens of traffic.
  EXPECT_EQ(s.requests, 1);
  EXPECT_EQ(s.dropped_tokens, 2048);
  EXPECT_EQ(s.tokens, 4471);
  EXPECT_EQ(s.iterations, 4471);
  EXPECT_EQ(s.layers, 1);

  trace::TraceReader reader(o.output);
  EXPECT_EQ(reader.header().model.num_experts, 64);
  const policy::FutureDemand future = sim::ReadFutureDemand(reader);
  for (const char* budget : {"10%", "25%", "50%"}) {
    SCOPED_TRACE(budget);
    const sim::ReplayResult lru = sim::Replay(reader, TestReplay("lru", budget), &future);
    const sim::ReplayResult min = sim::Replay(reader, TestReplay("belady", budget), &future);
    EXPECT_EQ(lru.total.hits + lru.total.misses, 4471 * 8);
    EXPECT_EQ(min.total.hits + min.total.misses, 4471 * 8);
    EXPECT_GE(min.total.hits, lru.total.hits);
    EXPECT_GT(min.total.hits, 0);
    EXPECT_EQ(lru.decode_tokens, 4471);  // Empty prompts: every token replays as decode.
  }
}

TEST(TraceImportReal, QwenGsm8kLog) {
  const auto log = RoutingDir() / "qwen1.5-moe-a2.7b-chat_layer0_gsm8k_vllm.jsonl";
  if (!std::filesystem::exists(log)) MOEX_SKIP_WITHOUT_SHARED_DATA(log);
  testing::TempDir dir;
  ImportOptions o{"vllm-jsonl", log.string(), "", dir / "qwen.trace"};
  // Two runs, each a 8192-token profiling pass then 52 passes of traffic (token_idx restarts).
  ImportSummary s = ImportRoutingLog(o);
  EXPECT_EQ(s.requests, 1);
  EXPECT_EQ(s.dropped_tokens, 2 * 8192);
  EXPECT_EQ(s.tokens, 18818 - 2 * 8192);
  EXPECT_EQ(s.iterations, s.tokens);
  EXPECT_EQ(trace::TraceReader(o.output).header().model.num_experts, 60);
  o.iterations = "pass";
  s = ImportRoutingLog(o);
  EXPECT_EQ(s.iterations, 104);
  EXPECT_EQ(s.tokens, 18818 - 2 * 8192);

  trace::TraceReader reader(o.output);
  const policy::FutureDemand future = sim::ReadFutureDemand(reader);
  const sim::ReplayResult lru = sim::Replay(reader, TestReplay("lru", "25%"), &future);
  const sim::ReplayResult min = sim::Replay(reader, TestReplay("belady", "25%"), &future);
  EXPECT_GE(min.total.hits, lru.total.hits);
}

TEST(TraceImportReal, SwitchBase8EncoderLog) {
  const auto log = RoutingDir() / "switch-base-8_encoder_router-trace.v2.json";
  const auto meta = RoutingDir() / "switch-base-8_capture-metadata.json";
  if (!std::filesystem::exists(log)) MOEX_SKIP_WITHOUT_SHARED_DATA(log);
  testing::TempDir dir;
  ImportOptions o{"switch-json", log.string(), meta.string(), dir / "switch.trace"};
  const ImportSummary s = ImportRoutingLog(o);
  EXPECT_EQ(s.requests, 10);
  EXPECT_EQ(s.tokens, 215);
  EXPECT_EQ(s.layers, 6);
  EXPECT_EQ(s.iterations, 10);

  trace::TraceReader reader(o.output);
  EXPECT_EQ(reader.header().info["layer_blocks"], nlohmann::json({1, 3, 5, 7, 9, 11}));
  const policy::FutureDemand future = sim::ReadFutureDemand(reader);
  const sim::ReplayResult lru = sim::Replay(reader, TestReplay("lru", "25%"), &future);
  const sim::ReplayResult min = sim::Replay(reader, TestReplay("belady", "25%"), &future);
  EXPECT_EQ(lru.prefill_tokens, 215);
  EXPECT_EQ(lru.decode_tokens, 0);
  EXPECT_GE(min.total.hits, lru.total.hits);
}

}  // namespace
}  // namespace moex
