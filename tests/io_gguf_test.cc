#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/quant_format.h"
#include "io/gguf_file.h"
#include "io/gguf_format.h"
#include "io/gguf_writer.h"
#include "io/mapped_file.h"

#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

class GgufTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  moex::testing::TempDir temp_;  // Removed with the fixture.
  const fs::path dir_ = temp_.path();
};

// Builds GGUF images byte by byte, to describe malformed files precisely.
class Image {
 public:
  Image& U32(uint32_t v) { return Put(v, 4); }
  Image& U64(uint64_t v) { return Put(v, 8); }
  Image& Str(const std::string& s) {
    U64(s.size());
    bytes_ += s;
    return *this;
  }
  Image& Raw(const std::string& s) {
    bytes_ += s;
    return *this;
  }
  Image& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return U32(kGgufMagic).U32(version).U64(n_tensors).U64(n_kv);
  }
  Image& PadTo(size_t alignment) {
    bytes_.append((alignment - bytes_.size() % alignment) % alignment, '\0');
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  Image& Put(uint64_t v, size_t n) {
    for (size_t i = 0; i < n; ++i) bytes_ += static_cast<char>(v >> (8 * i));
    return *this;
  }
  std::string bytes_;
};

std::string ParseError(const std::string& bytes) {
  try {
    GgufFile f(std::as_bytes(std::span(bytes.data(), bytes.size())), "mem.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

TEST_F(GgufTest, RoundTripsEveryMetadataType) {
  GgufWriter w;
  std::vector<std::pair<std::string, GgufValue>> kvs = {
      {"t.u8", GgufValue::U8(200)},
      {"t.i8", GgufValue::I8(-100)},
      {"t.u16", GgufValue::U16(60000)},
      {"t.i16", GgufValue::I16(-30000)},
      {"t.u32", GgufValue::U32(4000000000u)},
      {"t.i32", GgufValue::I32(-2000000000)},
      {"t.f32", GgufValue::F32(0.25f)},
      {"t.bool", GgufValue::Bool(true)},
      {"t.string", GgufValue::String("h\xc3\xa9llo")},
      {"t.u64", GgufValue::U64(1ull << 60)},
      {"t.i64", GgufValue::I64(-(1ll << 60))},
      {"t.f64", GgufValue::F64(1e-300)},
      {"t.strings", GgufValue::StringArray({"a", "", "\xe2\x96\x81the"})},
      {"t.empty_strings", GgufValue::StringArray({})},
      {"t.i32s", GgufValue::I32Array({1, -2, 3})},
      {"t.f32s", GgufValue::F32Array({0.5f, -1.5f})},
      {"t.u8s", GgufValue::NumericArray(GgufType::kU8, 3, {1, 2, 255})},
      {"t.bools", GgufValue::NumericArray(GgufType::kBool, 2, {1, 0})},
      {"t.f64s", GgufValue::NumericArray(GgufType::kF64, 1, std::vector<uint8_t>(8, 0))},
      {"t.u64s", GgufValue::NumericArray(GgufType::kU64, 0, {})},
  };
  for (const auto& [k, v] : kvs) w.Set(k, v);
  w.Set("t.u8", GgufValue::U8(201));  // Replacing keeps the position.
  kvs[0].second = GgufValue::U8(201);
  w.Write(Path("m.gguf"));

  GgufFile f(Path("m.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.metadata().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, kvs[i].first);
    EXPECT_EQ(f.metadata()[i].second, kvs[i].second) << kvs[i].first;
  }
  EXPECT_EQ(f.GetInt("t.u8"), 201);
  EXPECT_EQ(f.GetInt("t.i8"), -100);
  EXPECT_EQ(f.GetInt("t.u32"), 4000000000ll);
  EXPECT_EQ(f.GetInt("t.i64"), -(1ll << 60));
  EXPECT_EQ(f.GetFloat("t.f32"), 0.25);
  EXPECT_EQ(f.GetFloat("t.f64"), 1e-300);
  EXPECT_EQ(f.GetFloat("t.u16"), 60000.0);
  EXPECT_TRUE(f.GetBool("t.bool", false));
  EXPECT_EQ(f.GetString("t.string"), "h\xc3\xa9llo");
  EXPECT_EQ(f.GetStringArray("t.strings")[2], "\xe2\x96\x81the");
  EXPECT_EQ(f.GetIntArray("t.i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.GetIntArray("t.u8s"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(f.GetFloatArray("t.f32s"), (std::vector<float>{0.5f, -1.5f}));
  EXPECT_EQ(f.GetInt("missing", 7), 7);
  EXPECT_EQ(f.GetString("missing", "x"), "x");
  EXPECT_EQ(f.Get("t.strings").ToString(), "[string x 3: \"a\" \"\" \"\xe2\x96\x81the\"]");
}

TEST_F(GgufTest, TypedAccessorsNameKeyOnMismatch) {
  GgufWriter w;
  w.Set("a.string", GgufValue::String("x"));
  w.Set("a.big", GgufValue::U64(~0ull));
  w.Write(Path("m.gguf"));
  GgufFile f(Path("m.gguf"));
  auto error = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error([&] { f.GetInt("a.string"); }).find("key 'a.string': value is string"),
            std::string::npos);
  EXPECT_NE(error([&] { f.GetInt("a.big"); }).find("too large"), std::string::npos);
  EXPECT_NE(error([&] { f.GetStringArray("a.string"); }).find("array of strings"),
            std::string::npos);
  EXPECT_NE(error([&] { f.GetInt("nope"); }).find("missing GGUF key 'nope'"), std::string::npos);
}

TEST_F(GgufTest, RoundTripsTensorsWithRowMajorShapes) {
  for (uint32_t alignment : {32u, 64u}) {
    const auto f32 = RandomBytes(4 * 2 * 3 * 5, 1);
    const auto f16 = RandomBytes(2 * 7, 2);
    const auto bf16 = RandomBytes(2 * 3 * 9, 3);
    const auto q8 = RandomBytes(3 * 2 * 34, 4);  // 3 rows of 64 values.
    GgufWriter w(alignment);
    w.Set("general.architecture", GgufValue::String("test"));
    w.AddTensor("t.f32", DType::kF32, {2, 3, 5}, f32.data());
    w.AddTensor("t.f16", DType::kF16, {7}, f16.data());
    w.AddTensor("t.bf16", DType::kBF16, {3, 9}, bf16.data());
    w.AddTensor("t.q8", DType::kQ8_0, {3, 64}, q8.data());
    w.Write(Path("t.gguf"));

    GgufFile f(Path("t.gguf"));
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.data_offset() % alignment, 0u);
    ASSERT_EQ(f.tensor_infos().size(), 4u);
    EXPECT_EQ(f.FindTensorInfo("t.f32")->ne, (std::vector<int64_t>{5, 3, 2}));
    EXPECT_EQ(f.FindTensorInfo("t.q8")->ggml_type, kGgmlTypeQ8_0);
    auto expect = [&](const char* name, DType dt, std::vector<int64_t> shape,
                      const std::vector<std::byte>& bytes) {
      const TensorView* t = f.FindTensor(name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->name, name);
      EXPECT_EQ(t->dtype, dt);
      EXPECT_EQ(t->shape, shape);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % alignment, 0u);
      ASSERT_EQ(t->nbytes, bytes.size());
      EXPECT_EQ(std::memcmp(t->data, bytes.data(), bytes.size()), 0) << name;
    };
    expect("t.f32", DType::kF32, {2, 3, 5}, f32);
    expect("t.f16", DType::kF16, {7}, f16);
    expect("t.bf16", DType::kBF16, {3, 9}, bf16);
    expect("t.q8", DType::kQ8_0, {3, 64}, q8);
    EXPECT_EQ(f.FindTensor("t.q8")->row_bytes(), 68u);
    EXPECT_EQ(f.FindTensor("absent"), nullptr);
  }
}

TEST_F(GgufTest, WriterRejectsBadTensors) {
  GgufWriter w;
  float x[64] = {};
  w.AddTensor("a", DType::kF32, {1}, x);
  EXPECT_THROW(w.AddTensor("a", DType::kF32, {1}, x), Error);
  EXPECT_THROW(w.AddTensor(std::string(64, 'n'), DType::kF32, {1}, x), Error);
  EXPECT_THROW(w.AddTensor("q", DType::kQ8_0, {2, 33}, x), Error);
  EXPECT_THROW(w.AddTensor("d", DType::kF32, {1, 1, 1, 1, 1}, x), Error);
  EXPECT_THROW(GgufWriter(48), Error);
}

TEST_F(GgufTest, WriteFailuresLeaveNoFile) {
  {
    GgufWriter w;
    w.AddTensor("t", DType::kF32, {4}, [](size_t, std::span<std::byte>) { Fail("boom"); });
    EXPECT_THROW(w.Write(Path("f.gguf")), Error);
    EXPECT_TRUE(fs::is_empty(dir_));
  }
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = old;
  limited.rlim_cur = 1 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  GgufWriter w;
  w.Set("k", GgufValue::String("v"));
  w.AddTensor("t", DType::kF32, {1 << 20},
              [](size_t, std::span<std::byte> out) { std::memset(out.data(), 0, out.size()); });
  std::string message;
  try {
    w.Write(Path("full.gguf"));
  } catch (const Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("full.gguf"), std::string::npos) << message;
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(GgufTest, RejectsBadMagicVersionAndTruncation) {
  EXPECT_NE(ParseError("GGU").find("not a GGUF file"), std::string::npos);
  EXPECT_NE(ParseError(Image().U32(0x46554746).U32(3).U64(0).U64(0).bytes()).find("bad magic"),
            std::string::npos);
  EXPECT_NE(ParseError(Image().Header(0, 0, 1).bytes()).find("version 1"), std::string::npos);
  EXPECT_NE(ParseError(Image().Header(0, 0, 0x03000000).bytes()).find("big-endian"),
            std::string::npos);
  EXPECT_NE(ParseError(Image().Header(0, 0, 7).bytes()).find("unsupported GGUF version 7"),
            std::string::npos);
  EXPECT_EQ(ParseError(Image().Header(0, 0, 2).bytes()), "");  // v2 has the same layout.
  const std::string truncated = Image().Header(0, 1).Str("key").U32(4).bytes();
  EXPECT_NE(ParseError(truncated).find("truncated GGUF file: metadata value"), std::string::npos)
      << ParseError(truncated);
}

TEST_F(GgufTest, RejectsHugeCountsAndLengths) {
  EXPECT_NE(ParseError(Image().Header(~0ull, 0).bytes()).find("claims"), std::string::npos);
  EXPECT_NE(ParseError(Image().Header(0, 1ull << 40).bytes()).find("claims"), std::string::npos);
  // Key length past the end.
  EXPECT_NE(ParseError(Image().Header(0, 1).U64(~0ull).Raw(std::string(32, 'a')).bytes())
                .find("truncated"),
            std::string::npos);
  // String arrays and numeric arrays with absurd counts.
  const std::string strings =
      Image().Header(0, 1).Str("k").U32(9).U32(8).U64(1ull << 62).Raw(std::string(64, 'x')).bytes();
  EXPECT_NE(ParseError(strings).find("claims 4611686018427387904 strings"), std::string::npos);
  const std::string numbers = Image()
                                  .Header(0, 1)
                                  .Str("k")
                                  .U32(9)
                                  .U32(12)
                                  .U64(1ull << 61)
                                  .Raw(std::string(64, 'x'))
                                  .bytes();
  EXPECT_NE(ParseError(numbers).find("f64 values"), std::string::npos);
}

TEST_F(GgufTest, RejectsBadValueTypes) {
  EXPECT_NE(ParseError(Image().Header(0, 1).Str("k").U32(13).U64(0).bytes())
                .find("unknown value type 13"),
            std::string::npos);
  EXPECT_NE(
      ParseError(Image().Header(0, 1).Str("k").U32(9).U32(9).U64(0).bytes()).find("nested arrays"),
      std::string::npos);
  EXPECT_NE(ParseError(Image().Header(0, 2).Str("k").U32(4).U32(1).Str("k").U32(4).U32(2).bytes())
                .find("duplicate GGUF key 'k'"),
            std::string::npos);
  EXPECT_NE(ParseError(Image().Header(0, 1).Str("general.alignment").U32(4).U32(48).bytes())
                .find("not a power of two"),
            std::string::npos);
}

// One F32 tensor [ne0] with the given type and offset, padded data of `data_bytes`.
std::string TensorImage(std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                        size_t data_bytes) {
  Image img;
  img.Header(1, 0).Str("w").U32(static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) img.U64(d);
  img.U32(type).U64(offset).PadTo(32).Raw(std::string(data_bytes, '\0'));
  return img.bytes();
}

TEST_F(GgufTest, RejectsBadTensorInfos) {
  EXPECT_EQ(ParseError(TensorImage({4, 2}, kGgmlTypeF32, 0, 32)), "");
  EXPECT_NE(ParseError(TensorImage({4, 2}, kGgmlTypeF32, 0, 31)).find("runs past the end"),
            std::string::npos);
  EXPECT_NE(ParseError(TensorImage({4, 2}, kGgmlTypeF32, 16, 64)).find("not a multiple"),
            std::string::npos);
  EXPECT_NE(ParseError(TensorImage({4}, kGgmlTypeF32, 1ull << 40, 16)).find("beyond the data"),
            std::string::npos);
  EXPECT_NE(ParseError(TensorImage({1, 1, 1, 1, 1}, kGgmlTypeF32, 0, 4)).find("5 dimensions"),
            std::string::npos);
  EXPECT_NE(ParseError(TensorImage({1ull << 40, 1ull << 40}, kGgmlTypeF32, 0, 4)).find("too large"),
            std::string::npos);
  EXPECT_NE(ParseError(TensorImage({~0ull}, kGgmlTypeF32, 0, 4)).find("out of range"),
            std::string::npos);
  EXPECT_NE(ParseError(TensorImage({33}, kGgmlTypeQ8_0, 0, 64)).find("multiple of 32"),
            std::string::npos);
  // Two tensors with the same name.
  Image dup;
  dup.Header(2, 0).Str("w").U32(1).U64(1).U32(0).U64(0).Str("w").U32(1).U64(1).U32(0).U64(32);
  EXPECT_NE(ParseError(dup.bytes()).find("duplicate tensor 'w'"), std::string::npos);
}

// Tensors that share bytes would alias each other's weights (llama.cpp refuses them too);
// tensors side by side, or a zero-size one at another's offset, are fine.
TEST_F(GgufTest, RejectsOverlappingTensors) {
  auto two = [](uint64_t second_offset, uint64_t second_ne) {
    Image img;
    img.Header(2, 0).Str("a").U32(1).U64(16).U32(kGgmlTypeF32).U64(0);
    img.Str("b").U32(1).U64(second_ne).U32(kGgmlTypeF32).U64(second_offset);
    return img.PadTo(32).Raw(std::string(256, '\0')).bytes();
  };
  EXPECT_EQ(ParseError(two(64, 16)), "");
  EXPECT_EQ(ParseError(two(32, 0)), "");
  EXPECT_NE(ParseError(two(32, 16)).find("tensors 'a' (64 bytes at offset 0) and 'b' (at offset "
                                         "32) overlap"),
            std::string::npos)
      << ParseError(two(32, 16));
  EXPECT_NE(ParseError(two(0, 8)).find("overlap"), std::string::npos);
}

// A key or tensor name of control bytes or broken UTF-8 is refused with the bytes escaped,
// not printed raw to the terminal.
TEST_F(GgufTest, NonPrintableNamesAreRefusedEscaped) {
  const std::string key_error =
      ParseError(Image().Header(0, 1).Str("general.\x1b[2Jname\xff").U32(4).U32(1).bytes());
  EXPECT_NE(key_error.find("GGUF key 0 (at byte 24) is not printable text: "
                           "\"general.\\x1b[2Jname\\xff\""),
            std::string::npos)
      << key_error;
  EXPECT_EQ(key_error.find('\x1b'), std::string::npos);
  Image bad_tensor;
  bad_tensor.Header(1, 0).Str(std::string("w\0x", 3)).U32(1).U64(4).U32(kGgmlTypeF32).U64(0);
  const std::string tensor_error = ParseError(bad_tensor.PadTo(32).Raw(std::string(16, '\0')).bytes());
  EXPECT_NE(tensor_error.find("tensor 0's name (at byte 24) is not printable text: \"w\\x00x\""),
            std::string::npos)
      << tensor_error;
}

TEST_F(GgufTest, UnsupportedTensorTypeFailsOnAccessOnly) {
  const std::string img = TensorImage({256, 2}, 16 /* iq2_xxs */, 0, 132);
  GgufFile f(std::as_bytes(std::span(img.data(), img.size())), "iq2.gguf");
  ASSERT_NE(f.FindTensorInfo("w"), nullptr);
  try {
    f.FindTensor("w");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'w' has unsupported GGML type iq2_xxs"),
              std::string::npos)
        << e.what();
  }
}

// Tensors of GGML's block formats read as f32: exactly the values the format's decoder
// gives, on first access; a block with a non-finite scale is refused by tensor and block;
// rows must hold whole blocks.
TEST_F(GgufTest, QuantizedTensorsReadAsTheirDequantizedValues) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<float> w(2 * 256);
  for (float& v : w) v = normal(rng);
  std::vector<uint8_t> q4k(QuantBytes(QuantFormat::kQ4_K, 512)),
      fp4(QuantBytes(QuantFormat::kMXFP4, 512)), q6k(QuantBytes(QuantFormat::kQ6_K, 256));
  Quantize(QuantFormat::kQ4_K, w.data(), 512, q4k.data());
  Quantize(QuantFormat::kMXFP4, w.data(), 512, fp4.data());
  Quantize(QuantFormat::kQ6_K, w.data(), 256, q6k.data());
  q6k[208] = 0x00, q6k[209] = 0x7c;  // Its f16 scale d becomes +inf.
  GgufWriter writer;
  writer.AddTensor("a", QuantFormat::kQ4_K, {2, 256}, FillFromMemory(q4k.data(), q4k.size()));
  writer.AddTensor("b", QuantFormat::kMXFP4, {16, 32}, FillFromMemory(fp4.data(), fp4.size()));
  writer.AddTensor("bad", QuantFormat::kQ6_K, {1, 256}, FillFromMemory(q6k.data(), q6k.size()));
  EXPECT_THROW(writer.AddTensor("c", QuantFormat::kQ4_K, {1, 128}, FillFromMemory(nullptr, 0)),
               Error);  // Not a whole block per row.
  writer.Write(Path("q.gguf"));

  GgufFile f(Path("q.gguf"));
  EXPECT_EQ(f.FindTensorInfo("a")->ggml_type, 12u);
  for (const auto& [name, format, bytes] :
       {std::tuple{"a", QuantFormat::kQ4_K, &q4k}, std::tuple{"b", QuantFormat::kMXFP4, &fp4}}) {
    const TensorView* t = f.FindTensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, DType::kF32);
    ASSERT_EQ(t->nbytes, 512 * sizeof(float));
    std::vector<float> want(512);
    Dequantize(format, bytes->data(), 512, want.data());
    EXPECT_EQ(std::memcmp(t->data, want.data(), t->nbytes), 0) << name;
    EXPECT_EQ(f.FindTensor(name), t);  // Dequantised once.
  }
  EXPECT_EQ(f.FindTensor("b")->shape, (std::vector<int64_t>{16, 32}));
  try {
    f.FindTensor("bad");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q6_K tensor 'bad' block 0 has a non-finite scale"),
              std::string::npos)
        << e.what();
  }
  // Unchecked on request (routed experts are checked when packed): the blocks as stored.
  EXPECT_EQ(f.FindQuantizedTensor("bad", false)->dtype, DType::kQ6_K);
  // A q4_K row of 128 weights (half a block) is refused when the file is opened.
  const std::string img = TensorImage({128, 2}, 12 /* q4_K */, 0, 288);
  EXPECT_NE(ParseError(img).find("row length 128 is not a multiple of 256, its block size"),
            std::string::npos)
      << ParseError(img);
}

