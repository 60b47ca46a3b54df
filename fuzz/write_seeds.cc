// Writes the binary seeds of fuzz/corpus (safetensors, GGUF, expert store, trace) with moex's
// own writers, small enough to commit: `cmake --build build --target fuzz_write_seeds &&
// build/fuzz_write_seeds fuzz/corpus`. The text seeds (tokenizer.json, chat templates, API
// bodies) are written by hand in fuzz/corpus.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dist/event_messages.h"
#include "dist/expert_messages.h"
#include "io/gguf_writer.h"
#include "io/safetensors_writer.h"
#include "model/expert_store_packer.h"
#include "policy/registry.h"
#include "support/random_weight_source.h"
#include "trace/trace_writer.h"

namespace fs = std::filesystem;
using namespace moex;

namespace {

void Safetensors(const fs::path& dir) {
  static const std::vector<float> f32 = {1, 2, 3, 4, 5, 6};
  static const std::vector<uint16_t> half = {0x3c00, 0x4000, 0xc000, 0x7c00};
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.Add("a.weight", DType::kF32, {2, 3}, f32.data());
  w.Add("b.weight", DType::kF16, {4}, half.data());
  w.Add("c.weight", DType::kBF16, {2, 2}, half.data());
  w.Add("d.empty", DType::kF32, {0}, nullptr);
  w.WriteFile((dir / "dtypes.safetensors").string());
  SafetensorsWriter one;
  one.Add("model.embed_tokens.weight", DType::kBF16, {2, 2}, half.data());
  one.WriteFile((dir / "one.safetensors").string());
}

// A minimal MoE GGUF of a llama.cpp architecture (hidden 8, 2 layers, 2 experts) with a
// four-token vocabulary.
void GgufModel(const fs::path& path, const std::string& arch, const std::string& vocab_model) {
  static const std::vector<uint8_t> data(4096, 0x3c);
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String(arch));
  auto u32 = [&](const std::string& k, uint32_t v) { w.Set(arch + "." + k, GgufValue::U32(v)); };
  u32("block_count", 2);
  u32("context_length", 64);
  u32("embedding_length", 8);
  u32("feed_forward_length", 4);
  u32("expert_feed_forward_length", 4);
  u32("attention.head_count", 2);
  u32("attention.head_count_kv", 1);
  u32("expert_count", 2);
  u32("expert_used_count", 1);
  w.Set(arch + ".rope.freq_base", GgufValue::F32(10000.0f));
  w.Set(arch + ".attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5f));
  w.Set("tokenizer.ggml.model", GgufValue::String(vocab_model));
  if (vocab_model == "gpt2") {
    w.Set("tokenizer.ggml.pre", GgufValue::String("default"));
    w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "ab", "<|endoftext|>"}));
    w.Set("tokenizer.ggml.merges", GgufValue::StringArray({"a b"}));
  } else {
    w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"<unk>", "<s>", "</s>",
                                                           "\xe2\x96\x81"
                                                           "a"}));
    w.Set("tokenizer.ggml.scores", GgufValue::F32Array({0, 0, 0, -1}));
    w.Set("tokenizer.ggml.token_type", GgufValue::I32Array({2, 3, 3, 1}));
  }
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(3));
  w.AddTensor("token_embd.weight", DType::kBF16, {4, 8}, data.data());
  w.AddTensor("output_norm.weight", DType::kF32, {8}, data.data());
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.AddTensor(p + "attn_norm.weight", DType::kF32, {8}, data.data());
    w.AddTensor(p + "ffn_norm.weight", DType::kF32, {8}, data.data());
    w.AddTensor(p + "attn_q.weight", DType::kBF16, {8, 8}, data.data());
    w.AddTensor(p + "attn_k.weight", DType::kBF16, {4, 8}, data.data());
    w.AddTensor(p + "attn_v.weight", DType::kBF16, {4, 8}, data.data());
    w.AddTensor(p + "attn_output.weight", DType::kBF16, {8, 8}, data.data());
    w.AddTensor(p + "ffn_gate_inp.weight", DType::kF32, {2, 8}, data.data());
    w.AddTensor(p + "ffn_gate_exps.weight", DType::kBF16, {2, 4, 8}, data.data());
    w.AddTensor(p + "ffn_up_exps.weight", DType::kBF16, {2, 4, 8}, data.data());
    w.AddTensor(p + "ffn_down_exps.weight", DType::kQ8_0, {2, 8, 32}, data.data());
  }
  w.Write(path.string());
}

void Gguf(const fs::path& dir) {
  GgufModel(dir / "olmoe-gpt2.gguf", "olmoe", "gpt2");
  GgufModel(dir / "llama-spm.gguf", "llama", "llama");
}

void Store(const fs::path& dir) {
  ModelConfig c;
  c.arch = Arch::kOlmoe;
  c.hidden_size = 8;
  c.num_layers = 2;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.vocab_size = 4;
  c.num_experts = 2;
  c.num_experts_per_tok = 1;
  c.moe_intermediate_size = 4;
  c.first_k_dense_replace = 1;  // Layer 0 dense: the table lists layer 1 only.
  c.intermediate_size = 4;
  RandomWeightSource source(c, DType::kBF16, 7);
  PackOptions o;
  o.out_path = (dir / "tiny.moex").string();
  o.source_id = "seed";
  o.source_path = "seed";
  o.progress = false;
  PackExpertStore(source, c, o);
  fs::remove(o.out_path + ".lock");  // The packer's lock file is no seed.
}

