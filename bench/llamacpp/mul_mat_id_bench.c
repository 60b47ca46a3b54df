// llama.cpp's routed-expert FFN on its CPU backend, timed: the three ggml_mul_mat_id of
// build_moe_ffn (gate, up, down) with SwiGLU between them, for one weight type and a given
// number of tokens per expert. The counterpart of `kernels_bench --few-tokens` (moex's
// ExpertFfn on the same shapes); bench/llamacpp/mul_mat_id_compare.sh runs both side by side.
//
// Weights go where llama.cpp's loader puts them: the first of the CPU device's extra buffer
// types (repacked layouts such as q4_0x8, AMX tiles) whose supports_op accepts this
// mul_mat_id, else plain host memory. One expert's matrices are quantised once and copied to
// every expert (distinct addresses, so the cache sees `experts` different matrices).
// Routing: token t uses experts (t*used + j) mod experts, j < used, so every expert gets
// exactly tokens_per_expert tokens when tokens = tokens_per_expert * experts / used.
//
// Usage: mul_mat_id_bench TYPE D_MODEL D_FF EXPERTS USED TOKENS_PER_EXPERT THREADS REPS
// Prints one JSON object: best and median wall milliseconds per FFN call, and the buffer.
#define _POSIX_C_SOURCE 200809L
#include <ggml-alloc.h>
#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int type_by_name(const char* name) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name((enum ggml_type)t);
    if (n != NULL && strcasecmp(n, name) == 0 && ggml_blck_size((enum ggml_type)t) > 0) return t;
  }
  return -1;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

// Whether `buft` can hold `w` for a mul_mat_id with `used` experts per token (as llama.cpp's
// loader asks it: a dummy buffer on the weight, supports_op on the op).
static int buft_supports(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft,
                         struct ggml_tensor* w, int used) {
  struct ggml_init_params params = {ggml_tensor_overhead() * 8, NULL, true};
  struct ggml_context* ctx = ggml_init(params);
  struct ggml_tensor* b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, w->ne[0], used, 512);
  struct ggml_tensor* ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, used, 512);
  struct ggml_tensor* op = ggml_mul_mat_id(ctx, w, b, ids);
  w->buffer = ggml_backend_buft_alloc_buffer(buft, 0);
  const int ok = ggml_backend_dev_supports_op(dev, op);
  ggml_backend_buffer_free(w->buffer);
  w->buffer = NULL;
  ggml_free(ctx);
  return ok;
}

