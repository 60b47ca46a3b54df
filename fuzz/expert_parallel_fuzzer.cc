// libFuzzer target: the messages of expert parallelism (dist/expert_messages.h) and the
// policy-event batches rank 0 relays to the workers (dist/event_messages.h), which a worker
// decodes from bytes another process sent. The first byte picks the decoder (even: a
// message, with the row width from the second byte; odd: an event batch). Invariants: a
// message that decodes has rows and token indices within its bytes and its counts; every
// replayed gate routes only to experts that exist, and its routed set is ascending and
// distinct.
#include <algorithm>
#include <vector>

#include "dist/event_messages.h"
#include "dist/expert_messages.h"
#include "fuzz/fuzz_support.h"

namespace {

using namespace moex;

class CheckingSink final : public policy::EventSink {
 public:
  void OnGate(const policy::GateEvent& e) override {
    for (int64_t i = 0; i < e.n_tokens * e.top_k; ++i)
      fuzz::Expect(e.ids[i] >= 0 && e.ids[i] < e.num_experts, "a gate id out of range");
    const auto routed = e.routed_experts();
    fuzz::Expect(
        std::adjacent_find(routed.begin(), routed.end(), std::greater_equal<>()) == routed.end(),
        "a routed set that is not ascending and distinct");
    fuzz::Expect(e.n_tokens * e.top_k == 0 || !routed.empty(), "a gate without its routed set");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // In a vector, as the transport receives it: the decoded spans view it as int32 and float.
  const std::span<const std::byte> input = fuzz::Bytes(data + 2, size - 2);
  const std::vector<std::byte> copy(input.begin(), input.end());
  const std::span<const std::byte> body(copy);
  try {
    if (data[0] % 2 == 1) {
      CheckingSink sink;
      dist::ReplayEvents(body, sink);
      return 0;
    }
    const dist::MessageKind kind = dist::KindOf(body);
    if (kind != dist::MessageKind::kLayer && kind != dist::MessageKind::kOutputs) {
      dist::DecodeText(body);
      return 0;
    }
    const int64_t d = 1 + data[1] % 8;
    const dist::LayerMessage m = dist::DecodeLayer(body, d);
    int64_t rows = 0;
    for (const dist::ExpertSpan& s : m.experts) rows += s.rows;
    if (m.kind == dist::MessageKind::kLayer) {
      fuzz::Expect(static_cast<int64_t>(m.token_of_row.size()) == rows, "token indices != rows");
      fuzz::Expect(static_cast<int64_t>(m.rows.size()) == m.token_rows * d, "token rows size");
      for (int32_t t : m.token_of_row)
        fuzz::Expect(t >= 0 && t < m.token_rows, "a token index out of range");
    } else {
      fuzz::Expect(static_cast<int64_t>(m.rows.size()) == rows * d, "output rows size");
    }
    const std::byte* end = copy.data() + copy.size();
    if (!m.rows.empty())
      fuzz::Expect(reinterpret_cast<const std::byte*>(m.rows.data() + m.rows.size()) <= end,
                   "rows past the input");
  } catch (const Error&) {
  }
  return 0;
}
