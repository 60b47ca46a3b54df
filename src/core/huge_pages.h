// Large anonymous memory backed by transparent huge pages where the kernel allows them.
// Decode reads each expert it routes to, and every weight matrix, once per token out of
// gigabytes: with 4 KiB pages that is a TLB miss at every new page. Hosts that run THP in
// "madvise" mode (Debian's default) give huge pages only to ranges that ask for them.
#pragma once

#include <cstddef>

namespace moex {

// Size from which AlignedBuffer maps its memory and asks for huge pages.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Zero-filled, kHugePageBytes-aligned anonymous memory of `bytes` (rounded up to whole 4 KiB
// pages), advised MADV_HUGEPAGE; memory is committed as it is touched. Throws
// std::bad_alloc when the address space cannot be had. Release with UnmapHugePages.
std::byte* MapHugePages(size_t bytes);
void UnmapHugePages(std::byte* p, size_t bytes);

// Asks for huge pages over an existing anonymous mapping (best effort: a kernel without
// THP, or with it off, keeps small pages and loses nothing but the speed). MOEX_HUGE_PAGES=0
// turns the request off: on a virtual machine that hands freed memory back to its host,
// huge pages cost more to commit (docs/kernels.md has the measurements).
void AdviseHugePages(void* p, size_t bytes);

}  // namespace moex
