#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/logging.h"
#include "core/name_list.h"
#include "io/input_file.h"
#include "kernels/activation_precision.h"
#include "kernels/interleave.h"
#include "model/gguf_model.h"
#include "model/gpt_oss_weights.h"
#include "model/hf_checkpoint.h"
#include "model/hf_fp8.h"
#include "model/llama4_weights.h"
#include "model/mla_weights.h"
#include "model/qwen35_weights.h"

namespace moex {

namespace {

// Forwards to a source and remembers every name asked for, so BuildModel can tell which of
// the source's tensors the architecture never reads.
class UseRecorder : public WeightSource {
 public:
  explicit UseRecorder(const WeightSource& source) : source_(source) {}
  const TensorView* Find(const std::string& name) const override {
    used_.insert(name);
    return source_.Find(name);
  }
  std::vector<std::string> Names() const override { return source_.Names(); }
  std::string Describe() const override { return source_.Describe(); }
  std::string FileName(const std::string& name) const override { return source_.FileName(name); }

  // The source's tensors never asked for, and those it could not map, by file name.
  std::vector<std::string> Unused() const {
    std::vector<std::string> unused = source_.Unmapped();
    for (const std::string& name : source_.Names())
      if (!used_.contains(name)) unused.push_back(source_.FileName(name));
    return unused;
  }

