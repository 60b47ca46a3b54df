// Kernel benchmark on OLMoE-1B-7B-like shapes, all in one run so the numbers compare:
//  * the machine's streaming-read bandwidth (membw probe),
//  * decode (one token): Linear on 2048x2048 attention projections and ExpertFfn on 8 active
//    experts (d=2048, F=1024), weights cycled through a set far larger than the LLC so they
//    stream from DRAM; reported as GB/s and as a fraction of the measured bandwidth,
//  * prefill (n = 128, 512 tokens): Linear and ExpertFfn GFLOP/s next to OpenBLAS sgemm on
//    the same shapes (OpenBLAS gets as many threads as the kernel pool).
// Decode also runs on the smaller OLMoE "small" shapes of the engine benchmark.
// --quant: only the bandwidth probe and one-token decode through 8 experts in every GGML
// block format (q8_0 ... mxfp4, read in their blocks by kernels/quant_expert_ffn.cc), beside
// f32 (what a dequantised copy streams) and bf16: bytes of weights read per second and the
// fraction of the measured bandwidth, with f32 and with int8 activations side by side.
// --few-tokens: the routed-expert FFN of a pass that gives each expert 1-32 tokens (decode of
// many sequences, the tail of a chunked prefill) in every weight format: one ExpertFfn call
// over 64 OLMoE-1B-7B experts (8 per token), each given the same number of tokens, as
// bench/llamacpp/mul_mat_id_bench.c times llama.cpp's three ggml_mul_mat_id on the same shapes
// (bench/llamacpp/mul_mat_id_compare.sh runs both side by side). --type and --tokens pick one.
// Usage: kernels_bench [--json] [--quick] [--quant | --few-tokens [--type T] [--tokens N]]
#include <cblas.h>

#include <time.h>
#include <algorithm>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "core/quant_format.h"
#include "core/read_bandwidth.h"
#include "core/thread_pool.h"
#include "kernels/activation_precision.h"
#include "kernels/decode_order.h"
#include "kernels/interleave.h"
#include "kernels/ops.h"
#include "kernels/quant_expert_ffn.h"
#include "kernels/quantize.h"

