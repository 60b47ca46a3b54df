#include "kernels/decode_order.h"

#include <cpuid.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace moex::kernels {
namespace {

DecodeStreamOrder DefaultOrder() {
  // MOEX_DECODE_ORDER=interleaved|sequential overrides the vendor choice (for CPUs not
  // measured yet, and for side-by-side engine runs).
  if (const char* env = std::getenv("MOEX_DECODE_ORDER"); env != nullptr) {
    if (std::strcmp(env, "sequential") == 0) return DecodeStreamOrder::kSequential;
    if (std::strcmp(env, "interleaved") == 0) return DecodeStreamOrder::kInterleaved;
    std::fprintf(stderr, "moex: ignoring MOEX_DECODE_ORDER=%s (use interleaved or sequential)\n",
                 env);
  }
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return DecodeStreamOrder::kInterleaved;
  char vendor[13];
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  vendor[12] = '\0';
  return std::strcmp(vendor, "AuthenticAMD") == 0 ? DecodeStreamOrder::kSequential
                                                  : DecodeStreamOrder::kInterleaved;
}

std::atomic<DecodeStreamOrder>& Order() {
  static std::atomic<DecodeStreamOrder> order{DefaultOrder()};
  return order;
}

}  // namespace

DecodeStreamOrder GetDecodeStreamOrder() {
  return Order().load(std::memory_order_relaxed);
}

void SetDecodeStreamOrder(DecodeStreamOrder order) {
  Order().store(order, std::memory_order_relaxed);
}

const char* DecodeStreamOrderName(DecodeStreamOrder order) {
  return order == DecodeStreamOrder::kSequential ? "sequential" : "interleaved";
}

}  // namespace moex::kernels
