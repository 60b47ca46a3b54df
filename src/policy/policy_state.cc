#include "policy/policy_state.h"

#include <cstring>

#include "core/checksum.h"
#include "core/error.h"
#include "policy/policy.h"

namespace moex::policy {

namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'X', 'P', 'O', 'L', '1'};
// Longest string or array a state may hold: guards against a corrupt length field.
constexpr uint64_t kMaxElements = uint64_t{1} << 34;

std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// The model shape a state belongs to, compared as a whole.
std::string ModelIdentity(const PolicyFacts& f) {
  std::string moe;
  for (int l = 0; l < f.num_layers; ++l)
    if (f.IsMoeLayer(l)) moe += (moe.empty() ? "" : ",") + std::to_string(l);
  return "layers=" + std::to_string(f.num_layers) + " moe_layers=[" + moe +
         "] experts=" + std::to_string(f.num_experts) + " top_k=" + std::to_string(f.top_k) +
         " hidden=" + std::to_string(f.hidden_size) + " neurons=" + std::to_string(f.neurons);
}

// Distinguishes two models of one shape; 0 when the facts carry no router weights.
uint64_t RouterFingerprint(const PolicyFacts& f) {
  if (!f.router_weights) return 0;
  for (int l = 0; l < f.num_layers; ++l) {
    if (!f.IsMoeLayer(l)) continue;
    const std::vector<float> w = f.router_weights(l);
    return Checksum64({reinterpret_cast<const std::byte*>(w.data()), w.size() * sizeof(float)}) |
           1;  // Never 0, which means "unknown".
  }
  return 0;
}

}  // namespace

void StateWriter::Raw(const void* data, size_t bytes) {
  bytes_.append(static_cast<const char*>(data), bytes);
}

void StateWriter::String(const std::string& s) {
  U64(s.size());
  Raw(s.data(), s.size());
}

void StateWriter::Floats(const std::vector<float>& v) {
  U64(v.size());
  Raw(v.data(), v.size() * sizeof(float));
}

StateReader::StateReader(std::span<const std::byte> bytes, std::string origin)
    : bytes_(bytes), origin_(std::move(origin)) {}

void StateReader::Raw(void* data, size_t bytes) {
  Check(bytes <= bytes_.size() - at_, origin_, ": policy state ends early (truncated file?)");
  std::memcpy(data, bytes_.data() + at_, bytes);
  at_ += bytes;
}

uint64_t StateReader::U64() {
  uint64_t v;
  Raw(&v, sizeof v);
  return v;
}
int64_t StateReader::I64() {
  int64_t v;
  Raw(&v, sizeof v);
  return v;
}
double StateReader::F64() {
  double v;
  Raw(&v, sizeof v);
  return v;
}

std::string StateReader::String() {
  const uint64_t n = U64();
  Check(n <= bytes_.size() - at_, origin_, ": policy state has a string longer than the file");
  std::string s(n, '\0');
  Raw(s.data(), n);
  return s;
}

std::vector<float> StateReader::Floats() {
  const uint64_t n = U64();
  Check(n < kMaxElements && n * sizeof(float) <= bytes_.size() - at_, origin_,
        ": policy state has an array longer than the file");
  std::vector<float> v(n);
  Raw(v.data(), n * sizeof(float));
  return v;
}

void StateReader::ExpectEnd() const {
  Check(at_ == bytes_.size(), origin_, ": policy state has ", bytes_.size() - at_,
        " unexpected trailing bytes");
}

std::string EncodePolicyState(const Policy& policy, const PolicyFacts& facts) {
  StateWriter body;
  policy.SaveState(body);
  StateWriter out;
  out.Raw(kMagic, sizeof kMagic);
  out.U64(kPolicyStateVersion);
  out.String(policy.name());
  out.String(ModelIdentity(facts));
  out.U64(RouterFingerprint(facts));
  out.String(body.bytes());
  out.U64(Checksum64(AsBytes(out.bytes())));
  return out.bytes();
}

void DecodePolicyState(Policy& policy, const PolicyFacts& facts, std::span<const std::byte> bytes,
                       const std::string& origin) {
  Check(bytes.size() >= sizeof kMagic + 16 &&
            std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
        origin, " is not a moex policy state file");
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  const std::span<const std::byte> covered = bytes.first(bytes.size() - sizeof stored);
  StateReader in(covered, origin);
  char magic[sizeof kMagic];
  in.Raw(magic, sizeof magic);
  const uint64_t version = in.U64();
  Check(version <= kPolicyStateVersion, origin, " is policy state version ", version,
        "; this moex reads up to version ", kPolicyStateVersion, " (a newer moex wrote it)");
  Check(Checksum64(covered) == stored, origin, ": policy state fails its checksum (corrupt file)");
  const std::string spec = in.String();
  Check(spec == policy.name(), origin, " holds the state of policy '", spec,
        "', not of '", policy.name(), "'");
  const std::string model = in.String();
  Check(model == ModelIdentity(facts), origin, " was learned for a model of shape {", model,
        "}, not this one {", ModelIdentity(facts), "}");
  const uint64_t router = in.U64();
  const uint64_t ours = RouterFingerprint(facts);
  Check(router == 0 || ours == 0 || router == ours, origin,
        " was learned for another model of the same shape (its router weights differ)");
  const std::string body = in.String();
  in.ExpectEnd();
  StateReader body_in(AsBytes(body), origin);
  policy.LoadState(body_in);
  body_in.ExpectEnd();
}

}  // namespace moex::policy
