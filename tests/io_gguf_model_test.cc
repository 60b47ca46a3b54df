#include "model/gguf_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf_format.h"
#include "io/gguf_writer.h"
#include "model/hf_checkpoint.h"
#include "model/model.h"
#include "model/random_model.h"

#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

// HF-named tensors held in memory.
class MemoryWeights : public WeightSource {
 public:
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape, uint32_t seed) {
    TensorView t;
    t.name = name;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.nbytes = DTypeBytes(dtype, t.numel());
    auto& buf = buffers_[name];
    buf.resize(t.nbytes);
    std::mt19937 rng(seed);
    if (dtype == DType::kF32) {
      // Finite values so conversions compare equal.
      std::normal_distribution<float> dist;
      for (size_t i = 0; i < buf.size(); i += 4) {
        const float v = dist(rng);
        std::memcpy(&buf[i], &v, 4);
      }
    } else {
      for (size_t i = 0; i < buf.size(); i += 2) {
        const uint16_t v = static_cast<uint16_t>((rng() & 0x3fff) | 0x3000);  // Finite.
        std::memcpy(&buf[i], &v, 2);
      }
    }
    t.data = buf.data();
    views_[name] = t;
  }
  void Remove(const std::string& name) { views_.erase(name); }
  const TensorView* Find(const std::string& name) const override {
    auto it = views_.find(name);
    return it == views_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    for (const auto& [n, v] : views_) names.push_back(n);
    return names;
  }
  std::string Describe() const override { return "memory"; }

 private:
  std::map<std::string, std::vector<std::byte>> buffers_;
  std::map<std::string, TensorView> views_;
};

ModelConfig TinyConfig(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 16;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 500000.0f;
  c.max_position_embeddings = 2048;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  switch (arch) {
    case Arch::kMixtral:
      c.norm_topk_prob = true;
      break;
    case Arch::kPhiMoe:
      c.attention_bias = c.attention_out_bias = c.lm_head_bias = true;
      c.norm = NormKind::kLayerNorm;
      c.router = RouterKind::kSparseMixer;
      c.router_jitter_noise = 0.01;
      c.sliding_window = 2048;
      c.longrope = MakeLongRope(c.head_dim, c.max_position_embeddings, 64);
      c.longrope->short_mscale = 1.0625f;  // Not llama.cpp's attn_factor: must round trip.
      break;
    case Arch::kOlmoe:
      c.qk_norm = true;
      break;
    case Arch::kQwen2Moe:
      c.attention_bias = true;
      c.intermediate_size = 48;
      c.shared_expert_intermediate_size = 24;
      c.shared_expert_gate = true;
      break;
    case Arch::kQwen3Moe:
      c.head_dim = 16;  // != hidden / heads, so attention.key_length matters.
      c.qk_norm = c.qk_norm_per_head = true;
      c.norm_topk_prob = true;
      c.intermediate_size = 64;
      c.tie_word_embeddings = true;
      break;
    case Arch::kDeepseekMoe:
      c.attention_bias = true;  // Exercises the permutation of Q/K biases.
      c.intermediate_size = 48;
      c.first_k_dense_replace = 1;
      c.shared_expert_intermediate_size = 32;  // Two shared experts.
      c.routed_scaling_factor = 1.0f;
      break;
    case Arch::kDeepseekV2:
    case Arch::kDeepseekV3:
      break;  // MLA tensors have no place here: tests/deepseek_gguf_test.cc.
    case Arch::kGlm4Moe:
      break;  // Its gate and partial rotary: tests/glm4_moe_test.cc.
    case Arch::kGptOss:
      break;  // MLA / fused experts: tests/deepseek_gguf_test.cc, tests/gpt_oss_test.cc.
    case Arch::kMiniMaxM2:
      break;  // Its gate and partial rotary: tests/minimax_m2_test.cc.
    case Arch::kQwen3Next:
    case Arch::kQwen35Moe:
      break;  // Their Gated DeltaNet tensors: tests/qwen3_next_test.cc, qwen3_5_moe_test.cc.
    case Arch::kLlama4:
      break;  // Its MoE interleave and attention layers: tests/llama4_test.cc.
  }
  c.Validate();
  return c;
}