namespace moex::bench {
namespace {

using kernels::ExpertJob;

constexpr int64_t kModel = 2048;    // d_model and attention projection size.
constexpr int64_t kNeurons = 1024;  // Expert intermediate size.
constexpr int kActive = 8;          // Active experts per token.

// Wall-clock and process CPU seconds of one run. On a shared, oversubscribed machine the
// wall time mostly measures the scheduler; CPU time divided by the thread count estimates
// the time the work would take with the cores to itself, so both are reported.
struct Timing {
  double wall = 1e30;
  double cpu = 1e30;
};

double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Best wall and best CPU time of `reps` runs after one warm-up.
Timing BestOf(int reps, const std::function<void()>& fn) {
  fn();
  Timing best;
  for (int i = 0; i < reps; ++i) {
    const double c0 = CpuNow();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best.wall = std::min(best.wall, wall);
    best.cpu = std::min(best.cpu, CpuNow() - c0);
  }
  return best;
}

std::vector<float> Random(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// `count` matrices of rows x cols in `dtype`, contiguous, every byte written.
AlignedBuffer MakeMatrices(DType dtype, int64_t rows, int64_t cols, int count) {
  const size_t row_bytes = DTypeBytes(dtype, cols);
  const size_t bytes = row_bytes * rows * count;
  AlignedBuffer buf(bytes);  // As the model's weights: huge pages where allowed.
  const std::vector<float> row = Random(cols, 1, 0.05f);
  std::vector<std::byte> enc(row_bytes);
  kernels::FromF32(row.data(), dtype, cols, enc.data());
  for (size_t r = 0; r < static_cast<size_t>(rows) * count; ++r) {
    std::memcpy(buf.data() + r * row_bytes, enc.data(), row_bytes);
  }
  return buf;
}

// A throughput (GB/s or GFLOP/s) by wall clock and by CPU time per thread.
struct Rate {
  double wall = 0;
  double cpu = 0;
};

Rate RateOf(double work, const Timing& t, int threads) {
  return {work / t.wall, work / (t.cpu / threads)};
}

struct Decode {
  std::string name;
  Rate gb_per_s;
  double ms_per_call;  // Wall clock.
};

// One-token Linear over `count` distinct rows x cols matrices, as a forward pass would, the
// whole set `passes` times. With count 1 and many passes the weights stay in L2: the
// kernel's compute ceiling, which tells whether the streaming rates are bound by memory
// or by the core.
Decode DecodeLinear(DType dtype, int count, int reps, int threads, int64_t rows = kModel,
                    int64_t cols = kModel, int passes = 1) {
  const AlignedBuffer w = MakeMatrices(dtype, rows, cols, count);
  const size_t bytes = DTypeBytes(dtype, cols) * rows;
  const std::vector<float> x = Random(cols, 2, 1.0f);
  std::vector<float> y(rows);
  // q4_0 and q8_0 model weights carry an interleaved copy (kernels/interleave.h): so here.
  std::vector<std::vector<std::byte>> interleaved(static_cast<size_t>(count));
  if (kernels::InterleavedBlockBytes(dtype) != 0) {
    for (int m = 0; m < count; ++m)
      interleaved[m] = kernels::InterleaveRows(w.data() + m * bytes, dtype, rows, cols);
  }
  const Timing t = BestOf(reps, [&] {
    for (int p = 0; p < passes; ++p) {
      for (int m = 0; m < count; ++m) {
        kernels::LinearOutput o{w.data() + m * bytes, dtype, rows, cols, y.data()};
        if (!interleaved[m].empty()) o.interleaved = interleaved[m].data();
        kernels::LinearMulti(std::span<const kernels::LinearOutput>(&o, 1), x.data(), 1);
      }
    }
  });
  const int calls = count * passes;
  return {std::string(passes > 1 ? "in_L2_" : "") + "linear_" + std::to_string(rows) + "x" +
              std::to_string(cols) + "_" + DTypeName(dtype),
          RateOf(bytes * calls / 1e9, t, threads), t.wall / calls * 1e3};
}

// One token through 8 experts per call, cycling through `pool_experts` resident experts.
Decode DecodeExperts(DType dtype, int pool_experts, int reps, int threads, int64_t d = kModel,
                     int64_t neurons = kNeurons) {
  const size_t expert_bytes = kernels::ExpertRecordBytes(dtype, d) * neurons;
  const AlignedBuffer w = MakeMatrices(dtype, 3 * neurons, d, pool_experts);
  const std::vector<float> x = Random(d, 3, 1.0f);
  std::vector<float> y(kActive * d, 0.0f);
  const int calls = pool_experts / kActive;
  const Timing t = BestOf(reps, [&] {
    for (int c = 0; c < calls; ++c) {
      std::vector<ExpertJob> jobs;
      for (int e = 0; e < kActive; ++e) {
        jobs.push_back(
            {w.data() + (c * kActive + e) * expert_bytes, neurons, x.data(), 1, y.data() + e * d});
      }
      kernels::ExpertFfn(jobs, dtype, d);
    }
  });
  return {"experts_8x" + std::to_string(d) + "x" + std::to_string(neurons) + "_" + DTypeName(dtype),
          RateOf(expert_bytes * kActive * calls / 1e9, t, threads), t.wall / calls * 1e3};
}

struct Prefill {
  std::string name;
  int64_t n;
  Rate gflops;
  Rate openblas_gflops;
};

Prefill PrefillLinear(DType dtype, int64_t n, int reps, int threads) {
  const AlignedBuffer w = MakeMatrices(dtype, kModel, kModel, 1);
  const AlignedBuffer wf = MakeMatrices(DType::kF32, kModel, kModel, 1);
  const std::vector<float> x = Random(n * kModel, 4, 1.0f);
  std::vector<float> y(n * kModel);
  const double gflop = 2.0 * n * kModel * kModel / 1e9;
  const Timing ours =
      BestOf(reps, [&] { kernels::Linear(w.data(), dtype, kModel, kModel, x.data(), n, y.data()); });
  const Timing blas = BestOf(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, kModel, kModel, 1.0f, x.data(), kModel,
                reinterpret_cast<const float*>(wf.data()), kModel, 0.0f, y.data(), kModel);
  });
  return {std::string("linear_2048x2048_") + DTypeName(dtype), n, RateOf(gflop, ours, threads),
          RateOf(gflop, blas, threads)};
}

// n tokens through one expert; OpenBLAS does the same math as two sgemms on f32 weights
// (gate|up stacked, then down) plus an element-wise SwiGLU.
Prefill PrefillExpert(DType dtype, int64_t n, int reps, int threads) {
  const AlignedBuffer w = MakeMatrices(dtype, 3 * kNeurons, kModel, 1);
  const std::vector<float> gate_up = Random(2 * kNeurons * kModel, 5, 0.05f);
  const std::vector<float> down = Random(kModel * kNeurons, 6, 0.05f);
  const std::vector<float> x = Random(n * kModel, 7, 1.0f);
  std::vector<float> y(n * kModel, 0.0f), h(n * 2 * kNeurons);
  const double gflop = 2.0 * n * 3 * kModel * kNeurons / 1e9;
  const ExpertJob job{w.data(), kNeurons, x.data(), n, y.data()};
  const Timing ours =
      BestOf(reps, [&] { kernels::ExpertFfn(std::span<const ExpertJob>(&job, 1), dtype, kModel); });
  const Timing blas = BestOf(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, 2 * kNeurons, kModel, 1.0f, x.data(),
                kModel, gate_up.data(), kModel, 0.0f, h.data(), 2 * kNeurons);
    for (int64_t t = 0; t < n; ++t) {
      kernels::SiluMul(&h[t * 2 * kNeurons], &h[t * 2 * kNeurons + kNeurons], kNeurons);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, kModel, kNeurons, 1.0f, h.data(),
                2 * kNeurons, down.data(), kNeurons, 1.0f, y.data(), kModel);
  });
  return {std::string("expert_2048x1024_") + DTypeName(dtype), n, RateOf(gflop, ours, threads),
          RateOf(gflop, blas, threads)};
}

