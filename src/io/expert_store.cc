#include "io/expert_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace moex {

namespace {

void PreadAll(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    Check(got >= 0, "reading expert store ", path, ": ", std::strerror(errno));
    Check(got > 0, "expert store ", path, " is truncated (unexpected end of file at byte ", offset,
          ")");
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

uint64_t StoreTableBytes(uint32_t num_moe_layers, uint32_t num_experts, uint32_t blocks) {
  return AlignUp(4ull * num_moe_layers, 8) + 8ull * num_moe_layers * num_experts * (1ull + blocks);
}

namespace {

constexpr uint32_t kMaxStoreLayers = 1u << 16;  // Decoder layers.
constexpr uint32_t kMaxStoreCount = 1u << 30;   // Experts per layer, neurons per expert.

}  // namespace

ExpertStore ExpertStore::Open(const std::string& path) {
  ExpertStore s;
  s.path_ = path;
  Fd f;
  f.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  Check(f.fd >= 0, "cannot open expert store ", path, ": ", std::strerror(errno));
  struct stat st;
  Check(fstat(f.fd, &st) == 0, "cannot stat expert store ", path, ": ", std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  Check(size >= kStoreHeaderBytes, "expert store ", path, " is truncated (", size,
        " bytes, shorter than its header)");

  StoreHeader& h = s.header_;
  PreadAll(f.fd, &h, sizeof h, 0, path);
  Check(std::memcmp(h.magic, kExpertStoreMagic, sizeof h.magic) == 0, path,
        " is not a moex expert store (bad magic)");
  Check(h.version == kExpertStoreVersion, "expert store ", path, " has format version ", h.version,
        ", this build reads version ", kExpertStoreVersion);
  StoreHeader copy = h;
  copy.header_checksum = 0;
  Check(StoreChecksum(std::as_bytes(std::span(&copy, 1))) == h.header_checksum, "expert store ",
        path, " is corrupt (header checksum mismatch)");
  Check(size == h.file_bytes, "expert store ", path, " is truncated or overlong (", size,
        " bytes, header says ", h.file_bytes, ")");
  // Counts bounded so every int the reader hands out (layers, experts, neurons) is valid.
  Check(h.neurons > 0 && h.neurons <= kMaxStoreCount && h.block_neurons > 0 && h.record_bytes > 0 &&
            h.num_experts > 0 && h.num_experts <= kMaxStoreCount && h.block_neurons <= h.neurons &&
            h.num_layers <= kMaxStoreLayers && h.num_moe_layers <= h.num_layers &&
            h.hidden_size > 0 && h.hidden_size <= kMaxStoreCount &&
            h.num_moe_layers <= kMaxStoreMoeLayers,
        "expert store ", path, " has an invalid header");
  // The kernels read records as [gate row | up row | down column] of hidden_size elements;
  // block formats as record groups of whole blocks, which chunks never split. Every layer's
  // records fit the shared record size, which is the widest layer's (no other padding).
  const uint32_t group = h.group_neurons;
  Check(group > 0 && h.hidden_size % group == 0 && h.neurons % group == 0 &&
            h.block_neurons % group == 0,
        "expert store ", path, " has record groups of ", group,
        " neurons that do not divide its shape");
  uint64_t widest = 0;
  for (uint32_t i = 0; i < h.num_moe_layers; ++i) {
    const uint8_t gate_up = h.layer_dtypes[2 * i], down = h.layer_dtypes[2 * i + 1];
    Check(gate_up <= static_cast<uint8_t>(kLastDType) && down <= static_cast<uint8_t>(kLastDType),
          "expert store ", path, " has an invalid dtype for MoE layer #", i);
    const DType gu = static_cast<DType>(gate_up), dn = static_cast<DType>(down);
    const bool blocked = IsBlockQuantized(gu) && IsBlockQuantized(dn);
    Check(blocked ? group % DTypeBlockElems(gu) == 0 && group % DTypeBlockElems(dn) == 0 &&
                        h.hidden_size % DTypeBlockElems(gu) == 0
                  : gu == dn && !IsBlockQuantized(gu) && group == 1,
          "expert store ", path, " has MoE layer #", i, " in ", DTypeName(gu), "/", DTypeName(dn),
          ", which records of groups of ", group, " cannot hold");
    widest = std::max<uint64_t>(widest,
                                2 * DTypeBytes(gu, h.hidden_size) + DTypeBytes(dn, h.hidden_size));
  }
  Check(h.num_moe_layers == 0 || h.record_bytes == widest, "expert store ", path,
        " has records of ", h.record_bytes, " bytes, but its widest layer's take ", widest);
  const int blocks = s.blocks_per_expert();
  // Sums and products checked for wrap-around: a corrupt header must not alias a valid size.
  uint64_t checksums = 0, table_end = 0, data_bytes = 0, data_end = 0;
  Check(
      !__builtin_mul_overflow(uint64_t{h.num_moe_layers} * h.num_experts,
                              uint64_t{1} + static_cast<uint64_t>(blocks), &checksums) &&
          checksums <= (UINT64_MAX >> 4) &&
          h.table_bytes ==
              StoreTableBytes(h.num_moe_layers, h.num_experts, static_cast<uint32_t>(blocks)) &&
          !__builtin_add_overflow(h.table_offset, h.table_bytes, &table_end) &&
          table_end <= h.data_offset && h.data_offset % kStoreAlignment == 0 &&
          h.expert_stride % kStoreAlignment == 0 && h.expert_stride >= s.expert_bytes() &&
          !__builtin_mul_overflow(
              h.expert_stride, uint64_t{h.num_moe_layers} * uint64_t{h.num_experts}, &data_bytes) &&
          !__builtin_add_overflow(h.data_offset, data_bytes, &data_end) && data_end == h.file_bytes,
      "expert store ", path, " has an inconsistent layout");

  std::vector<std::byte> table(h.table_bytes);
  PreadAll(f.fd, table.data(), table.size(), h.table_offset, path);
  Check(StoreChecksum(table) == h.table_checksum, "expert store ", path,
        " is corrupt (table checksum mismatch)");
  s.moe_layers_.resize(h.num_moe_layers);
  s.moe_index_.assign(h.num_layers, -1);
  for (uint32_t i = 0; i < h.num_moe_layers; ++i) {
    uint32_t layer;
    std::memcpy(&layer, table.data() + 4 * i, 4);
    // Increasing, as the packer writes them: a repeated layer would leave an index stale.
    Check(layer < h.num_layers && (i == 0 || layer > static_cast<uint32_t>(s.moe_layers_[i - 1])),
          "expert store ", path, " lists MoE layer ", layer, " of ", h.num_layers, " out of order");
    s.moe_layers_[i] = static_cast<int>(layer);
    s.moe_index_[layer] = static_cast<int>(i);
  }
  const size_t ids_bytes = AlignUp(4ull * h.num_moe_layers, 8);
  s.checksums_.resize((table.size() - ids_bytes) / 8);
  std::memcpy(s.checksums_.data(), table.data() + ids_bytes, s.checksums_.size() * 8);
  return s;
}

int ExpertStore::MoeIndex(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(moe_index_.size())) return -1;
  return moe_index_[static_cast<size_t>(layer)];
}

DType ExpertStore::gate_up_dtype(int layer) const {
  const int i = MoeIndex(layer);
  Check(i >= 0, "expert store ", path_, ": layer ", layer, " has no routed experts");
  return static_cast<DType>(header_.layer_dtypes[2 * i]);
}

DType ExpertStore::down_dtype(int layer) const {
  const int i = MoeIndex(layer);
  Check(i >= 0, "expert store ", path_, ": layer ", layer, " has no routed experts");
  return static_cast<DType>(header_.layer_dtypes[2 * i + 1]);
}

size_t ExpertStore::EntryIndex(int layer, int expert) const {
  const int m = MoeIndex(layer);
  Check(m >= 0 && expert >= 0 && expert < num_experts(), "expert store ", path_, " has no expert ",
        expert, " in layer ", layer);
  return static_cast<size_t>(m) * header_.num_experts + static_cast<size_t>(expert);
}

uint64_t ExpertStore::ExpertOffset(int layer, int expert) const {
  return header_.data_offset + header_.expert_stride * EntryIndex(layer, expert);
}

uint64_t ExpertStore::ExpertChecksum(int layer, int expert) const {
  return checksums_[EntryIndex(layer, expert) * (1 + static_cast<size_t>(blocks_per_expert()))];
}

uint64_t ExpertStore::BlockChecksum(int layer, int expert, int block) const {
  return checksums_[EntryIndex(layer, expert) * (1 + static_cast<size_t>(blocks_per_expert())) + 1 +
                    static_cast<size_t>(block)];
}

void ExpertStore::VerifyData(const std::function<void(uint64_t, uint64_t)>& progress) const {
  Fd f;
  f.fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  Check(f.fd >= 0, "cannot open expert store ", path_, ": ", std::strerror(errno));
  std::vector<std::byte> buf(expert_bytes());
  const uint64_t total = static_cast<uint64_t>(moe_layers_.size()) * header_.num_experts;
  uint64_t done = 0;
  const uint64_t block_bytes = static_cast<uint64_t>(block_neurons()) * record_bytes();
  for (int layer : moe_layers_) {
    for (int e = 0; e < num_experts(); ++e) {
      PreadAll(f.fd, buf.data(), buf.size(), ExpertOffset(layer, e), path_);
      for (int b = 0; b < blocks_per_expert(); ++b) {
        const uint64_t begin = b * block_bytes;
        const uint64_t len = std::min<uint64_t>(block_bytes, buf.size() - begin);
        Check(StoreChecksum(std::span(buf.data() + begin, len)) == BlockChecksum(layer, e, b),
              "expert store ", path_, " is corrupt: layer ", layer, " expert ", e, " block ", b,
              " fails its checksum");
      }
      if (progress) progress(++done, total);
    }
  }
  posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
}

}  // namespace moex
