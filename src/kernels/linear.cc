// Linear: y = x W^T + b for every weight dtype, parallel over chunks of output rows; several
// outputs of one input share one parallel region.
#include "kernels/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/gemm-inl.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/activation_precision.h"
#include "kernels/ops.h"
#include "kernels/quant_expert_ffn.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {

// Rows [begin, end) of one Linear.
template <DType kT>
void LinearRows(const LinearOutput& o, const float* x, size_t n, size_t begin, size_t end) {
  const size_t out = static_cast<size_t>(o.out), in = static_cast<size_t>(o.in);
  const std::byte* w = o.w;
  const size_t row_bytes = DTypeBytes(kT, static_cast<int64_t>(in));
  const auto row = [w, row_bytes](size_t r) { return w + r * row_bytes; };
  DotRows<kT>(row, begin, end, x, in, n, in, o.y, out);
  if (o.bias != nullptr) {
    for (size_t t = 0; t < n; ++t) {
      for (size_t r = begin; r < end; ++r) o.y[t * out + r] += o.bias[r];
    }
  }
}

void LinearRowsAnyType(const LinearOutput& o, const float* x, size_t n, size_t begin, size_t end) {
  switch (o.dtype) {
    case DType::kF32:
      return LinearRows<DType::kF32>(o, x, n, begin, end);
    case DType::kF16:
      return LinearRows<DType::kF16>(o, x, n, begin, end);
    case DType::kBF16:
      return LinearRows<DType::kBF16>(o, x, n, begin, end);
    case DType::kQ8_0:
      return LinearRows<DType::kQ8_0>(o, x, n, begin, end);
    default:
      break;  // Refused before dispatch (LinearMulti).
  }
}

struct RowChunk {
  size_t output, begin, end;
};

void LinearMultiImpl(const LinearOutput* outs, size_t count, const float* x, size_t n,
                     ThreadPool* pool) {
  size_t rows = 0, macs = 0;
  for (size_t j = 0; j < count; ++j) {
    rows += static_cast<size_t>(outs[j].out);
    macs += static_cast<size_t>(outs[j].out * outs[j].in) * n;
  }
  // Below ~64k multiply-adds the fork/join costs more than it saves.
  if (macs < (size_t{1} << 16) || pool->size() == 1) {
    for (size_t j = 0; j < count; ++j) {
      LinearRowsAnyType(outs[j], x, n, 0, static_cast<size_t>(outs[j].out));
    }
    return;
  }
  // Chunks are claimed dynamically, several per thread, so a thread slowed down by the
  // machine's other load does not hold the others back. Decode chunks are multiples of
  // the 64-row interleave block; batches need finer chunks to balance their compute.
  const size_t threads = static_cast<size_t>(pool->size());
  const bool decode = n <= kDirectMaxTokens;
  const size_t align = decode ? 64 : 16;
  const size_t target = rows / (threads * (decode ? 8 : 4));
  const size_t grain = std::max(align, (target + align - 1) / align * align);
  thread_local std::vector<RowChunk> chunks;
  chunks.clear();
  for (size_t j = 0; j < count; ++j) {
    const size_t out = static_cast<size_t>(outs[j].out);
    for (size_t r = 0; r < out; r += grain) chunks.push_back({j, r, std::min(out, r + grain)});
  }
  // The pool is not re-entrant, so the list stays valid for the whole region.
  const RowChunk* list = chunks.data();
  pool->ParallelForDynamic(chunks.size(), 1, [&](size_t b, size_t e, int) {
    for (size_t c = b; c < e; ++c) {
      LinearRowsAnyType(outs[list[c].output], x, n, list[c].begin, list[c].end);
    }
  });
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moex::kernels {

HWY_EXPORT(LinearMultiImpl);

namespace {

// y = scale * y + bias for an output that ran without its bias.
void ApplyScale(const LinearOutput& o, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    float* y = o.y + t * o.out;
    if (o.bias != nullptr) {
      for (int64_t r = 0; r < o.out; ++r) y[r] = o.scale * y[r] + o.bias[r];
    } else {
      for (int64_t r = 0; r < o.out; ++r) y[r] *= o.scale;
    }
  }
}

}  // namespace

void LinearMulti(std::span<const LinearOutput> outs, const float* x, int64_t n, ThreadPool& pool) {
  Check(n >= 0, "Linear: negative batch");
  for (const LinearOutput& o : outs) {
    Check(o.out >= 0 && o.in >= 0, "Linear: negative shape");
    Check(o.in == outs[0].in, "Linear: outputs of one call share the input width");
    Check(o.in % DTypeBlockElems(o.dtype) == 0, "Linear: ", DTypeName(o.dtype), " input width ",
          o.in, " is not a multiple of ", DTypeBlockElems(o.dtype));
  }
  if (n == 0 || outs.empty()) return;
  // Scaled outputs (rare: files with llama.cpp's .scale tensors) run without their bias,
  // which is added after the scale, as llama.cpp does.
  const auto scaled = [](const LinearOutput& o) { return o.scale != 1.0f; };
  if (std::any_of(outs.begin(), outs.end(), scaled)) {
    std::vector<LinearOutput> unscaled(outs.begin(), outs.end());
    for (LinearOutput& o : unscaled) {
      if (o.scale != 1.0f) o.bias = nullptr;
      o.scale = 1.0f;
    }
    LinearMulti(unscaled, x, n, pool);
    for (const LinearOutput& o : outs)
      if (o.scale != 1.0f) ApplyScale(o, n);
    return;
  }
  // Block formats other than q8_0 go to the block kernels (quant_expert_ffn.cc), one output
  // at a time; with int8 activations all of them (q8_0 included) in one region with x
  // rounded once. Outputs are independent, so splitting a call changes no bits.
  const bool int8 = GetActivationPrecision() == ActivationPrecision::kInt8;
  std::vector<LinearOutput> plain, blocks;
  for (const LinearOutput& o : outs) {
    if (IsLinearDType(o.dtype) && !(int8 && o.dtype == DType::kQ8_0)) {
      plain.push_back(o);
    } else if (int8) {
      blocks.push_back(o);
    } else {
      QuantLinear(o, x, n, pool);
    }
  }
  if (!blocks.empty()) QuantLinearMultiInt8(blocks, x, n, pool);
  if (plain.empty()) return;
  HWY_DYNAMIC_DISPATCH(LinearMultiImpl)(plain.data(), plain.size(), x, static_cast<size_t>(n), &pool);
}

void LinearMulti(std::span<const LinearOutput> outs, const float* x, int64_t n) {
  LinearMulti(outs, x, n, ThreadPool::Global());
}

void Linear(const std::byte* w, DType dtype, int64_t out, int64_t in, const float* x, int64_t n,
            float* y, const float* bias, ThreadPool& pool) {
  const LinearOutput o{w, dtype, out, in, y, bias};
  LinearMulti(std::span<const LinearOutput>(&o, 1), x, n, pool);
}

void Linear(const std::byte* w, DType dtype, int64_t out, int64_t in, const float* x, int64_t n,
            float* y, const float* bias) {
  Linear(w, dtype, out, in, x, n, y, bias, ThreadPool::Global());
}

}  // namespace moex::kernels
#endif  // HWY_ONCE