// Fills `w` ([cols, rows, experts] of its type) with one quantised random expert, repeated.
static void fill_weights(struct ggml_tensor* w, uint32_t seed) {
  const int64_t cols = w->ne[0], rows = w->ne[1], experts = w->ne[2];
  float* src = malloc(sizeof(float) * cols * rows);
  for (int64_t i = 0; i < cols * rows; ++i) {
    seed = seed * 1664525u + 1013904223u;
    src[i] = ((seed >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * 0.05f;
  }
  const size_t expert_bytes = ggml_row_size(w->type, cols) * rows;
  char* data = malloc(expert_bytes * experts);
  if (w->type == GGML_TYPE_F32) {
    memcpy(data, src, expert_bytes);
  } else {
    ggml_quantize_chunk(w->type, src, data, 0, rows, cols, NULL);
  }
  for (int64_t e = 1; e < experts; ++e) memcpy(data + e * expert_bytes, data, expert_bytes);
  ggml_backend_tensor_set(w, data, 0, expert_bytes * experts);  // Whole: repacking needs it.
  free(data);
  free(src);
}

int main(int argc, char** argv) {
  if (argc != 9) {
    fprintf(stderr,
            "usage: mul_mat_id_bench TYPE D_MODEL D_FF EXPERTS USED TOKENS_PER_EXPERT THREADS "
            "REPS\n");
    return 2;
  }
  const int type = type_by_name(argv[1]);
  const int64_t d = atoll(argv[2]), ff = atoll(argv[3]), experts = atoll(argv[4]);
  const int used = atoi(argv[5]), per_expert = atoi(argv[6]), threads = atoi(argv[7]);
  const int reps = atoi(argv[8]);
  if (type < 0 || d <= 0 || ff <= 0 || experts <= 0 || used <= 0 || used > experts ||
      per_expert <= 0 || threads <= 0 || reps <= 0 || (per_expert * experts) % used != 0 ||
      d % ggml_blck_size((enum ggml_type)type) != 0 ||
      ff % ggml_blck_size((enum ggml_type)type) != 0) {
    fprintf(stderr, "mul_mat_id_bench: bad arguments (type '%s')\n", argv[1]);
    return 2;
  }
  const int64_t tokens = per_expert * experts / used;
  ggml_backend_load_all();
  ggml_backend_dev_t dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
  ggml_backend_t backend = ggml_backend_dev_init(dev, NULL);
  ggml_backend_cpu_set_n_threads(backend, threads);

  struct ggml_init_params wparams = {ggml_tensor_overhead() * 4, NULL, true};
  struct ggml_context* wctx = ggml_init(wparams);
  const enum ggml_type wt = (enum ggml_type)type;
  struct ggml_tensor* gate = ggml_new_tensor_3d(wctx, wt, d, ff, experts);
  struct ggml_tensor* up = ggml_new_tensor_3d(wctx, wt, d, ff, experts);
  struct ggml_tensor* down = ggml_new_tensor_3d(wctx, wt, ff, d, experts);

  ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
  ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
  ggml_backend_dev_get_extra_bufts_t extra_fn =
      (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(
          reg, "ggml_backend_dev_get_extra_bufts");
  if (extra_fn != NULL) {
    for (ggml_backend_buffer_type_t* b = extra_fn(dev); b != NULL && *b != NULL; ++b) {
      if (buft_supports(dev, *b, gate, used) && buft_supports(dev, *b, down, used)) {
        buft = *b;
        break;
      }
    }
  }
  ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, buft);
  if (wbuf == NULL) {
    fprintf(stderr, "mul_mat_id_bench: cannot allocate the weights\n");
    return 1;
  }
  fill_weights(gate, 1);
  fill_weights(up, 2);
  fill_weights(down, 3);

  struct ggml_init_params cparams = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL,
                                     true};
  struct ggml_context* ctx = ggml_init(cparams);
  struct ggml_tensor* x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, 1, tokens);
  struct ggml_tensor* ids = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, used, tokens);
  ggml_set_input(x);
  ggml_set_input(ids);
  struct ggml_tensor* g = ggml_mul_mat_id(ctx, gate, x, ids);  // [ff, used, tokens]
  struct ggml_tensor* u = ggml_mul_mat_id(ctx, up, x, ids);
  struct ggml_tensor* h = ggml_swiglu_split(ctx, g, u);
  struct ggml_tensor* y = ggml_mul_mat_id(ctx, down, h, ids);  // [d, used, tokens]
  ggml_set_output(y);
  struct ggml_cgraph* gf = ggml_new_graph(ctx);
  ggml_build_forward_expand(gf, y);
  ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend));
  if (!ggml_gallocr_alloc_graph(galloc, gf)) {
    fprintf(stderr, "mul_mat_id_bench: cannot allocate the graph\n");
    return 1;
  }
  float* xs = malloc(sizeof(float) * d * tokens);
  uint32_t seed = 7;
  for (int64_t i = 0; i < d * tokens; ++i) {
    seed = seed * 1664525u + 1013904223u;
    xs[i] = (seed >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
  }
  int32_t* id = malloc(sizeof(int32_t) * used * tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int j = 0; j < used; ++j) id[t * used + j] = (int32_t)((t * used + j) % experts);
  }
  ggml_backend_tensor_set(x, xs, 0, ggml_nbytes(x));
  ggml_backend_tensor_set(ids, id, 0, ggml_nbytes(ids));

  double* ms = malloc(sizeof(double) * reps);
  ggml_backend_graph_compute(backend, gf);  // Warm-up.
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_ms();
    ggml_backend_graph_compute(backend, gf);
    ms[r] = now_ms() - t0;
  }
  qsort(ms, reps, sizeof(double), cmp_double);
  printf(
      "{\"type\":\"%s\",\"d_model\":%lld,\"d_ff\":%lld,\"experts\":%lld,\"used\":%d,"
      "\"tokens_per_expert\":%d,\"tokens\":%lld,\"threads\":%d,\"buffer\":\"%s\","
      "\"best_ms\":%.4f,\"median_ms\":%.4f}\n",
      ggml_type_name(wt), (long long)d, (long long)ff, (long long)experts, used, per_expert,
      (long long)tokens, threads, ggml_backend_buft_name(buft), ms[0], ms[reps / 2]);
  free(ms);
  free(id);
  free(xs);
  ggml_gallocr_free(galloc);
  ggml_free(ctx);
  ggml_backend_buffer_free(wbuf);
  ggml_free(wctx);
  ggml_backend_free(backend);
  return 0;
}
