#include "core/read_bandwidth.h"

#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"

namespace moex {

namespace {

// Sums the 64-bit words of [p, p + bytes) (bytes a multiple of 256) as four interleaved
// sequential streams, one per quarter, with the widest vectors the CPU has. The kernels read
// several weight rows at once; a single stream per core keeps fewer cache lines in flight
// and would understate what the memory system delivers.
__attribute__((target("avx512f"))) uint64_t ReadSliceAvx512(const std::byte* p, size_t bytes) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  const auto* v = reinterpret_cast<const __m512i*>(p);
  const size_t q = bytes / 256;  // Lines per stream.
  for (size_t i = 0; i < q; ++i) {
    a = _mm512_add_epi64(a, _mm512_load_si512(v + i));
    b = _mm512_add_epi64(b, _mm512_load_si512(v + q + i));
    c = _mm512_add_epi64(c, _mm512_load_si512(v + 2 * q + i));
    d = _mm512_add_epi64(d, _mm512_load_si512(v + 3 * q + i));
  }
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

__attribute__((target("avx2"))) uint64_t ReadSliceAvx2(const std::byte* p, size_t bytes) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  const auto* v = reinterpret_cast<const __m256i*>(p);
  const size_t q = bytes / 256;  // Lines per stream, two vectors each.
  for (size_t i = 0; i < q; ++i) {
    a = _mm256_add_epi64(
        a, _mm256_add_epi64(_mm256_load_si256(v + 2 * i), _mm256_load_si256(v + 2 * i + 1)));
    b = _mm256_add_epi64(b, _mm256_add_epi64(_mm256_load_si256(v + 2 * (q + i)),
                                             _mm256_load_si256(v + 2 * (q + i) + 1)));
    c = _mm256_add_epi64(c, _mm256_add_epi64(_mm256_load_si256(v + 2 * (2 * q + i)),
                                             _mm256_load_si256(v + 2 * (2 * q + i) + 1)));
    d = _mm256_add_epi64(d, _mm256_add_epi64(_mm256_load_si256(v + 2 * (3 * q + i)),
                                             _mm256_load_si256(v + 2 * (3 * q + i) + 1)));
  }
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
  return out[0] + out[1] + out[2] + out[3];
}

uint64_t ReadSliceSse2(const std::byte* p, size_t bytes) {
  __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
  const auto* v = reinterpret_cast<const __m128i*>(p);
  const size_t q = bytes / 256;  // Lines per stream, four vectors each.
  for (size_t i = 0; i < 4 * q; i += 4) {
    for (size_t k = 0; k < 4; ++k) {
      a = _mm_add_epi64(a, _mm_load_si128(v + i + k));
      b = _mm_add_epi64(b, _mm_load_si128(v + 4 * q + i + k));
      c = _mm_add_epi64(c, _mm_load_si128(v + 8 * q + i + k));
      d = _mm_add_epi64(d, _mm_load_si128(v + 12 * q + i + k));
    }
  }
  alignas(16) uint64_t out[2];
  _mm_store_si128(reinterpret_cast<__m128i*>(out),
                  _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d)));
  return out[0] + out[1];
}

uint64_t ReadSlice(const std::byte* p, size_t bytes) {
  static const int level = __builtin_cpu_supports("avx512f") ? 2
                           : __builtin_cpu_supports("avx2")  ? 1
                                                             : 0;
  return level == 2   ? ReadSliceAvx512(p, bytes)
         : level == 1 ? ReadSliceAvx2(p, bytes)
                      : ReadSliceSse2(p, bytes);
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

ReadBandwidth MeasureReadBandwidth(size_t bytes, int passes) {
  constexpr size_t kPage = 4096;
  bytes = std::max(kPage, bytes / kPage * kPage);
  ThreadPool& pool = ThreadPool::Global();
  // The kind of memory the model's weights live in (huge pages where allowed), every page
  // written first, so that no pass measures page faults.
  AlignedBuffer buf(bytes);
  pool.ParallelFor(bytes, 1 << 20,
                   [&](size_t b, size_t e, int) { std::memset(buf.data() + b, 1, e - b); });
  ReadBandwidth best;
  volatile uint64_t sink = 0;
  for (int pass = 0; pass < passes; ++pass) {
    uint64_t sums[256] = {};
    const double c0 = ProcessCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(bytes / kPage, 16, [&](size_t b, size_t e, int w) {
      sums[w % 256] += ReadSlice(buf.data() + b * kPage, (e - b) * kPage);
    });
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = (ProcessCpuSeconds() - c0) / pool.size();
    for (uint64_t x : sums) sink = sink + x;
    best.wall_gb_per_s = std::max(best.wall_gb_per_s, static_cast<double>(bytes) / wall / 1e9);
    best.cpu_gb_per_s = std::max(best.cpu_gb_per_s, static_cast<double>(bytes) / cpu / 1e9);
  }
  return best;
}

}  // namespace moex
