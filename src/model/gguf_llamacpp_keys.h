// What llama.cpp does with the "{arch}.*" keys of the GGUF architectures moex reads, as its
// loader at the source bench/llamacpp pins does it (src/llama-model.cpp load_hparams and
// src/models/<arch>.cpp load_arch_hparams). llama.cpp's own writer (llama_model_saver,
// used by test-llama-archs and quantisation tools) writes every hyperparameter it has, set
// for the architecture or not, so its files carry ~110 keys at their defaults.
//
// moex's rule (docs/formats.md): a key moex does not read is accepted when llama.cpp does
// not read it for that architecture (it cannot change llama.cpp's result) or when its value
// is the one llama.cpp computes with when the key is absent; any other value is refused,
// naming key and value, rather than silently computing something else.
#pragma once

#include <string>
#include <string_view>

#include "io/gguf_file.h"

namespace moex::llamacpp_keys {

// Whether llama.cpp's loader reads "{arch}.{key}" for the GGUF architecture `arch`.
bool Reads(std::string_view arch, std::string_view key);

// Whether the value of "{arch}.{key}" in `f` is llama.cpp's value for the key's absence
// (its hparams default; for keys defaulting to another key's value, that value).
// REQUIRES: the key is present.
bool IsDefault(const GgufFile& f, std::string_view arch, std::string_view key);

// Whether "{arch}.rope.scaling.type" and ".factor" leave RoPE unscaled in llama.cpp: the
// type absent, "none", or "linear" (llama.cpp's default) with factor absent, 0 or 1.
bool RopeScalingIsNone(const GgufFile& f, std::string_view arch);

}  // namespace moex::llamacpp_keys
