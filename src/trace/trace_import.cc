#include "trace/trace_import.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/expert_store_format.h"
#include "io/input_file.h"
#include "trace/trace_writer.h"

namespace moex::trace {

namespace {

using nlohmann::json;

// Published shapes of the models whose logs we know, matched by a substring of the model id
// (vLLM logs name the HF repository, with or without the organisation or a "-Chat" suffix).
struct KnownModel {
  const char* key;
  int num_layers;
  int num_experts;
  int top_k;
  int hidden_size;
  int expert_neurons;
  int matrices;  // 3 for SwiGLU (gate | up | down), 2 for a plain FFN (wi | wo).
  int dtype_bytes;
  const char* dtype;
};

constexpr KnownModel kKnownModels[] = {
    {"olmoe-1b-7b", 16, 64, 8, 2048, 1024, 3, 2, "bf16"},        // allenai/OLMoE-1B-7B-0924
    {"qwen1.5-moe-a2.7b", 24, 60, 4, 2048, 1408, 3, 2, "bf16"},  // Qwen/Qwen1.5-MoE-A2.7B
    // google/switch-base-{8,16,...}: d_model 768, d_ff 3072, ReLU FFN experts in f32.
    {"switch-base", 12, 0, 1, 768, 3072, 2, 4, "f32"},
};

const KnownModel* FindKnownModel(std::string id) {
  std::transform(id.begin(), id.end(), id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const KnownModel& m : kKnownModels)
    if (id.find(m.key) != std::string::npos) return &m;
  return nullptr;
}

// Expert geometry from a published shape; an unknown model gets unit experts (one 1-byte
// neuron) so percentage budgets and hit rates still mean something (`--scale-to` costs them).
void SetShape(TraceModel& m, const KnownModel* known) {
  if (known) {
    m.hidden_size = known->hidden_size;
    m.expert_neurons = known->expert_neurons;
    m.record_bytes =
        static_cast<int64_t>(known->matrices) * known->hidden_size * known->dtype_bytes;
    m.dtype = known->dtype;
  } else {
    m.hidden_size = 1;
    m.expert_neurons = 1;
    m.record_bytes = 1;
    m.dtype = "unknown";
  }
  m.block_neurons = static_cast<int>(StoreBlockNeurons(static_cast<uint64_t>(m.record_bytes),
                                                       static_cast<uint32_t>(m.expert_neurons)));
}

std::string ReadText(const std::string& path, const char* what) {
  try {
    return ReadInputFile(path, kMaxDataFileBytes);
  } catch (const Error& e) {
    Fail(what, ": ", e.what());
  }
}

// A whole-file JSON document; a syntax error names the line and column it is on.
json ParseDocument(const std::string& text, const std::string& path) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.byte counts from 1 and points at the offending character.
    const size_t at = std::min<size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
    const auto head = text.begin() + static_cast<ptrdiff_t>(at);
    const int64_t line = 1 + std::count(text.begin(), head, '\n');
    const int64_t col =
        head - std::find(std::make_reverse_iterator(head), text.rend(), '\n').base() + 1;
    Fail(path, ":", line, ":", col, ": invalid JSON (", e.what(), ")");
  }
}

// Where a value came from: "file:line" for JSONL, "file: json.path" for whole documents.
struct Where {
  std::string text;
  template <typename... Parts>
  [[noreturn]] void Fail(Parts&&... parts) const {
    moex::Fail(text, ": ", std::forward<Parts>(parts)...);
  }
};

Where At(const std::string& path, int64_t line) {
  return {path + ":" + std::to_string(line)};
}
Where At(const std::string& path, const std::string& json_path) {
  return {path + ": " + json_path};
}

const json& Require(const json& j, const char* key, const Where& w) {
  if (!j.is_object()) w.Fail("expected a JSON object");
  auto it = j.find(key);
  if (it == j.end()) w.Fail("missing '", key, "'");
  return *it;
}

int64_t AsInt(const json& v, const std::string& what, const Where& w, int64_t lo = 0,
              int64_t hi = std::numeric_limits<int32_t>::max()) {
  if (!v.is_number_integer()) w.Fail(what, " must be an integer, got ", v.dump());
  // Non-negative literals parse as unsigned and may not fit an int64_t.
  const bool fits = !v.is_number_unsigned() ||
                    v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  const int64_t x = fits ? v.get<int64_t>() : std::numeric_limits<int64_t>::max();
  if (!fits || x < lo || x > hi) w.Fail(what, " ", v.dump(), " is outside ", lo, "..", hi);
  return x;
}

