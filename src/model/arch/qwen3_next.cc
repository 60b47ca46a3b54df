// Qwen3-Next (HF Qwen3NextConfig, llama.cpp "qwen3next"): Gated DeltaNet linear-attention
// layers (ModelConfig::GatedDeltaNet) between full-attention layers, by layer_types or every
// full_attention_interval-th layer; the full-attention layers have per-head q/k RMSNorm, RoPE
// on the first partial_rotary_factor of each head and an output gate from q_proj
// (attention_output_gate); every RMSNorm but the DeltaNet's gated one is zero-centred,
// x / rms(x) * (1 + w) (norm_weight_offset 1 in HF, 0 in llama.cpp's files, whose converter
// adds the 1); the MoE block is Qwen2-MoE's: softmax top-k (renormalised), a shared expert
// scaled by sigmoid(shared_expert_gate . x). Tensors keep HF's names: linear_attn.* for the
// DeltaNet (in_proj_qkvz and in_proj_ba grouped per key head), self_attn.* for attention,
// mlp.* for the MoE. The MTP layers (mtp.*) are never looked up.
#include <cmath>
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

std::vector<bool> IntervalLayers(int num_layers, int interval) {
  std::vector<bool> linear;
  for (int i = 0; i < num_layers; ++i) linear.push_back((i + 1) % interval != 0);
  return linear;
}

namespace {

// full_attention_interval when layer_types follows it, else 0.
int IntervalOf(const std::vector<bool>& linear) {
  for (int interval = 1; interval <= static_cast<int>(linear.size()); ++interval)
    if (IntervalLayers(static_cast<int>(linear.size()), interval) == linear) return interval;
  return 0;
}

void SetQwen3NextAttention(ModelConfig& c) {
  c.qk_norm = true;
  c.qk_norm_per_head = true;
  c.attention_output_gate = true;
  c.shared_expert_gate = c.shared_expert_intermediate_size > 0;
  c.norm_topk_prob = true;
}

}  // namespace

Qwen3Next::Qwen3Next()
    : Qwen3Next(
          {Arch::kQwen3Next, "qwen3_next", "Qwen3NextForCausalLM", "qwen3next", {"qwen3next"}}) {}

Qwen3Next::Qwen3Next(Names names)
    : Family(std::move(names), {.partial_rotary = true, .gated_delta_net = true}) {}

void Qwen3Next::ReadCommonHf(const nlohmann::json& j, const nlohmann::json& rope,
                             ModelConfig& c) const {
  using namespace hf_keys;
  const char* type = names().model_type;
  CheckSilu(j, type);
  c.head_dim = OptionalInt(j, "head_dim", 256);  // Both configs' default.
  c.num_experts = RequireInt(j, "num_experts");
  c.num_experts_per_tok = RequireInt(j, "num_experts_per_tok");
  c.moe_intermediate_size = RequireInt(j, "moe_intermediate_size");
  c.intermediate_size = OptionalInt(j, "intermediate_size", 0);
  c.shared_expert_intermediate_size = OptionalInt(j, "shared_expert_intermediate_size", 0);
  Check(!OptionalBool(j, "attention_bias", false), "config.json: ", type,
        " attention_bias true is not supported");
  SetQwen3NextAttention(c);
  c.norm_weight_offset = 1.0f;
  const double factor = OptionalDouble(rope, "partial_rotary_factor", 0.25);
  c.rope_theta = OptionalFloat(rope, "rope_theta", c.rope_theta);
  Check(factor > 0 && factor <= 1, "config.json: partial_rotary_factor must be in (0, 1], got ",
        factor);
  const int rot = static_cast<int>(std::lround(c.head_dim * factor));
  c.rope_dim = rot == c.head_dim ? 0 : rot;

  GatedDeltaNet g;
  g.num_k_heads = OptionalInt(j, "linear_num_key_heads", 16);
  g.num_v_heads = OptionalInt(j, "linear_num_value_heads", 32);
  g.k_head_dim = OptionalInt(j, "linear_key_head_dim", 128);
  g.v_head_dim = OptionalInt(j, "linear_value_head_dim", 128);
  g.conv_kernel = OptionalInt(j, "linear_conv_kernel_dim", 4);
  c.delta_net = g;
  if (auto types = j.find("layer_types"); types != j.end() && !types->is_null()) {
    Check(types->is_array(), "config.json: layer_types must be a list");
    for (const auto& t : *types) {
      Check(t.is_string(), "config.json: layer_types entries must be strings");
      const std::string s = t.get<std::string>();
      Check(s == "linear_attention" || s == "full_attention", "config.json: layer_types entry '", s,
            "' is not supported (linear_attention, full_attention)");
      c.layer_linear.push_back(s == "linear_attention");
    }
  } else {
    const int interval = OptionalInt(j, "full_attention_interval", 4);
    Check(interval >= 1, "config.json: full_attention_interval must be >= 1, got ", interval);
    c.layer_linear = IntervalLayers(c.num_layers, interval);
  }
}

