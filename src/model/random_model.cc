#include "model/random_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/quant_format.h"
#include "io/gguf_file.h"
#include "io/safetensors_writer.h"
#include "model/arch/family.h"
#include "model/gguf_model.h"
#include "model/gpt_oss_weights.h"
#include "model/hf_checkpoint.h"
#include "model/hf_fp8.h"
#include "model/hf_mxfp4.h"
#include "model/qwen35_weights.h"
#include "model/tensor_names.h"
#include "text/byte_tokenizer_json.h"
#include "text/tokenizer.h"

namespace moex {

namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashName(const std::string& name, uint64_t seed) {
  uint64_t h = SplitMix(seed);
  for (unsigned char ch : name) h = SplitMix(h ^ ch);
  return h;
}

// Value i of a tensor: uniform on [center - spread, center + spread].
struct Distribution {
  float center = 0.0f;
  float spread = 0.0f;
};

// Value i of a tensor as drawn, before it is stored in `dtype`.
float RandomValue(uint64_t tensor_seed, Distribution dist, size_t i) {
  const uint64_t r = SplitMix(tensor_seed + i);
  const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return dist.center + dist.spread * (2.0f * u - 1.0f);
}

ByteFill RandomFill(DType dtype, uint64_t tensor_seed, Distribution dist) {
  return [=](size_t offset, std::span<std::byte> out) {
    const size_t elem = DTypeBytes(dtype, 1);
    const size_t first = offset / elem;
    const size_t count = out.size() / elem;
    for (size_t i = 0; i < count; ++i) {
      const float v = RandomValue(tensor_seed, dist, first + i);
      if (dtype == DType::kF32) {
        std::memcpy(out.data() + i * 4, &v, 4);
      } else {
        const uint16_t h = dtype == DType::kBF16 ? F32ToBF16(v) : F32ToF16(v);
        std::memcpy(out.data() + i * 2, &h, 2);
      }
    }
  };
}

// The block-scaled FP8 form (model/hf_fp8.h) of a [rows, cols] matrix drawn in `dtype` as
// RandomFill would: per block of `block` x `block`, scale = amax / 448 (1 for an all-zero
// block) and code = e4m3(value / scale). Returns the codes and the f32 scales.
std::pair<std::shared_ptr<std::vector<uint8_t>>, std::shared_ptr<std::vector<float>>> RandomFp8(
    DType dtype, uint64_t tensor_seed, Distribution dist, int64_t rows, int64_t cols,
    int64_t block) {
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = RandomValue(tensor_seed, dist, i);
    values[i] = dtype == DType::kBF16  ? BF16ToF32(F32ToBF16(v))
                : dtype == DType::kF16 ? F16ToF32(F32ToF16(v))
                                       : v;
  }
  const int64_t br = (rows + block - 1) / block, bc = (cols + block - 1) / block;
  auto scales = std::make_shared<std::vector<float>>(static_cast<size_t>(br * bc), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& amax = (*scales)[static_cast<size_t>((r / block) * bc + c / block)];
      amax = std::max(amax, std::fabs(values[static_cast<size_t>(r * cols + c)]));
    }
  for (float& s : *scales) s = s > 0 ? s / 448.0f : 1.0f;
  auto codes = std::make_shared<std::vector<uint8_t>>(values.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r * cols + c);
      (*codes)[i] =
          FloatToFp8E4M3(values[i] / (*scales)[static_cast<size_t>((r / block) * bc + c / block)]);
    }
  return {codes, scales};
}

// HF's MXFP4 form (model/hf_mxfp4.h) of a fused expert tensor [E, K, R] drawn in `dtype` as
// RandomFill would: [E, R, K/32] blocks of 32 values along K, quantised with moex's MXFP4
// encoder (as a GGUF of the same weights would be), as the _blocks tensor or the _scales.
ByteFill RandomMxfp4Fill(DType dtype, uint64_t tensor_seed, Distribution dist,
                         std::array<int64_t, 3> ekr, bool scales) {
  return [=](size_t offset, std::span<std::byte> out) {
    const int64_t K = ekr[1], R = ekr[2], row_blocks = K / 32;
    const size_t unit = scales ? 1 : kHfMxfp4BlockBytes;
    for (size_t i = 0; i < out.size() / unit; ++i) {
      const auto q = static_cast<int64_t>(offset / unit + i);
      const int64_t e = q / (R * row_blocks), r = q / row_blocks % R, b = q % row_blocks;
      float values[32];
      for (int64_t t = 0; t < 32; ++t) {
        const float v =
            RandomValue(tensor_seed, dist, static_cast<size_t>((e * K + 32 * b + t) * R + r));
        values[t] = dtype == DType::kBF16  ? BF16ToF32(F32ToBF16(v))
                    : dtype == DType::kF16 ? F16ToF32(F32ToF16(v))
                                           : v;
      }
      uint8_t block[kGgmlMxfp4BlockBytes], codes[kHfMxfp4BlockBytes], scale;
      Quantize(QuantFormat::kMXFP4, values, 32, block);
      GgmlToHfMxfp4Block(block, codes, &scale);
      if (scales)
        out[i] = static_cast<std::byte>(scale);
      else
        std::memcpy(out.data() + i * unit, codes, unit);
    }
  };
}

