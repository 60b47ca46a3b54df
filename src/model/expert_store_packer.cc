#include "model/expert_store_packer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "core/logging.h"
#include "core/progress.h"
#include "io/store_catalog.h"
#include "io/store_output.h"
#include "model/expert_layout.h"
#include "model/tensor_names.h"

namespace moex {

namespace {

struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<std::byte[], FreeDeleter>;

AlignedBytes AllocAligned(size_t n) {
  auto* p =
      static_cast<std::byte*>(std::aligned_alloc(kStoreAlignment, AlignUp(n, kStoreAlignment)));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, AlignUp(n, kStoreAlignment));
  return AlignedBytes(p);
}

class ProgressBar {
 public:
  ProgressBar(bool enabled, uint64_t total) : enabled_(enabled), total_(total) {
    tty_ = isatty(STDERR_FILENO);
  }
  void Update(uint64_t done) {
    if (total_ > 0)
      PublishProgress("packing experts (bytes)", static_cast<int64_t>(done),
                      static_cast<int64_t>(total_));
    if (!enabled_ || total_ == 0) return;
    const int pct = static_cast<int>(100 * done / total_);
    if (pct == last_ || (!tty_ && pct % 10 != 0 && done != total_)) return;
    last_ = pct;
    const int width = 30;
    const int fill = pct * width / 100;
    std::fprintf(stderr, "%smoex: packing experts [%.*s%*s] %3d%% (%.2f / %.2f GB)%s",
                 tty_ ? "\r" : "", fill, "##############################", width - fill, "", pct,
                 done / 1e9, total_ / 1e9, (tty_ && done != total_) ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
  bool tty_;
  uint64_t total_;
  int last_ = -1;
};

// Writes with O_DIRECT when the filesystem allows (the store must not fill the page cache),
// buffered otherwise. Reports ENOSPC and EFBIG as a full disk.
class StoreWriter {
 public:
  // O_EXCL: the temporary name is this writer's alone.
  StoreWriter(const std::string& path, const std::string& path_option)
      : path_(path), path_option_(path_option) {
    fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0644);
    if (fd_ < 0 && errno == EINVAL) {
      Log(LogLevel::kInfo, "filesystem of ", path, " does not support O_DIRECT; packing with ",
          "buffered writes");
      fd_ = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    Check(fd_ >= 0, "cannot create ", path, ": ", std::strerror(errno));
  }
  ~StoreWriter() {
    if (fd_ >= 0) close(fd_);
  }
  // data and length must be kStoreAlignment-aligned.
  void Write(const std::byte* data, size_t n, uint64_t offset) {
    while (n > 0) {
      const ssize_t put = pwrite(fd_, data, n, static_cast<off_t>(offset));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0 && (errno == ENOSPC || errno == EFBIG || errno == EDQUOT))
        Fail("writing expert store ", path_, ": ", std::strerror(errno),
             " (disk full?); free space or put the store in another directory with ", path_option_);
      Check(put > 0, "writing expert store ", path_, ": ",
            put < 0 ? std::strerror(errno) : "no progress");
      data += put;
      n -= static_cast<size_t>(put);
      offset += static_cast<uint64_t>(put);
    }
  }
  void Sync() {
    Check(fdatasync(fd_) == 0, "syncing expert store ", path_, ": ", std::strerror(errno));
    posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  }
  void Close() {
    const int fd = fd_;
    fd_ = -1;
    Check(close(fd) == 0, "closing expert store ", path_, ": ", std::strerror(errno));
  }

 private:
  std::string path_;
  std::string path_option_;
  int fd_ = -1;
};

void CopyString(char* dst, size_t cap, const std::string& s) {
  std::memset(dst, 0, cap);
  std::memcpy(dst, s.data(), std::min(s.size(), cap - 1));
}

// The header of the store of this model, everything but checksums: its geometry and size.
StoreHeader PlanHeader(const std::vector<ExpertShape>& shapes, const ModelConfig& c,
                       const PackOptions& o, std::vector<int>* moe_layers) {
  const ExpertShape& shape = shapes.front();  // The geometry every MoE layer shares.
  const int64_t d = c.hidden_size;
  const int64_t f = c.moe_intermediate_size;
  // Block formats pack record groups of whole blocks (expert_layout.h); checked here so a
  // bad shape fails before the partial file is created.
  const int64_t group = shape.GroupNeurons();
  Check(d % group == 0 && f % group == 0, "expert store: ", shape.DTypeLabel(),
        " routed experts need hidden_size and moe_intermediate_size to be multiples of ", group,
        " to be packed neuron-major (d = ", d, ", F = ", f, ")");
  moe_layers->clear();
  for (int l = 0; l < c.num_layers; ++l)
    if (c.IsMoeLayer(l)) moe_layers->push_back(l);
  Check(moe_layers->size() <= kMaxStoreMoeLayers, "expert store: ", moe_layers->size(),
        " MoE layers, the store format holds at most ", kMaxStoreMoeLayers);

  StoreHeader h{};
  std::memcpy(h.magic, kExpertStoreMagic, sizeof h.magic);
  h.version = kExpertStoreVersion;
  h.header_bytes = kStoreHeaderBytes;
  CopyString(h.arch, sizeof h.arch, ArchName(c.arch));
  h.group_neurons = static_cast<uint32_t>(group);
  for (size_t i = 0; i < shapes.size(); ++i) {
    h.layer_dtypes[2 * i] = static_cast<uint8_t>(shapes[i].gate_up);
    h.layer_dtypes[2 * i + 1] = static_cast<uint8_t>(shapes[i].down);
  }
  h.num_layers = static_cast<uint32_t>(c.num_layers);
  h.num_moe_layers = static_cast<uint32_t>(moe_layers->size());
  h.num_experts = static_cast<uint32_t>(c.num_experts);
  h.hidden_size = static_cast<uint32_t>(d);
  h.neurons = static_cast<uint32_t>(f);
  h.record_bytes = static_cast<uint32_t>(shape.RecordBytes());
  h.block_neurons = StoreBlockNeurons(h.record_bytes, h.neurons, static_cast<uint32_t>(group));
  const uint64_t expert_bytes = static_cast<uint64_t>(h.record_bytes) * h.neurons;
  h.expert_stride = AlignUp(expert_bytes, kStoreAlignment);
  const uint32_t blocks = (h.neurons + h.block_neurons - 1) / h.block_neurons;
  h.table_offset = kStoreHeaderBytes;
  h.table_bytes = StoreTableBytes(h.num_moe_layers, h.num_experts, blocks);
  h.data_offset = AlignUp(h.table_offset + h.table_bytes, kStoreAlignment);
  h.file_bytes = h.data_offset + h.expert_stride * h.num_moe_layers * h.num_experts;
  h.created_unix = static_cast<uint64_t>(std::time(nullptr));
  CopyString(h.source_id, sizeof h.source_id, o.source_id);
  CopyString(h.source_path, sizeof h.source_path, o.source_path);
  return h;
}

void PackInto(const WeightSource& source, const ModelConfig& c, const PackOptions& o,
              const std::string& tmp) {
  const std::vector<ExpertShape> shapes = RoutedExpertShapes(source, c);
  const int64_t d = c.hidden_size;
  const int64_t f = c.moe_intermediate_size;
  std::vector<int> moe_layers;
  StoreHeader h = PlanHeader(shapes, c, o, &moe_layers);
  const uint64_t expert_bytes = static_cast<uint64_t>(h.record_bytes) * h.neurons;
  const uint32_t blocks = (h.neurons + h.block_neurons - 1) / h.block_neurons;

  const size_t ids_bytes = AlignUp(4ull * h.num_moe_layers, 8);
  std::vector<std::byte> table(h.table_bytes);
  for (size_t i = 0; i < moe_layers.size(); ++i) {
    const uint32_t l = static_cast<uint32_t>(moe_layers[i]);
    std::memcpy(table.data() + 4 * i, &l, 4);
  }

  StoreWriter out(tmp, o.path_option);
  AlignedBytes buf = AllocAligned(h.expert_stride);
  const uint64_t block_bytes = static_cast<uint64_t>(h.block_neurons) * h.record_bytes;
  const uint64_t total = expert_bytes * h.num_moe_layers * h.num_experts;
  ProgressBar bar(o.progress, total);
  uint64_t done = 0;
  bar.Update(0);
  std::vector<uint64_t> sums(blocks);
  for (size_t m = 0; m < moe_layers.size(); ++m) {
    std::vector<const TensorView*> packed;  // Released from the resident set per layer.
    for (int e = 0; e < c.num_experts; ++e) {
      const int l = moe_layers[m];
      const TensorView& g = source.Get(RoutedExpertTensorName(c.arch, l, e, 0), {f, d});
      const TensorView& u = source.Get(RoutedExpertTensorName(c.arch, l, e, 1), {f, d});
      const TensorView& dn = source.Get(RoutedExpertTensorName(c.arch, l, e, 2), {d, f});
      const ExpertShape& layer_shape = shapes[m];
      Check(g.dtype == layer_shape.gate_up && u.dtype == layer_shape.gate_up &&
                dn.dtype == layer_shape.down,
            "expert tensors of layer ", l, " expert ", e, " in ", source.Describe(), " are not ",
            layer_shape.DTypeLabel(), " (gate-up/down) as the layer's first expert's");
      PackExpertNeuronMajor(g, u, dn, layer_shape, buf.get());
      for (uint32_t b = 0; b < blocks; ++b) {
        const uint64_t begin = b * block_bytes;
        sums[b] = StoreChecksum(
            std::span(buf.get() + begin, std::min<uint64_t>(block_bytes, expert_bytes - begin)));
      }
      const size_t entry = m * h.num_experts + static_cast<size_t>(e);
      std::byte* slot = table.data() + ids_bytes + entry * 8 * (1 + blocks);
      const uint64_t expert_sum = StoreChecksum(std::as_bytes(std::span(sums)));
      std::memcpy(slot, &expert_sum, 8);
      std::memcpy(slot + 8, sums.data(), 8ull * blocks);
      out.Write(buf.get(), h.expert_stride, h.data_offset + entry * h.expert_stride);
      done += expert_bytes;
      bar.Update(done);
      packed.insert(packed.end(), {&g, &u, &dn});
    }
    // Packing reads every expert once through the checkpoint's mapping; without this the
    // first (packing) run of an offloaded model holds all of them resident.
    for (const TensorView* t : packed) source.ReleasePages(*t);
  }
  h.table_checksum = StoreChecksum(table);
  h.header_checksum = 0;
  h.header_checksum = StoreChecksum(std::as_bytes(std::span(&h, 1)));

  AlignedBytes head = AllocAligned(h.data_offset);
  std::memcpy(head.get(), &h, sizeof h);
  std::memcpy(head.get() + h.table_offset, table.data(), table.size());
  out.Write(head.get(), h.data_offset, 0);
  out.Sync();
  out.Close();
}

}  // namespace

std::string RoutedExpertTensorName(Arch arch, int layer, int expert, int which) {
  ModelConfig c;
  c.arch = arch;
  static const ExpertMatrix kWhich[] = {ExpertMatrix::kGate, ExpertMatrix::kUp,
                                        ExpertMatrix::kDown};
  return TensorNamesFor(c).Expert(layer, expert, kWhich[which]);
}

std::vector<ExpertShape> RoutedExpertShapes(const WeightSource& source, const ModelConfig& c) {
  std::vector<ExpertShape> shapes;
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    shapes.push_back(ExpertShape{source.Get(RoutedExpertTensorName(c.arch, l, 0, 0)).dtype,
                                 source.Get(RoutedExpertTensorName(c.arch, l, 0, 2)).dtype,
                                 c.hidden_size, c.moe_intermediate_size});
  }
  Check(!shapes.empty(), "model in ", source.Describe(), " has no MoE layers");
  return PadToCommonShape(std::move(shapes));
}

