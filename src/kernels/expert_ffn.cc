// ExpertFfn: routed-expert SwiGLU on neuron-major records.
//
// Two phases. Gate/up: h[t, i] = silu(gate_i . x_t) * (up_i . x_t), a dot-form GEMM over
// the gate and up rows (the same DotRows as Linear). Down: y[t, :] += h[t, i] * down_i for
// i in order, an outer-product tile whose accumulators start from y and take one FMA per
// neuron, so every output element is the same sequential FMA chain however the neurons
// arrive in chunks. Phase 1 may be split by neuron ranges and phase 2 by output columns
// across threads without changing a bit; small experts run as whole jobs on one thread.
#include "kernels/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/expert_ffn.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/gemm-inl.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "kernels/partition.h"
#include "kernels/quant_expert_ffn.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {

// Down tiles: kDownTokens tokens x kDownCols vectors of output columns for batches, and
// kSmallCols vectors for one or two tokens (whose FMA chains are latency bound).
#if MOEX_AVX512_TARGET
constexpr size_t kDownTokens = 4;
constexpr size_t kDownCols = 5;   // 20 accumulators + 4 broadcasts + 1 weight of 32.
constexpr size_t kSmallCols = 8;  // Up to 16 accumulators.
#else
constexpr size_t kDownTokens = 2;
constexpr size_t kDownCols = 4;
constexpr size_t kSmallCols = 4;
#endif
// Batches of up to this many tokens read the down columns straight from the records.
constexpr size_t kSmallBatch = 2;
// Neurons per pass over a column range for small batches: each record's slice of the down
// column is read as one contiguous run, and few pages are live at a time.
constexpr size_t kNeuronBlock = 16;
// Larger batches widen a panel of kPanelNeurons x (kPanelVectors vectors) down weights to a
// contiguous f32 scratch (L1-sized) and reuse it for every token tile; reading the records
// directly would touch one page per neuron per tile and thrash the TLB.
constexpr size_t kPanelNeurons = 64;
constexpr size_t kPanelVectors = 2 * kDownCols;

// y[t * ldy + c*N + lane] += sum over i < m of h[t * ldh + i] * w_i[wcol + c*N + lane], with
// w_i = down + i * rec, i in order: one FMA per neuron on accumulators loaded from y.
template <DType kT, size_t T, size_t C>
HWY_INLINE void DownTile(const std::byte* down, size_t rec, size_t wcol, size_t m, const float* h,
                         size_t ldh, float* y, size_t ldy) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[T][C];
#pragma GCC unroll 8
  for (size_t t = 0; t < T; ++t) {
#pragma GCC unroll 8
    for (size_t c = 0; c < C; ++c) acc[t][c] = hn::LoadU(df, y + t * ldy + c * N);
  }
  for (size_t i = 0; i < m; ++i) {
    const std::byte* w = down + i * rec;
    VF hv[T];
#pragma GCC unroll 8
    for (size_t t = 0; t < T; ++t) hv[t] = hn::Set(df, h[t * ldh + i]);
#pragma GCC unroll 8
    for (size_t c = 0; c < C; ++c) {
      const VF wv = LoadW<kT>(df, w, wcol + c * N);
#pragma GCC unroll 8
      for (size_t t = 0; t < T; ++t) acc[t][c] = hn::MulAdd(hv[t], wv, acc[t][c]);
    }
  }
#pragma GCC unroll 8
  for (size_t t = 0; t < T; ++t) {
#pragma GCC unroll 8
    for (size_t c = 0; c < C; ++c) hn::StoreU(acc[t][c], df, y + t * ldy + c * N);
  }
}

// DownTile with the token count t (1 <= t <= kMaxT) chosen at run time.
template <DType kT, size_t kMaxT, size_t C>
HWY_INLINE void DownTileN(size_t t, const std::byte* down, size_t rec, size_t wcol, size_t m,
                          const float* h, size_t ldh, float* y, size_t ldy) {
  if constexpr (kMaxT > 1) {
    if (t < kMaxT) return DownTileN<kT, kMaxT - 1, C>(t, down, rec, wcol, m, h, ldh, y, ldy);
  }
  DownTile<kT, kMaxT, C>(down, rec, wcol, m, h, ldh, y, ldy);
}

// Columns that do not fill a vector: one lane at a time with the target's own MulAdd, so
// each element gets exactly the operation it would get inside a vector. h is dense here.
template <DType kT>
HWY_INLINE void DownTail(const std::byte* down, size_t rec, size_t m, const float* h, float* y,
                         size_t col) {
  const hn::CappedTag<float, 1> d1;
  auto acc = hn::Set(d1, *y);
  for (size_t i = 0; i < m; ++i) {
    acc = hn::MulAdd(hn::Set(d1, h[i]), hn::Set(d1, LoadScalar<kT>(down + i * rec, col)), acc);
  }
  *y = hn::GetLane(acc);
}

