#include "trace/trace_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "io/expert_store_format.h"
#include "model/model_config.h"

namespace moex::trace {

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kNone:
      return "none";
    case Precision::kF32:
      return "f32";
    case Precision::kF16:
      return "f16";
    case Precision::kBF16:
      return "bf16";
  }
  return "?";
}

Precision ParsePrecision(const std::string& name) {
  for (Precision p : {Precision::kNone, Precision::kF32, Precision::kF16, Precision::kBF16})
    if (name == PrecisionName(p)) return p;
  Fail("invalid precision '", name, "' (valid: none, f32, f16, bf16)");
}

size_t PrecisionBytes(Precision p) {
  return p == Precision::kNone ? 0 : p == Precision::kF32 ? 4 : 2;
}

nlohmann::json HeaderToJson(const TraceHeader& h) {
  const TraceModel& m = h.model;
  return {{"source", h.source},
          {"model",
           {{"name", m.name},
            {"config", m.config},
            {"num_layers", m.num_layers},
            {"moe_layers", m.moe_layers},
            {"num_experts", m.num_experts},
            {"top_k", m.top_k},
            {"hidden_size", m.hidden_size},
            {"expert_neurons", m.expert_neurons},
            {"record_bytes", m.record_bytes},
            {"block_neurons", m.block_neurons},
            {"dtype", m.dtype}}},
          {"probs", PrecisionName(h.probs)},
          {"hidden", PrecisionName(h.hidden)},
          {"pooled", h.pooled},
          {"router_weights", h.router_weights},
          {"info", h.info}};
}

namespace {

template <typename T>
T Field(const nlohmann::json& j, const char* key, const char* where) {
  Check(j.is_object() && j.contains(key), "trace header: missing '", key, "' in ", where);
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    Fail("trace header: '", key, "' in ", where, " has the wrong type");
  }
}

}  // namespace

TraceHeader HeaderFromJson(const nlohmann::json& j) {
  TraceHeader h;
  h.source = Field<std::string>(j, "source", "header");
  const nlohmann::json& m = j.contains("model") ? j.at("model") : nlohmann::json();
  h.model.name = Field<std::string>(m, "name", "model");
  h.model.config = m.value("config", nlohmann::json());
  h.model.num_layers = Field<int>(m, "num_layers", "model");
  h.model.moe_layers = Field<std::vector<int>>(m, "moe_layers", "model");
  h.model.num_experts = Field<int>(m, "num_experts", "model");
  h.model.top_k = Field<int>(m, "top_k", "model");
  h.model.hidden_size = Field<int>(m, "hidden_size", "model");
  h.model.expert_neurons = Field<int>(m, "expert_neurons", "model");
  h.model.record_bytes = Field<int64_t>(m, "record_bytes", "model");
  h.model.block_neurons = Field<int>(m, "block_neurons", "model");
  h.model.dtype = Field<std::string>(m, "dtype", "model");
  h.probs = ParsePrecision(Field<std::string>(j, "probs", "header"));
  h.hidden = ParsePrecision(Field<std::string>(j, "hidden", "header"));
  h.pooled = Field<bool>(j, "pooled", "header");
  h.router_weights = Field<bool>(j, "router_weights", "header");
  h.info = j.value("info", nlohmann::json::object());
  const TraceModel& t = h.model;
  Check(t.num_layers > 0 && t.num_experts > 0 && t.num_experts <= 65535 && t.top_k > 0 &&
            t.top_k <= t.num_experts && t.hidden_size > 0 && t.expert_neurons > 0 &&
            t.record_bytes > 0 && t.block_neurons > 0 && !t.moe_layers.empty(),
        "trace header: invalid model shape (layers ", t.num_layers, ", experts ", t.num_experts,
        ", top-k ", t.top_k, ", hidden ", t.hidden_size, ", neurons ", t.expert_neurons, ")");
  // Caches are sized from these numbers' product: it must not wrap (a wrapped page size of
  // zero once divided in the cache plan). 2^50 bytes of experts is far beyond any model.
  int64_t all_experts = t.record_bytes;
  for (int64_t factor :
       {static_cast<int64_t>(t.expert_neurons), static_cast<int64_t>(t.num_experts),
        static_cast<int64_t>(t.moe_layers.size())})
    Check(!__builtin_mul_overflow(all_experts, factor, &all_experts) &&
              all_experts <= (int64_t{1} << 50),
          "trace header: experts of ", t.record_bytes, " bytes per neuron x ", t.expert_neurons,
          " neurons x ", t.num_experts, " experts x ", t.moe_layers.size(),
          " MoE layers exceed 2^50 bytes");
  Check(t.block_neurons <= t.expert_neurons, "trace header: store blocks of ", t.block_neurons,
        " neurons in experts of ", t.expert_neurons);
  // A store's block is a whole expert or a whole number of its alignment units
  // (StoreBlockNeurons); any other block size describes no store the simulator could model.
  Check(t.block_neurons == t.expert_neurons ||
            (static_cast<uint64_t>(t.block_neurons) * static_cast<uint64_t>(t.record_bytes)) %
                    kStoreAlignment ==
                0,
        "trace header: store blocks of ", t.block_neurons, " neurons x ", t.record_bytes,
        " bytes are neither a whole expert (", t.expert_neurons, " neurons) nor a multiple of the ",
        kStoreAlignment, "-byte store alignment");
  for (int l : t.moe_layers)
    Check(l >= 0 && l < t.num_layers, "trace header: MoE layer ", l, " is outside 0..",
          t.num_layers - 1);
  for (size_t i = 1; i < t.moe_layers.size(); ++i)
    Check(t.moe_layers[i - 1] < t.moe_layers[i], "trace header: MoE layers are not ascending");
  if (!t.config.is_null()) CheckConfigMatchesShape(t);
  return h;
}

