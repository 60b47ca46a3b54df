// Llama 4 (HF Llama4TextConfig, model_type "llama4" with its text_config or "llama4_text";
// llama.cpp "llama4"), the language model only: the vision tower and projector of
// Llama4ForConditionalGeneration are never looked up.
// - MoE on the layers interleave_moe_layer_step says (the last of each step: Scout every
//   layer, Maverick every other), a dense SwiGLU of intermediate_size_mlp elsewhere.
// - Routing: the top num_experts_per_tok logits, each weighted by its sigmoid, the weight
//   multiplying the expert's input (expert_weight_on_input); an always-on shared expert of the
//   routed experts' size beside them.
// - Attention: layers with RoPE (interleaved pairs, like Llama; stored in moex's rotate-half
//   order, the GGUF's Q/K rows un-permuted as Mixtral's) RMS-normalise each q and k head
//   without weights after RoPE (use_qk_norm) and attend within chunks of attention_chunk_size
//   (HF: the RoPE layers; llama.cpp: its sliding_window_pattern); the NoPE layers (every
//   fourth) attend to everything, their queries scaled by the attention temperature.
// - RoPE scaling "llama3" becomes one set of frequency factors (as llama.cpp's rope_freqs).
// Tensors: HF's feed_forward.* names (router, shared_expert.*, experts.{e}.*, and the dense
// gate/up/down_proj); HF checkpoints fuse the experts (experts.gate_up_proj [E, d, 2F],
// experts.down_proj [E, F, d]): see model/llama4_weights.h.
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "model/arch/family.h"
#include "model/arch/hf_config_keys.h"
#include "model/gguf_arch_keys.h"
#include "model/random_model.h"

