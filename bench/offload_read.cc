// Raw read bandwidth of the storage link + fetch engine on an expert store: every chunk of
// the first experts is read with io_uring and O_DIRECT at several queue depths, with and
// without per-block checksum verification. Compare with `dd iflag=direct` on the same file.
//
//   offload_read STORE [GB to read, default 2] [chunk neurons, default auto]
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "io/expert_store.h"
#include "tiers/fetch_engine.h"
#include "tiers/host_tier.h"
#include "tiers/storage_link.h"

int main(int argc, char** argv) {
  using namespace moex;
  using namespace moex::tiers;
  if (argc < 2) {
    std::cerr << "usage: offload_read STORE [GB] [CHUNK_NEURONS]\n";
    return 2;
  }
  try {
    const ExpertStore store = ExpertStore::Open(argv[1]);
    const double gb = argc > 2 ? std::atof(argv[2]) : 2.0;
    const int chunk = argc > 3 ? std::atoi(argv[3]) : HostTier::AutoChunkNeurons(store);
    const uint64_t chunk_bytes = AlignUp(static_cast<uint64_t>(chunk) * store.record_bytes(), 4096);
    const int chunks_per_expert = (store.neurons() + chunk - 1) / chunk;
    const int pages = 256;
    void* arena = mmap(nullptr, pages * chunk_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    Check(arena != MAP_FAILED, "mmap failed");
    const uint64_t total_chunks = static_cast<uint64_t>(gb * 1e9 / chunk_bytes);
    for (bool verify : {false, true}) {
      for (int depth : {4, 16, 32, 64}) {
        auto link = std::make_unique<StorageLink>(store.path(), depth);
        FetchEngine::Verifier verifier;
        if (verify) {
          verifier = [&](const FetchRequest& r) {
            return StoreChecksum(std::span(r.dst, r.bytes)) == 1 ? std::string("?") : std::string();
          };
        }
        FetchEngine engine(std::move(link), pages, store.header().num_layers, depth - 1, verifier);
        // Distinct experts in store order, each read chunk by chunk (demand class).
        Stopwatch watch;
        uint64_t issued = 0, done = 0;
        std::vector<uint32_t> gen(pages, 0);
        while (done < total_chunks) {
          while (issued < total_chunks && issued - done < static_cast<uint64_t>(pages)) {
            const uint64_t e = issued / chunks_per_expert;
            const int c = static_cast<int>(issued % chunks_per_expert);
            const int layer =
                store.moe_layers()[(e / store.num_experts()) % store.moe_layers().size()];
            FetchRequest r;
            r.key = {layer, static_cast<int32_t>(e % store.num_experts())};
            r.chunk = c;
            r.page = static_cast<int32_t>(issued % pages);
            r.generation = ++gen[static_cast<size_t>(r.page)];
            r.demand = true;
            r.src_offset = store.ExpertOffset(layer, r.key.expert) + c * chunk_bytes;
            r.dst = static_cast<std::byte*>(arena) + r.page * chunk_bytes;
            r.bytes = static_cast<uint32_t>(chunk_bytes);
            engine.Enqueue(r);
            ++issued;
          }
          done = engine.WaitForCompletion(done);
        }
        const double ms = watch.ElapsedMs();
        nlohmann::json j = {{"queue_depth", depth},
                            {"verify", verify},
                            {"chunk_bytes", chunk_bytes},
                            {"bytes", total_chunks * chunk_bytes},
                            {"gb_per_s", total_chunks * chunk_bytes / 1e6 / ms}};
        std::cout << j.dump() << std::endl;
      }
    }
  } catch (const Error& e) {
    std::cerr << "offload_read: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
