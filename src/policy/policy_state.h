// What a policy learned, as bytes (--policy-state). A policy writes and reads its own body
// through StateWriter/StateReader; EncodePolicyState wraps it in a versioned, checksummed
// envelope that names the policy spec and the model shape it was learned for, so loading
// it into another policy or model is a clear error rather than garbage. Files are read and
// written by the driver (src/cli); this layer only turns state into bytes and back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "policy/policy_facts.h"

namespace moex::policy {

class Policy;

class StateWriter {
 public:
  void U64(uint64_t v) { Raw(&v, sizeof v); }
  void I64(int64_t v) { Raw(&v, sizeof v); }
  void F64(double v) { Raw(&v, sizeof v); }
  void String(const std::string& s);
  void Floats(const std::vector<float>& v);
  void Raw(const void* data, size_t bytes);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Reads what a StateWriter wrote; any read past the end or implausible length throws Error
// naming `origin`.
class StateReader {
 public:
  StateReader(std::span<const std::byte> bytes, std::string origin);
  uint64_t U64();
  int64_t I64();
  double F64();
  std::string String();
  std::vector<float> Floats();
  void Raw(void* data, size_t bytes);
  bool at_end() const { return at_ == bytes_.size(); }
  void ExpectEnd() const;
  const std::string& origin() const { return origin_; }

 private:
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
  std::string origin_;
};

constexpr uint32_t kPolicyStateVersion = 1;

// The envelope: magic, version, the policy's canonical spec, the model shape (and a
// fingerprint of its router weights when the facts have them), the body, a checksum.
std::string EncodePolicyState(const Policy& policy, const PolicyFacts& facts);
// Throws Error naming `origin` when the bytes are not a policy state, are corrupt, come
// from a newer version, another policy spec, or a model of another shape.
void DecodePolicyState(Policy& policy, const PolicyFacts& facts, std::span<const std::byte> bytes,
                       const std::string& origin);

}  // namespace moex::policy