// Every HF tensor of `c`, in its architecture's naming.
MemoryWeights TinyWeights(const ModelConfig& c, DType dtype) {
  MemoryWeights w;
  uint32_t seed = 1;
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const int64_t f = c.moe_intermediate_size;
  const bool mixtral = c.arch == Arch::kMixtral || c.arch == Arch::kPhiMoe;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    w.Add(name, dtype, std::move(shape), seed++);
  };
  add("model.embed_tokens.weight", {c.vocab_size, h});
  add("model.norm.weight", {h});
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h});
  if (c.arch == Arch::kPhiMoe) {
    add("model.norm.bias", {h});
    add("lm_head.bias", {c.vocab_size});
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    if (c.arch == Arch::kPhiMoe) {
      add(p + "input_layernorm.bias", {h});
      add(p + "post_attention_layernorm.bias", {h});
      add(p + "self_attn.o_proj.bias", {h});
    }
    add(p + "self_attn.q_proj.weight", {q, h});
    add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h});
    add(p + "self_attn.o_proj.weight", {h, q});
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", {c.qk_norm_per_head ? c.head_dim : q});
      add(p + "self_attn.k_norm.weight", {c.qk_norm_per_head ? c.head_dim : kv});
    }
    if (!c.IsMoeLayer(l)) {
      add(p + "mlp.gate_proj.weight", {c.intermediate_size, h});
      add(p + "mlp.up_proj.weight", {c.intermediate_size, h});
      add(p + "mlp.down_proj.weight", {h, c.intermediate_size});
      continue;
    }
    const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
    add(moe + "gate.weight", {c.num_experts, h});
    for (int e = 0; e < c.num_experts; ++e) {
      const std::string x = moe + "experts." + std::to_string(e) + ".";
      add(x + (mixtral ? "w1" : "gate_proj") + ".weight", {f, h});
      add(x + (mixtral ? "w3" : "up_proj") + ".weight", {f, h});
      add(x + (mixtral ? "w2" : "down_proj") + ".weight", {h, f});
    }
    const int64_t s = c.shared_expert_intermediate_size;
    if (s > 0) {
      const std::string x =
          p + (c.arch == Arch::kQwen2Moe ? "mlp.shared_expert." : "mlp.shared_experts.");
      add(x + "gate_proj.weight", {s, h});
      add(x + "up_proj.weight", {s, h});
      add(x + "down_proj.weight", {h, s});
    }
    if (c.shared_expert_gate) add(p + "mlp.shared_expert_gate.weight", {1, h});
  }
  return w;
}

class GgufModelTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  moex::testing::TempDir temp_;  // Removed with the fixture.
  const fs::path dir_ = temp_.path();
};

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.ToHfJson().dump(), b.ToHfJson().dump());
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.qk_norm_per_head, b.qk_norm_per_head);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.norm_topk_prob, b.norm_topk_prob);
  EXPECT_EQ(a.routed_scaling_factor, b.routed_scaling_factor);
  EXPECT_EQ(a.shared_expert_gate, b.shared_expert_gate);
  EXPECT_EQ(a.moe_layer_freq, b.moe_layer_freq);
  EXPECT_EQ(a.norm, b.norm);
  EXPECT_EQ(a.router, b.router);
  EXPECT_EQ(a.router_jitter_noise, b.router_jitter_noise);
  EXPECT_EQ(a.attention_out_bias, b.attention_out_bias);
  EXPECT_EQ(a.lm_head_bias, b.lm_head_bias);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  ASSERT_EQ(a.longrope.has_value(), b.longrope.has_value());
  if (a.longrope) {
    EXPECT_EQ(a.longrope->short_factor, b.longrope->short_factor);
    EXPECT_EQ(a.longrope->long_factor, b.longrope->long_factor);
    EXPECT_EQ(a.longrope->short_mscale, b.longrope->short_mscale);
    EXPECT_EQ(a.longrope->long_mscale, b.longrope->long_mscale);
    EXPECT_EQ(a.longrope->original_max_position_embeddings,
              b.longrope->original_max_position_embeddings);
  }
}

TEST_F(GgufModelTest, RoundTripsEveryArchitectureAndDtypeBitExact) {
  for (Arch arch : {Arch::kMixtral, Arch::kPhiMoe, Arch::kOlmoe, Arch::kQwen2Moe, Arch::kQwen3Moe,
                    Arch::kDeepseekMoe}) {
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      SCOPED_TRACE(std::string(ArchName(arch)) + " " + DTypeName(dtype));
      const ModelConfig config = TinyConfig(arch);
      const MemoryWeights hf = TinyWeights(config, dtype);
      GgufWriteOptions options;
      options.f32_small_tensors = false;
      WriteGgufModel(config, hf, nullptr, Path("m.gguf"), options);

      GgufModel m = OpenGgufModel(Path("m.gguf"));
      EXPECT_EQ(m.file->GetString("general.architecture"), GgufArchName(arch));
      ExpectSameConfig(m.config, config);
      EXPECT_EQ(m.weights->Names(), hf.Names());
      for (const std::string& name : hf.Names()) {
        const TensorView& want = hf.Get(name);
        const TensorView& got = m.weights->Get(name, want.shape);
        EXPECT_EQ(got.name, name);
        EXPECT_EQ(got.dtype, want.dtype) << name;
        ASSERT_EQ(got.nbytes, want.nbytes) << name;
        EXPECT_EQ(std::memcmp(got.data, want.data, want.nbytes), 0) << name;
      }
      // Experts are stacked into one 3-D tensor per layer and matrix.
      const int moe_layer = config.first_k_dense_replace;
      const TensorView* exps =
          m.file->FindTensor("blk." + std::to_string(moe_layer) + ".ffn_down_exps.weight");
      ASSERT_NE(exps, nullptr);
      EXPECT_EQ(exps->shape,
                (std::vector<int64_t>{4, config.hidden_size, config.moe_intermediate_size}));
    }
  }
}