void CheckConfigMatchesShape(const TraceModel& t) {
  // The simulator sizes its caches from the config and indexes them with the records' ids,
  // which are checked against the shape: the two must agree.
  ModelConfig c;
  try {
    c = ModelConfig::FromHfJson(t.config);
  } catch (const Error& e) {
    Fail("trace header: model.config is invalid: ", e.what());
  }
  auto same = [](const char* what, int64_t config, int64_t shape) {
    Check(config == shape, "trace header: model.config says ", what, " ", config,
          ", the model shape says ", shape, " (inconsistent header)");
  };
  same("num_hidden_layers", c.num_layers, t.num_layers);
  same("num_experts", c.num_experts, t.num_experts);
  same("num_experts_per_tok", c.num_experts_per_tok, t.top_k);
  same("hidden_size", c.hidden_size, t.hidden_size);
  same("moe_intermediate_size", c.moe_intermediate_size, t.expert_neurons);
  std::vector<int> moe_layers;
  for (int l = 0; l < c.num_layers; ++l)
    if (c.IsMoeLayer(l)) moe_layers.push_back(l);
  Check(moe_layers == t.moe_layers,
        "trace header: model.config's MoE layers differ from the shape's moe_layers");
}

namespace {

class Encoder {
 public:
  template <typename T>
  void Put(T v) {
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &v, sizeof(T));
  }
  template <typename T>
  void PutArray(const std::vector<T>& v) {
    const size_t at = out_.size();
    out_.resize(at + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(out_.data() + at, v.data(), v.size() * sizeof(T));
  }
  // `v` must hold `count` values unless the precision is kNone.
  void PutFloats(const std::vector<float>& v, size_t count, Precision p, const char* what) {
    if (p == Precision::kNone) return;
    Check(v.size() == count, "trace: ", what, " has ", v.size(), " values, expected ", count);
    for (float f : v) {
      if (p == Precision::kF32)
        Put(f);
      else
        Put<uint16_t>(p == Precision::kF16 ? F32ToF16(f) : F32ToBF16(f));
    }
  }
  std::vector<std::byte> Take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class Decoder {
 public:
  Decoder(const std::byte* data, size_t size, const std::string& where)
      : p_(data), left_(size), where_(where) {}
  template <typename T>
  T Get() {
    Need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    Skip(sizeof(T));
    return v;
  }
  template <typename T>
  std::vector<T> GetArray(int64_t count) {
    Check(count >= 0 && static_cast<uint64_t>(count) <= left_ / sizeof(T), where_,
          ": record is shorter than its counts say (", count, " values)");
    std::vector<T> v(static_cast<size_t>(count));
    if (count > 0) std::memcpy(v.data(), p_, v.size() * sizeof(T));
    Skip(v.size() * sizeof(T));
    return v;
  }
  std::vector<float> GetFloats(int64_t count, Precision p) {
    if (p == Precision::kNone) return {};
    if (p == Precision::kF32) return GetArray<float>(count);
    const std::vector<uint16_t> h = GetArray<uint16_t>(count);
    std::vector<float> v(h.size());
    ConvertToF32(reinterpret_cast<const std::byte*>(h.data()),
                 p == Precision::kF16 ? DType::kF16 : DType::kBF16, count, v.data());
    return v;
  }
  void ExpectEnd() const {
    Check(left_ == 0, where_, ": ", left_, " unexpected bytes after the record's content");
  }

 private:
  void Need(size_t n) const {
    Check(left_ >= n, where_, ": record ends early (", left_, " bytes left, ", n, " needed)");
  }
  void Skip(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const std::byte* p_;
  size_t left_;
  const std::string& where_;
};

// Sizes come from the file, so each is checked before it is used to index anything.
int64_t Count(int64_t v, int64_t max, const char* what, const std::string& where) {
  Check(v >= 0 && v <= max, where, ": ", what, " ", v, " is out of range (0..", max, ")");
  return v;
}

}  // namespace

std::vector<std::byte> EncodeEvent(const TraceEvent& e, const TraceHeader& h) {
  Encoder enc;
  switch (e.kind) {
    case TraceEvent::kRequestBegin:
      enc.Put<int64_t>(e.request);
      enc.Put<int64_t>(static_cast<int64_t>(e.prompt.size()));
      enc.PutArray(e.prompt);
      break;
    case TraceEvent::kRequestEnd:
      enc.Put<int64_t>(e.request);
      break;
    case TraceEvent::kIteration: {
      const TraceIteration& it = e.iteration;
      const int64_t d = h.model.hidden_size;
      Check(it.requests.size() == it.token_counts.size(), "trace: iteration ", it.iteration,
            " has ", it.requests.size(), " requests but ", it.token_counts.size(), " counts");
      int64_t total = 0;
      for (int64_t c : it.token_counts) total += c;
      Check(static_cast<int64_t>(it.tokens.size()) == total, "trace: iteration ", it.iteration,
            " has ", it.tokens.size(), " tokens, its counts say ", total);
      enc.Put<int64_t>(it.iteration);
      enc.Put<int64_t>(static_cast<int64_t>(it.requests.size()));
      enc.PutArray(it.requests);
      enc.PutArray(it.token_counts);
      enc.PutArray(it.tokens);
      enc.PutFloats(it.pooled, it.requests.size() * static_cast<size_t>(d),
                    h.pooled ? Precision::kF32 : Precision::kNone, "pooled embedding");
      enc.Put<int32_t>(static_cast<int32_t>(it.gates.size()));
      for (const TraceGate& g : it.gates) {
        const size_t slots = static_cast<size_t>(g.n_tokens) * static_cast<size_t>(g.top_k);
        Check(g.n_tokens == total && g.ids.size() == slots && g.weights.size() == slots,
              "trace: gate of layer ", g.layer, " does not match its iteration's ", total,
              " tokens");
        enc.Put<int32_t>(g.layer);
        enc.Put<int32_t>(g.top_k);
        for (int32_t id : g.ids) {
          Check(id >= 0 && id < h.model.num_experts, "trace: expert id ", id, " out of range");
          enc.Put<uint16_t>(static_cast<uint16_t>(id));
        }
        enc.PutArray(g.weights);
        enc.PutFloats(g.probs, static_cast<size_t>(g.n_tokens) * h.model.num_experts, h.probs,
                      "gate probabilities");
        enc.PutFloats(g.hidden, static_cast<size_t>(g.n_tokens * d), h.hidden, "hidden state");
      }
      break;
    }
  }
  return enc.Take();
}

TraceEvent DecodeEvent(RecordTag tag, const std::byte* data, size_t size, const TraceHeader& h,
                       const std::string& where) {
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  Decoder dec(data, size, where);
  TraceEvent e;
  switch (tag) {
    case RecordTag::kRequestBegin: {
      e.kind = TraceEvent::kRequestBegin;
      e.request = dec.Get<int64_t>();
      e.prompt =
          dec.GetArray<int32_t>(Count(dec.Get<int64_t>(), kMaxCount, "prompt length", where));
      for (int32_t id : e.prompt) Check(id >= 0, where, ": prompt token id ", id, " is negative");
      break;
    }
    case RecordTag::kRequestEnd:
      e.kind = TraceEvent::kRequestEnd;
      e.request = dec.Get<int64_t>();
      break;
    case RecordTag::kIteration: {
      e.kind = TraceEvent::kIteration;
      TraceIteration& it = e.iteration;
      const int64_t d = h.model.hidden_size;
      it.iteration = dec.Get<int64_t>();
      const int64_t n = Count(dec.Get<int64_t>(), kMaxCount, "request count", where);
      it.requests = dec.GetArray<int64_t>(n);
      it.token_counts = dec.GetArray<int64_t>(n);
      int64_t total = 0;
      for (int64_t c : it.token_counts) total += Count(c, kMaxCount, "token count", where);
      for (size_t i = 0; i < it.requests.size(); ++i) {
        Check(it.token_counts[i] > 0, where, ": request ", it.requests[i],
              " is in the pass with no token");
        for (size_t k = 0; k < i; ++k)
          Check(it.requests[k] != it.requests[i], where, ": request ", it.requests[i],
                " appears twice in one pass");
      }
      it.tokens = dec.GetArray<int32_t>(total);
      for (int32_t id : it.tokens) Check(id >= 0, where, ": token id ", id, " is negative");
      it.pooled = dec.GetFloats(n * d, h.pooled ? Precision::kF32 : Precision::kNone);
      const int64_t gates = Count(dec.Get<int32_t>(), h.model.num_layers, "gate count", where);
      for (int64_t i = 0; i < gates; ++i) {
        TraceGate g;
        g.layer =
            static_cast<int>(Count(dec.Get<int32_t>(), h.model.num_layers - 1, "layer", where));
        Check(std::binary_search(h.model.moe_layers.begin(), h.model.moe_layers.end(), g.layer),
              where, ": gate of layer ", g.layer,
              ", which the header does not list as a MoE layer");
        Check(it.gates.empty() || it.gates.back().layer < g.layer, where, ": gate of layer ",
              g.layer, " follows layer ", it.gates.empty() ? -1 : it.gates.back().layer,
              " (gates go once per MoE layer, in layer order)");
        g.top_k = static_cast<int>(Count(dec.Get<int32_t>(), h.model.num_experts, "top-k", where));
        Check(g.top_k == h.model.top_k, where, ": gate of layer ", g.layer, " routes to ", g.top_k,
              " experts per token; the header's top_k is ", h.model.top_k);
        g.n_tokens = total;
        const int64_t slots = total * g.top_k;
        const std::vector<uint16_t> ids = dec.GetArray<uint16_t>(slots);
        g.ids.reserve(ids.size());
        for (uint16_t id : ids) {
          Check(id < h.model.num_experts, where, ": expert id ", id, " out of range (model has ",
                h.model.num_experts, " experts)");
          g.ids.push_back(id);
        }
        for (int64_t t = 0; t < total; ++t)
          for (int a = 0; a < g.top_k; ++a)
            for (int b = 0; b < a; ++b)
              Check(g.ids[t * g.top_k + a] != g.ids[t * g.top_k + b], where, ": token ", t,
                    " of the gate of layer ", g.layer, " routes to expert ",
                    g.ids[t * g.top_k + a], " twice");
        g.weights = dec.GetArray<float>(slots);
        for (float w : g.weights)
          Check(std::isfinite(w), where, ": the gate of layer ", g.layer,
                " has a non-finite combine weight (", w, ")");
        g.probs = dec.GetFloats(total * h.model.num_experts, h.probs);
        g.hidden = dec.GetFloats(total * d, h.hidden);
        for (const auto* values : {&g.probs, &g.hidden})
          Check(std::all_of(values->begin(), values->end(), [](float v) { return std::isfinite(v); }),
                where, ": the gate of layer ", g.layer, " holds a non-finite ",
                values == &g.probs ? "probability" : "hidden state value");
        it.gates.push_back(std::move(g));
      }
      break;
    }
    default:
      Fail(where, ": record tag ", static_cast<uint32_t>(tag), " is not an event");
  }
  dec.ExpectEnd();
  return e;
}

}  // namespace moex::trace