int64_t IntField(const json& j, const char* key, const Where& w, int64_t lo = 0,
                 int64_t hi = std::numeric_limits<int32_t>::max()) {
  return AsInt(Require(j, key, w), std::string("'") + key + "'", w, lo, hi);
}

const json& ArrayField(const json& j, const char* key, const Where& w) {
  const json& v = Require(j, key, w);
  if (!v.is_array()) w.Fail("'", key, "' must be an array");
  return v;
}

// `top_k` distinct expert ids in 0..num_experts-1 (num_experts 0: not known yet).
std::vector<int32_t> ExpertIds(const json& v, const std::string& what, size_t top_k,
                               int num_experts, const Where& w) {
  if (!v.is_array()) w.Fail(what, " must be an array");
  if (v.size() != top_k) w.Fail(what, " has ", v.size(), " expert ids, expected top-k ", top_k);
  std::vector<int32_t> ids;
  const int64_t hi = num_experts > 0 ? num_experts - 1 : 65534;
  for (const json& x : v) {
    const int32_t id = static_cast<int32_t>(AsInt(x, "expert id", w, 0, hi));
    if (std::find(ids.begin(), ids.end(), id) != ids.end())
      w.Fail(what, " routes to expert ", id, " twice");
    ids.push_back(id);
  }
  return ids;
}

// ---------------------------------------------------------------------------------------
// vllm-jsonl: a meta line, then one line per (token, logged layer).