// Down projection for columns [c0, c1) of one job (c0 a multiple of 16). Every path keeps
// each element's chain in neuron order, so all of them give the same bits.
template <DType kT>
void DownCols(const std::byte* down, size_t rec, size_t m, const float* h, size_t ldh, size_t n,
              float* y, size_t d, size_t c0, size_t c1) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t vend = c0 + (c1 - c0) / N * N;
  if (n <= kSmallBatch) {
    for (size_t i = 0; i < m; i += kNeuronBlock) {
      const size_t nb = std::min(kNeuronBlock, m - i);
      const std::byte* db = down + i * rec;
      size_t col = c0;
      for (; col + kSmallCols * N <= vend; col += kSmallCols * N) {
        DownTileN<kT, kSmallBatch, kSmallCols>(n, db, rec, col, nb, h + i, ldh, y + col, d);
      }
      for (; col < vend; col += N) {
        DownTileN<kT, kSmallBatch, 1>(n, db, rec, col, nb, h + i, ldh, y + col, d);
      }
    }
  } else if (n <= kDirectFewTokens) {
    // A few tokens: down columns straight from the records (as for one or two tokens),
    // token tiles re-reading each block's small weight slice from L1.
    for (size_t i = 0; i < m; i += kNeuronBlock) {
      const size_t nb = std::min(kNeuronBlock, m - i);
      const std::byte* db = down + i * rec;
      size_t col = c0;
      for (; col + kDownCols * N <= vend; col += kDownCols * N) {
        for (size_t t = 0; t < n; t += kDownTokens) {
          DownTileN<kT, kDownTokens, kDownCols>(std::min(kDownTokens, n - t), db, rec, col, nb,
                                                h + t * ldh + i, ldh, y + t * d + col, d);
        }
      }
      for (; col < vend; col += N) {
        for (size_t t = 0; t < n; t += kDownTokens) {
          DownTileN<kT, kDownTokens, 1>(std::min(kDownTokens, n - t), db, rec, col, nb,
                                        h + t * ldh + i, ldh, y + t * d + col, d);
        }
      }
    }
  } else {
    const size_t panel_cols = kPanelVectors * N;
    float* panel = GemmScratch(kPanelNeurons * panel_cols);
    const auto* pbytes = reinterpret_cast<const std::byte*>(panel);
    // Token blocks keep their slice of y in L2; within one, neuron blocks go outermost as
    // for small batches, so each block streams contiguous slices of its records and y
    // carries the chains from one block to the next.
    for (size_t tb = 0; tb < n; tb += kTokenBlock) {
      const size_t te = std::min(n, tb + kTokenBlock);
      for (size_t i0 = 0; i0 < m; i0 += kPanelNeurons) {
        const size_t nb = std::min(kPanelNeurons, m - i0);
        for (size_t cb = c0; cb < vend; cb += panel_cols) {
          const size_t width = std::min(panel_cols, vend - cb);  // A multiple of N.
          for (size_t i = 0; i < nb; ++i) {
            const std::byte* w = down + (i0 + i) * rec;
            for (size_t c = 0; c < width; c += N) {
              hn::StoreU(LoadW<kT>(df, w, cb + c), df, panel + i * width + c);
            }
          }
          for (size_t t = tb; t < te; t += kDownTokens) {
            const size_t tt = std::min(kDownTokens, te - t);
            const float* ht = h + t * ldh + i0;
            float* yt = y + t * d + cb;
            size_t col = 0;
            for (; col + kDownCols * N <= width; col += kDownCols * N) {
              DownTileN<DType::kF32, kDownTokens, kDownCols>(tt, pbytes, width * 4, col, nb, ht,
                                                             ldh, yt + col, d);
            }
            for (; col < width; col += N) {
              DownTileN<DType::kF32, kDownTokens, 1>(tt, pbytes, width * 4, col, nb, ht, ldh,
                                                     yt + col, d);
            }
          }
        }
      }
    }
  }
  if (vend == c1) return;
  std::vector<float> ht(m);
  for (size_t t = 0; t < n; ++t) {
    std::copy(h + t * ldh, h + t * ldh + m, ht.begin());
    for (size_t col = vend; col < c1; ++col) {
      DownTail<kT>(down, rec, m, ht.data(), y + t * d + col, col);
    }
  }
}

