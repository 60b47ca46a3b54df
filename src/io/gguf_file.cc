#include "io/gguf_file.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <tuple>

#include "core/error.h"
#include "core/printable.h"
#include "io/gguf_format.h"
#include "io/gguf_split_name.h"

namespace moex {

namespace {

// A bounds-checked cursor over the header. Every read names what it was reading, so a
// truncated file says where it ends.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  void Need(uint64_t n, const char* what) const {
    Check(n <= remaining(), file_, ": truncated GGUF file: ", what, " at byte ", pos_, " needs ", n,
          " bytes, ", remaining(), " left");
  }
  uint64_t ReadUInt(size_t bytes, const char* what) {
    Need(bytes, what);
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i)
      v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes_[pos_ + i])) << (8 * i);
    pos_ += bytes;
    return v;
  }
  uint32_t U32(const char* what) { return static_cast<uint32_t>(ReadUInt(4, what)); }
  uint64_t U64(const char* what) { return ReadUInt(8, what); }
  std::string String(const char* what) {
    const uint64_t len = U64(what);
    Need(len, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  std::vector<uint8_t> Bytes(uint64_t n, const char* what) {
    Need(n, what);
    const auto* p = reinterpret_cast<const uint8_t*>(bytes_.data() + pos_);
    pos_ += n;
    return {p, p + n};
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& file_;
  uint64_t pos_ = 0;
};

GgufValue ReadValue(Cursor& in, uint32_t raw_type, const std::string& key, const std::string& f) {
  Check(GgufTypeIsValid(raw_type), f, ": GGUF key '", key, "' has unknown value type ", raw_type);
  const auto type = static_cast<GgufType>(raw_type);
  if (type == GgufType::kString) return GgufValue::String(in.String("string value"));
  if (type != GgufType::kArray) {
    return GgufValue::Scalar(type, in.ReadUInt(GgufScalarBytes(type), "metadata value"));
  }
  const uint32_t raw_elem = in.U32("array type");
  Check(GgufTypeIsValid(raw_elem), f, ": GGUF key '", key, "' has unknown array type ", raw_elem);
  const auto elem = static_cast<GgufType>(raw_elem);
  Check(elem != GgufType::kArray, f, ": GGUF key '", key, "': nested arrays are not supported");
  const uint64_t count = in.U64("array length");
  if (elem == GgufType::kString) {
    // Each string takes at least its 8-byte length, which bounds the count by the file.
    Check(count <= in.remaining() / 8, f, ": GGUF key '", key, "' claims ", count,
          " strings, more than the file can hold");
    std::vector<std::string> strings;
    strings.reserve(count);
    for (uint64_t i = 0; i < count; ++i) strings.push_back(in.String("array string"));
    return GgufValue::StringArray(std::move(strings));
  }
  const size_t size = GgufScalarBytes(elem);
  Check(count <= in.remaining() / size, f, ": GGUF key '", key, "' claims ", count, " ",
        GgufTypeName(elem), " values, more than the file can hold");
  return GgufValue::NumericArray(elem, count, in.Bytes(count * size, "array data"));
}

}  // namespace

GgufFile::GgufFile(const std::string& path) : GgufFile(path, true) {}

GgufFile::GgufFile(const std::string& path, bool open_parts) : name_(path) {
  file_.emplace(path);
  Parse({file_->data(), file_->size()});
  if (open_parts) OpenParts();
}

void GgufFile::OpenParts() {
  const GgufValue* count_value = Find("split.count");
  if (count_value == nullptr) return;
  const int64_t count = GetInt("split.count");
  const int64_t no = GetInt("split.no", 0);
  Check(count >= 1 && count <= 99999, name_, ": split.count ", count, " is out of range");
  if (count == 1) return;
  Check(no == 0, name_, " is part ", no + 1, " of a split GGUF of ", count,
        " parts: pass the first part (", GgufSplitPartPath("NAME", 1, count), ")");
  const std::string first_suffix = GgufSplitPartPath("", 1, count);
  Check(name_.size() > first_suffix.size() && name_.ends_with(first_suffix), name_,
        ": the first part of a split GGUF of ", count, " parts must be named NAME",
        first_suffix, " (llama.cpp's gguf-split naming), so the other parts can be found");
  const std::string prefix = name_.substr(0, name_.size() - first_suffix.size());
  all_infos_ = infos_;
  for (int64_t k = 2; k <= count; ++k) {
    const std::string part_path = GgufSplitPartPath(prefix, k, count);
    std::error_code ec;
    Check(std::filesystem::exists(part_path, ec), name_, ": part ", k, " of ", count,
          " of this split GGUF is missing (", part_path, ")");
    auto part = std::unique_ptr<GgufFile>(new GgufFile(part_path, false));
    Check(part->GetInt("split.count", 0) == count && part->GetInt("split.no", -1) == k - 1,
          part_path, ": split.no/split.count say it is not part ", k, " of ", count);
    for (const GgufTensorInfo& info : part->infos_) {
      Check(!tensor_index_.contains(info.name) && !part_of_.contains(info.name), part_path,
            ": tensor '", info.name, "' is also in an earlier part");
      part_of_.emplace(info.name, parts_.size());
      all_infos_.push_back(info);
    }
    parts_.push_back(std::move(part));
  }
  if (const GgufValue* total = Find("split.tensors.count"))
    Check(total->AsInt() == static_cast<int64_t>(all_infos_.size()), name_,
          ": split.tensors.count says ", total->AsInt(), " tensors, the parts hold ",
          all_infos_.size());
}

const GgufFile* GgufFile::PartWith(const std::string& name) const {
  auto it = part_of_.find(name);
  return it == part_of_.end() ? nullptr : parts_[it->second].get();
}

GgufFile::GgufFile(std::span<const std::byte> bytes, const std::string& name) : name_(name) {
  Parse(bytes);
}

void GgufFile::Parse(std::span<const std::byte> bytes) {
  const std::string& f = name_;
  Cursor in(bytes, f);
  Check(bytes.size() >= 4, f, ": not a GGUF file (", bytes.size(), " bytes)");
  const uint32_t magic = in.U32("magic");
  Check(magic == kGgufMagic, f, ": not a GGUF file (bad magic)");
  version_ = in.U32("version");
  if (version_ == 0x02000000 || version_ == 0x03000000)
    Fail(f, ": big-endian GGUF files are not supported");
  Check(version_ != 1, f, ": GGUF version 1 is not supported (convert it with llama.cpp)");
  Check(version_ == 2 || version_ == 3, f, ": unsupported GGUF version ", version_);
  const uint64_t n_tensors = in.U64("tensor count");
  const uint64_t n_kv = in.U64("metadata count");
  // A KV takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor info 8 + 4 + 4 + 8.
  Check(n_kv <= in.remaining() / 13, f, ": GGUF header claims ", n_kv,
        " metadata entries, more than the file can hold");
  Check(n_tensors <= in.remaining() / 24, f, ": GGUF header claims ", n_tensors,
        " tensors, more than the file can hold");

  metadata_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = in.pos();
    std::string key = in.String("metadata key");
    if (!IsPrintableText(key))  // Printable() only on failure.
      Fail(f, ": GGUF key ", i, " (at byte ", key_at, ") is not printable text: \"", Printable(key),
           "\" (a corrupt file?)");
    const uint32_t type = in.U32("metadata type");
    GgufValue value = ReadValue(in, type, key, f);
    Check(key_index_.emplace(key, metadata_.size()).second, f, ": duplicate GGUF key '", key, "'");
    metadata_.emplace_back(std::move(key), std::move(value));
  }
  looked_up_ = std::make_unique<std::atomic<bool>[]>(metadata_.size());
  if (const GgufValue* a = Find(kGgufAlignmentKey)) {
    Check(a->type() == GgufType::kU32, f, ": general.alignment must be u32");
    const uint64_t v = a->scalar_bits();
    Check(v > 0 && (v & (v - 1)) == 0 && v <= (1u << 30), f, ": general.alignment ", v,
          " is not a power of two");
    alignment_ = static_cast<uint32_t>(v);
  }

  infos_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo info;
    const uint64_t name_at = in.pos();
    info.name = in.String("tensor name");
    if (!IsPrintableText(info.name))
      Fail(f, ": GGUF tensor ", i, "'s name (at byte ", name_at, ") is not printable text: \"",
           Printable(info.name), "\" (a corrupt file?)");
    const uint32_t n_dims = in.U32("tensor dimension count");
    Check(n_dims >= 1 && n_dims <= kGgufMaxDims, f, ": tensor '", info.name, "' has ", n_dims,
          " dimensions (1 to ", kGgufMaxDims, " allowed)");
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = in.U64("tensor dimension");
      Check(ne <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), f, ": tensor '",
            info.name, "' has dimension ", ne, " out of range");
      info.ne.push_back(static_cast<int64_t>(ne));
    }
    info.ggml_type = in.U32("tensor type");
    info.offset = in.U64("tensor offset");
    Check(tensor_index_.emplace(info.name, infos_.size()).second, f, ": duplicate tensor '",
          info.name, "'");
    infos_.push_back(std::move(info));
  }

  const uint64_t header_end = in.pos();
  data_offset_ = (header_end + alignment_ - 1) / alignment_ * alignment_;
  // A file without tensors may end right after its header, without padding.
  const uint64_t data_size = bytes.size() > data_offset_ ? bytes.size() - data_offset_ : 0;
  const std::byte* data = bytes.data() + (data_size > 0 ? data_offset_ : 0);

  views_.resize(infos_.size());
  std::vector<std::tuple<uint64_t, uint64_t, size_t>> extents;  // (offset, bytes, tensor)
  quantized_.resize(infos_.size());
  {
    // Parse runs inside a constructor, so the lock is uncontended; it keeps the rule simple.
    MutexLock lock(&dequantize_mutex_);
    q8_checked_.assign(infos_.size(), false);
    dequantized_.resize(infos_.size());
  }
  for (size_t i = 0; i < infos_.size(); ++i) {
    const GgufTensorInfo& info = infos_[i];
    TensorView& v = views_[i];
    v.name = info.name;
    v.shape = info.shape();
    Check(info.offset % alignment_ == 0, f, ": tensor '", info.name, "' offset ", info.offset,
          " is not a multiple of the alignment ", alignment_);
    Check(info.offset <= data_size, f, ": tensor '", info.name, "' offset ", info.offset,
          " is beyond the data section (", data_size, " bytes; truncated file?)");
    const std::optional<DType> dtype = DTypeOfGgmlType(info.ggml_type);
    const std::optional<QuantFormat> format = QuantFormatOfGgmlType(info.ggml_type);
    if (!dtype && !format) continue;  // Reported by FindTensor, so metadata stays readable.
    // Overflow-safe element count.
    constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 8;
    uint64_t numel = 1;
    for (int64_t ne : info.ne) {
      const auto d = static_cast<uint64_t>(ne);
      Check(d <= kMax && (d == 0 || numel <= kMax / d), f, ": tensor '", info.name,
            "' is too large");
      numel *= d;
    }
    // Rows of whole blocks (q8_0 included, which stays a kernel dtype).
    const int block = format ? Info(*format).block_elems : 1;
    Check(info.ne.empty() || info.ne[0] % block == 0, f, ": ", GgmlTypeName(info.ggml_type),
          " tensor '", info.name, "' row length ", info.ne.empty() ? 0 : info.ne[0],
          " is not a multiple of ", block, ", its block size");
    const uint64_t nbytes = dtype ? DTypeBytes(*dtype, static_cast<int64_t>(numel))
                                  : QuantBytes(*format, static_cast<int64_t>(numel));
    Check(nbytes <= data_size - info.offset, f, ": tensor '", info.name, "' (", nbytes,
          " bytes at offset ", info.offset, ") runs past the end of the file (truncated?)");
    if (nbytes > 0) extents.emplace_back(info.offset, nbytes, i);
    if (dtype) {
      v.dtype = *dtype;
      v.data = data + info.offset;
      v.nbytes = static_cast<size_t>(nbytes);
    } else {
      v.dtype = DType::kF32;
      v.nbytes = static_cast<size_t>(numel) * sizeof(float);
      Quantized q{*format, data + info.offset, static_cast<int64_t>(numel), v, false};
      q.raw.dtype = DTypeOf(*format);
      q.raw.data = q.blocks;
      q.raw.nbytes = static_cast<size_t>(nbytes);
      quantized_[i] = std::move(q);
    }
  }
  // Two tensors that share bytes would alias each other's weights; llama.cpp refuses such
  // a file (it wants each tensor right after the previous one), and so does moex.
  std::sort(extents.begin(), extents.end());
  for (size_t k = 1; k < extents.size(); ++k) {
    const auto [prev_at, prev_bytes, prev] = extents[k - 1];
    const auto [at, bytes_here, cur] = extents[k];
    Check(prev_at + prev_bytes <= at, f, ": tensors '", infos_[prev].name, "' (", prev_bytes,
          " bytes at offset ", prev_at, ") and '", infos_[cur].name, "' (at offset ", at,
          ") overlap");
  }
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = key_index_.find(key);
  if (it == key_index_.end()) return nullptr;
  looked_up_[it->second].store(true, std::memory_order_relaxed);
  return &metadata_[it->second].second;
}