 private:
  const WeightSource& source_;
  mutable std::unordered_set<std::string> used_;
};

std::vector<float> LoadF32(const WeightSource& w, const std::string& name, int64_t size) {
  return TensorToF32(w.Get(name, {size}));
}

// llama.cpp's optional output scales (`count` values, finite), or nothing when the file has
// none. An empty name (llama.cpp does not apply this scale for the architecture) is never
// looked up, so a file that carries one is refused as a tensor moex does not read.
std::vector<float> OptionalScales(const WeightSource& w, const std::string& name, int64_t count) {
  const TensorView* t = name.empty() ? nullptr : w.Find(name);
  if (t == nullptr) return {};
  Check(t->shape == std::vector<int64_t>{count}, "tensor '", w.FileName(name), "' in ",
        w.Describe(), " has shape ", ShapeString(t->shape), ", expected [", count, "]");
  std::vector<float> scales = TensorToF32(*t);
  for (const float s : scales)
    Check(std::isfinite(s), "tensor '", w.FileName(name), "' in ", w.Describe(),
          " holds a non-finite scale (", s, ")");
  return scales;
}

float OptionalScale(const WeightSource& w, const std::string& name) {
  const std::vector<float> s = OptionalScales(w, name, 1);
  return s.empty() ? 1.0f : s[0];
}

const TensorView* Matrix(const WeightSource& w, const std::string& name, int64_t rows,
                         int64_t cols) {
  return &w.Get(name, {rows, cols});
}

// A norm weight with the config's offset added (zero-centred norms, ModelConfig).
std::vector<float> LoadNorm(const WeightSource& w, const std::string& name, int64_t size,
                            float offset) {
  std::vector<float> v = LoadF32(w, name, size);
  if (offset != 0.0f)
    for (float& x : v) x += offset;
  return v;
}

// A Gated DeltaNet layer's tensors (ModelConfig::delta_net).
void LoadGatedDeltaNet(const WeightSource& w, const TensorNames& n, const ModelConfig& c, int i,
                       LayerWeights& L) {
  const GatedDeltaNet& g = *c.delta_net;
  auto layer = [&](const std::string& name) { return TensorNames::Layer(i, name); };
  const int64_t d = c.hidden_size, nv = g.num_v_heads;
  // Qwen3-Next: HF's grouped qkvz, or llama.cpp's qkv and z (a legacy file may carry the
  // grouped ssm_in beside them, which llama.cpp then never reads: neither does moex).
  const bool split_qkv = w.Find(layer(n.gdn_qkv)) != nullptr;
  const bool grouped_qkvz = w.Find(layer(n.gdn_qkvz)) != nullptr;  // Looked up either way.
  if (!split_qkv && grouped_qkvz) {
    L.gdn_qkvz = Matrix(w, layer(n.gdn_qkvz), g.conv_dim() + g.value_dim(), d);
  } else {
    L.gdn_qkv = Matrix(w, layer(n.gdn_qkv), g.conv_dim(), d);
    L.gdn_z = Matrix(w, layer(n.gdn_z), g.value_dim(), d);
  }
  // Qwen3-Next's grouped b/a, or Qwen3.5's b and a apart.
  if (w.Find(layer(n.gdn_ba)) != nullptr || w.Find(layer(n.gdn_b)) == nullptr) {
    L.gdn_ba = Matrix(w, layer(n.gdn_ba), 2 * nv, d);
  } else {
    L.gdn_b = Matrix(w, layer(n.gdn_b), nv, d);
    L.gdn_a = Matrix(w, layer(n.gdn_a), nv, d);
  }
  L.gdn_out = Matrix(w, layer(n.gdn_out), d, g.value_dim());
  auto scale = [&](const std::string& name) {
    return OptionalScale(w, name.empty() ? name : layer(name));
  };
  if (L.gdn_qkv != nullptr) {
    L.gdn_qkv_scale = scale(n.gdn_qkv_scale);
    L.gdn_z_scale = scale(n.gdn_z_scale);
  }
  if (L.gdn_b != nullptr) {
    L.gdn_b_scale = scale(n.gdn_b_scale);
    L.gdn_a_scale = scale(n.gdn_a_scale);
  }
  L.gdn_out_scale = scale(n.gdn_out_scale);
  // HF's Conv1d weight is [channels, 1, kernel]; llama.cpp's converter squeezes it.
  const TensorView& conv = w.Get(layer(n.gdn_conv));
  Check(conv.numel() == g.conv_dim() * g.conv_kernel, "tensor '", w.FileName(layer(n.gdn_conv)),
        "' in ", w.Describe(), " has shape ", ShapeString(conv.shape), ", expected [", g.conv_dim(),
        ", 1, ", g.conv_kernel, "]");
  L.gdn_conv = TensorToF32(conv);
  L.gdn_dt_bias = LoadF32(w, layer(n.gdn_dt_bias), nv);
  if (w.Find(layer(n.gdn_a_log)) != nullptr) {
    L.gdn_decay = LoadF32(w, layer(n.gdn_a_log), nv);
    for (float& a : L.gdn_decay) a = -std::exp(a);
  } else {
    L.gdn_decay = LoadF32(w, layer(n.gdn_neg_a), nv);
  }
  L.gdn_norm = LoadF32(w, layer(n.gdn_norm), g.v_head_dim);
}

DenseFfn LoadDenseFfn(const WeightSource& w, int layer, const std::string& gate,
                      const std::string& up, const std::string& down, int64_t d, int64_t f) {
  DenseFfn ffn;
  ffn.gate = Matrix(w, TensorNames::Layer(layer, gate), f, d);
  ffn.up = Matrix(w, TensorNames::Layer(layer, up), f, d);
  ffn.down = Matrix(w, TensorNames::Layer(layer, down), d, f);
  ffn.neurons = f;
  return ffn;
}

// The shared expert, with llama.cpp's output scales where the family applies them.
DenseFfn LoadSharedExpert(const WeightSource& w, const TensorNames& n, int layer, int64_t d,
                          int64_t f) {
  DenseFfn ffn = LoadDenseFfn(w, layer, n.shared_gate, n.shared_up, n.shared_down, d, f);
  auto scale = [&](const std::string& name) {
    return OptionalScale(w, name.empty() ? name : TensorNames::Layer(layer, name));
  };
  ffn.gate_scale = scale(n.shared_gate_scale);
  ffn.up_scale = scale(n.shared_up_scale);
  ffn.down_scale = scale(n.shared_down_scale);
  return ffn;
}

}  // namespace

void Model::ExpertTensors(int layer, int expert, const TensorView** gate, const TensorView** up,
                          const TensorView** down) const {
  *gate = &weights->Get(names.Expert(layer, expert, ExpertMatrix::kGate));
  *up = &weights->Get(names.Expert(layer, expert, ExpertMatrix::kUp));
  *down = &weights->Get(names.Expert(layer, expert, ExpertMatrix::kDown));
  CheckExpertTensors(**gate, **up, **down, layers.at(static_cast<size_t>(layer)).expert_shape);
}

size_t Model::TotalExpertBytes() const {
  return expert_shape.ExpertBytes() * static_cast<size_t>(config.num_experts) *
         static_cast<size_t>(NumMoeLayers());
}

std::string Model::ExpertDTypeLabel() const {
  std::vector<std::string> labels;
  for (const LayerWeights& L : layers) {
    if (!L.is_moe) continue;
    const std::string label = L.expert_shape.DTypeLabel();
    if (std::find(labels.begin(), labels.end(), label) == labels.end()) labels.push_back(label);
  }
  if (labels.empty()) return "none";
  if (labels.size() == 1) return labels[0];
  std::string all = "mixed ";
  for (size_t i = 0; i < labels.size(); ++i) all += (i ? ", " : "") + labels[i];
  return all;
}

int Model::NumMoeLayers() const {
  int n = 0;
  for (const auto& l : layers) n += l.is_moe ? 1 : 0;
  return n;
}

namespace {

// Gives every file-mapped Linear weight a copy of its own on huge pages (core/huge_pages.h):
// the bytes as stored, or for q4_0 / q8_0 with int8 activations the interleaved copy the int8
// kernels read (kernels/interleave.h; the view keeps the file's bytes for anything else).
// Decode streams these matrices once per token; from the file's 4 KiB pages it took a TLB
// miss every page (3 % of OLMoE-1B-7B Q4_K_M decode, docs/benchmarks.md). The file's pages
// are released, so the copy costs no memory; a tensor used twice gets one copy, and memory
// the source owns (an un-permuted Q) is used as it is.
void CopyLinearWeights(Model& model) {
  const bool int8 = kernels::GetActivationPrecision() == kernels::ActivationPrecision::kInt8;
  std::unordered_map<const TensorView*, const TensorView*> done;
  auto redirect = [&](const TensorView*& t) {
    if (t == nullptr || t->shape.size() != 2) return;
    const bool interleave = int8 && kernels::InterleavedBlockBytes(t->dtype) != 0;
    if (!interleave && !model.weights->Maps(*t)) return;
    auto [it, fresh] = done.emplace(t, nullptr);
    if (fresh) {
      TensorView& view = model.linear_views.emplace_back(*t);
      if (interleave) {
        // Written in place: an AlignedBuffer starts zeroed, as the padding rows must be.
        AlignedBuffer& copy = model.linear_bytes.emplace_back(
            kernels::InterleavedBytes(t->dtype, t->rows(), t->cols()));
        kernels::InterleaveRows(t->data, t->dtype, t->rows(), t->cols(), copy.data());
        view.interleaved = copy.data();
      } else {
        AlignedBuffer& copy = model.linear_bytes.emplace_back(t->nbytes);
        std::memcpy(copy.data(), t->data, t->nbytes);
        view.data = copy.data();
      }
      it->second = &view;
      // The file's pages are read again only as embedding rows (a tied LM head), or with
      // f32 activations for an interleaved format.
      model.weights->ReleasePages(*t);
    }
    t = it->second;
  };
  redirect(model.lm_head);
  for (LayerWeights& L : model.layers) {
    for (const TensorView** t :
         {&L.q, &L.k, &L.v, &L.o, &L.q_a, &L.q_b, &L.kv_a, &L.router, &L.gdn_qkvz, &L.gdn_qkv,
          &L.gdn_z, &L.gdn_ba, &L.gdn_b, &L.gdn_a, &L.gdn_out})
      redirect(*t);
    for (std::optional<DenseFfn>* ffn : {&L.shared_expert, &L.dense_ffn}) {
      if (!*ffn) continue;
      redirect((*ffn)->gate);
      redirect((*ffn)->up);
      redirect((*ffn)->down);
    }
  }
}

}  // namespace

std::unique_ptr<Model> BuildModel(const std::string& path, const ModelConfig& config,
                                  std::unique_ptr<WeightSource> weights) {
  auto model = std::make_unique<Model>();
  model->path = path;
  model->config = config;
  model->names = TensorNamesFor(config);
  model->weights = std::move(weights);
  const UseRecorder w(*model->weights);
  const TensorNames& n = model->names;
  const ModelConfig& c = config;
  const int64_t d = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;

  if (c.num_nextn_predict_layers > 0)
    Log(LogLevel::kWarn, "note: ", path, " has ", c.num_nextn_predict_layers,
        " multi-token-prediction layer(s); moex does not run them (next-token logits are "
        "unaffected)");
  model->embed = Matrix(w, n.embed, c.vocab_size, d);
  model->lm_head = c.tie_word_embeddings && w.Find(n.lm_head) == nullptr
                       ? model->embed
                       : Matrix(w, n.lm_head, c.vocab_size, d);
  model->final_norm = LoadNorm(w, n.final_norm, d, c.norm_weight_offset);
  const bool layer_norm = c.norm == NormKind::kLayerNorm;
  if (layer_norm) model->final_norm_bias = LoadF32(w, n.final_norm_bias, d);
  if (c.lm_head_bias) model->lm_head_bias = LoadF32(w, n.lm_head_bias, c.vocab_size);
  model->lm_head_scale = OptionalScale(w, n.lm_head_scale);

  model->layers.resize(static_cast<size_t>(c.num_layers));
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights& L = model->layers[static_cast<size_t>(i)];
    auto layer = [&](const std::string& name) { return TensorNames::Layer(i, name); };
    // An empty name stays empty (OptionalScales skips it).
    auto layer_scale = [&](const std::string& name) { return name.empty() ? name : layer(name); };
    L.attn_norm = LoadNorm(w, layer(n.attn_norm), d, c.norm_weight_offset);
    L.ffn_norm = LoadNorm(w, layer(n.ffn_norm), d, c.norm_weight_offset);
    if (layer_norm) {
      L.attn_norm_bias = LoadF32(w, layer(n.attn_norm_bias), d);
      L.ffn_norm_bias = LoadF32(w, layer(n.ffn_norm_bias), d);
    }
    if (c.IsLinearLayer(i)) {
      LoadGatedDeltaNet(w, n, c, i, L);
    } else if (c.mla) {
      LoadMlaWeights(w, n, c, i, L);
    } else {
      L.q = Matrix(w, layer(n.q), c.attention_output_gate ? 2 * q_dim : q_dim, d);
      L.k = Matrix(w, layer(n.k), kv_dim, d);
      L.v = Matrix(w, layer(n.v), kv_dim, d);
      L.o = Matrix(w, layer(n.o), d, q_dim);
    }
    if (c.attention_bias && !c.IsLinearLayer(i)) {
      // Gated attention's q_proj gives query and gate rows: its bias covers both.
      L.q_bias = LoadF32(w, layer(n.q_bias), c.attention_output_gate ? 2 * q_dim : q_dim);
      L.k_bias = LoadF32(w, layer(n.k_bias), kv_dim);
      L.v_bias = LoadF32(w, layer(n.v_bias), kv_dim);
    }
    if (c.attention_out_bias) L.o_bias = LoadF32(w, layer(n.o_bias), d);
    if (L.q != nullptr) L.q_scale = OptionalScale(w, layer_scale(n.q_scale));
    if (L.k != nullptr) L.k_scale = OptionalScale(w, layer_scale(n.k_scale));
    if (L.v != nullptr) L.v_scale = OptionalScale(w, layer_scale(n.v_scale));
    if (L.o != nullptr) L.o_scale = OptionalScale(w, layer_scale(n.o_scale));
    if (c.qk_norm && !c.IsLinearLayer(i)) {
      L.q_norm = LoadNorm(w, layer(n.q_norm), c.qk_norm_per_head ? c.head_dim : q_dim,
                          c.norm_weight_offset);
      L.k_norm = LoadNorm(w, layer(n.k_norm), c.qk_norm_per_head ? c.head_dim : kv_dim,
                          c.norm_weight_offset);
    }
    if (c.attention_sinks) L.sinks = LoadF32(w, layer(n.sinks), c.num_heads);
    L.is_moe = c.IsMoeLayer(i);
    if (!L.is_moe) {
      L.dense_ffn =
          LoadDenseFfn(w, i, n.dense_gate, n.dense_up, n.dense_down, d, c.intermediate_size);
      continue;
    }
    L.router = Matrix(w, layer(n.router), c.num_experts, d);
    if (c.topk_method == TopKMethod::kNoauxTc)
      L.router_bias = LoadF32(w, layer(n.router_bias), c.num_experts);
    if (c.router_bias) L.router_logit_bias = LoadF32(w, layer(n.router_linear_bias), c.num_experts);
    if (c.ExpertBiases()) {
      const int64_t E = c.num_experts, F = c.moe_intermediate_size;
      L.expert_gate_bias = TensorToF32(w.Get(layer(n.expert_gate_bias), {E, F}));
      L.expert_up_bias = TensorToF32(w.Get(layer(n.expert_up_bias), {E, F}));
      L.expert_down_bias = TensorToF32(w.Get(layer(n.expert_down_bias), {E, d}));
    }
    L.expert_gate_scale = OptionalScales(w, layer_scale(n.expert_gate_scale), c.num_experts);
    L.expert_up_scale = OptionalScales(w, layer_scale(n.expert_up_scale), c.num_experts);
    L.expert_down_scale = OptionalScales(w, layer_scale(n.expert_down_scale), c.num_experts);
    if (c.shared_expert_intermediate_size > 0) {
      L.shared_expert = LoadSharedExpert(w, n, i, d, c.shared_expert_intermediate_size);
      if (c.shared_expert_gate) L.shared_expert_gate = Matrix(w, layer(n.shared_expert_gate), 1, d);
    } else {
      // A config without shared experts over a checkpoint that has them would silently
      // compute a different model.
      Check(n.shared_gate.empty() || w.Find(layer(n.shared_gate)) == nullptr, "model ", path,
            ": the checkpoint has shared experts (", layer(n.shared_gate),
            ") but its config gives them no size (shared_expert_intermediate_size / "
            "n_shared_experts is 0)");
    }
    // Every expert must exist with the same shape and dtypes as the layer's first: checked
    // now, not mid-request.
    for (int e = 0; e < c.num_experts; ++e) {
      const TensorView& gate = w.Get(n.Expert(i, e, ExpertMatrix::kGate));
      if (e == 0) {
        const TensorView& down = w.Get(n.Expert(i, e, ExpertMatrix::kDown));
        L.expert_shape = ExpertShape{gate.dtype, down.dtype, d, c.moe_intermediate_size};
      }
      w.Find(n.Expert(i, e, ExpertMatrix::kUp));
      w.Find(n.Expert(i, e, ExpertMatrix::kDown));
      const TensorView *g, *u, *dn;
      model->ExpertTensors(i, e, &g, &u, &dn);
    }
  }
  // One record geometry for every MoE layer (expert_layout.h: layers that encode their
  // experts differently are padded to the widest).
  std::vector<ExpertShape> shapes;
  for (const LayerWeights& L : model->layers)
    if (L.is_moe) shapes.push_back(L.expert_shape);
  shapes = PadToCommonShape(std::move(shapes));
  size_t next = 0;
  for (LayerWeights& L : model->layers)
    if (L.is_moe) L.expert_shape = shapes[next++];
  if (!shapes.empty()) model->expert_shape = shapes[0];
  model->unused_tensors = w.Unused();
  CopyLinearWeights(*model);
  return model;
}