// An HF checkpoint's generation_config.json becomes llama.cpp's general.sampling.* keys, so
// the GGUF samples as the checkpoint did (Qwen3's published defaults, say).
TEST_F(GgufModelTest, SamplingDefaultsTravelAsGeneralSamplingKeys) {
  const ModelConfig config = TinyConfig(Arch::kOlmoe);
  const MemoryWeights hf = TinyWeights(config, DType::kF32);
  GenerationConfig g;
  g.do_sample = true;
  g.temperature = 0.6f;
  g.top_k = 20;
  g.top_p = 0.95f;
  g.repetition_penalty = 1.1f;
  GgufWriteOptions options;
  options.sampling = SamplingDefaults::FromGenerationConfig(g);
  WriteGgufModel(config, hf, nullptr, Path("s.gguf"), options);
  GgufFile f(Path("s.gguf"));
  EXPECT_FLOAT_EQ(static_cast<float>(f.GetFloat("general.sampling.temp")), 0.6f);
  EXPECT_EQ(f.GetInt("general.sampling.penalty_last_n"), -1);  // transformers: whole context.
  const SamplingDefaults d = SamplingDefaults::FromGguf(f);
  EXPECT_FLOAT_EQ(d.temperature, 0.6f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_FLOAT_EQ(d.top_p, 0.95f);
  EXPECT_FLOAT_EQ(d.min_p, 0.0f);
  EXPECT_FLOAT_EQ(d.repetition_penalty, 1.1f);
  EXPECT_EQ(d.repeat_last_n, -1);
  // Without them, nothing is written and the GGUF decodes greedily.
  WriteGgufModel(config, hf, nullptr, Path("n.gguf"));
  GgufFile n(Path("n.gguf"));
  EXPECT_EQ(n.Find("general.sampling.temp"), nullptr);
  EXPECT_EQ(SamplingDefaults::FromGguf(n).temperature, 0.0f);
}

TEST_F(GgufModelTest, PermutesQAndKLikeLlamaCpp) {
  const ModelConfig config = TinyConfig(Arch::kMixtral);
  const MemoryWeights hf = TinyWeights(config, DType::kF32);
  WriteGgufModel(config, hf, nullptr, Path("m.gguf"));
  GgufFile f(Path("m.gguf"));
  const int hd = config.head_dim;
  for (const char* which : {"q", "k"}) {
    const TensorView& src =
        hf.Get(std::string("model.layers.1.self_attn.") + which + "_proj.weight");
    const TensorView& dst = *f.FindTensor(std::string("blk.1.attn_") + which + ".weight");
    ASSERT_EQ(dst.shape, src.shape);
    // Within head h, GGUF row 2i+j holds HF row j*hd/2+i.
    for (int64_t r = 0; r < src.rows(); ++r) {
      const int64_t head = r / hd, i = (r % hd) / 2, j = r % 2;
      const int64_t from = head * hd + j * (hd / 2) + i;
      EXPECT_EQ(std::memcmp(dst.row(r), src.row(from), src.row_bytes()), 0) << which << r;
    }
  }
  // Other architectures keep HF order.
  const ModelConfig olmoe = TinyConfig(Arch::kOlmoe);
  const MemoryWeights hf2 = TinyWeights(olmoe, DType::kF32);
  WriteGgufModel(olmoe, hf2, nullptr, Path("o.gguf"));
  GgufFile o(Path("o.gguf"));
  const TensorView& src = hf2.Get("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(std::memcmp(o.FindTensor("blk.0.attn_q.weight")->data, src.data, src.nbytes), 0);
}

TEST_F(GgufModelTest, StoresSmallTensorsAsF32ForLlamaCpp) {
  const ModelConfig config = TinyConfig(Arch::kQwen2Moe);
  const MemoryWeights hf = TinyWeights(config, DType::kBF16);
  WriteGgufModel(config, hf, nullptr, Path("m.gguf"));
  GgufModel m = OpenGgufModel(Path("m.gguf"));
  EXPECT_EQ(m.file->GetInt("general.file_type"), 32);  // MOSTLY_BF16
  for (const std::string& name : hf.Names()) {
    const TensorView& want = hf.Get(name);
    const TensorView& got = m.weights->Get(name, want.shape);
    const bool small = want.shape.size() == 1 || name.ends_with("norm.weight") ||
                       name.ends_with("mlp.gate.weight") ||
                       name.ends_with("shared_expert_gate.weight");
    EXPECT_EQ(got.dtype, small ? DType::kF32 : DType::kBF16) << name;
    for (int64_t i = 0; i < want.numel(); ++i) {
      uint16_t h;
      std::memcpy(&h, want.data + 2 * i, 2);
      float g;
      if (got.dtype == DType::kF32) {
        std::memcpy(&g, got.data + 4 * i, 4);
      } else {
        uint16_t gh;
        std::memcpy(&gh, got.data + 2 * i, 2);
        g = BF16ToF32(gh);
      }
      ASSERT_EQ(g, BF16ToF32(h)) << name << " element " << i;
    }
  }
}

// A small tokenizer GGUF: tokens "t0".."t{n-1}", the last `pads` of them [PAD{i}].
void WriteTokenizer(const std::string& path, int n, int pads) {
  GgufWriter w;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int i = 0; i < n; ++i) {
    tokens.push_back(i >= n - pads ? "[PAD" + std::to_string(i) + "]" : "t" + std::to_string(i));
    scores.push_back(static_cast<float>(-i));
    types.push_back(i >= n - pads ? 4 : 1);
  }
  w.Set("general.architecture", GgufValue::String("gptneox"));
  w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray(tokens));
  w.Set("tokenizer.ggml.scores", GgufValue::F32Array(scores));
  w.Set("tokenizer.ggml.token_type", GgufValue::I32Array(types));
  w.Set("tokenizer.ggml.merges", GgufValue::StringArray({"t 0", "t 1"}));
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(0));
  w.Set("tokenizer.ggml.padding_token_id", GgufValue::U32(n - 1));
  w.Write(path);
}