// One job for one or two tokens as a single forward walk over its records (the sequential
// decode order, kernels/decode_order.h): per neuron, the gate and up dots, h, then the
// down projection of that one neuron (DownCols over a one-neuron range). Chunk invariance
// makes this the same bits as the two-phase path; only the order of memory reads differs.
template <DType kT>
void FusedNeuronWalk(const ExpertJob& job, size_t d, size_t row_bytes, const ExpertActivation& act) {
  const size_t n = static_cast<size_t>(job.n), m = static_cast<size_t>(job.neuron_count);
  const size_t rec = 3 * row_bytes;
  const float* xs[kSmallBatch];
  for (size_t t = 0; t < n; ++t) xs[t] = job.x + t * d;
  for (size_t i = 0; i < m; ++i) {
    const std::byte* gate = job.records + i * rec;
    const std::byte* up = gate + row_bytes;
    float g[kSmallBatch], u[kSmallBatch];
    DotTileN<kT, 1, kSmallBatch, kDecodePrefetchBytes>(&gate, xs, n, d, g, 1);
    DotTileN<kT, 1, kSmallBatch, kDecodePrefetchBytes>(&up, xs, n, d, u, 1);
    NeuronScaleAndBias(g, u, n, job.gate_scale, job.up_scale, job.gate_bias, job.up_bias, i);
    GatedActArray(act.limit, act.alpha, g, u, n, nullptr, nullptr);  // h[t] in g[t].
    DownCols<kT>(up + row_bytes, rec, 1, g, 1, n, job.y, d, 0, d);
  }
}

template <DType kT>
void ExpertFfnT(std::span<const ExpertJob> jobs, size_t d, ThreadPool& pool,
                const ExpertActivation& act) {
  const size_t row_bytes = DTypeBytes(kT, static_cast<int64_t>(d));
  const size_t rec = 3 * row_bytes;
  const size_t num_jobs = jobs.size();

  // Gate/up results per job: gu[t * 2m + i] = gate, gu[t * 2m + m + i] = up; h overwrites
  // the gate half.
  thread_local std::vector<float> gu_storage;
  std::vector<size_t> gu_offset(num_jobs + 1, 0);
  std::vector<size_t> neurons(num_jobs), columns(num_jobs);
  std::vector<uint64_t> neuron_cost(num_jobs), column_cost(num_jobs), job_cost(num_jobs);
  uint64_t total_cost = 0, max_cost = 0, total_bytes = 0;
  for (size_t j = 0; j < num_jobs; ++j) {
    const ExpertJob& job = jobs[j];
    const bool empty = job.n <= 0 || job.neuron_count <= 0;
    const size_t n = empty ? 0 : static_cast<size_t>(job.n);
    const size_t m = empty ? 0 : static_cast<size_t>(job.neuron_count);
    gu_offset[j + 1] = gu_offset[j] + n * 2 * m;
    neurons[j] = m;
    columns[j] = m == 0 ? 0 : d;
    // Work per neuron ~ its tokens plus the cost of streaming the record once.
    neuron_cost[j] = n + 2;
    column_cost[j] = m * (n + 2);
    job_cost[j] = m * (n + 2);
    total_cost += m * (n + 2);
    max_cost = std::max<uint64_t>(max_cost, m * (n + 2));
    total_bytes += m * rec;
  }
  if (total_cost == 0) return;
  if (gu_storage.size() < gu_offset[num_jobs]) gu_storage.resize(gu_offset[num_jobs]);
  float* gu = gu_storage.data();

  const auto gate_up = [&](size_t j, size_t a, size_t b) {
    const ExpertJob& job = jobs[j];
    const size_t n = static_cast<size_t>(job.n), m = neurons[j];
    const std::byte* base = job.records;
    float* g = gu + gu_offset[j];
    const auto gate_row = [base, rec](size_t i) { return base + i * rec; };
    const auto up_row = [base, rec, row_bytes](size_t i) { return base + i * rec + row_bytes; };
    DotRows<kT>(gate_row, a, b, job.x, d, n, d, g, 2 * m);
    DotRows<kT>(up_row, a, b, job.x, d, n, d, g + m, 2 * m);
    const float* gb = job.gate_bias != nullptr ? job.gate_bias + a : nullptr;
    const float* ub = job.up_bias != nullptr ? job.up_bias + a : nullptr;
    for (size_t t = 0; t < n; ++t)
      GatedActArray(act.limit, act.alpha, g + t * 2 * m + a, g + t * 2 * m + m + a, b - a, gb, ub,
                    job.gate_scale, job.up_scale);
  };
  const auto down = [&](size_t j, size_t c0, size_t c1) {
    const ExpertJob& job = jobs[j];
    DownCols<kT>(job.records + 2 * row_bytes, rec, neurons[j], gu + gu_offset[j], 2 * neurons[j],
                 static_cast<size_t>(job.n), job.y, d, c0, c1);
  };

  const size_t workers = static_cast<size_t>(pool.size());
  // Whole jobs per thread when they balance well or are too small to be worth a barrier.
  const bool whole_jobs =
      workers == 1 || max_cost * workers * 4 <= total_cost * 5 || total_bytes < (size_t{1} << 20);
  if (whole_jobs) {
    // Threads claim whole jobs, largest first, so one the OS slows down (the machine is
    // shared) takes fewer of them instead of holding the others back.
    std::vector<size_t> order(num_jobs);
    for (size_t j = 0; j < num_jobs; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return job_cost[a] > job_cost[b]; });
    const bool fused = GetDecodeStreamOrder() == DecodeStreamOrder::kSequential;
    const auto run = [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) {
        const size_t j = order[i];
        if (neurons[j] == 0) continue;
        if (fused && static_cast<size_t>(jobs[j].n) <= kSmallBatch) {
          FusedNeuronWalk<kT>(jobs[j], d, row_bytes, act);
          continue;
        }
        gate_up(j, 0, neurons[j]);
        down(j, 0, d);
      }
    };
    if (workers == 1) {
      run(0, num_jobs, 0);
    } else {
      pool.ParallelForDynamic(num_jobs, 1, run);
    }
    return;
  }
  pool.ParallelFor(workers, 1, [&](size_t b, size_t e, int) {
    for (size_t w = b; w < e; ++w) {
      for (const WorkRange& r : PartitionWork(neurons, neuron_cost, kTileRows, w, workers)) {
        gate_up(r.item, r.begin, r.end);
      }
    }
  });
  pool.ParallelFor(workers, 1, [&](size_t b, size_t e, int) {
    for (size_t w = b; w < e; ++w) {
      // 16-column boundaries: whole cache lines of y per worker, vector-aligned columns.
      for (const WorkRange& r : PartitionWork(columns, column_cost, 16, w, workers)) {
        down(r.item, r.begin, r.end);
      }
    }
  });
}

