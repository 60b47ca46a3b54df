// The OpenAI request bodies moex serves, parsed and checked: POST /v1/chat/completions and
// POST /v1/completions. Parsing is a pure function of the body text, so it is fuzzed on its
// own; every malformed body, wrong type or absurd value of a known field throws ApiError
// (400) naming the field, and OpenAI features moex cannot honour (audio, functions, suffix,
// ...) are refused rather than silently ignored. Fields moex does not know at all (other
// servers' extras) are ignored and listed in ignored_fields, as llama-server and vLLM do.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/tool_calls.h"
#include "text/grammar.h"

namespace moex::serve {

enum class Endpoint { kChat, kCompletion };

struct ApiLimits {
  int64_t context = 4096;        // The model's context: prompt + max_tokens must fit.
  int64_t vocab_size = 1 << 30;  // Token-id prompts are checked against it.
  int default_max_tokens = 256;  // When the request gives none (chat; completions: 16).
  size_t max_stop = 4;           // OpenAI allows up to 4 stop sequences.
  size_t max_stop_bytes = 256;
  size_t max_messages = 4096;
  int64_t max_choices = 128;  // OpenAI's bound on `n`; the server lowers it to what can queue.
  bool compact_json = false;  // Structured output is compact JSON (JsonSchemaOptions::compact).
};

struct ChatTurn {
  std::string role;  // system, user, assistant, tool ("developer" is read as system).
  std::string content;
  std::vector<ToolCall> tool_calls;  // An assistant's calls (its content may be empty).
  std::string tool_call_id;          // A tool message: the call it answers.
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletion;
  std::string model;                // Empty, or the served model's name (else 404).
  std::vector<ChatTurn> messages;   // Chat.
  std::string prompt_text;          // Completions with a text prompt.
  std::vector<int32_t> prompt_ids;  // Completions with a token-id prompt.
  bool prompt_is_ids = false;
  int max_tokens = 16;
  // Sampling; unset values take the model's defaults (model/sampling_defaults.h), as vLLM
  // does, rather than OpenAI's temperature 1.
  std::optional<float> temperature;  // 0 is greedy.
  std::optional<float> top_p;
  std::optional<int> top_k;    // Extension (llama.cpp, vLLM): 0 or -1 = no limit.
  std::optional<float> min_p;  // Extension (llama.cpp, vLLM).
  // Extensions: vLLM's repetition_penalty (over the whole context) or llama.cpp's
  // repeat_penalty (over the last repeat_last_n tokens, 64 unless given).
  std::optional<float> repetition_penalty;
  std::optional<int> repeat_last_n;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage.
  bool ignore_eos = false;        // Extension (vLLM): keep going past end-of-sequence.
  float presence_penalty = 0.0f;  // -2..2, over the generated tokens.
  float frequency_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // Token id, bias in -100..100.
  // Log probabilities of the generated tokens with this many alternatives each; -1: none.
  int logprobs = -1;
  int n = 1;  // Choices, sampled with seeds seed, seed + 1, ...
  // Tools (chat): the functions offered, as sent ({type: function, function: {name,
  // description, parameters}}), in the request's key order; tool_choice "none", "auto",
  // "required" or "function" (then tool_choice_name names it).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  std::string tool_choice = "none";  // "auto" when tools are given without a choice.
  std::string tool_choice_name;
  bool echo = false;  // Completions: the prompt's text before the reply.
  // Structured output: what the reply must be a string of (null: free text). From
  // response_format json_object / json_schema, or the extensions `json_schema` and `grammar`
  // (llama.cpp's server: a schema, a GBNF grammar) and `guided_json`, `guided_regex`,
  // `guided_grammar` (vLLM's).
  std::shared_ptr<const Grammar> grammar;
  std::string grammar_source;  // Which field gave it (for errors and logs).
  // Fields moex does not know, ignored as llama-server and vLLM ignore them; the server names
  // them in a Warning header.
  std::vector<std::string> ignored_fields;
};

// Parses and checks a request body; throws ApiError (status 400) with the offending param.
ApiRequest ParseApiRequest(Endpoint endpoint, std::string_view body, const ApiLimits& limits);

// RFC 9111's Warning header naming the ignored fields (code 299, "miscellaneous persistent
// warning"): printable ASCII only, each name cut to 64 characters, the list to about 1 KiB.
std::string IgnoredFieldsWarning(const ApiRequest& request);

}  // namespace moex::serve