TEST_F(GgufModelTest, CopiesTokenizerAndFitsItToTheVocabulary) {
  ModelConfig config = TinyConfig(Arch::kOlmoe);  // vocab 64.
  const MemoryWeights hf = TinyWeights(config, DType::kBF16);
  // Longer tokenizer whose tail is padding: trimmed. Padding id 69 falls outside: dropped.
  WriteTokenizer(Path("tok70.gguf"), 70, 10);
  {
    GgufFile tok(Path("tok70.gguf"));
    WriteGgufModel(config, hf, &tok, Path("m.gguf"));
    GgufModel m = OpenGgufModel(Path("m.gguf"));
    EXPECT_EQ(m.file->GetString("tokenizer.ggml.model"), "gpt2");
    EXPECT_EQ(m.file->GetStringArray("tokenizer.ggml.tokens").size(), 64u);
    EXPECT_EQ(m.file->GetFloatArray("tokenizer.ggml.scores").size(), 64u);
    EXPECT_EQ(m.file->GetIntArray("tokenizer.ggml.token_type").size(), 64u);
    EXPECT_EQ(m.file->GetStringArray("tokenizer.ggml.merges").size(), 2u);
    EXPECT_EQ(m.file->Find("tokenizer.ggml.padding_token_id"), nullptr);
    EXPECT_EQ(m.file->GetInt("tokenizer.ggml.bos_token_id"), 1);  // From the config.
    EXPECT_EQ(m.file->GetInt("olmoe.vocab_size"), 64);
    EXPECT_EQ(m.file->Find("general.name")->AsString(), "moex");
  }
  // Shorter tokenizer: padded with [PAD{i}] entries.
  WriteTokenizer(Path("tok50.gguf"), 50, 0);
  {
    GgufFile tok(Path("tok50.gguf"));
    WriteGgufModel(config, hf, &tok, Path("m.gguf"));
    GgufFile m(Path("m.gguf"));
    const auto& tokens = m.GetStringArray("tokenizer.ggml.tokens");
    ASSERT_EQ(tokens.size(), 64u);
    EXPECT_EQ(tokens[49], "t49");
    EXPECT_EQ(tokens[50], "[PAD50]");
    EXPECT_EQ(m.GetIntArray("tokenizer.ggml.token_type")[63], 5);
    EXPECT_EQ(m.GetFloatArray("tokenizer.ggml.scores")[63], -1000.0f);
  }
  // Dropping real tokens is an error.
  WriteTokenizer(Path("tok80.gguf"), 80, 4);
  GgufFile tok(Path("tok80.gguf"));
  try {
    WriteGgufModel(config, hf, &tok, Path("m.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not padding"), std::string::npos) << e.what();
  }
}

TEST_F(GgufModelTest, CopiesRealVocabulary) {
  const fs::path vocab = testing::SharedDataDir() / "gguf-vocab" / "ggml-vocab-gpt-neox.gguf";
  if (!fs::exists(vocab)) MOEX_SKIP_WITHOUT_SHARED_DATA(vocab);
  GgufFile tok(vocab.string());
  ModelConfig config = TinyConfig(Arch::kOlmoe);
  config.vocab_size = 50304;  // OLMoE's padded vocabulary, below the file's 50432 tokens.
  config.bos_token_id = -1;
  config.eos_token_ids = {50279};
  MemoryWeights hf = TinyWeights(config, DType::kBF16);
  WriteGgufModel(config, hf, &tok, Path("m.gguf"));
  GgufModel m = OpenGgufModel(Path("m.gguf"));
  EXPECT_EQ(m.config.vocab_size, 50304);
  EXPECT_EQ(m.config.eos_token_ids, std::vector<int>{50279});
  const auto& tokens = m.file->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 50304u);
  EXPECT_EQ(tokens[0], "<|endoftext|>");
  EXPECT_EQ(m.file->GetStringArray("tokenizer.ggml.merges"),
            tok.GetStringArray("tokenizer.ggml.merges"));
  // The vocabulary names no pre-tokenizer: the model names the one moex splits it with
  // (GPT-2's, as HF), so llama.cpp counts the same tokens rather than its 'default' ones.
  ASSERT_EQ(tok.Find("tokenizer.ggml.pre"), nullptr);
  EXPECT_EQ(m.file->GetString("tokenizer.ggml.pre"), "gpt-2");
}

