// The sampling a model's publisher asks for, read once at load: every surface (generate,
// chat, the server's API and web page) starts from it, and flags or request fields override
// single values (docs/sampling.md).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace moex {

class GgufFile;
struct GenerationConfig;

struct SamplingDefaults {
  float temperature = 0.0f;  // 0: greedy.
  int top_k = 0;             // 0: no limit.
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int repeat_last_n = 64;  // -1: the whole context.
  // Where the values came from, for the notice a command prints.
  std::string source = "the model sets none";

  // transformers' rule: without do_sample: true the model decodes greedily, whatever
  // temperature says; with it, temperature, top_k and top_p default to 1.0, 50 and 1.0.
  // repetition_penalty applies either way, over the whole context (repeat_last_n -1).
  static SamplingDefaults FromGenerationConfig(const GenerationConfig& g);
  // llama.cpp's general.sampling.* keys (temp, top_k, top_p, min_p, penalty_repeat,
  // penalty_last_n); any of them present means sampling, a missing temp is 1.0. Without
  // them: greedy. Throws Error for a value out of range.
  static SamplingDefaults FromGguf(const GgufFile& file);

  // Throws Error naming a value out of range (from a file, so the file is named by the
  // caller).
  void Validate() const;
  nlohmann::json ToJson() const;
  // "temperature 0.6, top-k 20, top-p 0.95 (from generation_config.json)".
  std::string Describe() const;
};

}  // namespace moex