struct Row {
  int64_t line = 0;
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

struct Token {
  int request = 0;  // Index into the request names.
  int64_t token_idx = 0;
  int64_t line = 0;       // Its first line.
  std::vector<int> rows;  // Per logged layer (in moe_layers order): index into rows, -1 none.
  bool dropped = false;   // Warm-up.
};

bool SameRouting(const Token& a, const Token& b, const std::vector<Row>& rows) {
  for (size_t l = 0; l < a.rows.size(); ++l) {
    const Row& x = rows[static_cast<size_t>(a.rows[l])];
    const Row& y = rows[static_cast<size_t>(b.rows[l])];
    if (x.ids != y.ids || x.weights != y.weights) return false;
  }
  return true;
}

ImportSummary ImportVllmJsonl(const ImportOptions& o) {
  Check(o.metadata.empty(), "--metadata applies to switch-json only");
  Check(o.iterations == "token" || o.iterations == "pass", "invalid iterations mode '",
        o.iterations, "' (valid: token, pass)");
  Check(o.warmup_run >= 0, "the warm-up run length must not be negative");
  const std::string& path = o.input;
  Check(RegularFileExists(path), "routing log ", path, " does not exist");
  std::ifstream in(path, std::ios::binary);
  Check(static_cast<bool>(in), "cannot open routing log ", path);

  json meta;
  std::vector<int> layers;  // Logged layers, ascending.
  std::map<int, int> slot;  // Layer -> index into layers.
  size_t top_k = 0;
  int num_experts = 0;  // 0 until known.
  const KnownModel* known = nullptr;
  std::vector<std::string> request_names;
  std::map<std::string, int> request_of;
  std::vector<Row> rows;
  // Passes: a pass ends where a (request, token, layer) repeats, i.e. token_idx restarted.
  std::vector<std::vector<Token>> passes(1);
  std::map<std::pair<int, int64_t>, size_t> in_pass;  // (request, token_idx) -> token.
  int32_t max_id = -1;

  std::string text;
  int64_t line = 0;
  while (std::getline(in, text)) {
    ++line;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isspace(c); }))
      continue;
    const Where w = At(path, line);
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      w.Fail("invalid JSON (", e.what(), ")");
    }
    const json& type = Require(j, "type", w);
    if (!type.is_string()) w.Fail("'type' must be a string");
    if (type == "meta") {
      if (!meta.is_null()) w.Fail("a second meta line");
      meta = j;
      const json& id = Require(j, "model_id", w);
      if (!id.is_string()) w.Fail("'model_id' must be a string");
      known = FindKnownModel(id.get<std::string>());
      top_k = static_cast<size_t>(IntField(j, "top_k", w, 1, 65535));
      for (const json& l : ArrayField(j, "layers_logged", w)) {
        const int layer = static_cast<int>(AsInt(l, "logged layer", w, 0, 65535));
        if (slot.count(layer)) w.Fail("layer ", layer, " is logged twice");
        slot[layer] = 0;
      }
      if (slot.empty()) w.Fail("'layers_logged' is empty");
      for (auto& [layer, index] : slot) {
        index = static_cast<int>(layers.size());
        layers.push_back(layer);
      }
      if (j.contains("num_experts") && !j.at("num_experts").is_null())
        num_experts = static_cast<int>(IntField(j, "num_experts", w, 1, 65535));
      else if (known && known->num_experts > 0)
        num_experts = known->num_experts;
      if (num_experts > 0 && top_k > static_cast<size_t>(num_experts))
        w.Fail("top_k ", top_k, " exceeds the ", num_experts, " experts");
      if (known && layers.back() >= known->num_layers)
        w.Fail("layer ", layers.back(), " is beyond the ", known->num_layers, " layers of ",
               id.get<std::string>());
      continue;
    }
    if (type != "route") w.Fail("unknown line type ", type.dump(), " (expected meta or route)");
    if (meta.is_null()) w.Fail("a route line before the meta line");

    const json& req = Require(j, "req_id", w);
    std::string name;
    if (req.is_string())
      name = req.get<std::string>();
    else if (req.is_number_integer())
      name = req.dump();
    else
      w.Fail("'req_id' must be a string or an integer");
    const int64_t token_idx = IntField(j, "token_idx", w, 0, std::numeric_limits<int64_t>::max());
    const int layer = static_cast<int>(IntField(j, "layer", w, 0, 65535));
    auto s = slot.find(layer);
    if (s == slot.end()) w.Fail("layer ", layer, " is not among the logged layers");
    Row row;
    row.line = line;
    row.ids = ExpertIds(Require(j, "topk_ids", w), "'topk_ids'", top_k, num_experts, w);
    const json& weights = Require(j, "topk_weights", w);
    if (!weights.is_array()) w.Fail("'topk_weights' must be an array");
    if (weights.size() != top_k)
      w.Fail("'topk_weights' has ", weights.size(), " weights for ", top_k, " experts");
    for (const json& x : weights) {
      if (!x.is_number()) w.Fail("a routing weight must be a number, got ", x.dump());
      const double v = x.get<double>();
      if (!std::isfinite(v) || std::abs(v) > std::numeric_limits<float>::max())
        w.Fail("routing weight ", x.dump(), " is not a finite float");
      row.weights.push_back(static_cast<float>(v));
    }
    for (int32_t id : row.ids) max_id = std::max(max_id, id);

    auto [r, fresh] = request_of.try_emplace(name, static_cast<int>(request_names.size()));
    if (fresh) request_names.push_back(name);
    auto t = in_pass.find({r->second, token_idx});
    if (t != in_pass.end() && passes.back()[t->second].rows[static_cast<size_t>(s->second)] >= 0) {
      passes.emplace_back();
      in_pass.clear();
      t = in_pass.end();
    }
    if (t == in_pass.end()) {
      Token tok;
      tok.request = r->second;
      tok.token_idx = token_idx;
      tok.line = line;
      tok.rows.assign(layers.size(), -1);
      t = in_pass.emplace(std::make_pair(r->second, token_idx), passes.back().size()).first;
      passes.back().push_back(std::move(tok));
    }
    passes.back()[t->second].rows[static_cast<size_t>(s->second)] = static_cast<int>(rows.size());
    rows.push_back(std::move(row));
  }
  Check(!in.bad(), "cannot read routing log ", path);
  Check(!meta.is_null(), path, ": no meta line (an empty file?)");
  Check(!rows.empty(), path, ": no route lines");
  if (num_experts == 0) num_experts = max_id + 1;  // Unknown model: at least what was used.
  if (top_k > static_cast<size_t>(num_experts))
    Fail(path, ": top_k ", top_k, " exceeds the ", num_experts, " experts the log uses");

  std::vector<Token*> order;  // Every token, in log order.
  for (auto& pass : passes)
    for (Token& tok : pass) {
      for (size_t l = 0; l < layers.size(); ++l)
        if (tok.rows[l] < 0)
          Fail(path, ":", tok.line, ": token ", tok.token_idx, " of request ",
               request_names[static_cast<size_t>(tok.request)], " has no routing for layer ",
               layers[l]);
      order.push_back(&tok);
    }
  // vLLM profiles memory with a pass over dummy inputs, which routes every token alike.
  int64_t dropped = 0;
  if (o.warmup_run > 0) {
    for (size_t begin = 0; begin < order.size();) {
      size_t end = begin + 1;
      while (end < order.size() && SameRouting(*order[begin], *order[end], rows)) ++end;
      if (end - begin >= static_cast<size_t>(o.warmup_run)) {
        for (size_t i = begin; i < end; ++i) order[i]->dropped = true;
        dropped += static_cast<int64_t>(end - begin);
      }
      begin = end;
    }
  }
  Check(static_cast<size_t>(dropped) < order.size(), path, ": every one of its ", order.size(),
        " tokens looks like warm-up (identical routing); import with warm-up dropping off");

  // Iterations: groups of tokens, request after request within each.
  std::vector<std::vector<const Token*>> iterations;
  for (const auto& pass : passes) {
    if (o.iterations == "token") {
      for (const Token& tok : pass)
        if (!tok.dropped) iterations.push_back({&tok});
      continue;
    }
    std::vector<const Token*> group;
    for (const Token& tok : pass)
      if (!tok.dropped) group.push_back(&tok);
    if (group.empty()) continue;
    std::vector<int> first;  // Requests by first appearance in the pass.
    for (const Token* tok : group)
      if (std::find(first.begin(), first.end(), tok->request) == first.end())
        first.push_back(tok->request);
    std::stable_sort(group.begin(), group.end(), [&](const Token* a, const Token* b) {
      return std::find(first.begin(), first.end(), a->request) <
             std::find(first.begin(), first.end(), b->request);
    });
    iterations.push_back(std::move(group));
  }
  std::map<int, size_t> last_iteration;
  for (size_t i = 0; i < iterations.size(); ++i)
    for (const Token* tok : iterations[i]) last_iteration[tok->request] = i;

  TraceHeader h;
  h.source = "import vllm-jsonl";
  h.model.name = meta.at("model_id").get<std::string>();
  h.model.num_layers = layers.back() + 1;
  h.model.moe_layers = layers;
  h.model.num_experts = num_experts;
  h.model.top_k = static_cast<int>(top_k);
  SetShape(h.model, known);
  h.info = {{"input", std::filesystem::path(path).filename().string()},
            {"meta", meta},
            {"iterations", o.iterations},
            {"passes", passes.size()},
            {"warmup_run", o.warmup_run},
            {"dropped_tokens", dropped},
            {"prompts", "unknown: empty prompts, so every token replays as decode"},
            {"shape", known ? "published config of " + h.model.name : "unknown: unit experts"}};

  ImportSummary summary;
  summary.layers = static_cast<int>(layers.size());
  summary.dropped_tokens = dropped;
  TraceWriter writer(o.output, h);
  std::map<int, int64_t> id_of;  // Request index -> trace request id (kept ones, in order).
  for (size_t i = 0; i < iterations.size(); ++i) {
    const std::vector<const Token*>& group = iterations[i];
    TraceEvent e;
    e.kind = TraceEvent::kIteration;
    TraceIteration& it = e.iteration;
    it.iteration = static_cast<int64_t>(i);
    for (const Token* tok : group) {
      if (!id_of.count(tok->request)) {
        const int64_t id = static_cast<int64_t>(id_of.size());
        id_of[tok->request] = id;
        TraceEvent begin;
        begin.kind = TraceEvent::kRequestBegin;
        begin.request = id;
        writer.Write(begin);
      }
      const int64_t id = id_of[tok->request];
      if (it.requests.empty() || it.requests.back() != id) {
        it.requests.push_back(id);
        it.token_counts.push_back(0);
      }
      ++it.token_counts.back();
    }
    it.tokens.assign(group.size(), 0);  // The log has no token ids.
    for (size_t l = 0; l < layers.size(); ++l) {
      TraceGate& g = it.gates.emplace_back();
      g.layer = layers[l];
      g.n_tokens = static_cast<int64_t>(group.size());
      g.top_k = static_cast<int>(top_k);
      for (const Token* tok : group) {
        const Row& row = rows[static_cast<size_t>(tok->rows[l])];
        g.ids.insert(g.ids.end(), row.ids.begin(), row.ids.end());
        g.weights.insert(g.weights.end(), row.weights.begin(), row.weights.end());
      }
    }
    writer.Write(e);
    summary.tokens += static_cast<int64_t>(group.size());
    for (const Token* tok : group) {
      if (last_iteration[tok->request] != i || id_of[tok->request] < 0) continue;
      TraceEvent end;
      end.kind = TraceEvent::kRequestEnd;
      end.request = id_of[tok->request];
      id_of[tok->request] = -1;  // Ended: written once.
      writer.Write(end);
    }
  }
  writer.Finish();
  summary.requests = static_cast<int64_t>(id_of.size());
  summary.iterations = static_cast<int64_t>(iterations.size());
  return summary;
}