// A Mixtral GGUF as llama.cpp's converter writes it: arch "llama", experts sized by
// feed_forward_length, legacy per-expert tensors in older files.
void WriteLlamaCppMixtral(const std::string& path, float freq_base) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  w.Set("llama.block_count", GgufValue::U32(1));
  w.Set("llama.context_length", GgufValue::U32(32768));
  w.Set("llama.embedding_length", GgufValue::U32(32));
  w.Set("llama.feed_forward_length", GgufValue::U32(64));
  w.Set("llama.attention.head_count", GgufValue::U32(4));
  w.Set("llama.attention.head_count_kv", GgufValue::U32(1));
  w.Set("llama.rope.freq_base", GgufValue::F32(freq_base));
  w.Set("llama.attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5f));
  w.Set("llama.expert_count", GgufValue::U32(2));
  w.Set("llama.expert_used_count", GgufValue::U32(2));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray(std::vector<std::string>(100, "x")));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
  std::vector<float> zeros(100 * 64);
  w.AddTensor("token_embd.weight", DType::kF32, {100, 32}, zeros.data());
  w.AddTensor("blk.0.ffn_gate_inp.weight", DType::kF32, {2, 32}, zeros.data());
  for (int e = 0; e < 2; ++e) {
    const std::string x = "." + std::to_string(e) + ".weight";
    w.AddTensor("blk.0.ffn_gate" + x, DType::kF32, {64, 32}, zeros.data());
    w.AddTensor("blk.0.ffn_up" + x, DType::kF32, {64, 32}, zeros.data());
    w.AddTensor("blk.0.ffn_down" + x, DType::kF32, {32, 64}, zeros.data());
  }
  w.Write(path);
}

