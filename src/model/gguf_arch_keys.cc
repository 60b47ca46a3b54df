#include "model/gguf_arch_keys.h"

#include "core/error.h"

namespace moex::gguf_keys {

std::string Key(const char* arch, const char* key) {
  return std::string(arch) + "." + key;
}

int ToInt(const GgufFile& f, const std::string& key, int64_t v) {
  Check(v >= 0 && v < (1ll << 31), f.path(), ": GGUF key '", key, "' out of range: ", v);
  return static_cast<int>(v);
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