// A short prefill spreads its tokens over many experts: `experts` jobs of `tokens` tokens
// each, distinct weights, one call (the whole-job schedule). Reported as GFLOP/s and as
// weight GB/s, since each expert's weights are read once for few FMAs per element.
struct FewTokens {
  std::string name;
  Rate gflops, gb_per_s;
};

FewTokens PrefillFewTokenExperts(DType dtype, int experts, int64_t tokens, int reps, int threads) {
  const AlignedBuffer w = MakeMatrices(dtype, 3 * kNeurons, kModel, experts);
  const size_t bytes = DTypeBytes(dtype, kModel) * 3 * kNeurons;
  const std::vector<float> x = Random(tokens * kModel, 7, 1.0f);
  std::vector<std::vector<float>> ys(experts, std::vector<float>(tokens * kModel, 0.0f));
  std::vector<ExpertJob> jobs;
  for (int e = 0; e < experts; ++e) {
    jobs.push_back({w.data() + e * bytes, kNeurons, x.data(), tokens, ys[e].data()});
  }
  const Timing t = BestOf(reps, [&] { kernels::ExpertFfn(jobs, dtype, kModel); });
  const double gflop = 2.0 * tokens * 3 * kModel * kNeurons * experts / 1e9;
  return {"experts_" + std::to_string(experts) + "x" + std::to_string(tokens) + "tok_" +
              DTypeName(dtype),
          RateOf(gflop, t, threads), RateOf(bytes * experts / 1e9, t, threads)};
}

nlohmann::json RateJson(const Rate& r) {
  return {{"wall", r.wall}, {"cpu_time", r.cpu}};
}

