// Memory-bandwidth probe: streaming read of a buffer far larger than the LLC with every
// thread of the global pool (MOEX_THREADS to change it). Usage: membw [--mib N] [--json]
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/read_bandwidth.h"
#include "core/thread_pool.h"

int main(int argc, char** argv) {
  size_t mib = 1024;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      mib = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: membw [--mib N] [--json]\n");
      return 2;
    }
  }
  const int threads = moex::ThreadPool::Global().size();
  const moex::ReadBandwidth bw = moex::MeasureReadBandwidth(mib << 20, 5);
  if (json) {
    std::printf(
        "{\"read_gb_per_s\": %.2f, \"read_gb_per_s_cpu_time\": %.2f, \"buffer_mib\": %zu, "
        "\"threads\": %d}\n",
        bw.wall_gb_per_s, bw.cpu_gb_per_s, mib, threads);
  } else {
    std::printf("streaming read: %.2f GB/s wall, %.2f GB/s per CPU time (%zu MiB, %d threads)\n",
                bw.wall_gb_per_s, bw.cpu_gb_per_s, mib, threads);
  }
  return 0;
}
