// Qwen3.5-MoE (HF Qwen3_5MoeForConditionalGeneration, model_type "qwen3_5_moe"; llama.cpp
// "qwen35moe"): Qwen3-Next's layers (qwen3_next.h) under other names.
// - config.json nests the text model's keys under text_config (ModelConfig::FromHfJson
//   passes that object here); the vision tower's keys and weights (model.visual.*) are not
//   read: moex runs the text model.
// - The Gated DeltaNet has four projections, in_proj_qkv (q heads, k heads, v heads in
//   order), in_proj_z, in_proj_b and in_proj_a, instead of Qwen3-Next's two grouped ones.
//   Weights live under model.language_model.* and the routed experts are fused
//   (mlp.experts.gate_up_proj [E, 2F, d], mlp.experts.down_proj [E, d, F]):
//   model/qwen35_weights.h presents them under the shared names.
// - The router always renormalises its top-k (there is no norm_topk_prob).
// - RoPE is MRoPE (rope_parameters.mrope_section, interleaved): each rotary frequency takes
//   its angle from the temporal, height or width position id. For text all three ids are the
//   token's position, so every frequency turns by the position: plain partial RoPE, which is
//   what moex computes (text only; docs/architectures.md).
// - llama.cpp's converter stores the value heads tiled (v head j * k_heads + g is HF's
//   g * r + j) so that ggml's broadcast pairs them with k head h % k_heads; the files are
//   read as they are (GatedDeltaNet::tiled_v_heads) and written that way from HF's order.
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "model/arch/hf_config_keys.h"
#include "model/arch/qwen3_next.h"
#include "model/random_model.h"

namespace moex {

namespace {

// HF's split of the rotary frequencies over (t, h, w), as Qwen3.5 publishes it: [11, 11, 10]
// for 32 frequencies.
std::vector<int> MropeSections(int rotary_dim) {
  const int half = rotary_dim / 2;
  const int a = (half + 2) / 3;
  return {a, a, half - 2 * a};
}

class Qwen35Moe : public Qwen3Next {
 public:
  Qwen35Moe()
      : Qwen3Next({Arch::kQwen35Moe,
                   "qwen3_5_moe",
                   "Qwen3_5MoeForConditionalGeneration",
                   "qwen35moe",
                   {"qwen3_5_moe_text"}}) {}

  void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const override {
    using namespace hf_keys;
    nlohmann::json rope = nlohmann::json::object();
    rope["partial_rotary_factor"] = OptionalDouble(j, "partial_rotary_factor", 0.25);
    rope["rope_theta"] = c.rope_theta;
    std::vector<int> sections;
    if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
      const std::string type = rp->value("rope_type", std::string("default"));
      Check(type == "default", "config.json: qwen3_5_moe rope_parameters.rope_type '", type,
            "' is not supported (default)");
      for (const char* key : {"partial_rotary_factor", "rope_theta"})
        if (rp->contains(key)) rope[key] = (*rp)[key];
      if (auto ms = rp->find("mrope_section"); ms != rp->end() && !ms->is_null()) {
        Check(ms->is_array(), "config.json: rope_parameters.mrope_section must be a list");
        for (const auto& s : *ms) {
          Check(s.is_number_integer() && s.get<int>() >= 0,
                "config.json: rope_parameters.mrope_section entries must be integers >= 0, got ",
                s.dump());
          sections.push_back(s.get<int>());
        }
      }
    }
    ReadCommonHf(j, rope, c);
    const int sum = std::accumulate(sections.begin(), sections.end(), 0);
    Check(sum <= c.RotaryDim() / 2, "config.json: rope_parameters.mrope_section sums to ", sum,
          ", more than the ", c.RotaryDim() / 2, " rotary frequencies");
  }