// Accuracy of the activation choice: relative RMS error, against a double-precision dot of
// the dequantised weights with the f32 activations, of the kernels' Linear with (a) f32 and
// (b) int8 activations (ActivationPrecision; formats without integer kernels keep f32).
// 256 rows of 2048 weights, activations ~ U(-1, 1) with a few 8x outliers per row.
struct ActivationError {
  double f32 = 0, int8 = 0;
};
ActivationError ActivationErrors(DType t) {
  const int64_t rows = 256, in = kModel;
  const std::vector<float> wf = Random(static_cast<size_t>(rows * in), 11, 0.05f);
  std::vector<std::byte> w(DTypeBytes(t, rows * in));
  for (int64_t r = 0; r < rows; ++r)
    kernels::FromF32(&wf[r * in], t, in, w.data() + r * DTypeBytes(t, in));
  std::vector<float> wq(static_cast<size_t>(rows * in));
  ConvertToF32(w.data(), t, rows * in, wq.data());
  std::vector<float> x = Random(static_cast<size_t>(in), 12, 1.0f);
  for (int64_t k = 0; k < in; k += 97) x[k] *= 8;
  std::vector<float> y32(rows), y8(rows);
  {
    const kernels::ScopedActivationPrecision p(kernels::ActivationPrecision::kF32);
    kernels::Linear(w.data(), t, rows, in, x.data(), 1, y32.data());
  }
  {
    const kernels::ScopedActivationPrecision p(kernels::ActivationPrecision::kInt8);
    kernels::Linear(w.data(), t, rows, in, x.data(), 1, y8.data());
  }
  double e32 = 0, e8 = 0, ref2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double ref = 0;
    for (int64_t k = 0; k < in; ++k) ref += static_cast<double>(wq[r * in + k]) * x[k];
    e32 += (y32[r] - ref) * (y32[r] - ref);
    e8 += (y8[r] - ref) * (y8[r] - ref);
    ref2 += ref * ref;
  }
  return {std::sqrt(e32 / ref2), std::sqrt(e8 / ref2)};
}