namespace moex {

namespace {

constexpr gguf_keys::ArchKeys kKeys{"llama4"};

// What llama.cpp's llama4 graph fixes whatever the file says (src/models/llama4.cpp): the
// chunk, the temperature's floor and scale, and a NoPE layer every fourth.
constexpr int kLlamaCppChunk = 8192;
constexpr int kLlamaCppTemperatureFloor = 8192;
constexpr float kLlamaCppTemperatureScale = 0.1f;
constexpr int kNopeInterval = 4;

// Layer i has no RoPE when (i + 1) % interval == 0 (HF's no_rope_layer_interval default).
std::vector<bool> NopeEvery(int num_layers, int interval) {
  std::vector<bool> nope;
  for (int i = 0; i < num_layers; ++i) nope.push_back((i + 1) % interval == 0);
  return nope;
}

std::vector<bool> Not(const std::vector<bool>& v) {
  std::vector<bool> out;
  for (const bool b : v) out.push_back(!b);
  return out;
}

// The fixed parts of Llama 4's block.
void SetLlama4Moe(ModelConfig& c) {
  c.router = RouterKind::kGroupedTopK;  // Top-k of sigmoid scores = top-k of the logits.
  c.scoring_func = ScoringFunc::kSigmoid;
  c.topk_method = TopKMethod::kGreedy;
  c.n_group = 1;
  c.topk_group = 1;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 1.0f;
  c.expert_weight_on_input = true;
  c.shared_expert_intermediate_size = c.moe_intermediate_size;
}

// A flag list from config.json (0/1 or booleans), one per layer.
std::vector<bool> FlagList(const nlohmann::json& j, const char* key, int num_layers) {
  const nlohmann::json& v = j.at(key);
  Check(v.is_array() && static_cast<int>(v.size()) >= num_layers, "config.json: ", key,
        " must be a list of at least num_hidden_layers (", num_layers, ") entries");
  std::vector<bool> out;
  for (int i = 0; i < num_layers; ++i) {
    const nlohmann::json& e = v[static_cast<size_t>(i)];
    Check(e.is_boolean() ||
              (e.is_number_integer() && (e.get<int64_t>() == 0 || e.get<int64_t>() == 1)),
          "config.json: ", key, " entries must be 0 or 1, got ", e.dump());
    out.push_back(e.is_boolean() ? e.get<bool>() : e.get<int64_t>() == 1);
  }
  return out;
}

class Llama4 : public Family {
 public:
  Llama4()
      : Family({Arch::kLlama4, "llama4", "Llama4ForCausalLM", kKeys.arch, {"llama4_text"}},
               {.llama3_rope = true}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    CheckSilu(j, "llama4");
    c.rope_theta = OptionalFloat(j, "rope_theta", 500000.0f);  // Llama4TextConfig's default.
    c.num_experts = OptionalInt(j, "num_local_experts", 16);
    c.num_experts_per_tok = OptionalInt(j, "num_experts_per_tok", 1);
    c.moe_intermediate_size = OptionalInt(j, "intermediate_size", 8192);
    c.intermediate_size = OptionalInt(j, "intermediate_size_mlp", 16384);
    SetLlama4Moe(c);
    const int step = OptionalInt(j, "interleave_moe_layer_step", 1);
    Check(step >= 1, "config.json: interleave_moe_layer_step must be >= 1, got ", step);
    c.moe_layer_freq = step;
    c.moe_layer_offset = 1;
    if (auto m = j.find("moe_layers"); m != j.end() && !m->is_null()) {
      Check(m->is_array(), "config.json: moe_layers must be a list");
      std::vector<int> want;
      for (int l = step - 1; l < c.num_layers; l += step) want.push_back(l);
      std::vector<int> got;
      for (const auto& e : *m) {
        Check(e.is_number_integer(), "config.json: moe_layers entries must be integers");
        got.push_back(e.get<int>());
      }
      Check(got == want, "config.json: moe_layers ", m->dump(),
            " is not supported (only the last layer of every interleave_moe_layer_step)");
    }
    const bool bias = OptionalBool(j, "attention_bias", false);
    c.attention_bias = bias;
    c.attention_out_bias = bias;
    c.qk_norm_unweighted = OptionalBool(j, "use_qk_norm", true);
    // no_rope_layers: 1 = RoPE. Default: NoPE every no_rope_layer_interval-th layer.
    if (auto n = j.find("no_rope_layers"); n != j.end() && !n->is_null() && !n->empty()) {
      c.layer_nope = Not(FlagList(j, "no_rope_layers", c.num_layers));
    } else {
      const int interval = OptionalInt(j, "no_rope_layer_interval", kNopeInterval);
      Check(interval >= 1, "config.json: no_rope_layer_interval must be >= 1, got ", interval);
      c.layer_nope = NopeEvery(c.num_layers, interval);
    }
    // Chunked attention on the layers layer_types says (default: the RoPE layers).
    c.attention_chunk_size = OptionalInt(j, "attention_chunk_size", 8192);
    if (auto types = j.find("layer_types"); types != j.end() && !types->is_null()) {
      Check(types->is_array() && static_cast<int>(types->size()) >= c.num_layers,
            "config.json: layer_types must list every layer");
      for (int i = 0; i < c.num_layers; ++i) {
        const nlohmann::json& t = (*types)[static_cast<size_t>(i)];
        Check(t.is_string(), "config.json: layer_types entries must be strings");
        const std::string s = t.get<std::string>();
        Check(s == "chunked_attention" || s == "full_attention", "config.json: layer_types entry '",
              s, "' is not supported (chunked_attention, full_attention)");
        c.layer_chunked.push_back(s == "chunked_attention");
      }
    } else {
      c.layer_chunked = Not(c.layer_nope);
    }
    if (c.attention_chunk_size == 0) c.layer_chunked.clear();
    // A boolean in Llama4TextConfig; early published configs wrote a number (4): non-zero on.
    const auto tuning = j.find("attn_temperature_tuning");
    const bool tune = tuning == j.end() || tuning->is_null() ||
                      (tuning->is_number() ? tuning->get<double>() != 0
                                           : OptionalBool(j, "attn_temperature_tuning", true));
    if (tune) {
      c.attn_temperature_floor = OptionalInt(j, "floor_scale", 8192);
      c.attn_temperature_scale = OptionalFloat(j, "attn_scale", 0.1f);
      Check(c.attn_temperature_floor > 0, "config.json: floor_scale must be > 0");
    }
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    j["rope_scaling"] = Llama3Json(c);
    j["num_local_experts"] = c.num_experts;
    j["intermediate_size"] = c.moe_intermediate_size;
    j["intermediate_size_mlp"] = c.intermediate_size;
    j["interleave_moe_layer_step"] = c.moe_layer_freq;
    j["attention_bias"] = c.attention_bias;
    j["use_qk_norm"] = c.qk_norm_unweighted;
    nlohmann::json rope = nlohmann::json::array(), types = nlohmann::json::array();
    for (int l = 0; l < c.num_layers; ++l) {
      rope.push_back(c.IsNopeLayer(l) ? 0 : 1);
      types.push_back(c.AttentionChunk(l) > 0 ? "chunked_attention" : "full_attention");
    }
    j["no_rope_layers"] = rope;
    j["layer_types"] = types;
    j["attention_chunk_size"] = c.attention_chunk_size;
    j["attn_temperature_tuning"] = c.attn_temperature_floor > 0;
    if (c.attn_temperature_floor > 0) {
      j["floor_scale"] = c.attn_temperature_floor;
      j["attn_scale"] = c.attn_temperature_scale;
    }
    j["hidden_act"] = "silu";
  }

