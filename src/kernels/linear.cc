// Linear: y = x W^T + b for every weight dtype, parallel over output rows.
#include "kernels/simd_config.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/linear.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/gemm-inl.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace moex::kernels::HWY_NAMESPACE {

template <DType kT>
void LinearT(const std::byte* w, size_t out, size_t in, const float* x, size_t n, float* y,
             const float* bias, ThreadPool& pool) {
  const size_t row_bytes = DTypeBytes(kT, static_cast<int64_t>(in));
  const auto row = [w, row_bytes](size_t r) { return w + r * row_bytes; };
  const auto run = [&](size_t begin, size_t end, int /*worker*/) {
    DotRows<kT>(row, begin, end, x, in, n, in, y, out);
    if (bias != nullptr) {
      for (size_t t = 0; t < n; ++t) {
        for (size_t r = begin; r < end; ++r) y[t * out + r] += bias[r];
      }
    }
  };
  // Below ~64k multiply-adds the fork/join costs more than it saves.
  if (out * in * n < (size_t{1} << 16) || pool.size() == 1) {
    run(0, out, 0);
  } else {
    pool.ParallelFor(out, 16, run);
  }
}

void LinearImpl(const std::byte* w, DType dtype, size_t out, size_t in, const float* x, size_t n,
                float* y, const float* bias, ThreadPool* pool) {
  switch (dtype) {
    case DType::kF32:
      return LinearT<DType::kF32>(w, out, in, x, n, y, bias, *pool);
    case DType::kF16:
      return LinearT<DType::kF16>(w, out, in, x, n, y, bias, *pool);
    case DType::kBF16:
      return LinearT<DType::kBF16>(w, out, in, x, n, y, bias, *pool);
    case DType::kQ8_0:
      return LinearT<DType::kQ8_0>(w, out, in, x, n, y, bias, *pool);
  }
}

}  // namespace moex::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moex::kernels {

HWY_EXPORT(LinearImpl);

void Linear(const std::byte* w, DType dtype, int64_t out, int64_t in, const float* x, int64_t n,
            float* y, const float* bias, ThreadPool& pool) {
  Check(out >= 0 && in >= 0 && n >= 0, "Linear: negative shape");
  Check(dtype != DType::kQ8_0 || in % kQ8BlockSize == 0, "Linear: q8_0 input width ", in,
        " is not a multiple of 32");
  if (out == 0 || n == 0) return;
  HWY_DYNAMIC_DISPATCH(LinearImpl)
  (w, dtype, static_cast<size_t>(out), static_cast<size_t>(in), x, static_cast<size_t>(n), y, bias,
   &pool);
}

void Linear(const std::byte* w, DType dtype, int64_t out, int64_t in, const float* x, int64_t n,
            float* y, const float* bias) {
  Linear(w, dtype, out, in, x, n, y, bias, ThreadPool::Global());
}

}  // namespace moex::kernels
#endif  // HWY_ONCE
