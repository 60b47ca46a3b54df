// The trace file format: exact round trips at every precision, and clear errors for
// truncated, corrupt, foreign and newer files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "io/expert_store_format.h"
#include "model/random_model.h"
#include "support/temp_dir.h"
#include "trace/trace_reader.h"
#include "trace/trace_writer.h"

namespace moex::trace {
namespace {

TraceHeader SmallHeader(Precision probs, Precision hidden, bool pooled) {
  TraceHeader h;
  h.source = "test";
  h.model.name = "toy";
  h.model.num_layers = 2;
  h.model.moe_layers = {0, 1};
  h.model.num_experts = 4;
  h.model.top_k = 2;
  h.model.hidden_size = 3;
  h.model.expert_neurons = 8;
  h.model.record_bytes = 18;
  h.model.block_neurons = 8;
  h.model.dtype = "bf16";
  h.probs = probs;
  h.hidden = hidden;
  h.pooled = pooled;
  h.info = {{"note", "unit test"}};
  return h;
}

TraceEvent Iteration(const TraceHeader& h, int64_t index) {
  TraceEvent e;
  e.kind = TraceEvent::kIteration;
  TraceIteration& it = e.iteration;
  it.iteration = index;
  it.requests = {0, 1};
  it.token_counts = {2, 1};
  it.tokens = {11, 12, 13};
  if (h.pooled) it.pooled = {0.5f, -1, 2, 3, 4, 5.25f};
  for (int layer = 0; layer < 2; ++layer) {
    TraceGate g;
    g.layer = layer;
    g.n_tokens = 3;
    g.top_k = 2;
    g.ids = {3, 1, 0, 2, 1, 2 + layer};
    g.weights = {0.6f, 0.4f, 0.7f, 0.3f, 0.55f, 0.45f};
    if (h.probs != Precision::kNone)
      for (int i = 0; i < 12; ++i) g.probs.push_back(0.1f * static_cast<float>(i) + 0.013f);
    if (h.hidden != Precision::kNone)
      for (int i = 0; i < 9; ++i) g.hidden.push_back(1.0f / static_cast<float>(i + 3));
    it.gates.push_back(g);
  }
  return e;
}

std::vector<TraceEvent> Events(const TraceHeader& h) {
  std::vector<TraceEvent> events;
  TraceEvent begin;
  begin.kind = TraceEvent::kRequestBegin;
  begin.request = 0;
  begin.prompt = {11, 12};
  events.push_back(begin);
  begin.request = 1;
  begin.prompt = {13};
  events.push_back(begin);
  events.push_back(Iteration(h, 0));
  events.push_back(Iteration(h, 1));
  TraceEvent end;
  end.kind = TraceEvent::kRequestEnd;
  end.request = 1;
  events.push_back(end);
  end.request = 0;
  events.push_back(end);
  return events;
}

void WriteTrace(const std::string& path, const TraceHeader& h, bool with_tensor = false) {
  TraceWriter w(path, h);
  std::vector<float> router = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  if (with_tensor) {
    TensorView t;
    t.name = "model.layers.0.mlp.gate.weight";
    t.dtype = DType::kF32;
    t.shape = {4, 3};
    t.data = reinterpret_cast<const std::byte*>(router.data());
    t.nbytes = router.size() * 4;
    w.WriteTensor(t);
  }
  for (const TraceEvent& e : Events(h)) w.Write(e);
  w.Finish();
}

float Rounded(float f, Precision p) {
  if (p == Precision::kF16) return F16ToF32(F32ToF16(f));
  if (p == Precision::kBF16) return BF16ToF32(F32ToBF16(f));
  return f;
}

class TraceRoundTrip : public ::testing::TestWithParam<Precision> {};

TEST_P(TraceRoundTrip, EveryFieldComesBack) {
  testing::TempDir dir;
  const Precision p = GetParam();
  const TraceHeader h = SmallHeader(p, p, p != Precision::kNone);
  WriteTrace(dir / "t.trace", h, true);
  TraceReader r(dir / "t.trace");
  EXPECT_EQ(r.header().model.name, "toy");
  EXPECT_EQ(r.header().probs, p);
  EXPECT_EQ(r.header().info["note"], "unit test");
  ASSERT_NE(r.tensors().Find("model.layers.0.mlp.gate.weight"), nullptr);
  EXPECT_EQ(r.tensors().Find("model.layers.0.mlp.gate.weight")->shape,
            (std::vector<int64_t>{4, 3}));
  const std::vector<TraceEvent> want = Events(h);
  for (int pass = 0; pass < 2; ++pass) {  // The second pass checks Rewind.
    TraceEvent got;
    for (const TraceEvent& w : want) {
      ASSERT_TRUE(r.Next(&got));
      ASSERT_EQ(got.kind, w.kind);
      EXPECT_EQ(got.request, w.request);
      EXPECT_EQ(got.prompt, w.prompt);
      const TraceIteration &a = got.iteration, &b = w.iteration;
      EXPECT_EQ(a.iteration, b.iteration);
      EXPECT_EQ(a.requests, b.requests);
      EXPECT_EQ(a.token_counts, b.token_counts);
      EXPECT_EQ(a.tokens, b.tokens);
      EXPECT_EQ(a.pooled, b.pooled);  // Pooled embeddings are always f32.
      ASSERT_EQ(a.gates.size(), b.gates.size());
      for (size_t g = 0; g < a.gates.size(); ++g) {
        EXPECT_EQ(a.gates[g].layer, b.gates[g].layer);
        EXPECT_EQ(a.gates[g].ids, b.gates[g].ids);
        EXPECT_EQ(a.gates[g].weights, b.gates[g].weights);
        ASSERT_EQ(a.gates[g].probs.size(), b.gates[g].probs.size());
        for (size_t i = 0; i < a.gates[g].probs.size(); ++i)
          EXPECT_EQ(a.gates[g].probs[i], Rounded(b.gates[g].probs[i], p));
        ASSERT_EQ(a.gates[g].hidden.size(), b.gates[g].hidden.size());
        for (size_t i = 0; i < a.gates[g].hidden.size(); ++i)
          EXPECT_EQ(a.gates[g].hidden[i], Rounded(b.gates[g].hidden[i], p));
      }
    }
    EXPECT_FALSE(r.Next(&got));
    EXPECT_FALSE(r.Next(&got));
    r.Rewind();
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, TraceRoundTrip,
                         ::testing::Values(Precision::kNone, Precision::kF32, Precision::kF16,
                                           Precision::kBF16),
                         [](const auto& info) { return std::string(PrecisionName(info.param)); });

std::vector<char> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteBytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Reads the whole trace; the error (if any) as a string.
std::string ReadAllError(const std::string& path) {
  try {
    TraceReader r(path);
    TraceEvent e;
    while (r.Next(&e)) {
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TraceFormat, EveryTruncationIsAnError) {
  testing::TempDir dir;
  WriteTrace(dir / "t.trace", SmallHeader(Precision::kF16, Precision::kNone, false));
  const std::vector<char> bytes = ReadBytes(dir / "t.trace");
  ASSERT_EQ(ReadAllError(dir / "t.trace"), "");
  for (size_t cut = 0; cut < bytes.size(); cut += 7) {
    SCOPED_TRACE(cut);
    WriteBytes(dir / "cut.trace",
               std::vector<char>(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(cut)));
    const std::string error = ReadAllError(dir / "cut.trace");
    EXPECT_NE(error, "");
  }
  // The last byte matters too: the end record is checked whole.
  WriteBytes(dir / "cut.trace", std::vector<char>(bytes.begin(), bytes.end() - 1));
  EXPECT_NE(ReadAllError(dir / "cut.trace").find("truncated"), std::string::npos);
}

TEST(TraceFormat, CorruptionVersionAndMagicAreReported) {
  testing::TempDir dir;
  WriteTrace(dir / "t.trace", SmallHeader(Precision::kF32, Precision::kNone, false));
  const std::vector<char> bytes = ReadBytes(dir / "t.trace");

  std::vector<char> flipped = bytes;
  flipped[flipped.size() - 44] ^= 0x10;  // In the request_end payload (end record: last 40 bytes).
  WriteBytes(dir / "x.trace", flipped);
  EXPECT_NE(ReadAllError(dir / "x.trace").find("checksum"), std::string::npos);

  std::vector<char> newer = bytes;
  newer[8] = 3;  // Version field follows the 8-byte magic.
  WriteBytes(dir / "x.trace", newer);
  EXPECT_NE(ReadAllError(dir / "x.trace").find("version 3"), std::string::npos);

  // A flipped bit in the JSON header (it starts after magic, version and length: byte 16).
  std::vector<char> header_flip = bytes;
  header_flip[20] ^= 0x01;
  WriteBytes(dir / "x.trace", header_flip);
  EXPECT_NE(ReadAllError(dir / "x.trace").find("header fails its checksum"), std::string::npos);

  std::vector<char> foreign = bytes;
  foreign[0] = 'X';
  WriteBytes(dir / "x.trace", foreign);
  EXPECT_NE(ReadAllError(dir / "x.trace").find("not a moex trace"), std::string::npos);

  std::vector<char> extra = bytes;
  extra.push_back('!');
  WriteBytes(dir / "x.trace", extra);
  EXPECT_NE(ReadAllError(dir / "x.trace"), "");

  EXPECT_NE(ReadAllError(dir / "missing.trace").find("cannot open"), std::string::npos);
}

// Found by trace_fuzzer: a tensor record's name length was trusted before it was checked (a
// corrupt one allocated and zeroed 4 GB), and rows * cols * 4 could wrap around to the payload
// size, giving a tensor view far larger than its data. Both are clear errors now.
TEST(TraceFormat, TensorRecordLengthsAreCheckedBeforeUse) {
  testing::TempDir dir;
  WriteTrace(dir / "t.trace", SmallHeader(Precision::kNone, Precision::kNone, false), true);
  const std::vector<char> bytes = ReadBytes(dir / "t.trace");
  uint32_t json_len = 0;
  std::memcpy(&json_len, bytes.data() + 12, 4);
  const size_t first_record = 16 + json_len + 8;  // After the header's checksum.
  // The file up to its first record, then one tensor record with the given payload.
  auto with_tensor = [&](const std::vector<char>& payload) {
    std::vector<char> out(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(first_record));
    const uint32_t tag = 1, reserved = 0;
    const uint64_t length = payload.size();
    const uint64_t sum = StoreChecksum(std::as_bytes(std::span(payload.data(), payload.size())));
    for (const auto& [p, n] :
         {std::pair<const void*, size_t>{&tag, 4}, {&reserved, 4}, {&length, 8}, {&sum, 8}})
      out.insert(out.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
    out.insert(out.end(), payload.begin(), payload.end());
    WriteBytes(dir / "x.trace", out);
    return ReadAllError(dir / "x.trace");
  };
  auto append = [](std::vector<char>& v, const auto& value) {
    const char* p = reinterpret_cast<const char*>(&value);
    v.insert(v.end(), p, p + sizeof value);
  };
  std::vector<char> long_name;
  append(long_name, uint32_t{0xffffffff});
  long_name.resize(long_name.size() + 16, 'a');
  EXPECT_NE(with_tensor(long_name).find("ends early"), std::string::npos);

  std::vector<char> wrapping;  // 2^62 x 4 floats = 2^66 bytes, which wraps to 0.
  append(wrapping, uint32_t{1});
  wrapping.push_back('w');
  append(wrapping, int64_t{1} << 62);
  append(wrapping, int64_t{4});
  EXPECT_NE(with_tensor(wrapping).find("bad shape or size"), std::string::npos);
}

// Version 1 files (no header checksum) are still read.
TEST(TraceFormat, VersionOneWithoutHeaderChecksumIsRead) {
  testing::TempDir dir;
  WriteTrace(dir / "t.trace", SmallHeader(Precision::kNone, Precision::kNone, false));
  std::vector<char> bytes = ReadBytes(dir / "t.trace");
  uint32_t json_len = 0;
  std::memcpy(&json_len, bytes.data() + 12, 4);
  bytes[8] = 1;
  const auto checksum_at = bytes.begin() + 16 + json_len;
  bytes.erase(checksum_at, checksum_at + 8);
  WriteBytes(dir / "v1.trace", bytes);
  EXPECT_EQ(ReadAllError(dir / "v1.trace"), "");
}

// The header's model.config rebuilds the simulator's ModelConfig, whose sizes index caches
// by the records' ids: a config that disagrees with the shape is refused (it crashed `sim`).
TEST(TraceFormat, ConfigDisagreeingWithTheShapeIsRefused) {
  const ModelConfig config = RandomModelConfig(Arch::kOlmoe, ModelSize::kTiny);
  TraceHeader h = SmallHeader(Precision::kNone, Precision::kNone, false);
  h.model.config = config.ToHfJson();
  h.model.num_layers = config.num_layers;
  h.model.moe_layers.clear();
  for (int l = 0; l < config.num_layers; ++l) h.model.moe_layers.push_back(l);
  h.model.num_experts = config.num_experts;
  h.model.top_k = config.num_experts_per_tok;
  h.model.hidden_size = config.hidden_size;
  h.model.expert_neurons = config.moe_intermediate_size;
  h.model.block_neurons = h.model.expert_neurons;
  const nlohmann::json good = HeaderToJson(h);
  EXPECT_NO_THROW(HeaderFromJson(good));
  auto error_of = [](const nlohmann::json& j) {
    try {
      HeaderFromJson(j);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json fewer_experts = good;
  fewer_experts["model"]["config"]["num_experts"] = config.num_experts / 2;
  EXPECT_NE(error_of(fewer_experts).find("num_experts"), std::string::npos);
  nlohmann::json more_layers = good;
  more_layers["model"]["config"]["num_hidden_layers"] = config.num_layers * 4;
  EXPECT_NE(error_of(more_layers).find("num_hidden_layers"), std::string::npos);
  nlohmann::json wider = good;
  wider["model"]["config"]["hidden_size"] = config.hidden_size * 2;
  EXPECT_NE(error_of(wider), "");
}

// Every gate record must name a layer the header lists as MoE.
TEST(TraceFormat, GateOfANonMoeLayerIsRefused) {
  testing::TempDir dir;
  TraceHeader h = SmallHeader(Precision::kNone, Precision::kNone, false);
  WriteTrace(dir / "t.trace", h);
  // Re-read the events under a header that lists only layer 1 as MoE.
  TraceHeader only_one = h;
  only_one.model.moe_layers = {1};
  const std::vector<std::byte> payload = EncodeEvent(Iteration(h, 0), h);
  EXPECT_THROW(DecodeEvent(RecordTag::kIteration, payload.data(), payload.size(), only_one, "x"),
               Error);
  EXPECT_NO_THROW(DecodeEvent(RecordTag::kIteration, payload.data(), payload.size(), h, "x"));
}

TEST(TraceFormat, HeaderFieldsAreChecked) {
  nlohmann::json j = HeaderToJson(SmallHeader(Precision::kF16, Precision::kNone, false));
  EXPECT_NO_THROW(HeaderFromJson(j));
  nlohmann::json missing = j;
  missing["model"].erase("num_experts");
  EXPECT_THROW(HeaderFromJson(missing), Error);
  nlohmann::json bad = j;
  bad["model"]["moe_layers"] = {5};
  EXPECT_THROW(HeaderFromJson(bad), Error);
  bad = j;
  bad["probs"] = "f8";
  EXPECT_THROW(HeaderFromJson(bad), Error);
  // Sizes whose product wraps (the simulator once divided by the wrapped page size).
  for (int64_t record : {int64_t{1} << 62, int64_t{1} << 45, std::numeric_limits<int64_t>::max()}) {
    bad = j;
    bad["model"]["record_bytes"] = record;
    try {
      HeaderFromJson(bad);
      ADD_FAILURE() << "record_bytes " << record << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("exceed 2^50 bytes"), std::string::npos) << e.what();
    }
  }
  bad = j;
  bad["model"]["block_neurons"] = bad["model"]["expert_neurons"].get<int>() + 1;
  EXPECT_THROW(HeaderFromJson(bad), Error);
}

// The reader checks what the records mean, not only their bytes: each case below replayed
// before (issue 41) and is now refused with the record and the reason.
TEST(TraceFormat, RecordsThatMeanNothingAreRefused) {
  testing::TempDir dir;
  const TraceHeader h = SmallHeader(Precision::kF32, Precision::kNone, false);
  auto error_of = [&](const std::function<void(std::vector<TraceEvent>&)>& spoil) {
    std::vector<TraceEvent> events = Events(h);
    spoil(events);
    {
      TraceWriter w(dir / "bad.trace", h);
      for (const TraceEvent& e : events) w.Write(e);
      w.Finish();
    }
    return ReadAllError(dir / "bad.trace");
  };
  EXPECT_EQ(error_of([](auto&) {}), "");
  // events: begin 0, begin 1, pass 0, pass 1, end 1, end 0.
  struct Case {
    const char* why;
    std::function<void(std::vector<TraceEvent>&)> spoil;
    const char* message;
  };
  const Case cases[] = {
      {"a gate's k differs from the header's",
       [](auto& e) {
         TraceGate& g = e[2].iteration.gates[1];
         g.top_k = 1;
         g.ids = {3, 0, 1};
         g.weights = {1, 1, 1};
       },
       "routes to 1 experts per token; the header's top_k is 2"},
      {"an expert twice for one token", [](auto& e) { e[2].iteration.gates[0].ids[1] = 3; },
       "token 0 of the gate of layer 0 routes to expert 3 twice"},
      {"a NaN weight", [](auto& e) { e[3].iteration.gates[1].weights[4] = std::nanf(""); },
       "non-finite combine weight"},
      {"a negative token id", [](auto& e) { e[2].iteration.tokens[1] = -4; },
       "token id -4 is negative"},
      {"a negative prompt id", [](auto& e) { e[1].prompt[0] = -1; },
       "prompt token id -1 is negative"},
      {"gates out of layer order",
       [](auto& e) { std::swap(e[2].iteration.gates[0], e[2].iteration.gates[1]); },
       "gate of layer 0 follows layer 1"},
      {"a pass before its request begins", [](auto& e) { std::swap(e[1], e[2]); },
       "computes request 1, which has not begun"},
      {"a pass after its request ended", [](auto& e) { std::swap(e[3], e[4]); },
       "computes request 1, which has already ended"},
      {"passes numbered backwards", [](auto& e) { e[3].iteration.iteration = 0; },
       "pass 0 follows pass 0"},
      {"a request that begins twice", [](auto& e) { e[1].request = 0; },
       "request 0 begins a second time"},
      {"an end without a begin", [](auto& e) { e[4].request = 7; },
       "request 7 ends without having begun"},
      {"a request twice in one pass", [](auto& e) { e[2].iteration.requests = {1, 1}; },
       "request 1 appears twice in one pass"},
  };
  for (const Case& c : cases) {
    const std::string error = error_of(c.spoil);
    EXPECT_NE(error.find(c.message), std::string::npos) << c.why << ": " << error;
    EXPECT_NE(error.find("bad.trace (record "), std::string::npos) << c.why << ": " << error;
  }
  // A request's end record missing: the file's end says which.
  const std::string missing = error_of([](auto& e) { e.erase(e.begin() + 4); });
  EXPECT_NE(missing.find("request 1 begins but never ends"), std::string::npos) << missing;
}

// Found by trace_fuzzer: every refused trace leaked its FILE handle (the constructor threw
// before the destructor could close it), until the process ran out of descriptors. A FIFO is
// refused without waiting for a writer.
TEST(TraceFormat, ARefusedTraceLeavesNoOpenFile) {
  testing::TempDir dir;
  std::ofstream(dir / "junk.trace") << "not a trace at all, but long enough";
  auto open_files = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                         std::filesystem::directory_iterator{});
  };
  const auto before = open_files();
  for (int i = 0; i < 200; ++i) EXPECT_THROW(TraceReader r(dir / "junk.trace"), Error);
  EXPECT_LE(open_files(), before + 1);
  ASSERT_EQ(::mkfifo((dir / "fifo.trace").c_str(), 0600), 0);
  EXPECT_NE(ReadAllError(dir / "fifo.trace").find("is a FIFO"), std::string::npos);
}

// A store block is a whole expert or whole alignment units; any other size is refused.
TEST(TraceFormat, AStoreBlockNoStoreCouldHaveIsRefused) {
  nlohmann::json j = HeaderToJson(SmallHeader(Precision::kNone, Precision::kNone, false));
  j["model"]["expert_neurons"] = 512;
  j["model"]["record_bytes"] = 64;
  j["model"]["block_neurons"] = 64;  // 4096 bytes: one alignment unit.
  EXPECT_NO_THROW(HeaderFromJson(j));
  j["model"]["block_neurons"] = 7;
  EXPECT_THROW(HeaderFromJson(j), Error);
  j["model"]["block_neurons"] = 512;  // The whole expert.
  EXPECT_NO_THROW(HeaderFromJson(j));
}

TEST(TraceFormat, WriterRejectsInconsistentEventsAndLeavesNoFile) {
  testing::TempDir dir;
  const TraceHeader h = SmallHeader(Precision::kF16, Precision::kNone, false);
  {
    TraceWriter w(dir / "t.trace", h);
    TraceEvent e = Iteration(h, 0);
    e.iteration.gates[0].ids[0] = 9;  // Only 4 experts.
    EXPECT_THROW(w.Write(e), Error);
    e = Iteration(h, 0);
    e.iteration.gates[0].probs.pop_back();
    EXPECT_THROW(w.Write(e), Error);
  }  // Never finished: nothing under the final name.
  EXPECT_FALSE(std::filesystem::exists(dir / "t.trace"));
}

}  // namespace
}  // namespace moex::trace
