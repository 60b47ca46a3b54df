// One adapter per model family (docs/design.md, "Model families"): everything that differs
// between Mixtral, Qwen, DeepSeek, ... beyond ModelConfig's flags lives in one file,
// src/model/arch/<family>.cc, as a subclass of Family; the shared code (config parsing,
// GGUF reading and writing, random shapes, validation) visits the adapter instead of
// switching on Arch. The forward pass never sees an adapter: it reads ModelConfig and
// TensorNames only.
//
// Adding a family: an Arch value, one file with its Family, a line in families.cc's table,
// its tests and docs (docs/design.md walks through it).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/gguf_tensor_map.h"
#include "model/model_config.h"
#include "model/tensor_names.h"

namespace moex {

class GgufFile;
class GgufWriter;
enum class ModelSize;

class Family {
 public:
  struct Names {
    Arch arch;
    const char* model_type;                 // HF config.json's model_type, and ArchName().
    const char* hf_class;                   // HF config.json's architectures[0].
    const char* gguf;                       // llama.cpp's general.architecture.
    std::vector<std::string_view> aliases;  // Other spellings ParseArch accepts.
  };
  // What the family may use beyond the shared transformer; ModelConfig::Validate and the
  // config readers refuse the others.
  struct Features {
    bool deepseek_yarn = false;   // rope_scaling "yarn" as DeepSeek-V2/V3 compute it.
    bool generic_yarn = false;    // HF's generic YaRN (gpt-oss).
    bool longrope = false;        // rope_scaling "longrope" / "su" (Phi-3.5-MoE).
    bool llama3_rope = false;     // rope_scaling "llama3", read as one set of factors (Llama 4).
    bool partial_rotary = false;  // RoPE on the first rope_dim values of a head.
    // Per-layer sliding windows, attention sinks, a router bias and biased experts with
    // the clamped SwiGLU: all of them or none (gpt-oss).
    bool gpt_oss_blocks = false;
    // Shared experts counted in n_shared_experts (so a whole number of routed experts).
    bool counted_shared_experts = false;
    // Gated DeltaNet layers, gated attention and zero-centred norms (Qwen3-Next, Qwen3.5).
    bool gated_delta_net = false;
    bool Yarn() const { return deepseek_yarn || generic_yarn; }
  };

  Family(Names names, Features features) : names_(std::move(names)), features_(features) {}
  virtual ~Family() = default;
  Family(const Family&) = delete;
  Family& operator=(const Family&) = delete;

  const Names& names() const { return names_; }
  const Features& features() const { return features_; }
  Arch arch() const { return names_.arch; }

  // --- HF config.json.
  // Reads the family's keys into `c`, whose shared fields (sizes, heads, eps, RoPE theta,
  // token ids) are already read; throws Error naming a missing or unsupported key.
  virtual void ReadHfConfig(const nlohmann::json& j, ModelConfig& c) const = 0;
  // Writes the family's keys (architectures included) beside the shared ones.
  virtual void WriteHfConfig(const ModelConfig& c, nlohmann::json& j) const = 0;
  // The family's HF tensor names.
  virtual TensorNames HfTensorNames() const { return TensorNames{}; }

  // --- llama.cpp's GGUF.
  // True when llama.cpp sizes the routed experts by feed_forward_length (the family has
  // no dense FFN); false when that key is the dense FFN and expert_feed_forward_length the
  // experts'.
  virtual bool GgufFeedForwardIsExpert() const { return false; }
  // True when llama.cpp's converter permutes Q/K rows (interleaved "normal" RoPE).
  virtual bool GgufPermutesQK() const { return false; }
  // Whether llama.cpp renormalises the top-k weights, where its graph fixes it
  // (src/models/<arch>.cpp passes norm_w to build_moe_ffn). nullopt: read from
  // expert_weights_norm, or not a top-k softmax.
  virtual std::optional<bool> LlamaCppFixedTopKNorm() const { return std::nullopt; }
  // The {arch}.* keys llama.cpp's load_arch_hparams (src/models/<arch>.cpp) reads for the
  // family, beyond those its load_hparams reads for every architecture
  // (llamacpp_keys::Reads). The others cannot change llama.cpp's result.
  virtual std::vector<std::string_view> LlamaCppArchKeys() const = 0;
  // Reads the family's metadata into `c`. On entry the shared keys are read, and so are
  // what the tensors imply for every family (tied embeddings, attention and lm_head
  // biases); after it, the MoE layer pattern is found from the routers' tensors (so the
  // leading dense layers must be set here).
  virtual void ReadGgufConfig(const GgufFile& f, ModelConfig& c) const = 0;
  // Writes the family's keys beside the shared ones (SetArchMetadata).
  virtual void WriteGgufConfig(const ModelConfig& /*c*/, GgufWriter& /*w*/) const {}
  // Completes the shared HF <-> GGUF tensor-name map (gguf_map::NamesFor: the common
  // attention and FFN names, experts under mlp.experts.{e}.gate_proj/up_proj/down_proj) with
  // the router and what else the family has; by default the router as mlp.gate.
  virtual void GgufTensorNames(gguf_map::ArchNames& n) const;

