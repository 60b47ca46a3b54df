// End-to-end tests of the `moex` command: outputs, and a clear error for every bad input.
#include <gtest/gtest.h>

#include <tuple>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "support/run_command.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex {
namespace {

using testing::Moex;
using testing::MoexBinary;
using testing::RunCommand;

TEST(CliTest, GenerateJsonReportsTheContract) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const auto r = RunCommand(
      Moex("generate --model " + model + " --prompt-ids 1,2,3 --max-tokens 5 --ignore-eos --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].size(), 5u);
  EXPECT_EQ(j["prompt_tokens"], 3);
  for (const char* key : {"prefill_ms", "ttft_ms", "tpot_ms", "decode_tokens_per_s"})
    EXPECT_TRUE(j["timings"].contains(key)) << key;
  for (const char* key :
       {"hits", "misses", "hit_rate", "bytes_read", "stall_ms", "prefetch_issued", "prefetch_used"})
    EXPECT_TRUE(j["offload"].contains(key)) << key;
  for (const char* key : {"peak_rss_bytes", "host_cache_bytes", "device_cache_bytes"})
    EXPECT_TRUE(j["memory"].contains(key)) << key;
}

// The cache size per position: K and V rows (OLMoE tiny: 3 layers x 2 x 64 floats; GLM-4.5
// tiny: one KV head of 16, whole heads cached though only 8 values rotate), or MLA's
// latent + k_pe (DeepSeek-V2 tiny: 3 layers x (32 + 8) floats).
TEST(CliTest, GenerateJsonReportsKvCacheBytesPerToken) {
  for (const auto& [arch, bytes, kind] :
       {std::tuple{Arch::kOlmoe, 3 * 2 * 64 * 4, "kv"},
        std::tuple{Arch::kGlm4Moe, 3 * 2 * 16 * 4, "kv"},
        std::tuple{Arch::kDeepseekV2, 3 * 40 * 4, "mla_latent"}}) {
    const auto r = RunCommand(Moex("generate --model " + testing::TinyModelPath(arch) +
                                   " --prompt-ids 1,2,3 --max-tokens 2 --json"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["memory"]["kv_cache_bytes_per_token"], bytes) << ArchName(arch);
    EXPECT_EQ(j["memory"]["kv_cache_kind"], kind) << ArchName(arch);
  }
}

// MOEX_DECODE_ORDER picks the decode row order; both orders give the same tokens, and a
// value that is neither is ignored with a warning that names it.
TEST(CliTest, DecodeOrderEnvironmentGivesSameTokensAndWarnsOnBadValue) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  const std::string args =
      " generate --model " + model + " --prompt-ids 1,2,3 --max-tokens 6 --ignore-eos --json";
  std::vector<nlohmann::json> tokens;
  for (const char* order : {"interleaved", "sequential", "bogus"}) {
    const auto r =
        RunCommand(std::string("MOEX_DECODE_ORDER=") + order + " " + MoexBinary() + args);
    ASSERT_EQ(r.exit_code, 0) << order << ": " << r.err;
    tokens.push_back(nlohmann::json::parse(r.out)["tokens"]);
    const bool warned = r.err.find("ignoring MOEX_DECODE_ORDER=bogus") != std::string::npos;
    EXPECT_EQ(warned, std::string(order) == "bogus") << r.err;
  }
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_EQ(tokens[0], tokens[2]);
}

TEST(CliTest, OffloadedGenerationEqualsResidentAndReportsMisses) {
  testing::TempDir dir;
  const std::string model = testing::TinyModelPath(Arch::kDeepseekMoe);
  const std::string common =
      "generate --model " + model + " --prompt-ids 9,8,7,6 --max-tokens 6 --ignore-eos --json";
  const auto resident = RunCommand(Moex(common));
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  for (const char* policy : {"lru", "nextgate"}) {
    const auto offloaded = RunCommand(Moex(common + " --host-budget 10% --policy " + policy +
                                           " --store " + (dir / "experts.moex")));
    ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
    const auto r = nlohmann::json::parse(resident.out);
    const auto o = nlohmann::json::parse(offloaded.out);
    EXPECT_EQ(o["tokens"], r["tokens"]) << policy;
    EXPECT_GT(o["offload"]["misses"].get<int64_t>(), 0) << policy;
    EXPECT_GT(o["offload"]["bytes_read"].get<int64_t>(), 0) << policy;
  }
}

TEST(CliTest, LogitsWritesTokensTimesVocabFloats) {
  testing::TempDir dir;
  const std::string model = testing::TinyModelPath(Arch::kMixtral);
  const auto r = RunCommand(
      Moex("logits --model " + model + " --prompt-ids 4,5,6,7 --out " + (dir / "logits.bin")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::filesystem::file_size(dir / "logits.bin"), 4u * 512u * sizeof(float));
}

TEST(CliTest, RandomPhiMoeWithAShortOriginalContextGeneratesPastIt) {
  // --rope-original moves LongRoPE's switch; generation crosses it, offloaded as resident.
  testing::TempDir dir;
  const auto w = RunCommand(
      Moex("random-model --arch phimoe --size tiny --rope-original 8 --out " + (dir / "phi")));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const auto config = nlohmann::json::parse(std::ifstream(dir / "phi/config.json"));
  EXPECT_EQ(config["model_type"], "phimoe");
  EXPECT_EQ(config["rope_scaling"]["original_max_position_embeddings"], 8);
  EXPECT_EQ(config["rope_scaling"]["short_factor"].size(), 8u);  // head_dim 16 / 2.
  const std::string common = "generate --model " + (dir / "phi") +
                             " --prompt-ids 1,2,3,4,5 --max-tokens 8 --ignore-eos --json";
  const auto resident = RunCommand(Moex(common));
  ASSERT_EQ(resident.exit_code, 0) << resident.err;
  const auto offloaded = RunCommand(Moex(common + " --host-budget 25% --policy nextgate"));
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.err;
  EXPECT_EQ(nlohmann::json::parse(resident.out)["tokens"].size(), 8u);
  EXPECT_EQ(nlohmann::json::parse(offloaded.out)["tokens"],
            nlohmann::json::parse(resident.out)["tokens"]);
}

// A model whose whole context's KV cache would not fit half the memory (Llama 4's is 10M
// tokens) runs with the longest context that does, saying so; -c and bench's own run size
// it silently.
TEST(CliTest, AContextTooLongForMemoryIsCappedWithANote) {
  testing::TempDir dir;
  const auto w = RunCommand(Moex("random-model --arch olmoe --size tiny --out " + (dir / "m")));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  nlohmann::json config = nlohmann::json::parse(std::ifstream(dir / "m/config.json"));
  config["max_position_embeddings"] = 1 << 30;  // 1.5 KiB per token: 1.5 TiB.
  std::ofstream(dir / "m/config.json") << config.dump();
  const std::string run = "generate --model " + (dir / "m") + " --prompt-ids 1,2,3 --max-tokens 4";
  const auto capped = RunCommand(Moex(run));
  ASSERT_EQ(capped.exit_code, 0) << capped.err;
  EXPECT_NE(capped.err.find("would need"), std::string::npos) << capped.err;
  EXPECT_NE(capped.err.find("-c sets it"), std::string::npos) << capped.err;
  const auto given = RunCommand(Moex(run + " -c 64"));
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(given.err.find("would need"), std::string::npos) << given.err;
  const auto bench =
      RunCommand(Moex("bench --model " + (dir / "m") + " --prompt-tokens 8 --gen-tokens 2 --json"));
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(bench.err.find("would need"), std::string::npos) << bench.err;
}

TEST(CliTest, BenchJsonReportsThroughput) {
  const std::string model = testing::TinyModelPath(Arch::kQwen2Moe);
  const auto r =
      RunCommand(Moex("bench --model " + model + " --prompt-tokens 8 --gen-tokens 4 --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["prefill_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["decode_weight_bytes_per_step"].get<double>(), 0.0);
  EXPECT_EQ(j["activations"], "int8");  // The default.
}

TEST(CliTest, BenchMembwReportsTheDecodeShareOfTheStreamingRead) {
  const std::string model = testing::TinyModelPath(Arch::kQwen2Moe);
  const std::string args = "bench --model " + model + " --prompt-tokens 4 --gen-tokens 4 --json";
  const auto plain = RunCommand(Moex(args));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(nlohmann::json::parse(plain.out).contains("membw_gb_per_s"));
  const auto r = RunCommand(Moex(args + " --membw"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const double membw = j["membw_gb_per_s"].get<double>();
  EXPECT_GT(membw, 0.0);
  EXPECT_GT(j["membw_gb_per_s_cpu_time"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["decode_share_of_membw"].get<double>(),
                   j["decode_weight_gb_per_s"].get<double>() / membw);
}

struct BadInput {
  std::string name;
  std::string args;
  std::string expected_message;
};

class CliErrorTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(CliErrorTest, FailsWithAClearMessage) {
  const BadInput& b = GetParam();
  std::string args = b.args;
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  for (size_t pos; (pos = args.find("{model}")) != std::string::npos;) args.replace(pos, 7, model);
  const auto r = RunCommand(Moex(args));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(b.expected_message), std::string::npos) << "stderr: " << r.err;
}

INSTANTIATE_TEST_SUITE_P(
    BadInputs, CliErrorTest,
    ::testing::Values(
        BadInput{"MissingModel", "generate --model /nonexistent/m --prompt-ids 1",
                 "does not exist"},
        BadInput{"TokenOutsideVocab", "generate --model {model} --prompt-ids 1,99999",
                 "outside the vocabulary"},
        BadInput{"BadIdList", "generate --model {model} --prompt-ids 1,x", "not an integer"},
        BadInput{"NegativeTemperature", "generate --model {model} --prompt-ids 1 --temperature -1",
                 "temperature"},
        BadInput{"BothPrompts", "generate --model {model} --prompt hi --prompt-ids 1",
                 "exactly one"},
        BadInput{"TextWithoutTokenizer", "generate --model {model} --prompt hello", "no tokenizer"},
        BadInput{"UnknownArch", "random-model --arch gpt2 --out /tmp/x",
                 "unsupported architecture"},
        BadInput{"UnknownSize", "random-model --arch olmoe --size huge --out /tmp/x",
                 "unknown model size"},
        BadInput{"UnknownDtype", "random-model --arch olmoe --dtype int4 --out /tmp/x",
                 "unknown dtype"},
        BadInput{"RopeOriginalWithoutLongRope",
                 "random-model --arch olmoe --rope-original 8 --out /tmp/x",
                 "--rope-original applies to LongRoPE models (phimoe)"},
        BadInput{"LogitsUnwritable",
                 "logits --model {model} --prompt-ids 1 --out /nonexistent/dir/x", "cannot create"},
        BadInput{"MissingSubcommand", "", "subcommand"},
        BadInput{"NegativeTpotTarget", "serve --model {model} --tpot-target -5",
                 "--tpot-target: Value -5 not in range"},
        // Reported by the new-user test (issue 20).
        BadInput{"HugeBudget",
                 "generate --model {model} --prompt-ids 1 --host-budget 99999999999999999999",
                 "too large"},
        BadInput{"NanBudget", "generate --model {model} --prompt-ids 1 --host-budget nan%",
                 "not a finite number"},
        BadInput{"InfBudget", "generate --model {model} --prompt-ids 1 --host-budget inf",
                 "not a finite number"},
        BadInput{"UnknownCommand", "foo --model x", "unknown command 'foo'"},
        BadInput{"LlamaCppGpuLayers", "generate -m {model} --prompt-ids 1 -ngl 99",
                 "unknown option '-ngl' for `moex generate` (moex computes on the CPU"},
        BadInput{"FirstUnknownOptionInOrder", "generate -m {model} --prompt-ids 1 --frob 1 --zap",
                 "unknown option '--frob' for `moex generate`; `moex generate --help` lists"},
        BadInput{"StrayWord", "generate -m {model} --prompt-ids 1 hello",
                 "unexpected argument 'hello' for `moex generate`"},
        BadInput{"CtxSizeOverTheModels", "generate -m {model} --prompt-ids 1 -c 99999999",
                 "exceeds the model's context"},
        BadInput{"PromptOverCtxSize", "generate -m {model} --prompt-ids 1,2,3 -n 8 -c 4",
                 "do not fit the context of 4 tokens"},
        BadInput{"MinPOutOfRange", "generate -m {model} --prompt-ids 1 --min-p 2",
                 "min-p must be in [0, 1]"},
        BadInput{"ZeroRepeatPenalty", "generate -m {model} --prompt-ids 1 --repeat-penalty 0",
                 "repetition penalty must be > 0"},
        BadInput{"UnknownActivationPrecision",
                 "generate --model {model} --prompt-ids 1 --activations q4",
                 "--activations: q4 not in {int8,f32}"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

TEST(CliTest, LlamaCppShortFlagsMeanWhatTheyMeanThere) {
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  auto run = [&](const std::string& args) {
    const auto r = RunCommand(Moex("generate " + args + " --prompt-ids 1,2,3 --json"));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  const auto llama = run("-m " + model + " -n 6 -t 1 -s 7 --temp 0.9 --top-k 5 --min-p 0.1 -c 64");
  const auto moex = run("--model " + model +
                        " --max-tokens 6 --threads 1 --seed 7 --temperature 0.9 --top-k 5 "
                        "--min-p 0.1 --ctx-size 64");
  EXPECT_EQ(llama["tokens"], moex["tokens"]);
  EXPECT_EQ(llama["tokens"].size(), 6u);
  EXPECT_EQ(llama["sampling"]["used"]["seed"], 7);
  EXPECT_FLOAT_EQ(llama["sampling"]["used"]["min_p"].get<float>(), 0.1f);
  // --repeat-penalty is llama.cpp's: its window is the last 64 tokens unless given.
  const auto penalised = run("-m " + model + " -n 2 --repeat-penalty 1.3");
  EXPECT_EQ(penalised["sampling"]["used"]["repeat_last_n"], 64);
}

TEST(CliTest, SamplingDefaultsComeFromGenerationConfig) {
  testing::TempDir dir;
  std::filesystem::copy(testing::TinyModelPath(Arch::kOlmoe), dir.path() / "m",
                        std::filesystem::copy_options::recursive);
  std::ofstream(dir / "m/generation_config.json")
      << R"({"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95})";
  auto run = [&](const std::string& extra) {
    const auto r = RunCommand(
        Moex("generate --model " + (dir / "m") + " --prompt-ids 1,2 --max-tokens 2 --json" + extra));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["sampling"];
  };
  const auto first = run("");
  EXPECT_EQ(first["source"], "generation_config.json");
  EXPECT_FLOAT_EQ(first["used"]["temperature"].get<float>(), 0.6f);
  EXPECT_EQ(first["used"]["top_k"], 20);
  EXPECT_FLOAT_EQ(first["used"]["top_p"].get<float>(), 0.95f);
  // No --seed: a random one each run (equal with probability 2^-64).
  EXPECT_NE(first["used"]["seed"], run("")["used"]["seed"]);
  // A flag overrides one value; the rest stay the model's.
  const auto greedy = run(" --temp 0");
  EXPECT_EQ(greedy["used"]["temperature"], 0.0);
  EXPECT_EQ(greedy["used"]["top_k"], 20);
  // The tiny model's own file has do_sample false: greedy.
  const auto r = RunCommand(Moex("generate --model " + testing::TinyModelPath(Arch::kOlmoe) +
                                 " --prompt-ids 1 --max-tokens 1 --json"));
  EXPECT_EQ(nlohmann::json::parse(r.out)["sampling"]["used"]["temperature"], 0.0);
}

TEST(CliTest, CorruptConfigIsAClearError) {
  testing::TempDir dir;
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  std::filesystem::copy(model, dir.path() / "m", std::filesystem::copy_options::recursive);
  std::ofstream(dir / "m/config.json") << "{\"model_type\": \"olmoe\", \"hidden_size\": ";
  const auto r = RunCommand(Moex("generate --model " + (dir / "m") + " --prompt-ids 1"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("config.json"), std::string::npos) << r.err;
}

TEST(CliTest, ShapeMismatchIsAClearError) {
  testing::TempDir dir;
  const std::string model = testing::TinyModelPath(Arch::kOlmoe);
  std::filesystem::copy(model, dir.path() / "m", std::filesystem::copy_options::recursive);
  // Point the config at more experts than the checkpoint has.
  auto config = nlohmann::json::parse(std::ifstream(dir / "m/config.json"));
  config["num_experts"] = config["num_experts"].get<int>() + 1;
  std::ofstream(dir / "m/config.json") << config.dump();
  const auto r = RunCommand(Moex("generate --model " + (dir / "m") + " --prompt-ids 1"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has shape"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace moex
