#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <string_view>

namespace moex {

namespace {

constexpr size_t kPageBytes = 4096;

size_t RoundUp(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

bool HugePagesWanted() {
  static const bool wanted = [] {
    const char* env = std::getenv("MOEX_HUGE_PAGES");
    return env == nullptr || std::string_view(env) != "0";
  }();
  return wanted;
}

}  // namespace

std::byte* MapHugePages(size_t bytes) {
  // Only whole huge pages inside the mapping become huge; the tail keeps small pages, so a
  // buffer costs no more memory than its size.
  const size_t size = RoundUp(bytes, kPageBytes);
  // Over-map by one huge page and trim, since mmap only promises 4 KiB alignment.
  const size_t span = size + kHugePageBytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(base, kHugePageBytes);
  if (aligned > base) ::munmap(raw, aligned - base);
  const uintptr_t end = aligned + size;
  if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
  AdviseHugePages(reinterpret_cast<void*>(aligned), size);
  return reinterpret_cast<std::byte*>(aligned);
}

void UnmapHugePages(std::byte* p, size_t bytes) {
  if (p != nullptr) ::munmap(p, RoundUp(bytes, kPageBytes));
}

void AdviseHugePages(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
  if (!HugePagesWanted()) return;
  ::madvise(p, bytes, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace moex