  // --- Shapes and checks.
  // The published checkpoint's config (`moex random-model --size full`).
  virtual ModelConfig PublishedConfig() const = 0;
  // The family's shape at `size`; by default PublishedConfig() shrunk by
  // ShrinkToSize (random_model.cc), keeping the topology.
  virtual ModelConfig RandomConfig(ModelSize size) const;
  // Checks only this family's rules (ModelConfig::Validate runs the shared ones first).
  virtual void Validate(const ModelConfig& /*c*/) const {}

 private:
  Names names_;
  Features features_;
};

// Every family, in the order `moex random-model` and error messages list them: the built-in
// table (families.cc), then the registered ones.
std::span<const Family* const> Families();

// Adds `family` to Families(): a family defined outside src/model/arch, such as the sample
// family of tests/model_family_sample_test.cc. Its Arch value, model_type and aliases must
// be new (throws Error otherwise). Construct one at static initialisation, before any model
// is read: Families() is not locked.
class FamilyRegistration {
 public:
  explicit FamilyRegistration(const Family& family);
};
// The adapter of `arch` (every Arch has one).
const Family& FamilyOf(Arch arch);
// The family whose model_type or alias is `name`; nullptr if none.
const Family* ParseArchOrNull(std::string_view name);
// The family whose GGUF general.architecture is `gguf`; nullptr if none.
const Family* FindGgufFamily(std::string_view gguf);
// "a, b and c": the model_type of every family with `has`, for messages.
std::string FamiliesWith(bool (*has)(const Family::Features&));

// The families' adapters (one per file under src/model/arch/).
const Family& MixtralFamily();
const Family& PhiMoeFamily();
const Family& Qwen2MoeFamily();
const Family& Qwen3MoeFamily();
const Family& OlmoeFamily();
const Family& DeepseekMoeFamily();
const Family& DeepseekV2Family();
const Family& DeepseekV3Family();
const Family& Glm4MoeFamily();
const Family& GptOssFamily();
const Family& MiniMaxM2Family();
const Family& Qwen3NextFamily();
const Family& Qwen35MoeFamily();
const Family& Llama4Family();

// Pieces several adapters share.
// HF's LongRoPE attention factor, sqrt(1 + ln(s) / ln(original)) for s = max_positions /
// original > 1, else 1: the mscale of a config that gives none (phimoe's readers, random
// shapes).
double LongRopeAttentionFactor(int max_positions, int original);
// rope_scaling "llama3" (HF's _compute_llama3_parameters) as the frequency divisors llama.cpp
// keeps in rope_freqs: 1 for wavelengths below original / high_freq_factor, `factor` above
// original / low_freq_factor, smoothly between. One set (short = long), mscale 1.
LongRope Llama3RopeFactors(int head_dim, float theta, double factor, double low_freq_factor,
                           double high_freq_factor, int original);
// A config of `arch` with HF's generic defaults (rms_norm_eps 1e-5, 4096 positions).
ModelConfig BaseConfig(Arch arch);
// Mixtral's expert names (block_sparse_moe, w1/w3/w2): HF names and their GGUF map.
TensorNames BlockSparseMoeNames();
void BlockSparseMoeGgufNames(gguf_map::ArchNames& n);
// DeepSeek's fused shared experts (mlp.shared_experts.*).
TensorNames SharedExpertsNames();
// The router as mlp.gate, and shared experts under `shared_prefix` when not null.
void MlpGateGgufNames(gguf_map::ArchNames& n, const char* shared_prefix);
void SharedExpertsGgufNames(gguf_map::ArchNames& n, const std::string& prefix);

}  // namespace moex
