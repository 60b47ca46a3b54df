// Mutation fuzzing of the model-file parsers with a fixed seed: valid small safetensors and
// GGUF images get bit flips, truncations, insertions and extreme length fields. Every parse
// must either succeed with views inside the input or throw moex::Error; a crash, another
// exception type or a runaway allocation (address-space limit) fails the test.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/gguf_model.h"

#if defined(__SANITIZE_ADDRESS__)
#define MOEX_FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOEX_FUZZ_ASAN 1
#endif
#endif

namespace moex {
namespace {

namespace fs = std::filesystem;

constexpr int kIterations = 8000;  // Per target; the whole test takes a few seconds.

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string TempPath(const std::string& name) {
  return (fs::path(::testing::TempDir()) / ("moex_fuzz_" + std::to_string(::getpid()) + name))
      .string();
}

std::string SafetensorsBase() {
  static const std::vector<float> f32 = {1, 2, 3, 4, 5, 6};
  static const std::vector<uint16_t> half = {1, 2, 3, 4};
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  w.Add("a.weight", DType::kF32, {2, 3}, f32.data());
  w.Add("b.weight", DType::kF16, {4}, half.data());
  w.Add("c.weight", DType::kBF16, {2, 2}, half.data());
  w.Add("d.empty", DType::kF32, {0}, nullptr);
  const std::string path = TempPath("base.safetensors");
  w.WriteFile(path);
  std::string bytes = ReadAll(path);
  fs::remove(path);
  return bytes;
}

std::string GgufBase() {
  static const std::vector<uint8_t> data(4096, 7);
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("test"));
  w.Set("k.u8", GgufValue::U8(1));
  w.Set("k.i16", GgufValue::I16(-2));
  w.Set("k.u32", GgufValue::U32(3));
  w.Set("k.f32", GgufValue::F32(0.5f));
  w.Set("k.bool", GgufValue::Bool(true));
  w.Set("k.u64", GgufValue::U64(5));
  w.Set("k.f64", GgufValue::F64(6.0));
  w.Set("k.str", GgufValue::String("seven"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "bb", "ccc"}));
  w.Set("tokenizer.ggml.scores", GgufValue::F32Array({0, -1, -2}));
  w.Set("tokenizer.ggml.token_type", GgufValue::I32Array({1, 1, 3}));
  w.AddTensor("t.f32", DType::kF32, {2, 3}, data.data());
  w.AddTensor("t.f16", DType::kF16, {5}, data.data());
  w.AddTensor("t.bf16", DType::kBF16, {2, 1, 2}, data.data());
  w.AddTensor("t.q8", DType::kQ8_0, {2, 32}, data.data());
  const std::string path = TempPath("base.gguf");
  w.Write(path);
  std::string bytes = ReadAll(path);
  fs::remove(path);
  return bytes;
}

// A minimal MoE GGUF of the given llama.cpp architecture (hidden 8, 2 layers, 2 experts).
std::string ModelBase(const std::string& arch) {
  static const std::vector<uint8_t> data(4096, 0x3c);
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String(arch));
  auto u32 = [&](const std::string& k, uint32_t v) { w.Set(arch + "." + k, GgufValue::U32(v)); };
  u32("block_count", 2);
  u32("embedding_length", 8);
  u32("feed_forward_length", 4);
  u32("attention.head_count", 2);
  u32("attention.head_count_kv", 1);
  u32("expert_count", 2);
  u32("expert_used_count", 1);
  w.Set(arch + ".rope.freq_base", GgufValue::F32(10000.0f));
  w.Set("tokenizer.ggml.tokens", GgufValue::StringArray({"a", "b", "c", "d"}));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(3));
  w.AddTensor("token_embd.weight", DType::kBF16, {4, 8}, data.data());
  w.AddTensor("output_norm.weight", DType::kF32, {8}, data.data());
  for (int l = 0; l < 2; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.AddTensor(p + "attn_norm.weight", DType::kF32, {8}, data.data());
    w.AddTensor(p + "attn_q.weight", DType::kBF16, {8, 8}, data.data());
    w.AddTensor(p + "attn_k.weight", DType::kBF16, {4, 8}, data.data());
    w.AddTensor(p + "attn_v.weight", DType::kBF16, {4, 8}, data.data());
    w.AddTensor(p + "attn_output.weight", DType::kBF16, {8, 8}, data.data());
    w.AddTensor(p + "ffn_gate_inp.weight", DType::kF32, {2, 8}, data.data());
    w.AddTensor(p + "ffn_gate_exps.weight", DType::kBF16, {2, 4, 8}, data.data());
    w.AddTensor(p + "ffn_up_exps.weight", DType::kBF16, {2, 4, 8}, data.data());
    w.AddTensor(p + "ffn_down_exps.weight", DType::kBF16, {2, 8, 4}, data.data());
  }
  const std::string path = TempPath("model.gguf");
  w.Write(path);
  std::string bytes = ReadAll(path);
  fs::remove(path);
  return bytes;
}