void Qwen3Next::WriteCommonHf(const ModelConfig& c, nlohmann::json& j) const {
  const GatedDeltaNet& g = *c.delta_net;
  j["num_experts"] = c.num_experts;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  j["attention_bias"] = false;
  j["hidden_act"] = "silu";
  j["linear_num_key_heads"] = g.num_k_heads;
  j["linear_num_value_heads"] = g.num_v_heads;
  j["linear_key_head_dim"] = g.k_head_dim;
  j["linear_value_head_dim"] = g.v_head_dim;
  j["linear_conv_kernel_dim"] = g.conv_kernel;
  nlohmann::json types = nlohmann::json::array();
  for (const bool linear : c.layer_linear)
    types.push_back(linear ? "linear_attention" : "full_attention");
  j["layer_types"] = types;
}

void Qwen3Next::ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const {
  using namespace hf_keys;
  // Qwen2MoeSparseMoeBlock renormalises only with norm_topk_prob; llama.cpp's qwen3next
  // graph always does, so a config that says otherwise is refused rather than computed
  // two ways.
  Check(OptionalBool(j, "norm_topk_prob", true),
        "config.json: qwen3_next norm_topk_prob false is not supported (llama.cpp always "
        "renormalises)");
  const int step = OptionalInt(j, "decoder_sparse_step", 1);
  Check(step == 1, "config.json: qwen3_next decoder_sparse_step ", step,
        " is not supported (1: every layer MoE)");
  if (auto mlp_only = j.find("mlp_only_layers");
      mlp_only != j.end() && mlp_only->is_array() && !mlp_only->empty())
    Fail("config.json: qwen3_next mlp_only_layers ", mlp_only->dump(),
         " is not supported (every layer MoE)");
  // Partial rotary: top level, or in transformers 5's rope_parameters.
  nlohmann::json rope = nlohmann::json::object();
  rope["partial_rotary_factor"] = OptionalDouble(j, "partial_rotary_factor", 0.25);
  rope["rope_theta"] = c.rope_theta;
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    const std::string type = rp->value("rope_type", std::string("default"));
    Check(type == "default", "config.json: qwen3_next rope_parameters.rope_type '", type,
          "' is not supported (default)");
    for (const char* key : {"partial_rotary_factor", "rope_theta"})
      if (rp->contains(key)) rope[key] = (*rp)[key];
  }
  ReadCommonHf(j, rope, c);
}

void Qwen3Next::WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const {
  WriteCommonHf(c, j);
  j["intermediate_size"] = c.intermediate_size;
  j["norm_topk_prob"] = true;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = nlohmann::json::array();
  j["partial_rotary_factor"] = static_cast<double>(c.RotaryDim()) / c.head_dim;
  if (const int interval = IntervalOf(c.layer_linear); interval > 0)
    j["full_attention_interval"] = interval;
}

// llama.cpp's qwen3next graph multiplies in the routed and shared experts' output scales
// (and attention's, as every family), not those of the DeltaNet's projections.
TensorNames Qwen3Next::HfTensorNames() const {
  TensorNames n;
  n.expert_gate_scale = "mlp.experts.gate_proj.scale";
  n.expert_up_scale = "mlp.experts.up_proj.scale";
  n.expert_down_scale = "mlp.experts.down_proj.scale";
  n.shared_gate_scale = "mlp.shared_expert.gate_proj.scale";
  n.shared_up_scale = "mlp.shared_expert.up_proj.scale";
  n.shared_down_scale = "mlp.shared_expert.down_proj.scale";
  return n;
}

