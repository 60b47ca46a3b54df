// llama-logits: llama.cpp's float32 logits for every position of a token-id sequence, written
// raw (little-endian, [tokens, vocab] row-major) like `moex logits`, so the two (and
// tools/reference/logits.py) compare directly. Built against libllama by get_llamacpp.sh.
// Never run in CI.
//
//   llama-logits MODEL.gguf IDS OUT [N_CTX=tokens] [THREADS=2]
//
// IDS: comma-separated token ids, evaluated in one batch from position 0. N_CTX is the
// context size llama.cpp is created with; it matters for LongRoPE (phi3/phimoe choose the
// long factors when the context exceeds the original one), so it defaults to the sequence
// length, the closest llama.cpp gets to HF's per-pass choice (llama.cpp pads it to a
// multiple of 256). The KV cache is f32 and flash attention is off.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static bool no_progress(float progress, void* user) {
  (void)progress;
  (void)user;
  return true;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL.gguf IDS OUT [N_CTX] [THREADS]\n", argv[0]);
    return 2;
  }
  int n = 0;
  int cap = 64;
  llama_token* ids = malloc(sizeof(llama_token) * (size_t)cap);
  for (char* s = strtok(argv[2], ","); s != NULL; s = strtok(NULL, ",")) {
    char* end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 0) {
      fprintf(stderr, "bad token id '%s' in IDS\n", s);
      return 2;
    }
    if (n == cap) ids = realloc(ids, sizeof(llama_token) * (size_t)(cap *= 2));
    ids[n++] = (llama_token)v;
  }
  if (n == 0) {
    fprintf(stderr, "IDS holds no token id\n");
    return 2;
  }
  const int n_ctx = argc > 4 ? atoi(argv[4]) : n;
  const int threads = argc > 5 ? atoi(argv[5]) : 2;
  if (n_ctx < n) {
    fprintf(stderr, "N_CTX %d is shorter than the %d ids\n", n_ctx, n);
    return 2;
  }

  llama_log_set(quiet, NULL);
  llama_backend_init();
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.progress_callback = no_progress;
  struct llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == NULL) {
    fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n_ctx;
  cp.n_batch = (uint32_t)n_ctx;
  cp.n_ubatch = (uint32_t)n_ctx;
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  // An f32 KV cache (llama.cpp's default is f16) and no flash attention (its CPU kernel
  // rounds through f16: ~5e-3 on the tiny phimoe's logits), so a comparison shows the
  // model's semantics rather than llama.cpp's storage choices.
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) {
    fprintf(stderr, "cannot create a context of %d tokens\n", n_ctx);
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  struct llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  if (llama_decode(ctx, batch) != 0) {
    fprintf(stderr, "llama_decode failed\n");
    return 1;
  }
  FILE* out = fopen(argv[3], "wb");
  if (out == NULL) {
    fprintf(stderr, "cannot write %s\n", argv[3]);
    return 1;
  }
  for (int i = 0; i < n; ++i) {
    const float* row = llama_get_logits_ith(ctx, i);
    if (fwrite(row, sizeof(float), (size_t)vocab, out) != (size_t)vocab) {
      fprintf(stderr, "short write to %s\n", argv[3]);
      return 1;
    }
  }
  fclose(out);
  fprintf(stderr, "wrote %s: %d x %d float32 (n_ctx %d)\n", argv[3], n, vocab, n_ctx);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  free(ids);
  return 0;
}