  // rope_scaling for c.longrope (null without): the factors are all moex keeps, so this
  // writes the llama3 parameters that give exactly those factors, among the published sets
  // (low_freq_factor, high_freq_factor) = (1, 1) (Llama 4) and (1, 4) (Llama 3.1 to 3.3),
  // with `factor` the lowest frequency's divisor. Other factors (a GGUF's rope_freqs) cannot
  // be written as config.json.
  static nlohmann::json Llama3Json(const ModelConfig& c) {
    if (!c.longrope) return nullptr;
    const LongRope& lr = *c.longrope;
    Check(!lr.long_factor.empty(), "config: llama4 RoPE factors are empty");
    const double factor = lr.long_factor.back();
    for (const auto& [low, high] : {std::pair{1.0, 1.0}, std::pair{1.0, 4.0}}) {
      const LongRope want = Llama3RopeFactors(c.head_dim, c.rope_theta, factor, low, high,
                                              lr.original_max_position_embeddings);
      if (want.long_factor == lr.long_factor && lr.short_factor == lr.long_factor &&
          lr.short_mscale == 1.0f && lr.long_mscale == 1.0f)
        return {{"rope_type", "llama3"},
                {"factor", factor},
                {"low_freq_factor", low},
                {"high_freq_factor", high},
                {"original_max_position_embeddings", lr.original_max_position_embeddings}};
    }
    Fail(
        "config: llama4's RoPE frequency factors (e.g. a GGUF's rope_freqs) are no llama3 "
        "rope_scaling with low_freq_factor 1 and high_freq_factor 1 or 4; config.json cannot "
        "express them");
  }

  TensorNames HfTensorNames() const override {
    TensorNames n;
    n.router = "feed_forward.router.weight";
    n.expert_gate = "feed_forward.experts.{e}.gate_proj.weight";
    n.expert_up = "feed_forward.experts.{e}.up_proj.weight";
    n.expert_down = "feed_forward.experts.{e}.down_proj.weight";
    n.shared_gate = "feed_forward.shared_expert.gate_proj.weight";
    n.shared_up = "feed_forward.shared_expert.up_proj.weight";
    n.shared_down = "feed_forward.shared_expert.down_proj.weight";
    n.dense_gate = "feed_forward.gate_proj.weight";
    n.dense_up = "feed_forward.up_proj.weight";
    n.dense_down = "feed_forward.down_proj.weight";
    return n;
  }

  bool GgufFeedForwardIsExpert() const override { return false; }
  bool GgufPermutesQK() const override { return true; }
  std::optional<bool> LlamaCppFixedTopKNorm() const override { return false; }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    return {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length",
            "interleave_moe_layer_step",        "attention.sliding_window",
            "attention.sliding_window_pattern", "rope.freq_base_swa"};
  }