TEST_F(GgufModelTest, ReadsLlamaCppMixtralMetadata) {
  WriteLlamaCppMixtral(Path("mixtral.gguf"), 1e6f);
  GgufModel m = OpenGgufModel(Path("mixtral.gguf"));
  EXPECT_EQ(m.config.arch, Arch::kMixtral);
  EXPECT_EQ(m.config.vocab_size, 100);
  EXPECT_EQ(m.config.moe_intermediate_size, 64);
  EXPECT_EQ(m.config.num_kv_heads, 1);
  EXPECT_EQ(m.config.head_dim, 8);
  EXPECT_EQ(m.config.max_position_embeddings, 32768);
  EXPECT_EQ(m.config.rope_theta, 1e6f);
  EXPECT_TRUE(m.config.tie_word_embeddings);
  EXPECT_TRUE(m.config.norm_topk_prob);
  EXPECT_EQ(m.config.eos_token_ids, std::vector<int>{2});
  EXPECT_NE(m.weights->Find("model.layers.0.block_sparse_moe.experts.1.w2.weight"), nullptr);
  EXPECT_EQ(m.weights->Get("model.layers.0.block_sparse_moe.experts.1.w3.weight").shape,
            (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(m.weights->Names().size(), 8u);
}

// A NaN, infinite, zero or negative rope.freq_base once gave garbage tokens silently.
TEST_F(GgufModelTest, NonFiniteOrNonPositiveRopeBaseIsRefused) {
  for (float base : {std::numeric_limits<float>::quiet_NaN(),
                     std::numeric_limits<float>::infinity(), 0.0f, -10000.0f}) {
    SCOPED_TRACE(base);
    WriteLlamaCppMixtral(Path("bad-rope.gguf"), base);
    try {
      OpenGgufModel(Path("bad-rope.gguf"));
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rope_theta"), std::string::npos) << e.what();
    }
  }
}

// Changes CopyGguf makes to a GGUF file.
struct GgufEdit {
  std::vector<std::pair<std::string, GgufValue>> keys;              // Set or replaced.
  std::map<std::string, std::vector<int64_t>> reshape;              // Same bytes, new shape.
  std::vector<std::pair<std::string, std::vector<int64_t>>> extra;  // Added, F32 zeros.
  std::vector<std::pair<std::string, std::vector<float>>> vectors;  // Added, F32 [n].
};

// A copy of the GGUF at `in` with `edit` applied (tensors copied as stored).
void CopyGguf(const std::string& in, const std::string& out, const GgufEdit& edit) {
  const GgufFile f(in);
  GgufWriter w;
  for (const auto& [k, v] : f.metadata()) w.Set(k, v);
  for (const auto& [k, v] : edit.keys) w.Set(k, v);
  for (const GgufTensorInfo& info : f.tensor_infos()) {
    const TensorView* t = f.FindTensor(info.name);
    const auto shape = edit.reshape.find(info.name);
    w.AddTensor(info.name, t->dtype, shape == edit.reshape.end() ? t->shape : shape->second,
                t->data);
  }
  static const std::vector<float> zeros(1 << 16);
  for (const auto& [name, shape] : edit.extra) w.AddTensor(name, DType::kF32, shape, zeros.data());
  for (const auto& [name, values] : edit.vectors)
    w.AddTensor(name, DType::kF32, {static_cast<int64_t>(values.size())}, values.data());
  w.Write(out);
}

void CopyGgufWithKey(const std::string& in, const std::string& out, const std::string& key,
                     GgufValue value) {
  GgufEdit edit;
  edit.keys.emplace_back(key, std::move(value));
  CopyGguf(in, out, edit);
}

// llama.cpp reads {arch}.expert_weights_scale only for DeepSeek (and GLM), where 0 means
// "not set"; other architectures never read it, so any value there leaves the model as it is.
TEST_F(GgufModelTest, ExpertWeightsScaleHasLlamaCppsMeaning) {
  const ModelConfig deepseek = TinyConfig(Arch::kDeepseekMoe);
  WriteGgufModel(deepseek, TinyWeights(deepseek, DType::kBF16), nullptr, Path("ds.gguf"));
  CopyGgufWithKey(Path("ds.gguf"), Path("ds0.gguf"), "deepseek.expert_weights_scale",
                  GgufValue::F32(0.0f));
  EXPECT_EQ(OpenGgufModel(Path("ds0.gguf")).config.routed_scaling_factor, 1.0f);
  CopyGgufWithKey(Path("ds.gguf"), Path("ds2.gguf"), "deepseek.expert_weights_scale",
                  GgufValue::F32(2.5f));
  EXPECT_EQ(OpenGgufModel(Path("ds2.gguf")).config.routed_scaling_factor, 2.5f);

  const ModelConfig olmoe = TinyConfig(Arch::kOlmoe);
  WriteGgufModel(olmoe, TinyWeights(olmoe, DType::kBF16), nullptr, Path("o.gguf"));
  CopyGgufWithKey(Path("o.gguf"), Path("o1.gguf"), "olmoe.expert_weights_scale",
                  GgufValue::F32(1.0f));
  EXPECT_EQ(OpenGgufModel(Path("o1.gguf")).config.routed_scaling_factor, 1.0f);
  CopyGgufWithKey(Path("o.gguf"), Path("o3.gguf"), "olmoe.expert_weights_scale",
                  GgufValue::F32(3.0f));
  EXPECT_EQ(OpenGgufModel(Path("o3.gguf")).config.routed_scaling_factor, 1.0f);
}

// llama.cpp computes with every tensor it knows, so a tensor moex would not read means a
// different model: the load fails naming it. Unknown names and known ones this architecture
// does not use here alike. The exception, .scale and .input_scale tensors llama.cpp loads
// but never applies: ScaleTensorsIgnored in tests/gguf_scale_tensors_test.cc.
TEST_F(GgufModelTest, TensorsMoexDoesNotReadAreRefusedByName) {
  const ModelConfig config = TinyConfig(Arch::kMixtral);
  WriteGgufModel(config, TinyWeights(config, DType::kBF16), nullptr, Path("m.gguf"));
  EXPECT_NO_THROW(LoadModel(Path("m.gguf")));
  const int64_t d = config.hidden_size;
  for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"rope_freqs.weight", {config.head_dim}},  // Read (below), but misshapen.
           {"blk.0.attn_q_norm.weight", {d}},
           {"blk.0.future_thing.weight", {d}}}) {
    SCOPED_TRACE(name);
    GgufEdit edit;
    edit.extra.emplace_back(name, shape);
    CopyGguf(Path("m.gguf"), Path("extra.gguf"), edit);
    try {
      LoadModel(Path("extra.gguf"));
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

// llama's rope_freqs.weight divides each RoPE frequency (Llama 3's scaling as a tensor): read
// as LongRoPE with one set of factors, and written back as rope_freqs.weight.
TEST_F(GgufModelTest, LlamaRopeFreqsAreFrequencyFactors) {
  const ModelConfig config = TinyConfig(Arch::kMixtral);
  WriteGgufModel(config, TinyWeights(config, DType::kBF16), nullptr, Path("m.gguf"));
  GgufEdit edit;
  std::vector<float> factors;
  for (int i = 0; i < config.head_dim / 2; ++i)
    factors.push_back(1.0f + 0.25f * static_cast<float>(i));
  edit.vectors.emplace_back("rope_freqs.weight", factors);
  CopyGguf(Path("m.gguf"), Path("freqs.gguf"), edit);
  const GgufModel gguf = OpenGgufModel(Path("freqs.gguf"));
  ASSERT_TRUE(gguf.config.longrope.has_value());
  const LongRope& lr = *gguf.config.longrope;
  EXPECT_EQ(lr.long_factor, factors);
  EXPECT_EQ(lr.short_factor, factors);
  EXPECT_EQ(lr.short_mscale, 1.0f);
  EXPECT_EQ(lr.long_mscale, 1.0f);
  const auto model = LoadModel(Path("freqs.gguf"));
  WriteGgufModel(model->config, *model->weights, nullptr, Path("again.gguf"));
  const GgufFile again(Path("again.gguf"));
  EXPECT_NE(again.FindTensorInfo("rope_freqs.weight"), nullptr);
  EXPECT_EQ(again.FindTensorInfo("rope_factors_long.weight"), nullptr);
  EXPECT_EQ(OpenGgufModel(Path("again.gguf")).config.longrope->long_factor, factors);
  // What they compute is checked against llama.cpp in llamacpp_archs_test (random factors).
  // A factor of 0 (an infinite frequency) is refused naming the tensor.
  GgufEdit zero;
  std::vector<float> bad = factors;
  bad[1] = 0.0f;
  zero.vectors.emplace_back("rope_freqs.weight", bad);
  CopyGguf(Path("m.gguf"), Path("zero.gguf"), zero);
  try {
    OpenGgufModel(Path("zero.gguf"));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_freqs.weight holds 0"), std::string::npos)
        << e.what();
  }
}

// Every {arch}.* key is read, or accepted at llama.cpp's default or where llama.cpp does not
// read it, or the load fails naming key and value.
TEST_F(GgufModelTest, KeysMoexDoesNotReadAreRefusedByName) {
  const ModelConfig config = TinyConfig(Arch::kMixtral);
  WriteGgufModel(config, TinyWeights(config, DType::kBF16), nullptr, Path("m.gguf"));
  const auto head_dim = static_cast<uint32_t>(config.head_dim);
  struct Case {
    std::string key;
    GgufValue value;
    bool loads;
  };
  const std::vector<Case> cases = {
      {"llama.rope.dimension_count", GgufValue::U32(head_dim), true},
      {"llama.rope.dimension_count", GgufValue::U32(head_dim / 2), false},
      {"llama.attention.value_length", GgufValue::U32(head_dim * 2), false},
      {"llama.rope.scaling.type", GgufValue::String("none"), true},
      // llama.cpp's default: linear with factor 0 (or 1) scales nothing.
      {"llama.rope.scaling.type", GgufValue::String("linear"), true},
      {"llama.rope.scaling.type", GgufValue::String("yarn"), false},
      {"llama.rope.scaling.factor", GgufValue::F32(4.0f), false},
      {"llama.rope.scaling.factor", GgufValue::F32(0.0f), true},
      {"llama.attention.causal", GgufValue::Bool(false), false},
      // Read by llama.cpp for every architecture: refused unless at its default.
      {"llama.expert_group_count", GgufValue::U32(0), true},
      {"llama.expert_group_count", GgufValue::U32(2), false},
      {"llama.rope.scaling.attn_factor", GgufValue::F32(1.0f), true},
      {"llama.rope.scaling.attn_factor", GgufValue::F32(2.0f), false},
      {"llama.embedding_length_out", GgufValue::U32(0), true},
      {"llama.embedding_length_out", GgufValue::U32(7), false},
      {"llama.attention.key_length_swa", GgufValue::U32(head_dim), true},
      {"llama.attention.key_length_swa", GgufValue::U32(head_dim * 2), false},
      {"llama.pooling_type", GgufValue::U32(4294967295u), true},
      {"llama.rope.scaling.finetuned", GgufValue::Bool(true), true},
      // Not read by llama.cpp for llama: no value changes its result (its writer stores
      // them all at its defaults; test-llama-archs' files carry ~110 such keys).
      {"llama.expert_gating_func", GgufValue::U32(2), true},
      {"llama.logit_scale", GgufValue::F32(2.0f), true},
      {"llama.leading_dense_block_count", GgufValue::U32(1), true},
      {"llama.expert_weights_norm", GgufValue::Bool(false), true},
      {"llama.attn_logit_softcapping", GgufValue::F32(50.0f), true},
      {"general.license", GgufValue::String("apache-2.0"), true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    CopyGgufWithKey(Path("m.gguf"), Path("k.gguf"), c.key, c.value);
    if (c.loads) {
      EXPECT_NO_THROW(OpenGgufModel(Path("k.gguf")));
      continue;
    }
    try {
      OpenGgufModel(Path("k.gguf"));
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.key), std::string::npos) << e.what();
    }
  }
}

// llama.cpp's converter writes Qwen2-MoE's shared-expert gate as a vector [d] (HF: [1, d]).
TEST_F(GgufModelTest, QwenSharedExpertGateAsAVector) {
  const ModelConfig config = TinyConfig(Arch::kQwen2Moe);
  WriteGgufModel(config, TinyWeights(config, DType::kF32), nullptr, Path("q.gguf"));
  GgufEdit edit;
  for (int l = 0; l < config.num_layers; ++l)
    if (config.IsMoeLayer(l))
      edit.reshape["blk." + std::to_string(l) + ".ffn_gate_inp_shexp.weight"] = {
          config.hidden_size};
  ASSERT_FALSE(edit.reshape.empty());
  CopyGguf(Path("q.gguf"), Path("q1d.gguf"), edit);
  const auto a = LoadModel(Path("q.gguf"));
  const auto b = LoadModel(Path("q1d.gguf"));
  for (int l = 0; l < config.num_layers; ++l) {
    const TensorView* ga = a->layers[l].shared_expert_gate;
    const TensorView* gb = b->layers[l].shared_expert_gate;
    ASSERT_EQ(ga == nullptr, gb == nullptr);
    if (ga == nullptr) continue;
    EXPECT_EQ(gb->shape, (std::vector<int64_t>{1, config.hidden_size}));
    EXPECT_EQ(std::memcmp(ga->data, gb->data, ga->nbytes), 0);
  }
}

TEST_F(GgufModelTest, ReadsLlamaCppPhiMoeMetadata) {
  // As llama.cpp's Phi-3 converter writes Phi-3.5-MoE: LongRoPE as the global F32 tensors
  // rope_factors_long/short, original_context_length and one attn_factor; no router jitter
  // and no short/long mscale (moex's own keys are absent here).
  auto write = [&](int64_t factor_len) {
    GgufWriter w;
    w.Set("general.architecture", GgufValue::String("phimoe"));
    w.Set("phimoe.block_count", GgufValue::U32(1));
    w.Set("phimoe.context_length", GgufValue::U32(131072));
    w.Set("phimoe.embedding_length", GgufValue::U32(32));
    w.Set("phimoe.feed_forward_length", GgufValue::U32(64));
    w.Set("phimoe.attention.head_count", GgufValue::U32(4));
    w.Set("phimoe.attention.head_count_kv", GgufValue::U32(1));
    w.Set("phimoe.attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5f));
    w.Set("phimoe.attention.sliding_window", GgufValue::U32(131072));
    w.Set("phimoe.rope.scaling.original_context_length", GgufValue::U32(4096));
    w.Set("phimoe.rope.scaling.attn_factor", GgufValue::F32(1.190238f));
    w.Set("phimoe.expert_count", GgufValue::U32(4));
    w.Set("phimoe.expert_used_count", GgufValue::U32(2));
    w.Set("tokenizer.ggml.tokens", GgufValue::StringArray(std::vector<std::string>(100, "x")));
    std::vector<float> values(100 * 64 * 4, 0.5f);
    w.AddTensor("token_embd.weight", DType::kF32, {100, 32}, values.data());
    w.AddTensor("output.weight", DType::kF32, {100, 32}, values.data());
    w.AddTensor("output.bias", DType::kF32, {100}, values.data());
    w.AddTensor("blk.0.attn_output.bias", DType::kF32, {32}, values.data());
    w.AddTensor("blk.0.ffn_gate_inp.weight", DType::kF32, {4, 32}, values.data());
    w.AddTensor("blk.0.ffn_gate_exps.weight", DType::kF32, {4, 64, 32}, values.data());
    w.AddTensor("rope_factors_long.weight", DType::kF32, {factor_len}, values.data());
    w.AddTensor("rope_factors_short.weight", DType::kF32, {factor_len}, values.data());
    w.Write(Path("phimoe.gguf"));
  };
  write(4);
  const ModelConfig c = ModelConfigFromGguf(GgufFile(Path("phimoe.gguf")));
  EXPECT_EQ(c.arch, Arch::kPhiMoe);
  EXPECT_EQ(c.norm, NormKind::kLayerNorm);
  EXPECT_EQ(c.router, RouterKind::kSparseMixer);
  EXPECT_DOUBLE_EQ(c.router_jitter_noise, 0.01);
  EXPECT_TRUE(c.attention_out_bias);
  EXPECT_TRUE(c.lm_head_bias);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.sliding_window, 131072);
  ASSERT_TRUE(c.longrope.has_value());
  EXPECT_EQ(c.longrope->long_factor, std::vector<float>(4, 0.5f));
  EXPECT_EQ(c.longrope->original_max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(c.longrope->short_mscale, 1.190238f);
  EXPECT_FLOAT_EQ(c.longrope->long_mscale, 1.190238f);
  write(5);
  try {
    ModelConfigFromGguf(GgufFile(Path("phimoe.gguf")));
    ADD_FAILURE() << "5 factors accepted for head_dim 8";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rope_factors_long.weight must be F32 of shape [4]"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(GgufModelTest, ReportsProblems) {
  const ModelConfig config = TinyConfig(Arch::kOlmoe);
  auto error = [&](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  MemoryWeights missing = TinyWeights(config, DType::kBF16);
  missing.Remove("model.layers.1.mlp.experts.2.up_proj.weight");
  EXPECT_NE(error([&] {
              WriteGgufModel(config, missing, nullptr, Path("m.gguf"));
            }).find("missing tensor 'model.layers.1.mlp.experts.2.up_proj.weight'"),
            std::string::npos);
  MemoryWeights extra = TinyWeights(config, DType::kBF16);
  extra.Add("model.layers.0.mystery.weight", DType::kBF16, {4}, 1);
  EXPECT_NE(error([&] {
              WriteGgufModel(config, extra, nullptr, Path("m.gguf"));
            }).find("cannot map tensor 'model.layers.0.mystery.weight'"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(Path("m.gguf")));

  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("grok"));
  w.Write(Path("grok.gguf"));
  EXPECT_NE(
      error([&] { OpenGgufModel(Path("grok.gguf")); }).find("unsupported GGUF architecture 'grok'"),
      std::string::npos);
  GgufWriter dense;
  dense.Set("general.architecture", GgufValue::String("llama"));
  dense.Write(Path("dense.gguf"));
  EXPECT_NE(error([&] { OpenGgufModel(Path("dense.gguf")); }).find("not a mixture of experts"),
            std::string::npos);
}

TEST_F(GgufModelTest, UnsupportedTensorTypeIsAnErrorAtOpen) {
  const ModelConfig config = TinyConfig(Arch::kOlmoe);
  WriteGgufModel(config, TinyWeights(config, DType::kF32), nullptr, Path("m.gguf"));
  // Patch blk.0.attn_q.weight's type id from f32 to q4_K in the tensor info.
  std::string bytes;
  {
    std::ifstream in(Path("m.gguf"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string name = "blk.0.attn_q.weight";
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  const size_t type_at = at + name.size() + 4 + 2 * 8;  // n_dims, then two dims.
  ASSERT_EQ(bytes[type_at], 0);
  bytes[type_at] = 16;  // iq2_xxs
  {
    std::ofstream out(Path("m.gguf"), std::ios::binary);
    out << bytes;
  }
  try {
    OpenGgufModel(Path("m.gguf"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.attn_q.weight' has unsupported GGML type iq2_xxs"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moex
