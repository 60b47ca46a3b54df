// `moex random-model`: a model with random weights in a real architecture's shape.
#include <filesystem>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "io/output_guard.h"
#include "model/arch/family.h"
#include "model/random_model.h"

namespace moex::cli {

namespace {

struct RandomModelCliOptions {
  std::string arch = "olmoe";
  std::string size = "tiny";
  std::string dtype = "bf16";
  std::string out;
  std::string format = "hf";
  std::string tokenizer;
  std::string gguf_vocab;
  std::string gguf_type;
  uint64_t seed = 0;
  int layers = 0;
  int rope_original = 0;
  bool no_tokenizer = false;
  bool hf_mxfp4 = false;
  int hf_fp8 = 0;
  bool force = false;
};

int RunRandomModel(const RandomModelCliOptions& o) {
  // An HF model is a directory: an empty one is fine, one holding anything (a model, say) is
  // not replaced without --force; a GGUF is a file, refused the same way when it exists.
  namespace fs = std::filesystem;
  const bool empty_dir = fs::is_directory(o.out) && fs::is_empty(o.out);
  if (!empty_dir)
    CheckOutputPath(o.out,
                    {.flag = "--out", .reads = {o.tokenizer, o.gguf_vocab}, .force = o.force});
  RandomModelOptions options;
  options.config = RandomModelConfig(ParseArch(o.arch), ParseModelSize(o.size));
  if (o.layers > 0) {
    options.config.num_layers = o.layers;
    if (!options.config.layer_sliding.empty())
      options.config.layer_sliding = AlternatingSlidingLayers(o.layers);
  }
  if (o.rope_original > 0) {
    Check(options.config.longrope.has_value(), "random-model: --rope-original applies to ",
          "LongRoPE models (phimoe), not ", o.arch);
    options.config = WithLongRope(options.config, o.rope_original);
  }
  options.dtype = ParseDType(o.dtype);
  options.seed = o.seed;
  options.out = o.out;
  options.format = o.format;
  options.tokenizer_json = o.tokenizer;
  options.byte_tokenizer = !o.no_tokenizer;
  options.gguf_vocab = o.gguf_vocab;
  if (o.gguf_type == "q4_k_m" || o.gguf_type == "Q4_K_M") {
    options.gguf_type = DType::kQ4_K;
    options.gguf_q4_k_m = true;
  } else if (!o.gguf_type.empty()) {
    options.gguf_type = ParseDType(o.gguf_type);
  }
  options.hf_mxfp4 = o.hf_mxfp4;
  options.hf_fp8_block = o.hf_fp8;
  WriteRandomModel(options);
  std::cerr << "moex: wrote " << o.arch << " (" << o.size << ", "
            << (o.gguf_type.empty() ? o.dtype : o.gguf_type)
            << (o.hf_mxfp4 ? ", mxfp4 experts" : "") << (o.hf_fp8 > 0 ? ", fp8 weights" : "")
            << ") to " << o.out << "\n";
  return 0;
}

}  // namespace

Runner AddRandomModelCommand(CLI::App& app) {
  auto o = std::make_shared<RandomModelCliOptions>();
  CLI::App* cmd = app.add_subcommand("random-model", "write a model with random weights");
  std::string archs;  // Every family's model_type, from the table of adapters.
  const auto families = Families();
  for (size_t i = 0; i < families.size(); ++i)
    archs += (i == 0                     ? ""
              : i + 1 == families.size() ? " or "
                                         : ", ") +
             std::string(families[i]->names().model_type);
  cmd->add_option("--arch", o->arch, archs);
  cmd->add_option("--size", o->size, "tiny, small or full (the published shape)");
  cmd->add_option("--dtype", o->dtype, "bf16, f16 or f32");
  cmd->add_option("--out", o->out, "output directory (hf) or file (gguf)")->required();
  cmd->add_option("--format", o->format, "hf or gguf");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "tokenizer.json to ship with the model (default: a byte-level tokenizer "
                  "sized to the vocabulary)");
  cmd->add_flag("--no-tokenizer", o->no_tokenizer, "ship no tokenizer (hf; prompts as ids)");
  cmd->add_option("--gguf-vocab", o->gguf_vocab, "GGUF whose tokenizer metadata to copy (gguf)");
  cmd->add_option("--gguf-type", o->gguf_type,
                  "q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, "
                  "iq4_xs or mxfp4: quantise weight matrices and experts (gguf; values drawn "
                  "in --dtype; k-quants, iq4_xs need sizes that are multiples of 256); or "
                  "q4_k_m: llama-quantize's Q4_K_M mix (q4_K, q6_K for the output and for "
                  "attn_v and ffn_down on some layers)");
  cmd->add_flag("--hf-mxfp4", o->hf_mxfp4,
                "gpt_oss, hf: routed experts in MXFP4 (_blocks/_scales and quantization_config), "
                "as openai/gpt-oss checkpoints are published; values drawn in --dtype");
  cmd->add_option("--hf-fp8", o->hf_fp8,
                  "hf: Linear weights (but the router and LM head) in block-scaled FP8 with "
                  "blocks of N x N (e4m3 and weight_scale_inv, quantization_config fp8), as "
                  "DeepSeek-V3 publishes its checkpoints (128; qwen3_5_moe: its experts one by "
                  "one, as Qwen's FP8 releases); values drawn in --dtype")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seed", o->seed, "weight seed");
  cmd->add_flag("--force", o->force,
                "write over an existing --out (a file, or a directory's files)");
  cmd->add_option("--layers", o->layers, "override the number of layers")
      ->check(CLI::Range(0, 256));
  cmd->add_option("--rope-original", o->rope_original,
                  "phimoe: LongRoPE original_max_position_embeddings (default 32 tiny, 512 "
                  "small, 4096 full); longer sequences use the long factors")
      ->check(CLI::Range(1, 1 << 24));
  return [o] { return RunRandomModel(*o); };
}

}  // namespace moex::cli
