// Shapes of gpt-oss for `moex random-model` (random_model.h): full is the published
// gpt-oss-20b config; small and tiny keep the topology (GQA 8:1 or 2:1, alternating
// sliding/full layers from sliding, sinks, biases everywhere, YaRN without truncation) and
// shrink widths and depth. Tiny uses a window of 4 positions and swiglu_limit 1 so that
// short test sequences cross the window and the activation's clamps.
#include "model/random_model.h"

namespace moex {

ModelConfig RandomGptOssConfig(ModelSize size) {
  ModelConfig c;
  c.arch = Arch::kGptOss;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 150000.0f;
  c.norm_topk_prob = true;
  c.router_bias = true;
  c.attention_bias = true;
  c.attention_out_bias = true;
  c.attention_sinks = true;
  c.swiglu_limit = 7.0f;
  c.sliding_window = 128;
  Yarn y;
  y.factor = 32.0f;
  y.original_max_position_embeddings = 4096;
  y.beta_fast = 32.0f;
  y.beta_slow = 1.0f;
  y.truncate = false;
  // gpt-oss-20b.
  c.vocab_size = 201088;
  c.hidden_size = 2880;
  c.num_layers = 24;
  c.num_heads = 64;
  c.num_kv_heads = 8;
  c.head_dim = 64;
  c.num_experts = 32;
  c.num_experts_per_tok = 4;
  c.moe_intermediate_size = 2880;
  c.eos_token_ids = {200002};
  if (size == ModelSize::kSmall) {
    c.hidden_size = 1024;
    c.num_layers = 8;
    c.num_heads = 16;
    c.num_kv_heads = 2;
    c.moe_intermediate_size = 768;
    y.original_max_position_embeddings = 512;
  } else if (size == ModelSize::kTiny) {
    c.vocab_size = 512;
    c.hidden_size = 64;
    c.num_layers = 3;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    c.num_experts = 8;
    c.moe_intermediate_size = 32;
    c.sliding_window = 4;
    c.swiglu_limit = 1.0f;
    c.eos_token_ids = {2};
    y.factor = 4.0f;
    y.original_max_position_embeddings = 32;
  }
  // HF derives YaRN's factor from these two as well; they agree by construction.
  c.max_position_embeddings = static_cast<int>(y.factor) * y.original_max_position_embeddings;
  c.yarn = y;
  c.layer_sliding = AlternatingSlidingLayers(c.num_layers);
  return c;
}

}  // namespace moex