void Trace(const fs::path& dir) {
  using namespace trace;
  TraceHeader h;
  h.source = "fuzz seed";
  h.model.name = "toy";
  h.model.num_layers = 2;
  h.model.moe_layers = {0, 1};
  h.model.num_experts = 4;
  h.model.top_k = 2;
  h.model.hidden_size = 3;
  h.model.expert_neurons = 8;
  h.model.record_bytes = 18;
  h.model.block_neurons = 8;
  h.model.dtype = "bf16";
  h.probs = Precision::kF16;
  h.hidden = Precision::kBF16;
  h.pooled = true;
  h.router_weights = true;
  TraceWriter w((dir / "small.trace").string(), h);
  std::vector<float> router(12, 0.25f);
  TensorView t;
  t.name = "model.layers.0.mlp.gate.weight";
  t.dtype = DType::kF32;
  t.shape = {4, 3};
  t.data = reinterpret_cast<const std::byte*>(router.data());
  t.nbytes = router.size() * 4;
  w.WriteTensor(t);
  TraceEvent begin;
  begin.kind = TraceEvent::kRequestBegin;
  begin.request = 0;
  begin.prompt = {11, 12};
  w.Write(begin);
  TraceEvent it;
  it.kind = TraceEvent::kIteration;
  it.iteration.requests = {0};
  it.iteration.token_counts = {2};
  it.iteration.tokens = {11, 12};
  it.iteration.pooled = {0.5f, -1, 2};
  for (int layer = 0; layer < 2; ++layer) {
    TraceGate g;
    g.layer = layer;
    g.n_tokens = 2;
    g.top_k = 2;
    g.ids = {3, 1, 0, 2};
    g.weights = {0.6f, 0.4f, 0.7f, 0.3f};
    g.probs.assign(8, 0.25f);
    g.hidden = {1, 2, 3, 4, 5, 6};
    it.iteration.gates.push_back(g);
  }
  w.Write(it);
  TraceEvent end;
  end.kind = TraceEvent::kRequestEnd;
  end.request = 0;
  w.Write(end);
  w.Finish();
}

// Expert-parallel messages and a relayed event batch, each behind the target's two selector
// bytes (expert_parallel_fuzzer.cc).
void ExpertParallel(const fs::path& dir) {
  auto write = [&](const char* name, uint8_t selector, uint8_t width, const void* data,
                   size_t size) {
    std::ofstream out(dir / name, std::ios::binary);
    out.put(static_cast<char>(selector)).put(static_cast<char>(width));
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  };
  const std::vector<int32_t> token_of_row = {0, 1, 0};
  const std::vector<float> rows = {1, 2, 3, 4};
  dist::LayerMessage layer;
  layer.layer = 3;
  layer.experts = {{1, 2}, {5, 1}};
  layer.token_rows = 2;
  layer.token_of_row = token_of_row;
  layer.rows = rows;
  const std::vector<std::byte> ask = dist::EncodeLayer(layer);
  write("layer", 0, 1, ask.data(), ask.size());  // Width 2.
  const std::vector<std::byte> text = dist::EncodeText({dist::MessageKind::kVerdict, "ok\n{}", {}});
  write("verdict", 0, 0, text.data(), text.size());
  dist::EventBatch batch(policy::kNeedsProbs | policy::kNeedsHidden | policy::kNeedsPooled);
  const std::vector<int32_t> prompt = {11, 12};
  const std::vector<int64_t> requests = {0}, counts = {2};
  const std::vector<float> pooled = {0.5f, -1}, hidden = {1, 2, 3, 4}, probs(8, 0.25f);
  const std::vector<int32_t> ids = {3, 1, 0, 2};
  const std::vector<float> weights = {0.6f, 0.4f, 0.7f, 0.3f};
  batch.Add(policy::RequestBeginEvent{0, prompt.data(), 2});
  policy::IterationBeginEvent it;
  it.n_requests = 1;
  it.requests = requests.data();
  it.token_counts = counts.data();
  it.tokens = prompt.data();
  it.n_tokens = 2;
  it.pooled = pooled.data();
  it.d = 2;
  batch.Add(it);
  policy::GateEvent g;
  g.n_tokens = 2;
  g.top_k = 2;
  g.num_experts = 4;
  g.ids = ids.data();
  g.weights = weights.data();
  g.probs = probs.data();
  g.hidden = hidden.data();
  g.d = 2;
  batch.Add(g);
  batch.AddIterationEnd();
  batch.Add(policy::RequestEndEvent{0});
  const std::string events = batch.Take();
  write("events", 1, 0, events.data(), events.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_write_seeds CORPUS_DIR\n");
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* d : {"safetensors_fuzzer", "gguf_fuzzer", "expert_store_fuzzer", "trace_fuzzer",
                        "expert_parallel_fuzzer"})
    fs::create_directories(root / d);
  Safetensors(root / "safetensors_fuzzer");
  Gguf(root / "gguf_fuzzer");
  Store(root / "expert_store_fuzzer");
  Trace(root / "trace_fuzzer");
  ExpertParallel(root / "expert_parallel_fuzzer");
  return 0;
}