void WriteJson(const std::filesystem::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();
  Check(static_cast<bool>(out), "cannot write ", path.string());
}

// Writes the HF checkpoint files (weights, config.json, generation_config.json) into dir.
void WriteHfCheckpoint(const ModelConfig& c, const SafetensorsWriter& writer,
                       const RandomModelOptions& o, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  writer.WriteCheckpoint(dir, o.max_shard_bytes);
  nlohmann::json config = c.ToHfJson();
  config["torch_dtype"] = o.dtype == DType::kBF16  ? "bfloat16"
                          : o.dtype == DType::kF16 ? "float16"
                                                   : "float32";
  if (o.hf_fp8_block > 0)
    config["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "float8_e4m3fn"},
                                     {"activation_scheme", "dynamic"},
                                     {"weight_block_size", {o.hf_fp8_block, o.hf_fp8_block}}};
  // As openai/gpt-oss publishes it: everything but the routed experts stays unquantised.
  if (o.hf_mxfp4)
    config["quantization_config"] = {{"quant_method", "mxfp4"},
                                     {"modules_to_not_convert",
                                      {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"}}};
  WriteJson(fs::path(dir) / "config.json", config);
  nlohmann::json gen = {{"do_sample", false}};
  if (c.bos_token_id >= 0) gen["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty()) gen["eos_token_id"] = c.eos_token_ids;
  WriteJson(fs::path(dir) / "generation_config.json", gen);
}

// GGUF goes through a temporary HF checkpoint so that the one HF -> GGUF converter (the one
// `moex` also uses for real checkpoints) defines the mapping.
void WriteRandomModelGguf(const ModelConfig& c, const SafetensorsWriter& writer,
                          const RandomModelOptions& o) {
  namespace fs = std::filesystem;
  const std::string temp = o.out + ".hf-tmp";
  fs::remove_all(temp);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{temp};
  WriteHfCheckpoint(c, writer, o, temp);
  auto hf = HfCheckpoint::Open(temp);
  GgufWriteOptions gguf;
  if (hf->has_generation_config())
    gguf.sampling = SamplingDefaults::FromGenerationConfig(hf->generation_config());
  std::unique_ptr<WeightSource> checkpoint = c.arch == Arch::kGptOss
                                                 ? WrapGptOssHfWeights(std::move(hf), c)
                                                 : std::unique_ptr<WeightSource>(std::move(hf));
  if (c.arch == Arch::kQwen35Moe) checkpoint = WrapQwen35HfWeights(std::move(checkpoint), c);
  std::unique_ptr<GgufFile> vocab;
  if (!o.gguf_vocab.empty()) vocab = std::make_unique<GgufFile>(o.gguf_vocab);
  gguf.quantize = o.gguf_type;
  gguf.q4_k_m = o.gguf_q4_k_m;
  WriteGgufModel(c, *checkpoint, vocab.get(), o.out, gguf);
}

}  // namespace

LongRope MakeLongRope(int head_dim, int max_position_embeddings, int original) {
  Check(original > 0 && head_dim >= 2, "longrope: need original_max_position_embeddings > 0");
  LongRope lr;
  lr.original_max_position_embeddings = original;
  const int half = head_dim / 2;
  const double ratio = std::max(1.0, static_cast<double>(max_position_embeddings) / original);
  for (int i = 0; i < half; ++i) {
    const double x = half > 1 ? static_cast<double>(i) / (half - 1) : 0.0;
    // Low frequencies (high i) are stretched most, as in published LongRoPE factors.
    lr.short_factor.push_back(static_cast<float>(1.0 + 0.5 * x * x));
    lr.long_factor.push_back(static_cast<float>(1.0 + (ratio - 1.0) * x * x * x));
  }
  lr.short_mscale = 1.0f;
  // HF's LongRoPE attention factor for this ratio (Phi-3.5-MoE publishes its own value).
  lr.long_mscale = static_cast<float>(LongRopeAttentionFactor(max_position_embeddings, original));
  return lr;
}

ModelConfig WithLongRope(ModelConfig c, int original) {
  if (!FamilyOf(c.arch).features().longrope) return c;
  c.longrope = MakeLongRope(c.head_dim, c.max_position_embeddings, original);
  // The published shape: long_mscale as Phi-3.5-MoE-instruct's config.json.
  if (c.hidden_size == 4096 && c.max_position_embeddings == 131072 && original == 4096)
    c.longrope->long_mscale = 1.243163121016122f;
  c.sliding_window = c.max_position_embeddings;
  return c;
}

ModelSize ParseModelSize(const std::string& name) {
  if (name == "tiny") return ModelSize::kTiny;
  if (name == "small") return ModelSize::kSmall;
  if (name == "full") return ModelSize::kFull;
  Fail("unknown model size '", name, "' (expected tiny, small or full)");
}

ModelConfig RandomModelConfig(Arch arch, ModelSize size) {
  return FamilyOf(arch).RandomConfig(size);
}

ModelConfig ShrinkToSize(ModelConfig c, ModelSize size) {
  if (size == ModelSize::kFull) return WithLongRope(c, 4096);
  const int published_moe_intermediate = c.moe_intermediate_size;

  // Smaller shapes keep the topology (norms, biases, shared/dense layers, GQA ratio) and
  // the routing fan-out, and shrink widths and depth.
  const int gqa = c.num_heads / c.num_kv_heads;
  if (size == ModelSize::kSmall) {
    c.hidden_size = 1024; c.num_heads = 16; c.head_dim = 64; c.num_layers = std::min(c.num_layers, 8);
    c.moe_intermediate_size = std::max(c.moe_intermediate_size / 4, 64);
  } else {  // Tiny: fast enough for a double-precision reference in unit tests.
    c.vocab_size = 512; c.hidden_size = 64; c.num_heads = 4; c.head_dim = 16; c.num_layers = 3;
    c.num_experts = std::min(c.num_experts, 16);
    c.num_experts_per_tok = std::min(c.num_experts_per_tok, c.num_experts / 2);
    c.moe_intermediate_size = 32;
    c.max_position_embeddings = 512;
    c.eos_token_ids = {2};
    c.bos_token_id = c.bos_token_id >= 0 ? 1 : -1;
  }
  c.num_kv_heads = std::max(1, c.num_heads / gqa);
  if (c.shared_expert_intermediate_size > 0)
    c.shared_expert_intermediate_size =
        c.shared_expert_intermediate_size * c.moe_intermediate_size / published_moe_intermediate;
  if (c.intermediate_size > 0) c.intermediate_size = 4 * c.moe_intermediate_size;
  if (c.first_k_dense_replace > 0) c.first_k_dense_replace = 1;
  if (c.rope_dim > 0) c.rope_dim = c.head_dim / 2;  // GLM's and MiniMax-M2's half.
  c.num_nextn_predict_layers = 0;  // No MTP tensors are written.
  // Small originals let tests and quick runs cross LongRoPE's short/long switch cheaply.
  return WithLongRope(c, size == ModelSize::kTiny ? 32 : 512);
}

namespace {

// A model that ships a tokenizer takes its size and special ids: a larger vocabulary than
// the embedding's would be refused when loaded, and its end-of-sequence id must stop
// generation.
void FitToTokenizer(int vocab, int bos, const std::vector<int>& eos, ModelConfig* c) {
  c->vocab_size = std::max(c->vocab_size, vocab);
  if (bos >= 0) c->bos_token_id = bos;
  if (!eos.empty()) c->eos_token_ids = eos;
}

}  // namespace

void WriteRandomModel(const RandomModelOptions& o) {
  namespace fs = std::filesystem;
  ModelConfig c = o.config;
  if (!o.gguf_vocab.empty()) {
    const GgufFile vocab(o.gguf_vocab);
    const std::vector<int> eos = vocab.Find("tokenizer.ggml.eos_token_id")
                                     ? std::vector<int>{static_cast<int>(
                                           vocab.GetInt("tokenizer.ggml.eos_token_id"))}
                                     : std::vector<int>{};
    FitToTokenizer(static_cast<int>(vocab.GetStringArray("tokenizer.ggml.tokens").size()),
                   static_cast<int>(vocab.GetInt("tokenizer.ggml.bos_token_id", -1)), eos, &c);
  }
  if (!o.tokenizer_json.empty()) {
    const auto tok = LoadTokenizer(o.tokenizer_json);
    FitToTokenizer(tok->vocab_size(), tok->bos_id(),
                   std::vector<int>(tok->eos_ids().begin(), tok->eos_ids().end()), &c);
  }
  c.Validate();
  Check(o.dtype == DType::kBF16 || o.dtype == DType::kF16 || o.dtype == DType::kF32,
        "random-model: dtype must be bf16, f16 or f32");
  Check(o.format == "hf" || o.format == "gguf", "random-model: format must be hf or gguf");
  Check(!o.gguf_type || o.format == "gguf", "random-model: --gguf-type needs --format gguf");
  Check(!o.gguf_type || IsBlockQuantized(*o.gguf_type), "random-model: --gguf-type must be ",
        "a block format such as q8_0, q4_K or mxfp4 (use --dtype for f32, f16 or bf16)");
  Check(!o.hf_mxfp4 || c.arch == Arch::kGptOss, "random-model: --hf-mxfp4 applies to gpt_oss");
  Check(!o.hf_mxfp4 || o.format == "hf", "random-model: --hf-mxfp4 writes an HF checkpoint; ",
        "for an MXFP4 GGUF use --format gguf --gguf-type mxfp4");
  Check(!o.hf_mxfp4 || (c.hidden_size % 32 == 0 && c.moe_intermediate_size % 32 == 0),
        "random-model: --hf-mxfp4 needs hidden_size and moe_intermediate_size to be multiples "
        "of 32");
  Check(o.hf_fp8_block >= 0 && o.hf_fp8_block <= 4096,
        "random-model: the FP8 block size must be in 1..4096");
  Check(o.hf_fp8_block == 0 || (o.format == "hf" && !o.hf_mxfp4 && c.arch != Arch::kGptOss),
        "random-model: --hf-fp8 writes an HF checkpoint (not gpt_oss, whose experts are MXFP4)");

  SafetensorsWriter writer;
  const TensorNames n = TensorNamesFor(c);
  const int64_t d = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  // Qwen3.5 keeps the text model under model.language_model. (model/qwen35_weights.h).
  const bool qwen35 = c.arch == Arch::kQwen35Moe;
  auto stored = [&](const std::string& name) {
    return qwen35 && name.rfind("model.", 0) == 0 ? "model.language_model." + name.substr(6) : name;
  };
  auto add = [&](const std::string& name, std::vector<int64_t> shape, Distribution dist) {
    writer.Add(stored(name), o.dtype, shape, RandomFill(o.dtype, HashName(name, o.seed), dist));
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float gain = 1.0f) {
    const Distribution dist{0.0f, gain * std::sqrt(3.0f / static_cast<float>(cols))};
    // The router and the LM head stay unquantised, as in DeepSeek-V3's checkpoints.
    if (o.hf_fp8_block == 0 || name == n.lm_head || name.ends_with(n.router))
      return add(name, {rows, cols}, dist);
    const auto [codes, scales] =
        RandomFp8(o.dtype, HashName(name, o.seed), dist, rows, cols, o.hf_fp8_block);
    writer.AddBytes(
        stored(name), {rows, cols},
        [codes](size_t offset, std::span<std::byte> out) {
          std::memcpy(out.data(), codes->data() + offset, out.size());
        },
        "F8_E4M3");
    const int64_t blocks_r = (rows + o.hf_fp8_block - 1) / o.hf_fp8_block;
    const int64_t blocks_c = (cols + o.hf_fp8_block - 1) / o.hf_fp8_block;
    writer.Add(stored(name) + "_scale_inv", DType::kF32, {blocks_r, blocks_c},
               [scales](size_t offset, std::span<std::byte> out) {
                 std::memcpy(out.data(),
                             reinterpret_cast<const std::byte*>(scales->data()) + offset,
                             out.size());
               });
  };
  // Zero-centred norms (norm_weight_offset) store w - offset, so draws center on 1 - offset.
  auto norm = [&](const std::string& name, int64_t size) {
    add(name, {size}, {1.0f - c.norm_weight_offset, 0.2f});
  };
  auto bias = [&](const std::string& name, int64_t size) { add(name, {size}, {0.0f, 0.2f}); };
  const bool layer_norm = c.norm == NormKind::kLayerNorm;
  auto layer = [](int l, const std::string& name) { return TensorNames::Layer(l, name); };

  add(n.embed, {c.vocab_size, d}, {0.0f, 1.0f});
  for (int l = 0; l < c.num_layers; ++l) {
    norm(layer(l, n.attn_norm), d);
    if (layer_norm) bias(layer(l, n.attn_norm_bias), d);
    if (c.IsLinearLayer(l)) {  // Gated DeltaNet: Qwen3.5's four projections, or HF's grouped two.
      const GatedDeltaNet& g = *c.delta_net;
      if (qwen35) {
        matrix(layer(l, n.gdn_qkv), g.conv_dim(), d);
        matrix(layer(l, n.gdn_z), g.value_dim(), d);
        matrix(layer(l, n.gdn_b), g.num_v_heads, d);
        matrix(layer(l, n.gdn_a), g.num_v_heads, d);
      } else {
        matrix(layer(l, n.gdn_qkvz), g.conv_dim() + g.value_dim(), d);
        matrix(layer(l, n.gdn_ba), 2 * g.num_v_heads, d);
      }
      add(layer(l, n.gdn_conv), {g.conv_dim(), 1, g.conv_kernel},
          {0.0f, std::sqrt(3.0f / static_cast<float>(g.conv_kernel))});
      add(layer(l, n.gdn_dt_bias), {g.num_v_heads}, {1.0f, 0.5f});
      // A = exp(A_log) between 0.4 and 2.7: decays that neither vanish nor stall.
      add(layer(l, n.gdn_a_log), {g.num_v_heads}, {0.5f, 0.5f});
      add(layer(l, n.gdn_norm), {g.v_head_dim}, {1.0f, 0.2f});
      matrix(layer(l, n.gdn_out), d, g.value_dim());
    } else if (c.mla) {  // MLA: low-rank q (or plain q), latent + k_pe, its up-projection.
      const Mla& m = *c.mla;
      const int64_t H = c.num_heads;
      if (m.q_lora_rank > 0) {
        matrix(layer(l, n.q_a), m.q_lora_rank, d);
        norm(layer(l, n.q_a_norm), m.q_lora_rank);
        matrix(layer(l, n.q_b), H * m.qk_head_dim(), m.q_lora_rank);
      } else {
        matrix(layer(l, n.q), H * m.qk_head_dim(), d);
      }
      matrix(layer(l, n.kv_a), m.cache_row(), d);
      norm(layer(l, n.kv_a_norm), m.kv_lora_rank);
      matrix(layer(l, n.kv_b), H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank);
      matrix(layer(l, n.o), d, H * m.v_head_dim);
    } else {
      matrix(layer(l, n.q), c.attention_output_gate ? 2 * q_dim : q_dim, d);
      matrix(layer(l, n.k), kv_dim, d);
      matrix(layer(l, n.v), kv_dim, d);
      matrix(layer(l, n.o), d, q_dim);
    }
    if (c.attention_bias) {
      bias(layer(l, n.q_bias), c.attention_output_gate ? 2 * q_dim : q_dim);
      bias(layer(l, n.k_bias), kv_dim);
      bias(layer(l, n.v_bias), kv_dim);
    }
    if (c.attention_out_bias) bias(layer(l, n.o_bias), d);
    if (c.attention_sinks) add(layer(l, n.sinks), {c.num_heads}, {0.0f, 2.0f});
    if (c.qk_norm && !c.IsLinearLayer(l)) {
      norm(layer(l, n.q_norm), c.qk_norm_per_head ? c.head_dim : q_dim);
      norm(layer(l, n.k_norm), c.qk_norm_per_head ? c.head_dim : kv_dim);
    }
    norm(layer(l, n.ffn_norm), d);
    if (layer_norm) bias(layer(l, n.ffn_norm_bias), d);
    if (!c.IsMoeLayer(l)) {
      matrix(layer(l, n.dense_gate), c.intermediate_size, d);
      matrix(layer(l, n.dense_up), c.intermediate_size, d);
      matrix(layer(l, n.dense_down), d, c.intermediate_size);
      continue;
    }
    // A larger router gain gives less uniform routing than unit-variance logits would.
    matrix(layer(l, n.router), c.num_experts, d, 4.0f);
    if (c.topk_method == TopKMethod::kNoauxTc)
      add(layer(l, n.router_bias), {c.num_experts}, {0.0f, 0.05f});
    if (c.router_bias) bias(layer(l, n.router_linear_bias), c.num_experts);
    if (c.arch == Arch::kGptOss) {
      // HF's fused layout (model/gpt_oss_weights.h): x @ W orientation, gate/up interleaved.
      // With hf_mxfp4, the same draws quantised (HF's MXFP4 form: Linear orientation).
      const int64_t E = c.num_experts, F = c.moe_intermediate_size;
      auto fused = [&](const std::string& name, int64_t K, int64_t R) {
        const Distribution dist{0.0f, std::sqrt(3.0f / static_cast<float>(K))};
        if (!o.hf_mxfp4) return add(name, {E, K, R}, dist);
        const uint64_t seed = HashName(name, o.seed);
        writer.AddBytes(name + "_blocks", {E, R, K / 32, kHfMxfp4BlockBytes},
                        RandomMxfp4Fill(o.dtype, seed, dist, {E, K, R}, false));
        writer.AddBytes(name + "_scales", {E, R, K / 32},
                        RandomMxfp4Fill(o.dtype, seed, dist, {E, K, R}, true));
      };
      fused(layer(l, "mlp.experts.gate_up_proj"), d, 2 * F);
      add(layer(l, "mlp.experts.gate_up_proj_bias"), {E, 2 * F}, {0.0f, 0.2f});
      fused(layer(l, "mlp.experts.down_proj"), F, d);
      add(layer(l, "mlp.experts.down_proj_bias"), {E, d}, {0.0f, 0.2f});
      continue;
    }
    // Qwen3.5's bf16 checkpoints fuse the experts: gate_up_proj [E, 2F, d] (gate rows first),
    // down_proj [E, d, F]; its FP8 releases store them one by one, each with its scales.
    const bool fused = qwen35 && o.hf_fp8_block == 0;
    if (fused) {
      const int64_t E = c.num_experts, F = c.moe_intermediate_size;
      add(layer(l, "mlp.experts.gate_up_proj"), {E, 2 * F, d},
          {0.0f, std::sqrt(3.0f / static_cast<float>(d))});
      add(layer(l, "mlp.experts.down_proj"), {E, d, F},
          {0.0f, std::sqrt(3.0f / static_cast<float>(F))});
    }
    for (int e = 0; e < c.num_experts && !fused; ++e) {
      matrix(n.Expert(l, e, ExpertMatrix::kGate), c.moe_intermediate_size, d);
      matrix(n.Expert(l, e, ExpertMatrix::kUp), c.moe_intermediate_size, d);
      matrix(n.Expert(l, e, ExpertMatrix::kDown), d, c.moe_intermediate_size);
    }
    if (c.shared_expert_intermediate_size > 0) {
      const int64_t f = c.shared_expert_intermediate_size;
      matrix(layer(l, n.shared_gate), f, d);
      matrix(layer(l, n.shared_up), f, d);
      matrix(layer(l, n.shared_down), d, f);
      if (c.shared_expert_gate) matrix(layer(l, n.shared_expert_gate), 1, d);
    }
  }
  norm(n.final_norm, d);
  if (layer_norm) bias(n.final_norm_bias, d);
  if (!c.tie_word_embeddings) matrix(n.lm_head, c.vocab_size, d);
  if (c.lm_head_bias) bias(n.lm_head_bias, c.vocab_size);

  if (o.format == "gguf") {
    Check(o.tokenizer_json.empty(), "random-model: --tokenizer applies to hf; use --gguf-vocab");
    WriteRandomModelGguf(c, writer, o);
    return;
  }
  writer.SetMetadata("format", "pt");
  // A directory this call creates is removed again if writing fails (no empty or half
  // model directory is left behind).
  const bool existed = fs::exists(o.out);
  try {
    WriteHfCheckpoint(c, writer, o, o.out);
    if (!o.tokenizer_json.empty()) {
      fs::copy_file(o.tokenizer_json, fs::path(o.out) / "tokenizer.json",
                    fs::copy_options::overwrite_existing);
    } else if (o.byte_tokenizer) {
      const ByteTokenizerFiles files =
          ByteLevelTokenizerFor(c.vocab_size, c.bos_token_id, c.eos_token_ids);
      WriteJson(fs::path(o.out) / "tokenizer.json", files.tokenizer);
      WriteJson(fs::path(o.out) / "tokenizer_config.json", files.config);
    }
  } catch (...) {
    std::error_code ec;
    if (!existed) fs::remove_all(o.out, ec);
    throw;
  }
}

}  // namespace moex