  void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const override {
    nlohmann::json text = j;
    for (const char* key : {"architectures", "torch_dtype", "rope_theta"}) text.erase(key);
    text["model_type"] = "qwen3_5_moe_text";
    WriteCommonHf(c, text);
    text["rope_parameters"] = {
        {"rope_type", "default"},
        {"rope_theta", c.rope_theta},
        {"partial_rotary_factor", static_cast<double>(c.RotaryDim()) / c.head_dim},
        {"mrope_section", MropeSections(c.RotaryDim())},
        {"mrope_interleaved", true}};
    nlohmann::json top = {{"model_type", names().model_type},
                          {"architectures", j["architectures"]},
                          {"tie_word_embeddings", c.tie_word_embeddings},
                          {"text_config", text}};
    if (j.contains("torch_dtype")) top["torch_dtype"] = j["torch_dtype"];
    j = top;
  }

  // llama.cpp's qwen35moe graph also scales the DeltaNet's projections.
  TensorNames HfTensorNames() const override {
    TensorNames n = Qwen3Next::HfTensorNames();
    n.gdn_qkv_scale = "linear_attn.in_proj_qkv.scale";
    n.gdn_z_scale = "linear_attn.in_proj_z.scale";
    n.gdn_b_scale = "linear_attn.in_proj_b.scale";
    n.gdn_a_scale = "linear_attn.in_proj_a.scale";
    n.gdn_out_scale = "linear_attn.out_proj.scale";
    return n;
  }

  std::vector<std::string_view> LlamaCppArchKeys() const override {
    std::vector<std::string_view> keys = Qwen3Next::LlamaCppArchKeys();
    keys.push_back("rope.dimension_sections");
    return keys;
  }

  void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const override {
    Qwen3Next::ReadGgufConfig(f, c);
    c.delta_net->tiled_v_heads = true;
    const gguf_keys::ArchKeys keys = Keys();
    // Required by llama.cpp; any split gives text the same angles (see the top).
    Check(keys.Has(f, "rope.dimension_sections"), f.path(), ": qwen35moe GGUF without '",
          keys.Key("rope.dimension_sections"), "'");
    for (const int64_t s : f.Get(keys.Key("rope.dimension_sections")).AsIntArray())
      Check(s >= 0, f.path(), ": ", keys.Key("rope.dimension_sections"), " has a negative entry (",
            s, ")");
  }

  void WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const override {
    Qwen3Next::WriteGgufConfig(c, w);
    std::vector<int32_t> sections;
    for (const int s : MropeSections(c.RotaryDim())) sections.push_back(s);
    sections.push_back(0);
    w.Set(Keys().Key("rope.dimension_sections"), GgufValue::I32Array(sections));
  }

  void GgufTensorNames(gguf_map::ArchNames& n) const override {
    Qwen3Next::GgufTensorNames(n);
    n.layer.push_back({"linear_attn.in_proj_b", "ssm_beta"});
    n.layer.push_back({"linear_attn.in_proj_a", "ssm_alpha"});
  }

  // Qwen3.5-35B-A3B: transformers' Qwen3_5MoeTextConfig defaults (its docstring names that
  // checkpoint: 40 layers, 256 experts, top-8, widths as Qwen3-Next's), with Qwen3-Next's
  // context and RoPE base (the published config.json's rope_theta 1e7) and its token ids.
  ModelConfig PublishedConfig() const override {
    ModelConfig c = Qwen3Next::PublishedConfig();
    c.arch = arch();
    c.vocab_size = 248320;
    c.num_layers = 40;
    c.num_experts = 256;
    c.num_experts_per_tok = 8;
    c.intermediate_size = 0;
    c.layer_linear = IntervalLayers(c.num_layers, 4);
    // <|endoftext|>, config.json's bos and eos (generation_config.json adds <|im_end|>).
    c.bos_token_id = 248044;
    c.eos_token_ids = {248044};
    return c;
  }
};

}  // namespace

const Family& Qwen35MoeFamily() {
  static const Qwen35Moe family;
  return family;
}

}  // namespace moex
