#include "dist/event_messages.h"

#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "policy/registry.h"

namespace moex::dist {

namespace {

enum class EventType : uint32_t {
  kRequestBegin = 1,
  kIterationBegin = 2,
  kGate = 3,
  kIterationEnd = 4,
  kRequestEnd = 5,
};

// Reads the fields of a batch in order; every count is checked against the bytes left
// before anything is multiplied or allocated.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}

  bool done() const { return at_ == bytes_.size(); }

  template <typename T>
  T Get(const char* what) {
    Check(bytes_.size() - at_ >= sizeof(T), "an event batch cut short in ", what);
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }

  // a * b elements, refused when they would need more bytes than are left.
  int64_t Count(int64_t a, int64_t b, size_t element, const char* what) const {
    const int64_t left = static_cast<int64_t>((bytes_.size() - at_) / element);
    Check(a >= 0 && b >= 0 && (b == 0 || a <= left / b), "an event batch gives ", what, " ", a,
          " x ", b, " values, more than its ", bytes_.size() - at_, " bytes left carry");
    return a * b;
  }

  template <typename T>
  void GetArray(int64_t n, std::vector<T>* out, const char* what) {
    n = Count(n, 1, sizeof(T), what);
    out->resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(out->data(), bytes_.data() + at_, static_cast<size_t>(n) * sizeof(T));
    at_ += static_cast<size_t>(n) * sizeof(T);
  }

 private:
  std::span<const std::byte> bytes_;
  size_t at_ = 0;
};

int32_t CheckedInt(int64_t v, const char* what) {
  Check(v >= 0 && v <= std::numeric_limits<int32_t>::max(), "an event batch gives ", what, " ", v);
  return static_cast<int32_t>(v);
}

}  // namespace

template <typename T>
void EventBatch::Put(const T& v) {
  const size_t at = bytes_.size();
  bytes_.resize(at + sizeof v);
  std::memcpy(bytes_.data() + at, &v, sizeof v);
}

template <typename T>
void EventBatch::PutArray(const T* data, int64_t n) {
  Put<int64_t>(n);
  if (n <= 0) return;
  const size_t at = bytes_.size();
  bytes_.resize(at + static_cast<size_t>(n) * sizeof(T));
  std::memcpy(bytes_.data() + at, data, static_cast<size_t>(n) * sizeof(T));
}

void EventBatch::Add(const policy::RequestBeginEvent& e) {
  Put(EventType::kRequestBegin);
  Put<int64_t>(e.request);
  PutArray(e.prompt, e.prompt_len);
  ++events_;
}

void EventBatch::Add(const policy::IterationBeginEvent& e) {
  Put(EventType::kIterationBegin);
  Put<int64_t>(e.iteration);
  PutArray(e.requests, e.n_requests);
  PutArray(e.token_counts, e.n_requests);
  PutArray(e.tokens, e.n_tokens);
  const bool pooled = (fields_ & policy::kNeedsPooled) && e.pooled != nullptr && e.d > 0;
  Put<int64_t>(pooled ? e.d : 0);
  PutArray(e.pooled, pooled ? e.n_requests * e.d : 0);
  ++events_;
}

void EventBatch::Add(const policy::GateEvent& e) {
  Put(EventType::kGate);
  Put<int32_t>(e.layer);
  Put<int32_t>(e.top_k);
  Put<int32_t>(e.num_experts);
  Put<int64_t>(e.n_tokens);
  const int64_t slots = e.n_tokens * e.top_k;
  PutArray(e.ids, slots);
  PutArray(e.weights, slots);
  const bool probs = (fields_ & policy::kNeedsProbs) && e.probs != nullptr;
  PutArray(e.probs, probs ? e.n_tokens * e.num_experts : 0);
  const bool hidden = (fields_ & policy::kNeedsHidden) && e.hidden != nullptr && e.d > 0;
  Put<int64_t>(hidden ? e.d : 0);
  PutArray(e.hidden, hidden ? e.n_tokens * e.d : 0);
  ++events_;
}

void EventBatch::AddIterationEnd() {
  Put(EventType::kIterationEnd);
  ++events_;
}

void EventBatch::Add(const policy::RequestEndEvent& e) {
  Put(EventType::kRequestEnd);
  Put<int64_t>(e.request);
  ++events_;
}

std::string EventBatch::Take() {
  std::string out;
  out.swap(bytes_);
  events_ = 0;
  return out;
}

