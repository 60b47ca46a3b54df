#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/mapped_file.h"
#include "io/safetensors_writer.h"

#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  moex::testing::TempDir temp_;  // Removed with the fixture.
  const fs::path dir_ = temp_.path();
};

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors image with the given header text and `data_bytes` zero bytes of data.
std::string Image(const std::string& header, size_t data_bytes, uint64_t length_field = ~0ull) {
  const uint64_t len = length_field == ~0ull ? header.size() : length_field;
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(len >> (8 * i));
  return s + header + std::string(data_bytes, '\0');
}

std::string ParseError(const std::string& image) {
  try {
    SafetensorsFile f(std::as_bytes(std::span(image.data(), image.size())), "mem");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(SafetensorsTest, RoundTripsAllDtypesAndMetadata) {
  const auto f32 = RandomBytes(4 * 3 * 5, 1);
  const auto f16 = RandomBytes(2 * 7, 2);
  const auto bf16 = RandomBytes(2 * 2 * 2 * 3, 3);
  const auto scalar = RandomBytes(4, 4);
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.Add("a.f32", DType::kF32, {3, 5}, f32.data());
  w.Add("b.f16", DType::kF16, {7}, f16.data());
  w.Add("c.bf16", DType::kBF16, {2, 2, 3}, bf16.data());
  w.Add("d.scalar", DType::kF32, {}, scalar.data());
  w.Add("e.empty", DType::kBF16, {0, 4}, nullptr);
  EXPECT_EQ(w.data_bytes(), f32.size() + f16.size() + bf16.size() + scalar.size());
  w.WriteFile(Path("x.safetensors"));
  EXPECT_FALSE(fs::exists(Path("x.safetensors.tmp." + std::to_string(::getpid()))));

  SafetensorsFile f(Path("x.safetensors"));
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  auto expect = [&](const char* name, DType dt, std::vector<int64_t> shape,
                    const std::vector<std::byte>& bytes) {
    const TensorView* t = f.Find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, dt);
    EXPECT_EQ(t->shape, shape);
    ASSERT_EQ(t->nbytes, bytes.size());
    if (!bytes.empty()) {
      EXPECT_EQ(std::memcmp(t->data, bytes.data(), bytes.size()), 0) << name;
    }
  };
  expect("a.f32", DType::kF32, {3, 5}, f32);
  expect("b.f16", DType::kF16, {7}, f16);
  expect("c.bf16", DType::kBF16, {2, 2, 3}, bf16);
  expect("d.scalar", DType::kF32, {}, scalar);
  expect("e.empty", DType::kBF16, {0, 4}, {});
  EXPECT_EQ(f.Find("nope"), nullptr);
  // The data section starts 8-byte aligned.
  MappedFile raw(Path("x.safetensors"));
  uint64_t len;
  std::memcpy(&len, raw.data(), 8);
  EXPECT_EQ((8 + len) % 8, 0u);
}

// U8 tensors (HF's packed MXFP4 blocks) are bytes kept apart from the weights.
TEST_F(SafetensorsTest, U8TensorsRoundTripApartFromTheWeights) {
  const auto blocks = RandomBytes(2 * 3 * 16, 5);
  const auto f32 = RandomBytes(4 * 2, 6);
  SafetensorsWriter w;
  w.AddBytes("w_blocks", {2, 3, 16}, FillFromMemory(blocks.data(), blocks.size()));
  w.Add("w.f32", DType::kF32, {2}, f32.data());
  EXPECT_EQ(w.data_bytes(), blocks.size() + f32.size());
  w.WriteFile(Path("u8.safetensors"));
  SafetensorsFile f(Path("u8.safetensors"));
  ASSERT_EQ(f.tensors().size(), 1u);
  ASSERT_EQ(f.byte_tensors().size(), 1u);
  EXPECT_EQ(f.Find("w_blocks"), nullptr);
  EXPECT_EQ(f.FindBytes("w.f32"), nullptr);
  const ByteTensor* b = f.FindBytes("w_blocks");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{2, 3, 16}));
  ASSERT_EQ(b->nbytes, blocks.size());
  EXPECT_EQ(std::memcmp(b->data, blocks.data(), blocks.size()), 0);
  // A U8 tensor's size is its element count.
  EXPECT_NE(ParseError(Image(R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [0, 3]}})", 4))
                .find("has 3 bytes but U8 [4] needs 4"),
            std::string::npos);
}

TEST_F(SafetensorsTest, StreamsLargeTensorsInRowAlignedPieces) {
  const int64_t rows = 3000, cols = 1000;  // 12 MB: more than one fill piece.
  std::vector<std::pair<size_t, size_t>> calls;
  SafetensorsWriter w;
  w.Add("big", DType::kF32, {rows, cols}, [&](size_t offset, std::span<std::byte> out) {
    calls.emplace_back(offset, out.size());
    for (size_t i = 0; i < out.size(); i += 4) {
      const float v = static_cast<float>((offset + i) / 4);
      std::memcpy(out.data() + i, &v, 4);
    }
  });
  w.WriteFile(Path("big.safetensors"));
  ASSERT_GT(calls.size(), 1u);
  size_t next = 0;
  for (auto [offset, size] : calls) {
    EXPECT_EQ(offset, next);
    EXPECT_EQ(offset % (cols * 4), 0u);
    EXPECT_EQ(size % (cols * 4), 0u);
    next = offset + size;
  }
  EXPECT_EQ(next, static_cast<size_t>(rows * cols * 4));
  SafetensorsFile f(Path("big.safetensors"));
  const float* p = reinterpret_cast<const float*>(f.Find("big")->data);
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[rows * cols - 1], static_cast<float>(rows * cols - 1));
}

