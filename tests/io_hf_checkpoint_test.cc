#include "model/hf_checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors_writer.h"

#include "support/temp_dir.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

ModelConfig TinyOlmoe() {
  ModelConfig c;
  c.arch = Arch::kOlmoe;
  c.vocab_size = 64;
  c.hidden_size = 16;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 4;
  c.num_experts = 4;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 8;
  c.qk_norm = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteText("config.json", TinyOlmoe().ToHfJson().dump(2));
    std::mt19937 rng(7);
    for (int layer = 0; layer < 2; ++layer) {
      for (int e = 0; e < 4; ++e) {
        for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
          const std::string name = "model.layers." + std::to_string(layer) + ".mlp.experts." +
                                   std::to_string(e) + "." + p + ".weight";
          names_.push_back(name);
        }
      }
    }
    names_.push_back("model.embed_tokens.weight");
    for (const auto& name : names_) {
      const bool embed = name.find("embed") != std::string::npos;
      shapes_.push_back(embed ? std::vector<int64_t>{64, 16} : std::vector<int64_t>{8, 16});
      std::vector<uint16_t> v(static_cast<size_t>(shapes_.back()[0] * 16));
      for (auto& x : v) x = static_cast<uint16_t>(rng());
      data_.push_back(std::move(v));
    }
  }

  void WriteText(const std::string& name, const std::string& text) {
    std::ofstream out(dir_ / name);
    out << text;
  }
  SafetensorsWriter Writer() const {
    SafetensorsWriter w;
    for (size_t i = 0; i < names_.size(); ++i)
      w.Add(names_[i], DType::kBF16, shapes_[i], data_[i].data());
    return w;
  }
  std::string OpenError() {
    try {
      HfCheckpoint::Open(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  void ExpectAllTensors(const HfCheckpoint& ckpt) {
    ASSERT_EQ(ckpt.Names().size(), names_.size());
    for (size_t i = 0; i < names_.size(); ++i) {
      const TensorView& t = ckpt.Get(names_[i], shapes_[i]);
      EXPECT_EQ(t.dtype, DType::kBF16);
      ASSERT_EQ(t.nbytes, data_[i].size() * 2);
      EXPECT_EQ(std::memcmp(t.data, data_[i].data(), t.nbytes), 0) << names_[i];
    }
  }

  moex::testing::TempDir temp_;  // Removed with the fixture.
  const fs::path dir_ = temp_.path();
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<std::vector<uint16_t>> data_;
};

TEST_F(HfCheckpointTest, OpensSingleFileCheckpoint) {
  Writer().WriteCheckpoint(dir_.string());
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors"));
  auto ckpt = HfCheckpoint::Open(dir_.string());
  EXPECT_EQ(ckpt->config().arch, Arch::kOlmoe);
  EXPECT_EQ(ckpt->config().num_experts, 4);
  EXPECT_EQ(ckpt->config_json()["model_type"], "olmoe");
  EXPECT_FALSE(ckpt->has_generation_config());
  EXPECT_EQ(ckpt->generation_config().eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(ckpt->generation_config().bos_token_id, 1);
  EXPECT_EQ(ckpt->Describe(), dir_.string());
  ExpectAllTensors(*ckpt);
}

TEST_F(HfCheckpointTest, ReadsGenerationConfig) {
  Writer().WriteCheckpoint(dir_.string());
  WriteText("generation_config.json",
            R"({"eos_token_id": [2, 5], "temperature": 0.6, "top_p": 0.9, "top_k": 20,
                "do_sample": true, "bos_token_id": 1})");
  auto ckpt = HfCheckpoint::Open(dir_.string());
  ASSERT_TRUE(ckpt->has_generation_config());
  const GenerationConfig& g = ckpt->generation_config();
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{2, 5}));
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_FLOAT_EQ(*g.top_p, 0.9f);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_TRUE(*g.do_sample);
  EXPECT_FALSE(g.repetition_penalty.has_value());
  WriteText("generation_config.json", R"({"top_k": "many"})");
  EXPECT_NE(OpenError().find("top_k"), std::string::npos);
}

TEST_F(HfCheckpointTest, OpensShardedCheckpoint) {
  Writer().WriteCheckpoint(dir_.string(), 1000);  // ~256 bytes per expert tensor.
  EXPECT_TRUE(fs::exists(dir_ / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir_ / "model-00001-of-00009.safetensors"));  // 3 experts a shard.
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));
  auto ckpt = HfCheckpoint::Open(dir_.string());
  EXPECT_GT(ckpt->files().size(), 1u);
  ExpectAllTensors(*ckpt);
  // A later single-file write replaces the sharded layout's index.
  Writer().WriteCheckpoint(dir_.string());
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.index.json"));
  ExpectAllTensors(*HfCheckpoint::Open(dir_.string()));
}

TEST_F(HfCheckpointTest, RejectsMissingShard) {
  Writer().WriteCheckpoint(dir_.string(), 1000);
  fs::remove(dir_ / "model-00003-of-00009.safetensors");
  const std::string e = OpenError();
  EXPECT_NE(e.find("lists shard model-00003-of-00009.safetensors, which is missing"),
            std::string::npos)
      << e;
}