// One-token decode through 8 OLMoE-1B-7B experts (d = 2048, F = 1024) per call in each
// block format and in f32 / bf16, cycling through at least 384 MB of experts; block formats
// with f32 and with int8 activations, side by side.
int QuantDecode(bool json, bool quick, int threads, const ReadBandwidth& bw) {
  const int reps = quick ? 2 : 3;
  std::vector<DType> types = {DType::kF32, DType::kBF16};
  for (QuantFormat f : kAllQuantFormats) types.push_back(DTypeOf(f));
  const auto run = [&](DType t, kernels::ActivationPrecision precision) {
    const kernels::ScopedActivationPrecision p(precision);
    const size_t expert_bytes = kernels::ExpertRecordBytes(t, kModel) * kNeurons;
    const size_t want = (quick ? size_t{192} : size_t{384}) << 20;
    const int pool = static_cast<int>((want / expert_bytes + kActive - 1) / kActive * kActive);
    return DecodeExperts(t, pool, reps, threads);
  };
  // One-token Linear 2048 -> 2048 (attention projections, the LM head's rows), cycling
  // through as many bytes as the experts.
  const auto run_linear = [&](DType t, kernels::ActivationPrecision precision) {
    const kernels::ScopedActivationPrecision p(precision);
    const size_t bytes = DTypeBytes(t, kModel) * kModel;
    const size_t want = (quick ? size_t{192} : size_t{384}) << 20;
    return DecodeLinear(t, static_cast<int>((want + bytes - 1) / bytes), reps, threads);
  };
  // One 2048x2048 Linear read again and again from cache: the kernel's compute
  // ceiling per format. Above the streaming bandwidth, the streaming rate is memory-bound.
  const auto run_cached = [&](DType t) {
    const kernels::ScopedActivationPrecision p(kernels::Int8ActivationBlock(t) != 0
                                                   ? kernels::ActivationPrecision::kInt8
                                                   : kernels::ActivationPrecision::kF32);
    return DecodeLinear(t, 1, reps, threads, kModel, kModel, quick ? 50 : 100);
  };
  std::vector<Decode> f32, int8, linear_f32, linear_int8, cached;
  std::vector<ActivationError> errors;
  for (DType t : types) {
    f32.push_back(run(t, kernels::ActivationPrecision::kF32));
    const bool has_int8 = kernels::Int8ActivationBlock(t) != 0;
    int8.push_back(has_int8 ? run(t, kernels::ActivationPrecision::kInt8) : f32.back());
    linear_f32.push_back(run_linear(t, kernels::ActivationPrecision::kF32));
    linear_int8.push_back(has_int8 ? run_linear(t, kernels::ActivationPrecision::kInt8)
                                   : linear_f32.back());
    errors.push_back(IsBlockQuantized(t) ? ActivationErrors(t) : ActivationError{});
    cached.push_back(run_cached(t));
  }
  const auto ratio = [&](const Decode& d) {
    return nlohmann::json{{"wall", d.gb_per_s.wall / bw.wall_gb_per_s},
                          {"cpu_time", d.gb_per_s.cpu / bw.cpu_gb_per_s}};
  };
  if (json) {
    nlohmann::json out;
    out["simd_target"] = kernels::SimdTargetName();
    out["threads"] = threads;
    out["membw_gb_per_s"] = {{"wall", bw.wall_gb_per_s}, {"cpu_time", bw.cpu_gb_per_s}};
    for (size_t i = 0; i < types.size(); ++i) {
      out["quant_decode"][DTypeName(types[i])] = {
          {"case", f32[i].name},
          {"bytes_per_weight", static_cast<double>(DTypeBytes(types[i], 256)) / 256},
          {"int8_kernel", kernels::Int8ActivationBlock(types[i]) != 0},
          {"f32_activations",
           {{"gb_per_s", RateJson(f32[i].gb_per_s)},
            {"ratio_to_membw", ratio(f32[i])},
            {"ms_per_token_8_experts", f32[i].ms_per_call},
            {"rel_rms_error", errors[i].f32}}},
          {"int8_activations",
           {{"gb_per_s", RateJson(int8[i].gb_per_s)},
            {"ratio_to_membw", ratio(int8[i])},
            {"ms_per_token_8_experts", int8[i].ms_per_call},
            {"rel_rms_error", errors[i].int8}}},
          {"linear_2048x2048",
           {{"f32_gb_per_s", RateJson(linear_f32[i].gb_per_s)},
            {"int8_gb_per_s", RateJson(linear_int8[i].gb_per_s)}}},
          {"linear_2048x2048_in_cache",
           {{"gb_per_s", RateJson(cached[i].gb_per_s)}, {"ratio_to_membw", ratio(cached[i])}}},
          {"int8_speedup_wall",
           f32[i].gb_per_s.wall > 0 ? int8[i].gb_per_s.wall / f32[i].gb_per_s.wall : 0.0}};
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf(
      "SIMD target %s, %d threads. Rates: wall-clock GB/s of weights read (share of\n"
      "the streaming bandwidth); f32 | int8 activations, the same run. Experts: one token\n"
      "through 8 OLMoE-1B-7B experts; Linear: one token through 2048x2048 matrices;\n"
      "cached: one 2048x2048 Linear read again and again from cache (int8 where the format\n"
      "has it), the kernel's compute ceiling.\n",
      kernels::SimdTargetName().c_str(), threads);
  std::printf("memory bandwidth (streaming read)  %7.2f | %7.2f GB/s (wall | per CPU time)\n\n",
              bw.wall_gb_per_s, bw.cpu_gb_per_s);
  std::printf("%-8s %7s %25s %8s %22s %18s %16s\n", "experts", "B/wt", "GB/s f32 | int8",
              "int8/f32", "dot rel err f32 | int8", "Linear f32 | int8", "cached");
  for (size_t i = 0; i < types.size(); ++i) {
    const double w32 = f32[i].gb_per_s.wall, w8 = int8[i].gb_per_s.wall;
    const double c = cached[i].gb_per_s.wall;
    std::printf(
        "%-8s %7.4f %6.2f (%3.0f%%) | %6.2f (%3.0f%%) %7.2fx   %.1e | %.1e %8.2f | %6.2f "
        "%7.1f (%3.0f%%)\n",
        DTypeName(types[i]), static_cast<double>(DTypeBytes(types[i], 256)) / 256, w32,
        100 * w32 / bw.wall_gb_per_s, w8, 100 * w8 / bw.wall_gb_per_s, w8 / w32, errors[i].f32,
        errors[i].int8, linear_f32[i].gb_per_s.wall, linear_int8[i].gb_per_s.wall, c,
        100 * c / bw.wall_gb_per_s);
  }
  return 0;
}

// One ExpertFfn call over `experts` experts (d = 2048, F = 1024) of `dtype`, each given
// `per_expert` tokens of their own; the best wall time of `reps` calls after a warm-up.
struct FewTokenFfn {
  DType dtype;
  int per_expert;
  double best_ms;
  double weight_gb;  // Bytes of weights one call reads.
};

FewTokenFfn TimeFewTokenFfn(DType dtype, int experts, int per_expert, int reps) {
  const size_t expert_bytes = kernels::ExpertRecordBytes(dtype, kModel) * kNeurons;
  const AlignedBuffer w = MakeMatrices(dtype, 3 * kNeurons, kModel, experts);
  const std::vector<float> x = Random(static_cast<size_t>(experts) * per_expert * kModel, 7, 1.0f);
  std::vector<float> y(x.size(), 0.0f);
  std::vector<ExpertJob> jobs;
  for (int e = 0; e < experts; ++e) {
    const size_t row = static_cast<size_t>(e) * per_expert * kModel;
    jobs.push_back(
        {w.data() + e * expert_bytes, kNeurons, x.data() + row, per_expert, y.data() + row});
  }
  const Timing t = BestOf(reps, [&] { kernels::ExpertFfn(jobs, dtype, kModel); });
  return {dtype, per_expert, t.wall * 1e3, static_cast<double>(expert_bytes) * experts / 1e9};
}

int FewTokenExpertFfn(bool json, bool quick, int threads, const ReadBandwidth& bw,
                      const std::vector<DType>& types, const std::vector<int>& per_expert) {
  constexpr int kExperts = 64;
  const int reps = quick ? 3 : 7;
  std::vector<FewTokenFfn> runs;
  for (DType t : types) {
    for (int n : per_expert) runs.push_back(TimeFewTokenFfn(t, kExperts, n, reps));
  }
  if (json) {
    nlohmann::json out;
    out["simd_target"] = kernels::SimdTargetName();
    out["threads"] = threads;
    out["membw_gb_per_s"] = {{"wall", bw.wall_gb_per_s}, {"cpu_time", bw.cpu_gb_per_s}};
    out["shape"] = {
        {"d_model", kModel}, {"d_ff", kNeurons}, {"experts", kExperts}, {"used", kActive}};
    for (const FewTokenFfn& r : runs) {
      out["few_tokens"].push_back(
          {{"type", DTypeName(r.dtype)},
           {"tokens_per_expert", r.per_expert},
           {"tokens", r.per_expert * kExperts / kActive},
           {"best_ms", r.best_ms},
           {"weight_gb_per_s", r.weight_gb / (r.best_ms / 1e3)},
           {"ratio_to_membw", r.weight_gb / (r.best_ms / 1e3) / bw.wall_gb_per_s},
           {"gflops",
            2.0 * r.per_expert * kExperts * 3 * kModel * kNeurons / 1e9 / (r.best_ms / 1e3)}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf(
      "SIMD target %s, %d threads. One ExpertFfn call over 64 experts (d = 2048, F = 1024),\n"
      "each given the same number of tokens; best wall time, weight GB/s (share of the\n"
      "streaming bandwidth, %.2f GB/s) and GFLOP/s.\n\n",
      kernels::SimdTargetName().c_str(), threads, bw.wall_gb_per_s);
  std::printf("%-8s %6s %10s %16s %9s\n", "type", "tok/ex", "ms", "GB/s", "GFLOP/s");
  for (const FewTokenFfn& r : runs) {
    const double gb_s = r.weight_gb / (r.best_ms / 1e3);
    std::printf("%-8s %6d %10.2f %8.2f (%3.0f%%) %9.1f\n", DTypeName(r.dtype), r.per_expert,
                r.best_ms, gb_s, 100 * gb_s / bw.wall_gb_per_s,
                2.0 * r.per_expert * kExperts * 3 * kModel * kNeurons / 1e9 / (r.best_ms / 1e3));
  }
  return 0;
}

int Main(int argc, char** argv) {
  bool json = false, quick = false, quant = false, few_tokens = false;
  std::vector<DType> few_types = {DType::kF32, DType::kBF16, DType::kF16};
  for (QuantFormat f : kAllQuantFormats) few_types.push_back(DTypeOf(f));
  std::vector<int> few_per_expert = {1, 2, 4, 8, 16, 32};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--quant") == 0) {
      quant = true;
    } else if (std::strcmp(argv[i], "--few-tokens") == 0) {
      few_tokens = true;
    } else if (std::strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
      try {
        few_types = {ParseDType(argv[++i])};
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kernels_bench: %s\n", e.what());
        return 2;
      }
    } else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
      const int n = std::atoi(argv[++i]);
      if (n < 1 || n > 4096) {
        std::fprintf(stderr, "kernels_bench: --tokens wants 1..4096 tokens per expert\n");
        return 2;
      }
      few_per_expert = {n};
    } else {
      std::fprintf(stderr,
                   "usage: kernels_bench [--json] [--quick] [--quant | --few-tokens [--type T] "
                   "[--tokens N]]\n");
      return 2;
    }
  }
  const int threads = ThreadPool::Global().size();
  openblas_set_num_threads(threads);
  const int reps = quick ? 2 : 4;

  const ReadBandwidth bw = MeasureReadBandwidth(size_t{512} << 20, quick ? 3 : 5);
  if (quant) return QuantDecode(json, quick, threads, bw);
  if (few_tokens) return FewTokenExpertFfn(json, quick, threads, bw, few_types, few_per_expert);
  // Weight sets of 384-512 MB per measurement: several times the LLC (105 MB here).
  // Every decode case runs in both row orders (kernels/decode_order.h), alternating, so
  // their ratio is taken side by side; the CPU's default order is restored afterwards.
  const kernels::DecodeStreamOrder default_order = kernels::GetDecodeStreamOrder();
  std::vector<Decode> decode;
  for (const kernels::DecodeStreamOrder order :
       {kernels::DecodeStreamOrder::kInterleaved, kernels::DecodeStreamOrder::kSequential}) {
    kernels::SetDecodeStreamOrder(order);
    const std::string suffix = std::string("@") + kernels::DecodeStreamOrderName(order);
    std::vector<Decode> cases = {DecodeLinear(DType::kBF16, 64, reps, threads),
                                 DecodeExperts(DType::kBF16, 32, reps, threads)};
    // OLMoE small shapes (the engine benchmark's model): 2 MB projections, the 103 MB LM
    // head, and 1.5 MB experts, where per-call overheads weigh more.
    cases.push_back(DecodeLinear(DType::kBF16, 192, reps, threads, 1024, 1024));
    cases.push_back(DecodeLinear(DType::kBF16, 4, reps, threads, 50304, 1024));
    cases.push_back(DecodeExperts(DType::kBF16, 256, reps, threads, 1024, 256));
    cases.push_back(DecodeLinear(DType::kBF16, 1, reps, threads, 512, 1024, 2000));
    if (!quick) {
      cases.push_back(DecodeLinear(DType::kF32, 32, reps, threads));
      cases.push_back(DecodeLinear(DType::kQ8_0, 96, reps, threads));
      cases.push_back(DecodeExperts(DType::kQ8_0, 64, reps, threads));
    }
    for (Decode& d : cases) {
      d.name += suffix;
      decode.push_back(std::move(d));
    }
  }
  kernels::SetDecodeStreamOrder(default_order);
  const size_t per_order = decode.size() / 2;
  std::vector<Prefill> prefill;
  for (int64_t n : {int64_t{128}, int64_t{512}}) {
    prefill.push_back(PrefillLinear(DType::kF32, n, reps, threads));
    prefill.push_back(PrefillLinear(DType::kBF16, n, reps, threads));
    if (!quick || n == 128) prefill.push_back(PrefillExpert(DType::kBF16, n, reps, threads));
  }

  std::vector<FewTokens> few;
  for (int64_t tokens : {int64_t{4}, int64_t{8}, int64_t{16}}) {
    few.push_back(PrefillFewTokenExperts(DType::kBF16, 16, tokens, reps, threads));
  }

  if (json) {
    nlohmann::json out;
    for (const FewTokens& f : few) {
      out["few_token_experts"][f.name] = {{"gflops", RateJson(f.gflops)},
                                          {"gb_per_s", RateJson(f.gb_per_s)}};
    }
    out["simd_target"] = kernels::SimdTargetName();
    out["threads"] = threads;
    out["membw_gb_per_s"] = {{"wall", bw.wall_gb_per_s}, {"cpu_time", bw.cpu_gb_per_s}};
    out["decode_stream_order_default"] = kernels::DecodeStreamOrderName(default_order);
    for (size_t i = 0; i < per_order; ++i) {
      const Decode& a = decode[i];
      const Decode& b = decode[i + per_order];
      out["decode_sequential_over_interleaved"][a.name.substr(0, a.name.find('@'))] = {
          {"wall", b.gb_per_s.wall / a.gb_per_s.wall},
          {"cpu_time", b.gb_per_s.cpu / a.gb_per_s.cpu}};
    }
    for (const Decode& d : decode) {
      out["decode"][d.name] = {{"gb_per_s", RateJson(d.gb_per_s)},
                               {"ratio_to_membw",
                                {{"wall", d.gb_per_s.wall / bw.wall_gb_per_s},
                                 {"cpu_time", d.gb_per_s.cpu / bw.cpu_gb_per_s}}},
                               {"ms_per_call", d.ms_per_call}};
    }
    for (const Prefill& p : prefill) {
      out["prefill"][p.name + "_n" + std::to_string(p.n)] = {
          {"gflops", RateJson(p.gflops)},
          {"openblas_sgemm_gflops", RateJson(p.openblas_gflops)},
          {"ratio_to_openblas",
           {{"wall", p.gflops.wall / p.openblas_gflops.wall},
            {"cpu_time", p.gflops.cpu / p.openblas_gflops.cpu}}}};
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("SIMD target %s, %d threads. Each rate: wall clock | per CPU time.\n",
              kernels::SimdTargetName().c_str(), threads);
  std::printf("memory bandwidth (streaming read)  %7.2f | %7.2f GB/s\n\n", bw.wall_gb_per_s,
              bw.cpu_gb_per_s);
  std::printf("%-36s %17s %15s %9s\n", "decode (1 token)", "GB/s", "of membw", "ms/call");
  for (const Decode& d : decode) {
    std::printf("%-36s %7.2f | %7.2f %6.0f%% | %4.0f%% %9.3f\n", d.name.c_str(), d.gb_per_s.wall,
                d.gb_per_s.cpu, 100 * d.gb_per_s.wall / bw.wall_gb_per_s,
                100 * d.gb_per_s.cpu / bw.cpu_gb_per_s, d.ms_per_call);
  }
  std::printf("\n%-30s %17s   (this CPU's default: %s)\n", "sequential / interleaved", "ratio",
              kernels::DecodeStreamOrderName(default_order));
  for (size_t i = 0; i < per_order; ++i) {
    const Decode& a = decode[i];
    const Decode& b = decode[i + per_order];
    std::printf("%-30s %7.2f | %7.2f\n", a.name.substr(0, a.name.find('@')).c_str(),
                b.gb_per_s.wall / a.gb_per_s.wall, b.gb_per_s.cpu / a.gb_per_s.cpu);
  }
  std::printf("\n%-36s %17s %17s\n", "few-token experts (short prefill)", "GFLOP/s", "GB/s");
  for (const FewTokens& f : few) {
    std::printf("%-36s %7.1f | %7.1f %7.2f | %7.2f\n", f.name.c_str(), f.gflops.wall, f.gflops.cpu,
                f.gb_per_s.wall, f.gb_per_s.cpu);
  }
  std::printf("\n%-30s %5s %15s %17s %13s\n", "prefill", "n", "GFLOP/s", "OpenBLAS sgemm", "ratio");
  for (const Prefill& p : prefill) {
    std::printf("%-30s %5lld %6.1f | %6.1f %7.1f | %7.1f %5.2f | %5.2f\n", p.name.c_str(),
                static_cast<long long>(p.n), p.gflops.wall, p.gflops.cpu, p.openblas_gflops.wall,
                p.openblas_gflops.cpu, p.gflops.wall / p.openblas_gflops.wall,
                p.gflops.cpu / p.openblas_gflops.cpu);
  }
  return 0;
}

}  // namespace
}  // namespace moex::bench

int main(int argc, char** argv) {
  return moex::bench::Main(argc, argv);
}
