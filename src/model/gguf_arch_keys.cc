#include "model/gguf_arch_keys.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace moex::gguf_keys {

std::string Key(const char* arch, const char* key) {
  return std::string(arch) + "." + key;
}

int ToInt(const GgufFile& f, const std::string& key, int64_t v) {
  Check(v >= 0 && v < (1ll << 31), f.path(), ": GGUF key '", key, "' out of range: ", v);
  return static_cast<int>(v);
}

int64_t UniformInt(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    Check(fallback.has_value(), f.path(), ": missing GGUF key '", key, "'");
    return *fallback;
  }
  if (!v->is_array()) return f.GetInt(key);
  const std::vector<int64_t> values = f.GetIntArray(key);
  Check(!values.empty() &&
            std::all_of(values.begin(), values.end(), [&](int64_t x) { return x == values[0]; }),
        f.path(), ": GGUF key '", key, "' varies per layer, which moex does not support");
  return values[0];
}

std::vector<float> F32Vector(const GgufFile& f, const std::string& name, int64_t n) {
  const TensorView* t = f.FindTensor(name);
  Check(t != nullptr, f.path(), ": missing tensor ", name);
  Check(t->dtype == DType::kF32 && t->shape == std::vector<int64_t>{n}, f.path(), ": tensor ", name,
        " must be F32 of shape [", n, "], is ", DTypeName(t->dtype), " ", ShapeString(t->shape));
  std::vector<float> out(static_cast<size_t>(n));
  std::memcpy(out.data(), t->data, out.size() * sizeof(float));
  return out;
}

int ArchKeys::Uniform(const GgufFile& f, const char* key, std::optional<int64_t> fallback) const {
  const std::string k = Key(key);
  return ToInt(f, k, UniformInt(f, k, fallback));
}

int ArchKeys::Int(const GgufFile& f, const char* key, int64_t fallback) const {
  const std::string k = Key(key);
  return ToInt(f, k, f.GetInt(k, fallback));
}

int ArchKeys::RequiredInt(const GgufFile& f, const char* key) const {
  Check(Has(f, key), f.path(), ": ", arch, " GGUF without '", Key(key), "'");
  return Int(f, key, 0);
}

int ArchKeys::PositiveInt(const GgufFile& f, const char* key) const {
  Check(Has(f, key), f.path(), ": ", arch, " GGUF without '", Key(key), "'");
  const int64_t v = f.GetInt(Key(key));
  Check(v > 0 && v < (1ll << 31), f.path(), ": ", Key(key), " = ", v, " is out of range");
  return static_cast<int>(v);
}

void ArchKeys::SetU32(GgufWriter& w, const char* key, uint32_t v) const {
  w.Set(Key(key), GgufValue::U32(v));
}

void ArchKeys::SetF32(GgufWriter& w, const char* key, float v) const {
  w.Set(Key(key), GgufValue::F32(v));
}

}  // namespace moex::gguf_keys