TEST_F(HfCheckpointTest, RejectsTensorListedButAbsent) {
  Writer().WriteCheckpoint(dir_.string(), 1000);
  nlohmann::json index = ReadJsonFile((dir_ / "model.safetensors.index.json").string());
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00009.safetensors";
  WriteText("model.safetensors.index.json", index.dump());
  const std::string e = OpenError();
  EXPECT_NE(e.find("lists tensor 'model.norm.weight' in model-00001-of-00009.safetensors"),
            std::string::npos)
      << e;
  index["weight_map"]["model.norm.weight"] = "../escape.safetensors";
  WriteText("model.safetensors.index.json", index.dump());
  EXPECT_NE(OpenError().find("invalid shard file name"), std::string::npos);
}

TEST_F(HfCheckpointTest, ReportsMissingPieces) {
  EXPECT_NE(OpenError().find("neither model.safetensors"), std::string::npos);
  fs::remove(dir_ / "config.json");
  EXPECT_NE(OpenError().find("has no config.json"), std::string::npos);
  WriteText("config.json", "{bad json");
  EXPECT_NE(OpenError().find("bad JSON"), std::string::npos);
  WriteText("config.json", R"({"model_type": "gpt2"})");
  EXPECT_NE(OpenError().find("unsupported architecture 'gpt2'"), std::string::npos);
  EXPECT_THROW(HfCheckpoint::Open((dir_ / "nonexistent").string()), Error);
}

// A directory, FIFO or device where a file should be is named as what it is (it was
// reported as missing), and nothing blocks on a FIFO or reads /dev/zero without end.
TEST_F(HfCheckpointTest, WhatIsNotAFileIsNamedAsWhatItIs) {
  fs::create_directory(dir_ / "model.safetensors");
  EXPECT_NE(OpenError().find("model.safetensors is a directory, not a file"), std::string::npos)
      << OpenError();
  fs::remove(dir_ / "model.safetensors");
  ASSERT_EQ(::mkfifo((dir_ / "model.safetensors").c_str(), 0600), 0);
  EXPECT_NE(OpenError().find("model.safetensors is a FIFO"), std::string::npos) << OpenError();
  fs::remove(dir_ / "model.safetensors");
  Writer().WriteCheckpoint(dir_.string());
  fs::remove(dir_ / "config.json");
  fs::create_symlink("/dev/zero", dir_ / "config.json");
  EXPECT_NE(OpenError().find("config.json is a character device"), std::string::npos)
      << OpenError();
  fs::remove(dir_ / "config.json");
  ASSERT_EQ(::mkfifo((dir_ / "config.json").c_str(), 0600), 0);
  EXPECT_NE(OpenError().find("config.json is a FIFO"), std::string::npos) << OpenError();
  fs::remove(dir_ / "config.json");
  WriteText("config.json", TinyOlmoe().ToHfJson().dump(2));
  fs::create_directory(dir_ / "generation_config.json");
  EXPECT_NE(OpenError().find("generation_config.json is a directory"), std::string::npos)
      << OpenError();
}

// A field of the wrong type is reported as such, not as missing; a context that is not
// positive is refused when the model loads, not per request.
TEST_F(HfCheckpointTest, WrongTypesAndBadSizesAreNamedWithTheirValue) {
  Writer().WriteCheckpoint(dir_.string());
  nlohmann::json config = TinyOlmoe().ToHfJson();
  config["model_type"] = 5;
  WriteText("config.json", config.dump());
  EXPECT_NE(OpenError().find("'model_type' must be a string such as \"olmoe\", got 5"),
            std::string::npos)
      << OpenError();
  struct Case {
    const char* field;
    int64_t value;
    const char* message;
  };
  for (const Case& c :
       {Case{"max_position_embeddings", -5,
             "max_position_embeddings (context_length in GGUF) must be > 0, got -5"},
        Case{"max_position_embeddings", 0, "must be > 0, got 0"},
        Case{"head_dim", -16, "head_dim must be > 0, got -16"},
        Case{"max_position_embeddings", 4294967808, "out of range: 4294967808"}}) {
    const auto& [field, value, message] = c;
    config = TinyOlmoe().ToHfJson();
    config[field] = value;
    WriteText("config.json", config.dump());
    EXPECT_NE(OpenError().find(message), std::string::npos) << field << ": " << OpenError();
  }
}

TEST_F(HfCheckpointTest, ReportsMissingTensorAndWrongShape) {
  Writer().WriteCheckpoint(dir_.string());
  auto ckpt = HfCheckpoint::Open(dir_.string());
  try {
    ckpt->Get("model.norm.weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.norm.weight'"), std::string::npos);
  }
  try {
    ckpt->Get("model.embed_tokens.weight", {16, 64});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has shape [64, 16], expected [16, 64]"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(HfCheckpointTest, RejectsTruncatedShard) {
  Writer().WriteCheckpoint(dir_.string());
  const auto path = dir_ / "model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 1);
  EXPECT_NE(OpenError().find("model.safetensors"), std::string::npos);
}

}  // namespace
}  // namespace moex
