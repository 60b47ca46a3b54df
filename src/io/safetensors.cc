#include "io/safetensors.h"

#include <cstdint>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moex {

namespace {

uint64_t ReadU64LE(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

bool ParseDTypeName(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::kF32;
  else if (s == "F16")
    *out = DType::kF16;
  else if (s == "BF16")
    *out = DType::kBF16;
  else
    return false;
  return true;
}

uint64_t NonNegative(const nlohmann::json& v, const std::string& what, const std::string& file) {
  Check(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), file, ": ",
        what, " must be a non-negative integer");
  return v.get<uint64_t>();
}

}  // namespace

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    default:
      Fail("safetensors cannot store dtype ", DTypeName(dtype));
  }
}

SafetensorsFile::SafetensorsFile(const std::string& path) : name_(path) {
  file_.emplace(path);
  Parse({file_->data(), file_->size()});
}

SafetensorsFile::SafetensorsFile(std::span<const std::byte> bytes, const std::string& name)
    : name_(name) {
  Parse(bytes);
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const ByteTensor* SafetensorsFile::FindBytes(const std::string& name) const {
  auto it = byte_index_.find(name);
  return it == byte_index_.end() ? nullptr : &byte_tensors_[it->second];
}

void SafetensorsFile::Parse(std::span<const std::byte> bytes) {
  const std::string& f = name_;
  Check(bytes.size() >= 8, f, ": truncated safetensors file (", bytes.size(),
        " bytes, need at least 8 for the header length)");
  const uint64_t header_len = ReadU64LE(bytes.data());
  Check(header_len <= kSafetensorsMaxHeaderBytes, f, ": safetensors header length ", header_len,
        " exceeds the maximum of ", kSafetensorsMaxHeaderBytes, " bytes (corrupt file?)");
  Check(header_len <= bytes.size() - 8, f, ": safetensors header length ", header_len,
        " runs past the end of the file (", bytes.size(), " bytes; truncated?)");
  const char* header = reinterpret_cast<const char*>(bytes.data() + 8);
  const std::byte* data = bytes.data() + 8 + header_len;
  const uint64_t data_size = bytes.size() - 8 - header_len;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, header + header_len);
  } catch (const nlohmann::json::exception& e) {
    Fail(f, ": bad safetensors JSON header: ", e.what());
  }
  Check(j.is_object(), f, ": safetensors header must be a JSON object");

  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      Check(v.is_object() || v.is_null(), f, ": __metadata__ must be an object");
      if (v.is_object()) {
        for (auto m = v.begin(); m != v.end(); ++m)
          metadata_[m.key()] =
              m.value().is_string() ? m.value().get<std::string>() : m.value().dump();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    Check(v.is_object(), f, ": ", where, " must be a JSON object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    Check(dt != v.end() && dt->is_string(), f, ": ", where, " has no dtype string");
    Check(sh != v.end() && sh->is_array(), f, ": ", where, " has no shape array");
    Check(off != v.end() && off->is_array() && off->size() == 2, f, ": ", where,
          " needs data_offsets [begin, end]");
    TensorView t;
    t.name = name;
    const std::string dtype = dt->get<std::string>();
    const bool bytes = dtype == "U8" || dtype == "F8_E4M3";
    Check(bytes || ParseDTypeName(dtype, &t.dtype), f, ": unsupported dtype ", dtype,
          " for tensor ", name,
          " (supported: F32, F16, BF16, U8 for packed blocks, F8_E4M3 for FP8 weights)");
    // numel * element size must not overflow; every dimension and product is checked.
    uint64_t numel = 1;
    constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 8;
    for (const auto& d : *sh) {
      const uint64_t dim = NonNegative(d, where + " shape entry", f);
      Check(dim <= kMax && (dim == 0 || numel <= kMax / dim), f, ": ", where,
            " shape is too large");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t begin = NonNegative((*off)[0], where + " data_offsets", f);
    const uint64_t end = NonNegative((*off)[1], where + " data_offsets", f);
    Check(begin <= end, f, ": ", where, " has data_offsets [", begin, ", ", end,
          "] with begin > end");
    Check(end <= data_size, f, ": ", where, " data_offsets [", begin, ", ", end,
          "] run past the data section (", data_size, " bytes; truncated file?)");
    const uint64_t expected = bytes ? numel : DTypeBytes(t.dtype, static_cast<int64_t>(numel));
    if (end - begin != expected)  // ShapeString() only on failure.
      Fail(f, ": ", where, " has ", end - begin, " bytes but ", dtype, " ", ShapeString(t.shape),
           " needs ", expected);
    t.data = data + begin;
    t.nbytes = static_cast<size_t>(expected);
    if (bytes)
      byte_tensors_.push_back({std::move(t.name), dtype, std::move(t.shape), t.data, t.nbytes});
    else
      tensors_.push_back(std::move(t));
  }
  // nlohmann's object keeps keys sorted, so both lists are already sorted by name.
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  for (size_t i = 0; i < byte_tensors_.size(); ++i) byte_index_.emplace(byte_tensors_[i].name, i);
}

}  // namespace moex