TEST_F(SafetensorsTest, RejectsTruncatedFile) {
  EXPECT_NE(ParseError(std::string(5, '\0')).find("truncated"), std::string::npos);
  // A valid file cut inside its data section.
  const auto bytes = RandomBytes(64, 5);
  SafetensorsWriter w;
  w.Add("t", DType::kF32, {16}, bytes.data());
  w.WriteFile(Path("t.safetensors"));
  const auto size = fs::file_size(Path("t.safetensors"));
  fs::resize_file(Path("t.safetensors"), size - 10);
  try {
    SafetensorsFile f(Path("t.safetensors"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("run past the data section"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("t.safetensors"), std::string::npos);
  }
}

TEST_F(SafetensorsTest, RejectsHeaderLengthBeyondFile) {
  EXPECT_NE(ParseError(Image("{}", 0, 1000)).find("runs past the end"), std::string::npos);
  EXPECT_NE(ParseError(Image("{}", 0, ~0ull - 1)).find("exceeds the maximum"), std::string::npos);
}

TEST_F(SafetensorsTest, RejectsBadJson) {
  EXPECT_NE(ParseError(Image("{\"a\": ", 0)).find("bad safetensors JSON"), std::string::npos);
  EXPECT_NE(ParseError(Image("[1, 2]", 0)).find("must be a JSON object"), std::string::npos);
  EXPECT_NE(ParseError(Image(R"({"t": {"dtype": "F32", "shape": [1]}})", 4)).find("data_offsets"),
            std::string::npos);
  EXPECT_NE(
      ParseError(Image(R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4))
          .find("non-negative"),
      std::string::npos);
}

TEST_F(SafetensorsTest, RejectsUnsupportedDtype) {
  const std::string e =
      ParseError(Image(R"({"w": {"dtype": "I8", "shape": [4], "data_offsets": [0, 4]}})", 4));
  EXPECT_NE(e.find("unsupported dtype I8 for tensor w"), std::string::npos) << e;
  EXPECT_NE(ParseError(Image(R"({"w": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8))
                .find("unsupported dtype F64"),
            std::string::npos);
}

TEST_F(SafetensorsTest, RejectsOffsetsOutOfRange) {
  EXPECT_NE(
      ParseError(Image(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8))
          .find("run past the data section"),
      std::string::npos);
  EXPECT_NE(ParseError(Image(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8))
                .find("begin > end"),
            std::string::npos);
  EXPECT_NE(ParseError(Image(R"({"w": {"dtype": "F32", "shape": [1],
                                 "data_offsets": [18446744073709551615, 3]}})",
                             8))
                .find("begin > end"),
            std::string::npos);
}

TEST_F(SafetensorsTest, RejectsSizeMismatchAndOverflow) {
  EXPECT_NE(ParseError(Image(R"({"w": {"dtype": "F16", "shape": [3], "data_offsets": [0, 8]}})", 8))
                .find("has 8 bytes but F16 [3] needs 6"),
            std::string::npos);
  EXPECT_NE(ParseError(Image(R"({"w": {"dtype": "F32",
                                 "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 8]}})",
                             8))
                .find("too large"),
            std::string::npos);
}

TEST_F(SafetensorsTest, MappedFileErrors) {
  try {
    MappedFile m(Path("missing"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos);
  }
  WriteBytes(Path("empty"), "");
  EXPECT_THROW(MappedFile(Path("empty")), Error);
  EXPECT_THROW(MappedFile(dir_.string()), Error);
  WriteBytes(Path("secret"), "x");
  fs::permissions(Path("secret"), fs::perms::none);
  if (::geteuid() != 0) {
    try {
      MappedFile m(Path("secret"));
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("permission denied"), std::string::npos);
    }
  }
  WriteBytes(Path("one"), "abc");
  MappedFile ok(Path("one"));
  EXPECT_EQ(ok.size(), 3u);
  MappedFile moved = std::move(ok);
  EXPECT_EQ(moved.size(), 3u);
  EXPECT_EQ(static_cast<char>(moved.data()[1]), 'b');
}

TEST_F(SafetensorsTest, WriterRejectsBadTensors) {
  SafetensorsWriter w;
  float x = 0;
  w.Add("a", DType::kF32, {1}, &x);
  EXPECT_THROW(w.Add("a", DType::kF32, {1}, &x), Error);
  EXPECT_THROW(w.Add("", DType::kF32, {1}, &x), Error);
  EXPECT_THROW(w.Add("q", DType::kQ8_0, {32}, &x), Error);
  EXPECT_THROW(w.Add("n", DType::kF32, {-2}, &x), Error);
}

TEST_F(SafetensorsTest, FailedFillLeavesNoFile) {
  SafetensorsWriter w;
  w.Add("t", DType::kF32, {4}, [](size_t, std::span<std::byte>) { Fail("generator broke"); });
  EXPECT_THROW(w.WriteFile(Path("f.safetensors")), Error);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SafetensorsTest, DiskFullGivesErrorAndNoFile) {
  // RLIMIT_FSIZE makes writes past 1 MiB fail with EFBIG, as a full disk would.
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = old;
  limited.rlim_cur = 1 << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  SafetensorsWriter w;
  w.Add("t", DType::kF32, {1 << 20},
        [](size_t, std::span<std::byte> out) { std::memset(out.data(), 1, out.size()); });
  std::string message;
  try {
    w.WriteFile(Path("full.safetensors"));
  } catch (const Error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("writing"), std::string::npos) << message;
  EXPECT_NE(message.find("full.safetensors"), std::string::npos) << message;
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace moex