  // llama.cpp's llama4 reader: MoE every interleave_moe_layer_step-th layer (the step's last),
  // the shared expert as large as the routed ones, chunked attention on the layers
  // sliding_window_pattern marks (an array, or a period whose last layer is full; default 4)
  // with a chunk of 8192 whatever sliding_window says (0 turns chunks and temperature off,
  // which llama.cpp's graph then cannot run: refused), NoPE every fourth layer with the
  // temperature at floor 8192, scale 0.1, and the q/k norm unless there are 128 experts.
  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    const int step = kKeys.RequiredInt(f, "interleave_moe_layer_step");
    Check(step >= 1, f.path(), ": ", kKeys.Key("interleave_moe_layer_step"), " 0 is not supported");
    c.moe_layer_freq = step;
    c.moe_layer_offset = 1;
    SetLlama4Moe(c);
    const int window = kKeys.Int(f, "attention.sliding_window", kLlamaCppChunk);
    Check(window != 0, f.path(), ": ", kKeys.Key("attention.sliding_window"),
          " = 0 (llama.cpp's all-full-attention variant, MobileLLM) is not supported");
    c.attention_chunk_size = kLlamaCppChunk;
    const std::string pattern_key = kKeys.Key("attention.sliding_window_pattern");
    if (const GgufValue* p = f.Find(pattern_key); p != nullptr && p->is_array()) {
      std::vector<int64_t> flags;
      if (p->array_type() == GgufType::kBool)
        flags.assign(p->raw_array().begin(), p->raw_array().end());
      else
        flags = p->AsIntArray();
      Check(static_cast<int>(flags.size()) >= c.num_layers, f.path(), ": ", pattern_key, " has ",
            flags.size(), " entries for ", c.num_layers, " layers");
      c.layer_chunked.assign(flags.begin(), flags.begin() + c.num_layers);
    } else {
      const int period = kKeys.Int(f, "attention.sliding_window_pattern", 4);
      c.layer_chunked.clear();
      for (int l = 0; l < c.num_layers; ++l)
        c.layer_chunked.push_back(period == 0 || l % period < period - 1);
    }
    c.layer_nope = NopeEvery(c.num_layers, kNopeInterval);
    c.attn_temperature_floor = kLlamaCppTemperatureFloor;
    c.attn_temperature_scale = kLlamaCppTemperatureScale;
    c.qk_norm_unweighted = c.num_experts != 128;  // llama.cpp: not for Maverick (17B-128E).
    if (kKeys.Has(f, "rope.freq_base_swa")) {
      const double swa_theta = f.GetFloat(kKeys.Key("rope.freq_base_swa"));
      Check(static_cast<float>(swa_theta) == c.rope_theta, f.path(), ": ",
            kKeys.Key("rope.freq_base_swa"), " = ", swa_theta, " differs from rope.freq_base (",
            c.rope_theta, "); another RoPE base on the chunked layers is not supported");
    }
    if (f.FindTensorInfo("rope_freqs.weight") != nullptr) {
      // llama.cpp divides each RoPE frequency by these factors: LongRoPE with one set.
      LongRope lr;
      lr.long_factor = gguf_keys::F32Vector(f, "rope_freqs.weight", c.head_dim / 2);
      for (const float x : lr.long_factor)
        Check(std::isfinite(x) && x != 0, f.path(), ": rope_freqs.weight holds ", x,
              " (a frequency factor must be finite and not 0)");
      lr.short_factor = lr.long_factor;
      lr.original_max_position_embeddings = c.max_position_embeddings;
      c.longrope = std::move(lr);
    }
  }