// ---------------------------------------------------------------------------------------
// switch-json: selections[token][layer][k] over the encoder's sparse layers, and the capture
// metadata's prompt spans.

struct Span {
  std::string id;
  int64_t start = 0, end = 0;
};

std::vector<Span> ReadSpans(const std::string& path, int64_t tokens, int layers, json* info) {
  const json doc = ParseDocument(ReadText(path, "capture metadata"), path);
  const Where top = At(path, std::string("top level"));
  if (!doc.is_object()) top.Fail("expected a JSON object");
  std::vector<Span> spans;
  const json& list = ArrayField(doc, "prompt_spans", top);
  for (size_t i = 0; i < list.size(); ++i) {
    const Where w = At(path, "prompt_spans[" + std::to_string(i) + "]");
    Span s;
    const json& id = Require(list[i], "id", w);
    s.id = id.is_string() ? id.get<std::string>() : id.dump();
    s.start = IntField(list[i], "token_start", w, 0, std::numeric_limits<int64_t>::max());
    s.end = IntField(list[i], "token_end_exclusive", w, 0, std::numeric_limits<int64_t>::max());
    const int64_t expect = spans.empty() ? 0 : spans.back().end;
    if (s.start != expect)
      w.Fail("starts at token ", s.start, ", expected ", expect, " (spans must tile the trace)");
    if (s.end <= s.start) w.Fail("is empty or reversed (", s.start, "..", s.end, ")");
    if (s.end > tokens) w.Fail("ends at token ", s.end, " beyond the trace's ", tokens);
    if (list[i].contains("non_padding_tokens") &&
        IntField(list[i], "non_padding_tokens", w) != s.end - s.start)
      w.Fail("'non_padding_tokens' disagrees with its span of ", s.end - s.start, " tokens");
    spans.push_back(std::move(s));
  }
  if (spans.empty()) top.Fail("'prompt_spans' is empty");
  if (spans.back().end != tokens)
    At(path, std::string("prompt_spans"))
        .Fail("cover ", spans.back().end, " of the trace's ", tokens, " tokens");
  if (doc.contains("sparse_encoder_block_indices")) {
    const Where w = At(path, std::string("sparse_encoder_block_indices"));
    const json& blocks = ArrayField(doc, "sparse_encoder_block_indices", top);
    if (blocks.size() != static_cast<size_t>(layers))
      w.Fail("lists ", blocks.size(), " blocks for the trace's ", layers, " layers");
    for (const json& b : blocks) AsInt(b, "block index", w);
    (*info)["layer_blocks"] = blocks;
  }
  json capture = doc;
  capture.erase("prompt_spans");
  (*info)["capture"] = capture;
  json prompts = json::array();
  for (const Span& s : spans) prompts.push_back({{"id", s.id}, {"tokens", s.end - s.start}});
  (*info)["prompt_spans"] = prompts;
  return spans;
}