std::unique_ptr<Model> LoadModel(const std::string& path) {
  namespace fs = std::filesystem;
  Check(fs::exists(path), "model path '", path, "' does not exist");
  const std::string kind = DescribePath(path);
  Check(kind == "a regular file" || kind == "a directory", "model path '", path, "' is ", kind,
        ": pass a .gguf file or a checkpoint directory");
  if (fs::is_regular_file(path)) {
    Check(path.size() > 5 && path.substr(path.size() - 5) == ".gguf", "model file '", path,
          "' is not a .gguf file (for HF checkpoints pass the directory)");
    GgufModel gguf = OpenGgufModel(path);
    auto model = BuildModel(path, gguf.config, std::move(gguf.weights));
    try {
      model->sampling = SamplingDefaults::FromGguf(*gguf.file);
    } catch (const Error& e) {
      Fail(path, ": ", e.what());
    }
    // llama.cpp computes with every tensor it knows: one moex does not read means a
    // different model (an unsupported variant), never something to skip. The exception:
    // llama.cpp loads .scale and .input_scale tensors for every architecture but multiplies
    // only some .scale in (moex applies exactly those: docs/formats.md), so the rest cannot
    // change its result.
    std::vector<std::string> ignored, refused;
    for (const std::string& name : model->unused_tensors)
      (name.ends_with(".scale") || name.ends_with(".input_scale") ? ignored : refused)
          .push_back(name);
    if (!ignored.empty())
      Log(LogLevel::kDebug, path, ": scale tensors llama.cpp loads but never applies for ",
          ArchName(gguf.config.arch), " (ignored): ", NameList(ignored));
    Check(refused.empty(), path, ": ", refused.size(), " tensor(s) that moex does not read for ",
          ArchName(gguf.config.arch), ": ", NameList(refused));
    model->unused_tensors = std::move(refused);
    return model;
  }
  auto checkpoint = HfCheckpoint::Open(path);
  ModelConfig config = checkpoint->config();
  SamplingDefaults sampling;
  if (checkpoint->has_generation_config()) {
    try {
      sampling = SamplingDefaults::FromGenerationConfig(checkpoint->generation_config());
    } catch (const Error& e) {
      Fail(checkpoint->dir(), "/generation_config.json: ", e.what());
    }
  }
  const bool fp8 = checkpoint->quantization() && checkpoint->quantization()->quant_method == "fp8";
  std::unique_ptr<WeightSource> source =
      config.arch == Arch::kGptOss   ? WrapGptOssHfWeights(std::move(checkpoint), config)
      : config.arch == Arch::kLlama4 ? WrapLlama4HfWeights(std::move(checkpoint), config)
      : fp8                          ? WrapFp8HfWeights(std::move(checkpoint))
                                     : std::unique_ptr<WeightSource>(std::move(checkpoint));
  if (config.arch == Arch::kQwen35Moe) source = WrapQwen35HfWeights(std::move(source), config);
  auto model = BuildModel(path, config, std::move(source));
  model->sampling = sampling;
  if (!model->unused_tensors.empty())
    Log(LogLevel::kWarn, path, ": ", model->unused_tensors.size(),
        " tensor(s) not read for this architecture: ", NameList(model->unused_tensors));
  return model;
}

}  // namespace moex
