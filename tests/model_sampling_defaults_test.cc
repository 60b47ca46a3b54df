// The sampling defaults a model carries: generation_config.json read as transformers reads it,
// the GGUF's general.sampling keys as llama.cpp reads them, and greedy when neither says.
#include <gtest/gtest.h>

#include "core/error.h"
#include "io/gguf_file.h"
#include "io/gguf_writer.h"
#include "model/hf_checkpoint.h"
#include "model/sampling_defaults.h"
#include "support/temp_dir.h"

namespace moex {
namespace {

TEST(SamplingDefaults, WithoutDoSampleTransformersDecodesGreedily) {
  // OLMoE's generation_config.json: token ids only.
  SamplingDefaults d = SamplingDefaults::FromGenerationConfig(
      GenerationConfig::FromJson({{"eos_token_id", 50279}}));
  EXPECT_EQ(d.temperature, 0.0f);
  EXPECT_EQ(d.source, "generation_config.json");
  // A temperature without do_sample is ignored, as transformers ignores it.
  d = SamplingDefaults::FromGenerationConfig(GenerationConfig::FromJson({{"temperature", 0.6}}));
  EXPECT_EQ(d.temperature, 0.0f);
  EXPECT_EQ(d.Describe(), "greedy (generation_config.json)");
}

TEST(SamplingDefaults, DoSampleTakesTheFileAndTransformersDefaults) {
  // Qwen3's generation_config.json.
  SamplingDefaults d = SamplingDefaults::FromGenerationConfig(GenerationConfig::FromJson(
      {{"do_sample", true}, {"temperature", 0.6}, {"top_k", 20}, {"top_p", 0.95}}));
  EXPECT_FLOAT_EQ(d.temperature, 0.6f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_FLOAT_EQ(d.top_p, 0.95f);
  EXPECT_EQ(d.min_p, 0.0f);
  EXPECT_EQ(d.repetition_penalty, 1.0f);
  EXPECT_EQ(d.Describe(), "temperature 0.6, top-k 20, top-p 0.95 (generation_config.json)");
  // Only do_sample: temperature 1, top-k 50 (transformers' defaults); a repetition penalty
  // covers the whole context.
  d = SamplingDefaults::FromGenerationConfig(
      GenerationConfig::FromJson({{"do_sample", true}, {"repetition_penalty", 1.05}}));
  EXPECT_EQ(d.temperature, 1.0f);
  EXPECT_EQ(d.top_k, 50);
  EXPECT_FLOAT_EQ(d.repetition_penalty, 1.05f);
  EXPECT_EQ(d.repeat_last_n, -1);
  // Out of range: an error naming the value.
  EXPECT_THROW(SamplingDefaults::FromGenerationConfig(
                   GenerationConfig::FromJson({{"do_sample", true}, {"top_p", 0}})),
               Error);
}

TEST(SamplingDefaults, GgufGeneralSamplingKeys) {
  testing::TempDir dir;
  const std::string plain = (dir.path() / "plain.gguf").string();
  GgufWriter w;
  w.Set("general.architecture", GgufValue::String("llama"));
  w.Write(plain);
  SamplingDefaults d = SamplingDefaults::FromGguf(GgufFile(plain));
  EXPECT_EQ(d.temperature, 0.0f);  // No keys: greedy.
  EXPECT_EQ(d.source, "the model sets none");

  const std::string keyed = (dir.path() / "keyed.gguf").string();
  w.Set("general.sampling.top_k", GgufValue::I32(40));
  w.Set("general.sampling.min_p", GgufValue::F32(0.05f));
  w.Set("general.sampling.penalty_repeat", GgufValue::F32(1.1f));
  w.Write(keyed);
  d = SamplingDefaults::FromGguf(GgufFile(keyed));
  EXPECT_EQ(d.temperature, 1.0f);  // Sampling keys without temp: temperature 1.
  EXPECT_EQ(d.top_k, 40);
  EXPECT_FLOAT_EQ(d.min_p, 0.05f);
  EXPECT_FLOAT_EQ(d.repetition_penalty, 1.1f);
  EXPECT_EQ(d.repeat_last_n, 64);  // llama.cpp's window.

  const std::string bad = (dir.path() / "bad.gguf").string();
  w.Set("general.sampling.temp", GgufValue::F32(-1.0f));
  w.Write(bad);
  EXPECT_THROW(SamplingDefaults::FromGguf(GgufFile(bad)), Error);
}

}  // namespace
}  // namespace moex