ImportSummary ImportSwitchJson(const ImportOptions& o) {
  Check(o.iterations == "token", "--iterations applies to vllm-jsonl only");
  const std::string& path = o.input;
  const json doc = ParseDocument(ReadText(path, "routing log"), path);
  const Where top = At(path, std::string("top level"));
  if (!doc.is_object()) top.Fail("expected a JSON object");
  if (doc.contains("version") && doc.at("version") != 2)
    top.Fail("version ", doc.at("version").dump(), " is not supported (expected 2)");
  const int layers = static_cast<int>(IntField(doc, "layers", top, 1, 65535));
  const int num_experts = static_cast<int>(IntField(doc, "expertsPerLayer", top, 1, 65535));
  const size_t top_k = static_cast<size_t>(IntField(doc, "topK", top, 1, num_experts));
  const json& selections = ArrayField(doc, "selections", top);
  const int64_t tokens = static_cast<int64_t>(selections.size());
  if (tokens == 0) top.Fail("'selections' is empty");
  if (doc.contains("tokens") &&
      IntField(doc, "tokens", top, 0, std::numeric_limits<int64_t>::max()) != tokens)
    top.Fail("'tokens' says ", doc.at("tokens").dump(), " but 'selections' has ", tokens);

  // ids[layer] holds every token's top-k, token after token.
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(layers));
  for (int64_t t = 0; t < tokens; ++t) {
    const std::string at = "selections[" + std::to_string(t) + "]";
    const json& per_layer = selections[static_cast<size_t>(t)];
    if (!per_layer.is_array() || per_layer.size() != static_cast<size_t>(layers))
      At(path, at).Fail("expected an array of ", layers, " layers");
    for (int l = 0; l < layers; ++l) {
      const std::string where = at + "[" + std::to_string(l) + "]";
      const std::vector<int32_t> k = ExpertIds(per_layer[static_cast<size_t>(l)], "the selection",
                                               top_k, num_experts, At(path, where));
      ids[static_cast<size_t>(l)].insert(ids[static_cast<size_t>(l)].end(), k.begin(), k.end());
    }
  }

  std::string name = "switch";
  if (doc.contains("source") && doc["source"].is_object() && doc["source"].contains("model") &&
      doc["source"]["model"].is_object() && doc["source"]["model"].value("id", json()).is_string())
    name = doc["source"]["model"]["id"].get<std::string>();
  json info = {{"input", std::filesystem::path(path).filename().string()},
               {"prompts", "placeholder ids (0), one per token, so every token replays as prefill"},
               {"weights", "1.0: the log holds the selected experts only"},
               {"layers", "trace layer i is the i-th sparse encoder block"}};
  json trace_info = doc;
  trace_info.erase("selections");
  info["trace"] = trace_info;
  std::vector<Span> spans;
  if (o.metadata.empty()) {
    spans.push_back({"all", 0, tokens});
    info["prompt_spans"] = "no metadata: one request of every token";
  } else {
    spans = ReadSpans(o.metadata, tokens, layers, &info);
    info["metadata"] = std::filesystem::path(o.metadata).filename().string();
  }

  const KnownModel* known = FindKnownModel(name);
  TraceHeader h;
  h.source = "import switch-json";
  h.model.name = name;
  h.model.num_layers = layers;
  for (int l = 0; l < layers; ++l) h.model.moe_layers.push_back(l);
  h.model.num_experts = num_experts;
  h.model.top_k = static_cast<int>(top_k);
  SetShape(h.model, known);
  info["shape"] = known ? "published config of " + name : "unknown: unit experts";
  h.info = info;

  TraceWriter writer(o.output, h);
  for (size_t r = 0; r < spans.size(); ++r) {
    const Span& s = spans[r];
    const int64_t n = s.end - s.start;
    TraceEvent begin;
    begin.kind = TraceEvent::kRequestBegin;
    begin.request = static_cast<int64_t>(r);
    begin.prompt.assign(static_cast<size_t>(n), 0);
    writer.Write(begin);
    // An encoder sees the whole prompt at once: one pass per prompt.
    TraceEvent e;
    e.kind = TraceEvent::kIteration;
    TraceIteration& it = e.iteration;
    it.iteration = static_cast<int64_t>(r);
    it.requests = {static_cast<int64_t>(r)};
    it.token_counts = {n};
    it.tokens.assign(static_cast<size_t>(n), 0);
    for (int l = 0; l < layers; ++l) {
      TraceGate& g = it.gates.emplace_back();
      g.layer = l;
      g.n_tokens = n;
      g.top_k = static_cast<int>(top_k);
      const auto& all = ids[static_cast<size_t>(l)];
      const auto from = all.begin() + static_cast<ptrdiff_t>(s.start * static_cast<int64_t>(top_k));
      g.ids.assign(from, from + static_cast<ptrdiff_t>(n * static_cast<int64_t>(top_k)));
      g.weights.assign(g.ids.size(), 1.0f);
    }
    writer.Write(e);
    TraceEvent end;
    end.kind = TraceEvent::kRequestEnd;
    end.request = static_cast<int64_t>(r);
    writer.Write(end);
  }
  writer.Finish();
  ImportSummary summary;
  summary.requests = static_cast<int64_t>(spans.size());
  summary.tokens = tokens;
  summary.layers = layers;
  summary.iterations = static_cast<int64_t>(spans.size());
  return summary;
}

}  // namespace

ImportSummary ImportRoutingLog(const ImportOptions& options) {
  Check(!options.input.empty(), "no routing log to import");
  Check(!options.output.empty(), "no trace file to write");
  if (options.format == "vllm-jsonl") return ImportVllmJsonl(options);
  if (options.format == "switch-json") return ImportSwitchJson(options);
  Fail("unknown import format '", options.format, "' (valid: vllm-jsonl, switch-json)");
}

}  // namespace moex::trace