namespace {

std::string GigabytesText(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB", static_cast<double>(bytes) / 1e9);
  return text;
}

// Packs into a temporary of its own and renames it over `target`; the caller holds the lock.
// `why` says why a store is (re)packed; the notice names its size, place and the free space
// there, and a store that cannot fit is refused before anything is written.
void PackLocked(const WeightSource& source, const ModelConfig& config, const PackOptions& options,
                const std::string& target, const std::string& why) {
  RemoveStalePartials(target);  // A packer killed midway; the lock says none runs now.
  const uint64_t bytes = ExpertStoreBytes(source, config);
  const std::filesystem::path dir = std::filesystem::absolute(target).parent_path();
  const int64_t free_bytes = CheckRoomFor(
      dir.string(), bytes, "the expert store of " + options.source_path, options.path_option);
  Log(LogLevel::kWarn, why.empty() ? "" : why + "; ",
      "packing the experts once: ", GigabytesText(bytes), " into ", target,
      free_bytes >= 0 ? " (" + GigabytesText(static_cast<uint64_t>(free_bytes)) + " free there)"
                      : "");
  const std::string tmp = UniqueTempPath(target);
  try {
    PackInto(source, config, options, tmp);
    Check(rename(tmp.c_str(), target.c_str()) == 0, "cannot rename ", tmp, " to ", target, ": ",
          std::strerror(errno));
  } catch (...) {
    unlink(tmp.c_str());
    throw;
  }
  unlink((options.out_path + ".corrupt").c_str());
}

// Why the store at `path` cannot serve this model ("" when it can).
std::string WhyNotUsable(const WeightSource& source, const ModelConfig& config,
                         const PackOptions& options, const std::string& path) {
  if (access(path.c_str(), F_OK) != 0) return "no expert store at " + path;
  if (access((options.out_path + ".corrupt").c_str(), F_OK) == 0)
    return "expert store " + path + " was found corrupt by an earlier read";
  try {
    ExpertStore store = ExpertStore::Open(path);
    const std::string why =
        StoreMismatch(store, config, RoutedExpertShapes(source, config), options.source_id);
    return why.empty() ? "" : "expert store " + path + " is stale: " + why;
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace

std::string StoreMismatch(const ExpertStore& store, const ModelConfig& c, DType dtype,
                          const std::string& source_id) {
  std::vector<ExpertShape> shapes;
  for (int l = 0; l < c.num_layers; ++l)
    if (c.IsMoeLayer(l))
      shapes.push_back(ExpertShape::Uniform(dtype, c.hidden_size, c.moe_intermediate_size));
  return StoreMismatch(store, c, shapes, source_id);
}

std::string StoreMismatch(const ExpertStore& store, const ModelConfig& c,
                          const std::vector<ExpertShape>& shapes, const std::string& source_id) {
  const StoreHeader& h = store.header();
  if (std::string(h.source_id, strnlen(h.source_id, sizeof h.source_id)) != source_id)
    return "it was packed from a different checkpoint (or the checkpoint changed since)";
  if (std::string(h.arch, strnlen(h.arch, sizeof h.arch)) != ArchName(c.arch))
    return "it was packed for another architecture";
  if (h.num_layers != static_cast<uint32_t>(c.num_layers) ||
      h.num_experts != static_cast<uint32_t>(c.num_experts) ||
      h.hidden_size != static_cast<uint32_t>(c.hidden_size) ||
      h.neurons != static_cast<uint32_t>(c.moe_intermediate_size))
    return "its shape differs from the model's";
  int moe = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    if (!c.IsMoeLayer(l)) continue;
    if (store.MoeIndex(l) != moe || static_cast<size_t>(moe) >= shapes.size())
      return "its MoE layers differ from the model's";
    const ExpertShape& s = shapes[static_cast<size_t>(moe)];
    if (store.gate_up_dtype(l) != s.gate_up || store.down_dtype(l) != s.down)
      return "its dtype differs from the checkpoint's (layer " + std::to_string(l) + ": " +
             DTypeName(store.gate_up_dtype(l)) + "/" + DTypeName(store.down_dtype(l)) +
             " packed, " + s.DTypeLabel() + " in the checkpoint)";
    ++moe;
  }
  if (moe != static_cast<int>(h.num_moe_layers)) return "its MoE layers differ from the model's";
  return "";
}

void PackExpertStore(const WeightSource& source, const ModelConfig& config,
                     const PackOptions& options) {
  const std::string target = CheckStoreTarget(options.out_path);
  const StoreLock lock(target);
  PackLocked(source, config, options, CheckStoreTarget(options.out_path), "");
}

uint64_t ExpertStoreBytes(const WeightSource& source, const ModelConfig& config) {
  std::vector<int> moe_layers;
  return PlanHeader(RoutedExpertShapes(source, config), config, PackOptions{}, &moe_layers)
      .file_bytes;
}

void MarkExpertStoreCorrupt(const std::string& store_path, const std::string& why) {
  std::ofstream(store_path + ".corrupt") << why << "\n";
}

std::string WhyExpertStoreUnusable(const WeightSource& source, const ModelConfig& config,
                                   const PackOptions& options) {
  return WhyNotUsable(source, config, options, CheckStoreTarget(options.out_path));
}

ExpertStore OpenOrPackExpertStore(const WeightSource& source, const ModelConfig& config,
                                  const PackOptions& options) {
  const std::string path = CheckStoreTarget(options.out_path);
  if (WhyNotUsable(source, config, options, path).empty()) return ExpertStore::Open(path);
  const StoreLock lock(path);
  // Another process may have packed it while this one waited for the lock.
  const std::string why = WhyNotUsable(source, config, options, CheckStoreTarget(path));
  if (why.empty()) return ExpertStore::Open(path);
  PackLocked(source, config, options, path, why.starts_with("no expert store at") ? "" : why);
  return ExpertStore::Open(path);
}

}  // namespace moex
