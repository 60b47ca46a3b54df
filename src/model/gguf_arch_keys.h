// The "{arch}.*" metadata keys of llama.cpp's GGUF files, read and written with the range
// checks every architecture's reader shares (gguf_model_reader.cc, gguf_model_writer.cc,
// gguf_deepseek2.cc, gguf_glm4moe.cc, gguf_gpt_oss.cc), so each error names the key the
// same way.
#pragma once

#include <cstdint>
#include <string>

#include "io/gguf_file.h"
#include "io/gguf_writer.h"

namespace moex::gguf_keys {

// "{arch}.{key}".
std::string Key(const char* arch, const char* key);

// `v` (the value of `key` in `f`) as an int; fails naming the key unless 0 <= v < 2^31.
int ToInt(const GgufFile& f, const std::string& key, int64_t v);

// One architecture's keys: `keys.Int(f, "expert_count", 0)` reads "{arch}.expert_count".
struct ArchKeys {
  const char* arch;

  std::string Key(const char* key) const { return gguf_keys::Key(arch, key); }
  bool Has(const GgufFile& f, const char* key) const { return f.Find(Key(key)) != nullptr; }
  // `fallback` when absent; ToInt's range.
  int Int(const GgufFile& f, const char* key, int64_t fallback) const;
  // Fails "{arch} GGUF without '{arch}.{key}'" when absent; ToInt's range.
  int RequiredInt(const GgufFile& f, const char* key) const;
  // Required, and 0 < v < 2^31.
  int PositiveInt(const GgufFile& f, const char* key) const;

  void SetU32(GgufWriter& w, const char* key, uint32_t v) const;
  void SetF32(GgufWriter& w, const char* key, float v) const;
};

}  // namespace moex::gguf_keys