std::vector<std::string_view> Qwen3Next::LlamaCppArchKeys() const {
  return {"expert_feed_forward_length",
          "expert_shared_feed_forward_length",
          "attention.layer_norm_rms_epsilon",
          "ssm.conv_kernel",
          "ssm.inner_size",
          "ssm.state_size",
          "ssm.time_step_rank",
          "ssm.group_count",
          "attention.recurrent_layers",
          "full_attention_interval"};
}

  // llama.cpp sizes the DeltaNet from the ssm.* keys (head_k_dim = head_v_dim =
  // ssm.state_size, key heads ssm.group_count, value heads ssm.time_step_rank), marks its
  // layers by attention.recurrent_layers or else full_attention_interval (default 4), and
  // stores the norms with the 1 added.
void Qwen3Next::ReadGgufConfig(const GgufFile& f, ModelConfig& c) const {
  const gguf_keys::ArchKeys kKeys = Keys();
  // The converter appends the MTP layers as the last blocks (never run, as in llama.cpp).
  const int nextn = kKeys.Int(f, "nextn_predict_layers", 0);
  Check(nextn < c.num_layers, f.path(), ": ", kKeys.Key("nextn_predict_layers"), " (", nextn,
        ") leaves no layers of block_count ", c.num_layers);
  c.num_layers -= nextn;
  c.num_nextn_predict_layers = nextn;
  GatedDeltaNet g;
  g.conv_kernel = kKeys.PositiveInt(f, "ssm.conv_kernel");
  g.k_head_dim = kKeys.PositiveInt(f, "ssm.state_size");
  g.num_k_heads = kKeys.PositiveInt(f, "ssm.group_count");
  g.num_v_heads = kKeys.PositiveInt(f, "ssm.time_step_rank");
  g.v_head_dim = g.k_head_dim;
  const int inner = kKeys.PositiveInt(f, "ssm.inner_size");
  Check(inner == g.num_v_heads * g.v_head_dim, f.path(), ": ", kKeys.Key("ssm.inner_size"), " (",
        inner, ") must be ", kKeys.Key("ssm.time_step_rank"), " x ", kKeys.Key("ssm.state_size"),
        " (", g.num_v_heads * g.v_head_dim, "), as llama.cpp sizes the value heads");
  c.delta_net = g;
  // llama.cpp reads the interval only without recurrent_layers; read here either way, so
  // that the file's keys count as understood.
  const int interval = kKeys.Int(f, "full_attention_interval", 4);
  if (kKeys.Has(f, "attention.recurrent_layers")) {
    // An array of bool as llama.cpp's converter writes it (integers are read too).
    const GgufValue& v = f.Get(kKeys.Key("attention.recurrent_layers"));
    std::vector<int64_t> flags;
    if (v.is_array() && v.array_type() == GgufType::kBool)
      flags.assign(v.raw_array().begin(), v.raw_array().end());
    else
      flags = v.AsIntArray();
    Check(static_cast<int>(flags.size()) >= c.num_layers, f.path(), ": ",
          kKeys.Key("attention.recurrent_layers"), " has ", flags.size(), " entries for ",
          c.num_layers, " layers");
    c.layer_linear.assign(flags.begin(), flags.begin() + c.num_layers);
  } else {
    Check(interval >= 1, f.path(), ": ", kKeys.Key("full_attention_interval"), " must be >= 1");
    c.layer_linear = IntervalLayers(c.num_layers, interval);
  }
  const int rot = kKeys.Int(f, "rope.dimension_count", c.head_dim);
  c.rope_dim = rot == c.head_dim ? 0 : rot;
  c.shared_expert_intermediate_size = kKeys.Uniform(f, "expert_shared_feed_forward_length", 0);
  SetQwen3NextAttention(c);
  c.norm_weight_offset = 0.0f;
}