class Mutator {
 public:
  explicit Mutator(const std::string& base) : base_(base), rng_(0x6d6f6578) {
    // Small non-zero u64 values are likely lengths, counts or offsets: prime targets.
    for (size_t p = 0; p + 8 <= base.size(); ++p) {
      uint64_t v;
      std::memcpy(&v, base.data() + p, 8);
      if (v > 0 && v < 65536) fields_.push_back(p);
    }
  }

  std::string Next() {
    std::string s = base_;
    const int n = 1 + static_cast<int>(rng_() % 4);
    for (int k = 0; k < n; ++k) {
      const size_t pos = s.empty() ? 0 : rng_() % s.size();
      switch (rng_() % 6) {
        case 0:
          if (!s.empty()) s[pos] = static_cast<char>(s[pos] ^ (1 << (rng_() % 8)));
          break;
        case 1:
          s.resize(rng_() % (s.size() + 1));
          break;
        case 2: {
          const size_t len = 1 + rng_() % 16;
          std::string bytes(len, '\0');
          for (auto& c : bytes) c = static_cast<char>(rng_());
          s.insert(pos, bytes);
          break;
        }
        case 3:
        case 4: {
          const size_t at = !fields_.empty() && rng_() % 2 ? fields_[rng_() % fields_.size()] : pos;
          const uint64_t v = Extreme(s.size());
          const size_t width = rng_() % 2 ? 8 : 4;
          if (at + width <= s.size()) std::memcpy(s.data() + at, &v, width);
          break;
        }
        case 5: {  // Textual numbers, for JSON headers.
          const size_t digit = s.find_first_of("0123456789", pos);
          if (digit == std::string::npos) break;
          const size_t end = s.find_first_not_of("0123456789", digit);
          static const char* const kNumbers[] = {"18446744073709551615",
                                                 "18446744073709551616",
                                                 "-1",
                                                 "1e30",
                                                 "9223372036854775807",
                                                 "0",
                                                 "4294967296",
                                                 "3.5",
                                                 "null",
                                                 "\"x\""};
          s.replace(digit, end == std::string::npos ? std::string::npos : end - digit,
                    kNumbers[rng_() % (sizeof kNumbers / sizeof kNumbers[0])]);
          break;
        }
      }
    }
    return s;
  }

 private:
  uint64_t Extreme(size_t size) {
    const uint64_t kValues[] = {
        0,     1,          0xff, 0x7fffffff, 0xffffffff, 1ull << 32, 0x7fffffffffffffffull,
        ~0ull, 1ull << 62, size, size + 1,   size - 8,   rng_()};
    return kValues[rng_() % (sizeof kValues / sizeof kValues[0])];
  }

  std::string base_;
  std::mt19937_64 rng_;
  std::vector<size_t> fields_;
};