std::vector<std::string> GgufFile::KeysNotLookedUp(std::string_view prefix) const {
  std::vector<std::string> keys;
  for (size_t i = 0; i < metadata_.size(); ++i)
    if (metadata_[i].first.starts_with(prefix) && !looked_up_[i].load(std::memory_order_relaxed))
      keys.push_back(metadata_[i].first);
  return keys;
}

const GgufValue& GgufFile::Get(const std::string& key) const {
  const GgufValue* v = Find(key);
  Check(v != nullptr, name_, ": missing GGUF key '", key, "'");
  return *v;
}

template <typename F>
auto GgufFile::Typed(const std::string& key, F&& read) const {
  const GgufValue& v = Get(key);
  try {
    return read(v);
  } catch (const Error& e) {
    Fail(name_, ": GGUF key '", key, "': ", e.what());
  }
}

int64_t GgufFile::GetInt(const std::string& key) const {
  return Typed(key, [](const GgufValue& v) { return v.AsInt(); });
}
int64_t GgufFile::GetInt(const std::string& key, int64_t fallback) const {
  return Find(key) ? GetInt(key) : fallback;
}
double GgufFile::GetFloat(const std::string& key) const {
  return Typed(key, [](const GgufValue& v) { return v.AsFloat(); });
}
double GgufFile::GetFloat(const std::string& key, double fallback) const {
  return Find(key) ? GetFloat(key) : fallback;
}
bool GgufFile::GetBool(const std::string& key, bool fallback) const {
  return Find(key) ? Typed(key, [](const GgufValue& v) { return v.AsBool(); }) : fallback;
}
std::string GgufFile::GetString(const std::string& key) const {
  return Typed(key, [](const GgufValue& v) { return v.AsString(); });
}
std::string GgufFile::GetString(const std::string& key, const std::string& fallback) const {
  return Find(key) ? GetString(key) : fallback;
}
const std::vector<std::string>& GgufFile::GetStringArray(const std::string& key) const {
  return *Typed(key, [](const GgufValue& v) { return &v.AsStringArray(); });
}
std::vector<int64_t> GgufFile::GetIntArray(const std::string& key) const {
  return Typed(key, [](const GgufValue& v) { return v.AsIntArray(); });
}
std::vector<float> GgufFile::GetFloatArray(const std::string& key) const {
  return Typed(key, [](const GgufValue& v) { return v.AsFloatArray(); });
}