TEST_F(GgufTest, ReadsRealVocabFiles) {
  const fs::path vocab_dir = testing::SharedDataDir() / "gguf-vocab";
  if (!fs::exists(vocab_dir)) MOEX_SKIP_WITHOUT_SHARED_DATA(vocab_dir);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(vocab_dir)) {
    if (entry.path().extension() != ".gguf") continue;
    ++files;
    GgufFile f(entry.path().string());
    SCOPED_TRACE(entry.path().string());
    EXPECT_GE(f.version(), 2u);
    EXPECT_FALSE(f.GetString("general.architecture").empty());
    const std::string model = f.GetString("tokenizer.ggml.model");
    EXPECT_TRUE(model == "gpt2" || model == "llama") << model;
    const auto& tokens = f.GetStringArray("tokenizer.ggml.tokens");
    EXPECT_GT(tokens.size(), 1000u);
    if (f.Find("tokenizer.ggml.token_type")) {
      EXPECT_EQ(f.GetIntArray("tokenizer.ggml.token_type").size(), tokens.size());
    }
    if (f.Find("tokenizer.ggml.scores")) {
      EXPECT_EQ(f.GetFloatArray("tokenizer.ggml.scores").size(), tokens.size());
    }
    if (model == "gpt2") {
      EXPECT_GT(f.GetStringArray("tokenizer.ggml.merges").size(), 1000u);
    }
    const int64_t bos = f.GetInt("tokenizer.ggml.bos_token_id", 0);
    EXPECT_LT(bos, static_cast<int64_t>(tokens.size()));
  }
  EXPECT_GE(files, 3);
}

}  // namespace
}  // namespace moex