// Caps the address space while fuzzing so an absurd allocation throws bad_alloc (and fails
// the test) instead of swapping. Skipped under ASan, which reserves terabytes up front.
class AddressSpaceLimit {
 public:
  AddressSpaceLimit() {
#ifndef MOEX_FUZZ_ASAN
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    statm >> pages;
    if (pages == 0 || ::getrlimit(RLIMIT_AS, &old_) != 0) return;
    struct rlimit limited = old_;
    limited.rlim_cur = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + (2ull << 30);
    if (old_.rlim_cur != RLIM_INFINITY && limited.rlim_cur > old_.rlim_cur) return;
    active_ = ::setrlimit(RLIMIT_AS, &limited) == 0;
#endif
  }
  ~AddressSpaceLimit() {
    if (active_) ::setrlimit(RLIMIT_AS, &old_);
  }

 private:
  struct rlimit old_ {};
  bool active_ = false;
};

bool Inside(const TensorView& t, const std::string& bytes) {
  const auto* lo = reinterpret_cast<const std::byte*>(bytes.data());
  return t.nbytes == 0 ||
         (t.data >= lo && t.data + t.nbytes <= lo + bytes.size() && t.data + t.nbytes >= t.data);
}

// Runs `parse` on thousands of mutants; returns how many parsed successfully.
template <typename Parse>
int Fuzz(const std::string& base, Parse parse) {
  Mutator mutator(base);
  AddressSpaceLimit limit;
  int ok = 0;
  for (int i = 0; i < kIterations; ++i) {
    const std::string s = mutator.Next();
    try {
      parse(s);
      ++ok;
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << i << ": non-moex exception: " << e.what();
      return ok;
    }
  }
  return ok;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

TEST(FuzzParsersTest, SafetensorsNeverCrashes) {
  const std::string base = SafetensorsBase();
  SafetensorsFile(Bytes(base), "base");  // The base itself is valid.
  const int ok = Fuzz(base, [](const std::string& s) {
    SafetensorsFile f(Bytes(s), "mutant");
    for (const TensorView& t : f.tensors()) {
      ASSERT_TRUE(Inside(t, s)) << t.name;
      ASSERT_EQ(t.nbytes, DTypeBytes(t.dtype, t.numel()));
    }
  });
  EXPECT_GT(ok, 0);
  EXPECT_LT(ok, kIterations);
  RecordProperty("parsed", ok);
}

TEST(FuzzParsersTest, GgufNeverCrashes) {
  const std::string base = GgufBase();
  GgufFile(Bytes(base), "base");
  const int ok = Fuzz(base, [](const std::string& s) {
    GgufFile f(Bytes(s), "mutant");
    for (const auto& [key, value] : f.metadata()) (void)value.ToString();
    for (const GgufTensorInfo& info : f.tensor_infos()) {
      const TensorView* t = f.FindTensor(info.name);  // Throws for unsupported types.
      ASSERT_TRUE(t != nullptr && Inside(*t, s)) << info.name;
      ASSERT_EQ(t->nbytes, DTypeBytes(t->dtype, t->numel()));
    }
  });
  EXPECT_GT(ok, 0);
  EXPECT_LT(ok, kIterations);
}

TEST(FuzzParsersTest, GgufModelAdapterNeverCrashes) {
  for (const char* arch : {"olmoe", "llama"}) {  // llama exercises the Q/K un-permutation.
    const std::string base = ModelBase(arch);
    {
      auto file = std::make_shared<const GgufFile>(Bytes(base), "base");
      const ModelConfig config = ModelConfigFromGguf(*file);
      ASSERT_EQ(MakeGgufWeightSource(file, config)->Names().size(), 2u + 2 * (5 + 1 + 3 * 2));
    }
    const int ok = Fuzz(base, [](const std::string& s) {
      auto file = std::make_shared<const GgufFile>(Bytes(s), "mutant");
      const ModelConfig config = ModelConfigFromGguf(*file);
      auto weights = MakeGgufWeightSource(file, config);
      for (const std::string& name : weights->Names()) {
        const TensorView& t = weights->Get(name);
        ASSERT_EQ(t.nbytes, DTypeBytes(t.dtype, t.numel())) << name;
        const bool owned =
            name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos;
        if (!owned || config.arch != Arch::kMixtral) {
          ASSERT_TRUE(Inside(t, s)) << name;
        }
      }
    });
    EXPECT_GT(ok, 0) << arch;
  }
}

}  // namespace
}  // namespace moex