  // What llama.cpp reads back as this config; anything it would compute differently is
  // refused (Validate of the GGUF writer's config, below).
  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    Check(c.attention_chunk_size == kLlamaCppChunk &&
              c.attn_temperature_floor == kLlamaCppTemperatureFloor &&
              c.attn_temperature_scale == kLlamaCppTemperatureScale &&
              c.layer_nope == NopeEvery(c.num_layers, kNopeInterval),
          "gguf: llama.cpp runs Llama 4 with a chunk of 8192, the attention temperature at floor "
          "8192 and scale 0.1, and NoPE every fourth layer; this config (chunk ",
          c.attention_chunk_size, ", floor ", c.attn_temperature_floor, ", scale ",
          c.attn_temperature_scale, ") would run differently there");
    Check(c.qk_norm_unweighted == (c.num_experts != 128),
          "gguf: llama.cpp normalises Llama 4's q and k exactly when there are not 128 experts");
    kKeys.SetU32(w, "interleave_moe_layer_step", c.moe_layer_freq);
    kKeys.SetU32(w, "attention.sliding_window", c.attention_chunk_size);
    std::vector<uint8_t> flags;
    for (int l = 0; l < c.num_layers; ++l) flags.push_back(c.AttentionChunk(l) > 0 ? 1 : 0);
    w.Set(kKeys.Key("attention.sliding_window_pattern"),
          GgufValue::NumericArray(GgufType::kBool, flags.size(), flags));
  }

  void GgufTensorNames(gguf_map::ArchNames& n) const override {
    for (gguf_map::NamePair& p : n.layer)
      if (p.hf.starts_with("mlp.")) p.hf = "feed_forward." + p.hf.substr(4);
    n.layer.push_back({"feed_forward.router", "ffn_gate_inp"});
    SharedExpertsGgufNames(n, "feed_forward.shared_expert.");
    n.expert_prefix = "feed_forward.experts.";
  }

  // Llama-4-Scout-17B-16E (config.json's text_config, as HF's Llama4TextConfig defaults
  // and llama.cpp's 17B_16E type): 48 layers, all MoE, 16 experts of 8192, top-1.
  ModelConfig PublishedConfig() const override {
    ModelConfig c = BaseConfig(arch());
    c.vocab_size = 202048;
    c.hidden_size = 5120;
    c.num_layers = 48;
    c.num_heads = 40;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.rope_theta = 500000.0f;
    c.rms_norm_eps = 1e-5f;
    c.max_position_embeddings = 10485760;
    c.num_experts = 16;
    c.num_experts_per_tok = 1;
    c.moe_intermediate_size = 8192;
    c.intermediate_size = 16384;
    SetLlama4Moe(c);
    c.moe_layer_freq = 1;
    c.moe_layer_offset = 1;
    c.qk_norm_unweighted = true;
    c.layer_nope = NopeEvery(c.num_layers, kNopeInterval);
    c.layer_chunked = Not(c.layer_nope);
    c.attention_chunk_size = 8192;
    c.attn_temperature_floor = 8192;
    c.attn_temperature_scale = 0.1f;
    c.longrope = Llama3RopeFactors(c.head_dim, c.rope_theta, 16.0, 1.0, 1.0, 8192);
    c.bos_token_id = 200000;
    c.eos_token_ids = {200001, 200007, 200008};
    return c;
  }

  // Tiny and small keep Scout's attention (NoPE every fourth layer, chunks of 8192 on the
  // others, the temperature as published: what llama.cpp computes, so they can be written as
  // GGUF) and take Maverick's interleave (MoE every other layer) so the dense layers are
  // covered too; no RoPE scaling. Tests shrink the chunk and the floor to cross them.
  ModelConfig RandomConfig(ModelSize size) const override {
    ModelConfig c = ShrinkToSize(PublishedConfig(), size);
    if (size == ModelSize::kFull) return c;
    c.longrope.reset();
    c.num_kv_heads = c.num_heads / 4;  // Scout's 40 / 8 does not divide 4 or 16 heads.
    c.num_layers = size == ModelSize::kTiny ? 4 : 8;
    c.moe_layer_freq = 2;
    c.shared_expert_intermediate_size = c.moe_intermediate_size;
    c.layer_nope = NopeEvery(c.num_layers, kNopeInterval);
    c.layer_chunked = Not(c.layer_nope);
    return c;
  }

  void Validate(const ModelConfig& c) const override {
    const auto per_layer = [&](const std::vector<bool>& v) {
      return v.empty() || static_cast<int>(v.size()) == c.num_layers;
    };
    Check(per_layer(c.layer_nope) && per_layer(c.layer_chunked),
          "config: llama4's NoPE and chunked layer lists need one entry per layer");
    Check(c.attention_chunk_size >= 0 && (c.attention_chunk_size > 0 || c.layer_chunked.empty()),
          "config: llama4's chunked layers need attention_chunk_size > 0");
    Check(c.attn_temperature_floor >= 0, "config: llama4's floor_scale must be >= 0");
    Check(c.router == RouterKind::kGroupedTopK && c.scoring_func == ScoringFunc::kSigmoid &&
              c.topk_method == TopKMethod::kGreedy && !c.norm_topk_prob && c.expert_weight_on_input,
          "config: llama4 routes by the sigmoid of the top logits, weighting the experts' input");
    Check(c.shared_expert_intermediate_size == c.moe_intermediate_size,
          "config: llama4's shared expert has the routed experts' size");
    Check(c.intermediate_size > 0 || c.moe_layer_freq == 1,
          "config: llama4 with dense layers needs intermediate_size_mlp > 0");
  }
};

}  // namespace

const Family& Llama4Family() {
  static const Llama4 family;
  return family;
}

}  // namespace moex
