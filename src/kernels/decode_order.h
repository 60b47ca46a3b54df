// How the decode (1–2 token) matrix-vector path walks weight rows. The fastest order
// depends on the CPU's prefetchers, so it is chosen per CPU and can be set for measurement:
//  * kInterleaved: eight rows at a time, one accumulator each (eight concurrent streams;
//    rows shorter than half a page further interleaved). Measured fastest on Intel
//    Sapphire Rapids, where the L2 streamer follows one stream per 4 KiB page.
//  * kSequential: one row at a time, a software prefetch a fixed distance ahead, so a
//    thread's share of a matrix is one forward stream. Measured 1.3–1.5x faster than
//    kInterleaved on AMD Zen 5 (docs/benchmarks.md, "Decode stream order").
// Both give the same bits: a row's dot product is the same FMA chain in either order.
#pragma once

namespace moex::kernels {

enum class DecodeStreamOrder { kInterleaved, kSequential };

// The order for this CPU (kSequential on AMD, kInterleaved otherwise; the environment
// variable MOEX_DECODE_ORDER=interleaved|sequential overrides it) unless set.
DecodeStreamOrder GetDecodeStreamOrder();
// For benchmarks that compare the orders side by side; not for use while kernels run.
void SetDecodeStreamOrder(DecodeStreamOrder order);
const char* DecodeStreamOrderName(DecodeStreamOrder order);

}  // namespace moex::kernels
