// One GGUF metadata value: a scalar (u8..f64, bool), a string, or an array of either
// (arrays of arrays are not supported). Numeric arrays keep their packed little-endian
// bytes, so a 150k-entry tokenizer score table costs one allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace moex {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

const char* GgufTypeName(GgufType type);
// Bytes of a scalar of this type; 0 for strings and arrays.
size_t GgufScalarBytes(GgufType type);
bool GgufTypeIsValid(uint32_t type);

class GgufValue {
 public:
  GgufValue() = default;

  static GgufValue U8(uint8_t v) { return Scalar(GgufType::kU8, v); }
  static GgufValue I8(int8_t v) { return Scalar(GgufType::kI8, static_cast<uint8_t>(v)); }
  static GgufValue U16(uint16_t v) { return Scalar(GgufType::kU16, v); }
  static GgufValue I16(int16_t v) { return Scalar(GgufType::kI16, static_cast<uint16_t>(v)); }
  static GgufValue U32(uint32_t v) { return Scalar(GgufType::kU32, v); }
  static GgufValue I32(int32_t v) { return Scalar(GgufType::kI32, static_cast<uint32_t>(v)); }
  static GgufValue U64(uint64_t v) { return Scalar(GgufType::kU64, v); }
  static GgufValue I64(int64_t v) { return Scalar(GgufType::kI64, static_cast<uint64_t>(v)); }
  static GgufValue F32(float v);
  static GgufValue F64(double v);
  static GgufValue Bool(bool v) { return Scalar(GgufType::kBool, v ? 1 : 0); }
  static GgufValue String(std::string v);
  static GgufValue StringArray(std::vector<std::string> v);
  static GgufValue I32Array(const std::vector<int32_t>& v);
  static GgufValue F32Array(const std::vector<float>& v);
  // A numeric array from packed little-endian elements of `elem` (not string or array).
  static GgufValue NumericArray(GgufType elem, uint64_t count, std::vector<uint8_t> bytes);
  // A scalar of a numeric or bool type from its little-endian bits.
  static GgufValue Scalar(GgufType type, uint64_t bits);

  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }
  GgufType array_type() const { return elem_; }
  uint64_t array_size() const { return count_; }

  // Typed reads. Each throws Error naming the actual type when it does not fit:
  // AsInt accepts any integer type (and u64 up to INT64_MAX), AsFloat also integers.
  int64_t AsInt() const;
  double AsFloat() const;
  bool AsBool() const;
  const std::string& AsString() const;
  const std::vector<std::string>& AsStringArray() const;
  std::vector<int64_t> AsIntArray() const;
  std::vector<float> AsFloatArray() const;
  // Packed elements of a numeric array.
  std::span<const uint8_t> raw_array() const { return raw_; }
  uint64_t scalar_bits() const { return bits_; }

  // Short human-readable form (arrays abbreviated), for logs and `moex` inspection.
  std::string ToString() const;

  bool operator==(const GgufValue& other) const = default;

 private:
  [[noreturn]] void WrongType(const char* wanted) const;

  GgufType type_ = GgufType::kU8;
  GgufType elem_ = GgufType::kU8;  // Element type of an array.
  uint64_t bits_ = 0;              // Scalar value, little-endian bits.
  uint64_t count_ = 0;             // Array length.
  std::string str_;
  std::vector<std::string> strings_;
  std::vector<uint8_t> raw_;
};

}  // namespace moex
