// Constants of the GGUF container (llama.cpp's model format) shared by reader and writer:
// magic, versions, default alignment and the GGML tensor type ids moex can hold.
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"

namespace moex {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32.
constexpr uint32_t kGgufVersion = 3;
constexpr uint32_t kGgufDefaultAlignment = 32;
constexpr uint32_t kGgufMaxDims = 4;  // GGML_MAX_DIMS.
constexpr const char* kGgufAlignmentKey = "general.alignment";

// GGML tensor type ids (ggml.h) of the types moex reads and writes.
constexpr uint32_t kGgmlTypeF32 = 0;
constexpr uint32_t kGgmlTypeF16 = 1;
constexpr uint32_t kGgmlTypeQ8_0 = 8;
constexpr uint32_t kGgmlTypeBF16 = 30;

uint32_t GgmlTypeOf(DType dtype);
// The DType for a GGML type id, or nullopt for types moex does not support.
std::optional<DType> DTypeOfGgmlType(uint32_t ggml_type);
// "q4_K", "iq2_xs", ...; "type N" for ids it does not know.
const char* GgmlTypeName(uint32_t ggml_type);

}  // namespace moex