const GgufTensorInfo* GgufFile::FindTensorInfo(const std::string& name) const {
  if (const GgufFile* part = PartWith(name)) return part->FindTensorInfo(name);
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &infos_[it->second];
}

const TensorView* GgufFile::FindTensor(const std::string& name) const {
  return FindTensor(name, true);
}

const TensorView* GgufFile::FindTensor(const std::string& name, bool check_scales) const {
  if (const GgufFile* part = PartWith(name)) return part->FindTensor(name, check_scales);
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) return nullptr;
  const GgufTensorInfo& info = infos_[it->second];
  const size_t i = it->second;
  Check(DTypeOfGgmlType(info.ggml_type) || quantized_[i], name_, ": tensor '", name,
        "' has unsupported GGML type ", GgmlTypeName(info.ggml_type), " (id ", info.ggml_type,
        "; supported: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, "
        "q6_K, iq4_nl, iq4_xs, mxfp4)");
  if (quantized_[i]) {
    MutexLock lock(&dequantize_mutex_);
    if (views_[i].data == nullptr) {
      const Quantized& q = *quantized_[i];
      const auto* blocks = reinterpret_cast<const uint8_t*>(q.blocks);
      CheckScales(name, q);
      dequantized_[i] = AlignedBuffer(views_[i].nbytes);
      Dequantize(q.format, blocks, q.count, reinterpret_cast<float*>(dequantized_[i].data()));
      views_[i].data = dequantized_[i].data();
    }
  } else if (check_scales && views_[i].dtype == DType::kQ8_0) {
    // q8_0 stays in its blocks for the kernels: its scales are checked here, once, as the
    // other formats' are when they are dequantised.
    MutexLock lock(&dequantize_mutex_);
    if (!q8_checked_[i]) {
      if (const auto bad = FindNonFiniteScale(
              QuantFormat::kQ8_0, reinterpret_cast<const uint8_t*>(views_[i].data),
              views_[i].numel()))
        Fail(name_, ": q8_0 tensor '", name, "' block ", *bad, " has a non-finite scale");
      q8_checked_[i] = true;
    }
  }
  return &views_[i];
}

void GgufFile::CheckScales(const std::string& name, const Quantized& q) const {
  if (q.checked) return;
  if (const auto bad =
          FindNonFiniteScale(q.format, reinterpret_cast<const uint8_t*>(q.blocks), q.count)) {
    Fail(name_, ": ", QuantFormatName(q.format), " tensor '", name, "' block ", *bad,
         " has a non-finite scale");
  }
  q.checked = true;
}

const TensorView* GgufFile::FindQuantizedTensor(const std::string& name,
                                                bool check_scales) const {
  if (const GgufFile* part = PartWith(name)) return part->FindQuantizedTensor(name, check_scales);
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end() || !quantized_[it->second]) return FindTensor(name, check_scales);
  const Quantized& q = *quantized_[it->second];
  MutexLock lock(&dequantize_mutex_);
  if (check_scales) CheckScales(name, q);
  return &q.raw;
}

}  // namespace moex
