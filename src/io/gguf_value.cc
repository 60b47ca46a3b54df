#include "io/gguf_value.h"

#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace moex {

namespace {

// Reads element i of a packed array (or a scalar's bits) as a signed or float value.
uint64_t LoadBits(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

bool IsInteger(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

bool IntFromBits(GgufType t, uint64_t bits, int64_t* out) {
  switch (t) {
    case GgufType::kU8:
      *out = static_cast<uint8_t>(bits);
      return true;
    case GgufType::kI8:
      *out = static_cast<int8_t>(bits);
      return true;
    case GgufType::kU16:
      *out = static_cast<uint16_t>(bits);
      return true;
    case GgufType::kI16:
      *out = static_cast<int16_t>(bits);
      return true;
    case GgufType::kU32:
      *out = static_cast<uint32_t>(bits);
      return true;
    case GgufType::kI32:
      *out = static_cast<int32_t>(bits);
      return true;
    case GgufType::kI64:
      *out = static_cast<int64_t>(bits);
      return true;
    case GgufType::kU64:
      if (bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
      *out = static_cast<int64_t>(bits);
      return true;
    default:
      return false;
  }
}

bool FloatFromBits(GgufType t, uint64_t bits, double* out) {
  if (t == GgufType::kF32) {
    const auto b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, 4);
    *out = f;
    return true;
  }
  if (t == GgufType::kF64) {
    std::memcpy(out, &bits, 8);
    return true;
  }
  if (t == GgufType::kU64) {
    *out = static_cast<double>(bits);
    return true;
  }
  int64_t i;
  if (!IntFromBits(t, bits, &i)) return false;
  *out = static_cast<double>(i);
  return true;
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "?";
}

size_t GgufScalarBytes(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool GgufTypeIsValid(uint32_t type) {
  return type <= static_cast<uint32_t>(GgufType::kF64);
}

GgufValue GgufValue::Scalar(GgufType type, uint64_t bits) {
  const size_t bytes = GgufScalarBytes(type);
  Check(bytes > 0, "GGUF: ", GgufTypeName(type), " is not a scalar type");
  GgufValue v;
  v.type_ = type;
  v.bits_ = bytes == 8 ? bits : bits & ((1ull << (8 * bytes)) - 1);
  return v;
}

GgufValue GgufValue::F32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return Scalar(GgufType::kF32, b);
}

GgufValue GgufValue::F64(double f) {
  uint64_t b;
  std::memcpy(&b, &f, 8);
  return Scalar(GgufType::kF64, b);
}

GgufValue GgufValue::String(std::string s) {
  GgufValue v;
  v.type_ = GgufType::kString;
  v.str_ = std::move(s);
  return v;
}

GgufValue GgufValue::StringArray(std::vector<std::string> s) {
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_ = GgufType::kString;
  v.count_ = s.size();
  v.strings_ = std::move(s);
  return v;
}

GgufValue GgufValue::NumericArray(GgufType elem, uint64_t count, std::vector<uint8_t> bytes) {
  const size_t size = GgufScalarBytes(elem);
  Check(size > 0, "GGUF: arrays of ", GgufTypeName(elem), " are not supported");
  Check(bytes.size() / size == count && bytes.size() % size == 0,
        "GGUF: array byte size does not match its length");
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.elem_ = elem;
  v.count_ = count;
  v.raw_ = std::move(bytes);
  return v;
}

GgufValue GgufValue::I32Array(const std::vector<int32_t>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    const auto u = static_cast<uint32_t>(values[i]);
    for (int k = 0; k < 4; ++k) bytes[4 * i + k] = static_cast<uint8_t>(u >> (8 * k));
  }
  return NumericArray(GgufType::kI32, values.size(), std::move(bytes));
}

GgufValue GgufValue::F32Array(const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &values[i], 4);
    for (int k = 0; k < 4; ++k) bytes[4 * i + k] = static_cast<uint8_t>(u >> (8 * k));
  }
  return NumericArray(GgufType::kF32, values.size(), std::move(bytes));
}

void GgufValue::WrongType(const char* wanted) const {
  if (is_array()) Fail("value is an array of ", GgufTypeName(elem_), ", expected ", wanted);
  Fail("value is ", GgufTypeName(type_), ", expected ", wanted);
}

int64_t GgufValue::AsInt() const {
  int64_t v;
  if (!IntFromBits(type_, bits_, &v)) {
    if (type_ == GgufType::kU64) Fail("value ", bits_, " is too large");
    WrongType("an integer");
  }
  return v;
}

double GgufValue::AsFloat() const {
  double v;
  if (!FloatFromBits(type_, bits_, &v)) WrongType("a number");
  return v;
}

bool GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) WrongType("bool");
  return bits_ != 0;
}

const std::string& GgufValue::AsString() const {
  if (type_ != GgufType::kString) WrongType("string");
  return str_;
}

const std::vector<std::string>& GgufValue::AsStringArray() const {
  if (!is_array() || elem_ != GgufType::kString) WrongType("an array of strings");
  return strings_;
}

std::vector<int64_t> GgufValue::AsIntArray() const {
  if (!is_array() || !IsInteger(elem_)) WrongType("an array of integers");
  const size_t size = GgufScalarBytes(elem_);
  std::vector<int64_t> out(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    const uint64_t bits = LoadBits(raw_.data() + i * size, size);
    if (!IntFromBits(elem_, bits, &out[i])) Fail("array value ", bits, " is too large");
  }
  return out;
}

std::vector<float> GgufValue::AsFloatArray() const {
  const bool numeric =
      is_array() && (IsInteger(elem_) || elem_ == GgufType::kF32 || elem_ == GgufType::kF64);
  if (!numeric) WrongType("an array of numbers");
  const size_t size = GgufScalarBytes(elem_);
  std::vector<float> out(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    double d = 0;
    FloatFromBits(elem_, LoadBits(raw_.data() + i * size, size), &d);
    out[i] = static_cast<float>(d);
  }
  return out;
}

std::string GgufValue::ToString() const {
  std::ostringstream out;
  auto scalar = [&](GgufType t, uint64_t bits) {
    int64_t i;
    double d;
    if (t == GgufType::kBool)
      out << (bits ? "true" : "false");
    else if (t == GgufType::kU64)
      out << bits;
    else if (IntFromBits(t, bits, &i))
      out << i;
    else if (FloatFromBits(t, bits, &d))
      out << d;
  };
  if (type_ == GgufType::kString) {
    out << '"' << str_ << '"';
  } else if (is_array()) {
    out << "[" << GgufTypeName(elem_) << " x " << count_ << ":";
    const uint64_t shown = count_ < 8 ? count_ : 8;
    for (uint64_t i = 0; i < shown; ++i) {
      out << ' ';
      if (elem_ == GgufType::kString) {
        out << '"' << strings_[i] << '"';
      } else {
        const size_t size = GgufScalarBytes(elem_);
        scalar(elem_, LoadBits(raw_.data() + i * size, size));
      }
    }
    if (shown < count_) out << " ...";
    out << "]";
  } else {
    scalar(type_, bits_);
  }
  return out.str();
}

}  // namespace moex