int64_t ReplayEvents(std::span<const std::byte> batch, policy::EventSink& sink) {
  Reader in(batch);
  int64_t events = 0;
  std::vector<int32_t> ints, routed;
  std::vector<int64_t> requests, counts;
  std::vector<float> weights, probs, rows;
  while (!in.done()) {
    const auto type = in.Get<EventType>("an event type");
    switch (type) {
      case EventType::kRequestBegin: {
        policy::RequestBeginEvent e;
        e.request = in.Get<int64_t>("a request id");
        in.GetArray(in.Get<int64_t>("a prompt length"), &ints, "prompt tokens");
        e.prompt = ints.data();
        e.prompt_len = static_cast<int64_t>(ints.size());
        sink.OnRequestBegin(e);
        break;
      }
      case EventType::kIterationBegin: {
        policy::IterationBeginEvent e;
        e.iteration = in.Get<int64_t>("an iteration");
        in.GetArray(in.Get<int64_t>("a request count"), &requests, "requests");
        const int64_t n = in.Get<int64_t>("a request count");
        Check(n == static_cast<int64_t>(requests.size()), "an event batch gives ", requests.size(),
              " requests and ", n, " token counts");
        in.GetArray(n, &counts, "token counts");
        in.GetArray(in.Get<int64_t>("a token count"), &ints, "tokens");
        e.d = in.Get<int64_t>("a pooled width");
        const int64_t pooled = in.Get<int64_t>("a pooled size");
        Check(pooled == in.Count(n, e.d, sizeof(float), "pooled rows"), "an event batch gives ",
              pooled, " pooled values for ", n, " requests of width ", e.d);
        in.GetArray(pooled, &rows, "pooled rows");
        e.n_requests = n;
        e.requests = requests.data();
        e.token_counts = counts.data();
        e.tokens = ints.data();
        e.n_tokens = static_cast<int64_t>(ints.size());
        e.pooled = pooled > 0 ? rows.data() : nullptr;
        sink.OnIterationBegin(e);
        break;
      }
      case EventType::kGate: {
        policy::GateEvent e;
        e.layer = CheckedInt(in.Get<int32_t>("a layer"), "layer");
        e.top_k = CheckedInt(in.Get<int32_t>("top-k"), "top-k");
        e.num_experts = CheckedInt(in.Get<int32_t>("an expert count"), "expert count");
        e.n_tokens = in.Get<int64_t>("a token count");
        const int64_t slots = in.Count(e.n_tokens, e.top_k, sizeof(int32_t), "routing slots");
        Check(in.Get<int64_t>("the routing ids") == slots, "an event batch's gate of ", e.n_tokens,
              " tokens x top-", e.top_k, " has another number of ids");
        in.GetArray(slots, &ints, "routing ids");
        for (int32_t id : ints)
          Check(id >= 0 && id < e.num_experts, "an event batch routes to expert ", id, " of ",
                e.num_experts);
        Check(in.Get<int64_t>("the routing weights") == slots, "an event batch's gate of ",
              e.n_tokens, " tokens x top-", e.top_k, " has another number of weights");
        in.GetArray(slots, &weights, "routing weights");
        const int64_t p = in.Get<int64_t>("a probability count");
        Check(p == 0 || p == in.Count(e.n_tokens, e.num_experts, sizeof(float), "probabilities"),
              "an event batch gives ", p, " gate probabilities for ", e.n_tokens, " tokens of ",
              e.num_experts, " experts");
        in.GetArray(p, &probs, "gate probabilities");
        e.d = in.Get<int64_t>("a hidden width");
        const int64_t h = in.Get<int64_t>("a hidden size");
        Check(h == in.Count(e.n_tokens, e.d, sizeof(float), "gate inputs"), "an event batch gives ",
              h, " gate input values for ", e.n_tokens, " tokens of width ", e.d);
        in.GetArray(h, &rows, "gate inputs");
        e.ids = ints.data();
        e.weights = weights.data();
        e.probs = p > 0 ? probs.data() : nullptr;
        e.hidden = h > 0 ? rows.data() : nullptr;
        policy::SetRouted(&e, &routed);
        sink.OnGate(e);
        break;
      }
      case EventType::kIterationEnd:
        sink.OnIterationEnd();
        break;
      case EventType::kRequestEnd:
        sink.OnRequestEnd({in.Get<int64_t>("a request id")});
        break;
      default:
        Fail("an event batch holds an event of unknown type ", static_cast<uint32_t>(type));
    }
    ++events;
  }
  return events;
}

}  // namespace moex::dist
