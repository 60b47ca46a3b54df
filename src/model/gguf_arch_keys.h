// The "{arch}.*" metadata keys of llama.cpp's GGUF files, read and written with the range
// checks every architecture's reader shares (gguf_model_reader.cc, gguf_model_writer.cc,
// gguf_deepseek2.cc and the families' adapters, arch/*.cc), so each error names the key the
// same way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/gguf_file.h"
#include "io/gguf_writer.h"

namespace moex::gguf_keys {

// "{arch}.{key}".
std::string Key(const char* arch, const char* key);

// `v` (the value of `key` in `f`) as an int; fails naming the key unless 0 <= v < 2^31.
int ToInt(const GgufFile& f, const std::string& key, int64_t v);

// A count llama.cpp may store per layer (an array); moex needs it uniform. `fallback` when
// absent (fails naming the key without one).
int64_t UniformInt(const GgufFile& f, const std::string& key, std::optional<int64_t> fallback);

// A 1-D F32 tensor of `n` values (RoPE factors); fails naming it otherwise.
std::vector<float> F32Vector(const GgufFile& f, const std::string& name, int64_t n);

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
  // UniformInt's per-layer count; ToInt's range.
  int Uniform(const GgufFile& f, const char* key, std::optional<int64_t> fallback) const;

  void SetU32(GgufWriter& w, const char* key, uint32_t v) const;
  void SetF32(GgufWriter& w, const char* key, float v) const;
};

}  // namespace moex::gguf_keys