void ExpertFfnImpl(const ExpertJob* jobs, size_t num_jobs, DType dtype, size_t d,
                   ThreadPool* pool, const ExpertActivation* act) {
  const std::span<const ExpertJob> s(jobs, num_jobs);
  switch (dtype) {
    case DType::kF32:
      return ExpertFfnT<DType::kF32>(s, d, *pool, *act);
    case DType::kF16:
      return ExpertFfnT<DType::kF16>(s, d, *pool, *act);
    case DType::kBF16:
      return ExpertFfnT<DType::kBF16>(s, d, *pool, *act);
    default:
      break;  // Block formats run in quant_expert_ffn.cc.
  }
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moex::kernels {

HWY_EXPORT(ExpertFfnImpl);

ExpertEncoding ExpertEncoding::Uniform(DType dtype, int64_t d_model) {
  ExpertEncoding e;
  e.gate_up = e.down = dtype;
  e.group_neurons = DTypeBlockElems(dtype);
  e.record_bytes = e.NaturalRecordBytes(d_model);
  return e;
}

size_t ExpertEncoding::NaturalRecordBytes(int64_t d_model) const {
  return 2 * DTypeBytes(gate_up, d_model) + DTypeBytes(down, d_model);
}

void ExpertFfn(std::span<const ExpertJob> jobs, const ExpertEncoding& encoding, int64_t d_model,
               ThreadPool& pool, const ExpertActivation& act) {
  Check(d_model > 0, "ExpertFfn: d_model must be positive");
  Check(act.limit >= 0 && act.alpha > 0, "ExpertFfn: bad activation parameters");
  for (const ExpertJob& job : jobs)
    Check((job.gate_bias == nullptr) == (job.up_bias == nullptr),
          "ExpertFfn: gate and up biases come together");
  if (IsBlockQuantized(encoding.gate_up) || IsBlockQuantized(encoding.down))
    return QuantExpertFfn(jobs, encoding, d_model, pool, act);
  // f32/f16/bf16 records are [gate row | up row | down column] of one dtype.
  Check(encoding.down == encoding.gate_up && encoding.group_neurons == 1 &&
            encoding.record_bytes == encoding.NaturalRecordBytes(d_model),
        "ExpertFfn: ", DTypeName(encoding.gate_up), " gate/up with ", DTypeName(encoding.down),
        " down in groups of ", encoding.group_neurons,
        " neurons is not a record layout the kernels know");
  if (jobs.empty()) return;
  HWY_DYNAMIC_DISPATCH(ExpertFfnImpl)
  (jobs.data(), jobs.size(), encoding.gate_up, static_cast<size_t>(d_model), &pool, &act);
}

void ExpertFfn(std::span<const ExpertJob> jobs, DType dtype, int64_t d_model, ThreadPool& pool,
               const ExpertActivation& act) {
  ExpertFfn(jobs, ExpertEncoding::Uniform(dtype, d_model), d_model, pool, act);
}

void ExpertFfn(std::span<const ExpertJob> jobs, DType dtype, int64_t d_model,
               const ExpertActivation& act) {
  ExpertFfn(jobs, dtype, d_model, ThreadPool::Global(), act);
}

}  // namespace moex::kernels
#endif  // HWY_ONCE