void Qwen3Next::WriteGgufConfig(const ModelConfig& c, GgufWriter& w) const {
  const gguf_keys::ArchKeys kKeys = Keys();
  const GatedDeltaNet& g = *c.delta_net;
  kKeys.SetU32(w, "ssm.conv_kernel", g.conv_kernel);
  kKeys.SetU32(w, "ssm.state_size", g.k_head_dim);
  kKeys.SetU32(w, "ssm.group_count", g.num_k_heads);
  kKeys.SetU32(w, "ssm.time_step_rank", g.num_v_heads);
  kKeys.SetU32(w, "ssm.inner_size", static_cast<uint32_t>(g.value_dim()));
  std::vector<uint8_t> flags(c.layer_linear.begin(), c.layer_linear.end());
  w.Set(kKeys.Key("attention.recurrent_layers"),
        GgufValue::NumericArray(GgufType::kBool, flags.size(), flags));
  if (const int interval = IntervalOf(c.layer_linear); interval > 0)
    kKeys.SetU32(w, "full_attention_interval", interval);
  kKeys.SetU32(w, "rope.dimension_count", c.RotaryDim());
  if (c.shared_expert_intermediate_size > 0)
    kKeys.SetU32(w, "expert_shared_feed_forward_length", c.shared_expert_intermediate_size);
}

void Qwen3Next::GgufTensorNames(gguf_map::ArchNames& n) const {
  MlpGateGgufNames(n, "mlp.shared_expert.");
  n.layer.push_back({"mlp.shared_expert_gate", "ffn_gate_inp_shexp"});
  for (gguf_map::NamePair& p : n.layer)  // llama.cpp's qwen3next names it so.
    if (p.hf == "post_attention_layernorm") p.gguf = "post_attention_norm";
  n.layer.push_back({"linear_attn.in_proj_qkvz", "ssm_in"});
  n.layer.push_back({"linear_attn.in_proj_qkv", "attn_qkv"});
  n.layer.push_back({"linear_attn.in_proj_z", "attn_gate"});
  n.layer.push_back({"linear_attn.in_proj_ba", "ssm_ba"});
  n.layer.push_back({"linear_attn.conv1d", "ssm_conv1d"});
  n.layer.push_back({"linear_attn.norm", "ssm_norm"});
  n.layer.push_back({"linear_attn.out_proj", "ssm_out"});
}

// Qwen3-Next-80B-A3B (Instruct and Thinking share the shape).
ModelConfig Qwen3Next::PublishedConfig() const {
  ModelConfig c = BaseConfig(arch());
  c.vocab_size = 151936;
  c.hidden_size = 2048;
  c.num_layers = 48;
  c.num_heads = 16;
  c.num_kv_heads = 2;
  c.head_dim = 256;
  c.rope_dim = 64;
  c.rope_theta = 1e7f;
  c.rms_norm_eps = 1e-6f;
  c.max_position_embeddings = 262144;
  c.num_experts = 512;
  c.num_experts_per_tok = 10;
  c.moe_intermediate_size = 512;
  c.shared_expert_intermediate_size = 512;
  c.intermediate_size = 5120;
  SetQwen3NextAttention(c);
  c.norm_weight_offset = 1.0f;
  c.delta_net = GatedDeltaNet{16, 32, 128, 128, 4, false};
  c.layer_linear = IntervalLayers(c.num_layers, 4);
  c.bos_token_id = 151643;
  c.eos_token_ids = {151645};
  return c;
}

// ShrinkToSize keeps widths it knows; the DeltaNet's and the layer pattern are set here:
// tiny has 4 layers (three DeltaNet, one attention), small 8.
ModelConfig Qwen3Next::RandomConfig(ModelSize size) const {
  ModelConfig c = ShrinkToSize(PublishedConfig(), size);
  if (size == ModelSize::kFull) return c;
  c.rope_dim = c.head_dim / 4;
  if (size == ModelSize::kTiny) {
    c.num_layers = 4;
    c.delta_net = GatedDeltaNet{2, 4, 16, 16, 4, false};
  } else {
    c.delta_net = GatedDeltaNet{8, 16, 64, 64, 4, false};
  }
  c.layer_linear = IntervalLayers(c.num_layers, 4);
  return c;
}

// Attention biases: none in the published checkpoints (config.json refuses them), but
// llama.cpp's graph adds them when a file has them (its own toy files do).
void Qwen3Next::Validate(const ModelConfig& c) const {
  Check(c.delta_net.has_value() && c.attention_output_gate && c.qk_norm && c.qk_norm_per_head,
        "config: ", names().model_type,
        " needs Gated DeltaNet layers, gated attention and per-head q/k norms");
}

const Family& Qwen3NextFamily() {
  static const Qwen3Next family;
  return family;
}

}  // namespace moex
