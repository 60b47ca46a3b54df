#include "io/gguf_format.h"

#include "core/quant_format.h"

namespace moex {

uint32_t GgmlTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return kGgmlTypeF32;
    case DType::kF16:
      return kGgmlTypeF16;
    case DType::kBF16:
      return kGgmlTypeBF16;
    case DType::kQ8_0:
      return kGgmlTypeQ8_0;
    default:  // GGML's block formats are named by their type ids.
      return static_cast<uint32_t>(*QuantFormatOf(dtype));
  }
}

std::optional<DType> DTypeOfGgmlType(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF32:
      return DType::kF32;
    case kGgmlTypeF16:
      return DType::kF16;
    case kGgmlTypeBF16:
      return DType::kBF16;
    case kGgmlTypeQ8_0:
      return DType::kQ8_0;
    default:
      return std::nullopt;
  }
}

const char* GgmlTypeName(uint32_t ggml_type) {
  // Names for error messages only; ids 4, 5 and 31-33 were retired upstream.
  static const char* const kNames[] = {
      "f32",     "f16",     "q4_0",    "q4_1",  "type 4",  "type 5",  "q5_0",    "q5_1",
      "q8_0",    "q8_1",    "q2_K",    "q3_K",  "q4_K",    "q5_K",    "q6_K",    "q8_K",
      "iq2_xxs", "iq2_xs",  "iq3_xxs", "iq1_s", "iq4_nl",  "iq3_s",   "iq2_s",   "iq4_xs",
      "i8",      "i16",     "i32",     "i64",   "f64",     "iq1_m",   "bf16",    "type 31",
      "type 32", "type 33", "tq1_0",   "tq2_0", "type 36", "type 37", "type 38", "mxfp4",
  };
  if (ggml_type < sizeof kNames / sizeof kNames[0]) return kNames[ggml_type];
  return "unknown type";
}

}  // namespace moex
