// Mutation fuzzing of the HTTP API's request parser with a fixed seed: valid chat and
// completion bodies get byte flips, truncations, random insertions, JSON tokens spliced in
// and extreme numbers. Every body must parse or be refused with ApiError 400; a crash,
// another exception type or another status fails the test.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "serve/api_error.h"
#include "serve/api_request.h"
#include "serve/messages_api.h"
#include "serve/responses_api.h"

namespace moex::serve {
namespace {

constexpr int kIterations = 20000;  // Per base body; the test takes about a second.

class JsonMutator {
 public:
  explicit JsonMutator(std::string base) : base_(std::move(base)), rng_(0x73657276) {}

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
          std::string bytes(1 + rng_() % 8, '\0');
          for (auto& c : bytes) c = static_cast<char>(rng_());
          s.insert(pos, bytes);
          break;
        }
        case 3: {
          static const char* const kTokens[] = {
              "{",    "}",    "[",    "]",           ",",           ":",         "\"",
              "null", "true", "[[[[", "\"\\u0000\"", "\"\\ud800\"", "{\"a\":1}", "\"\xc3\x28\""};
          s.insert(pos, kTokens[rng_() % (sizeof kTokens / sizeof kTokens[0])]);
          break;
        }
        default: {  // Replace a number or a string value with something extreme.
          const size_t at = s.find_first_of("0123456789\"", pos);
          if (at == std::string::npos) break;
          const size_t end =
              s[at] == '"' ? s.find('"', at + 1) : s.find_first_not_of("0123456789.", at);
          static const char* const kValues[] = {"-1",
                                                "0",
                                                "1e308",
                                                "-1e308",
                                                "18446744073709551616",
                                                "9223372036854775807",
                                                "2.5",
                                                "null",
                                                "[]",
                                                "{}",
                                                "\"\"",
                                                "true",
                                                "1e-320"};
          s.replace(at, end == std::string::npos ? std::string::npos : end - at + (s[at] == '"'),
                    kValues[rng_() % (sizeof kValues / sizeof kValues[0])]);
          break;
        }
      }
    }
    return s;
  }

 private:
  std::string base_;
  std::mt19937_64 rng_;
};

// Which body the mutants are: an OpenAI endpoint's, or a dialect's translated first.
enum class Body { kOpenAi, kMessages, kResponses };

int Fuzz(Endpoint endpoint, const std::string& base, Body kind = Body::kOpenAi) {
  ApiLimits limits;
  limits.context = 4096;
  limits.vocab_size = 50304;
  JsonMutator mutator(base);
  int accepted = 0;
  for (int i = 0; i < kIterations; ++i) {
    std::string body = mutator.Next();
    try {
      if (kind == Body::kMessages) body = TranslateMessagesRequest(body).chat_body;
      if (kind == Body::kResponses) body = TranslateResponsesRequest(body).chat_body;
      const ApiRequest r = ParseApiRequest(endpoint, body, limits);
      // What is accepted is within the limits.
      EXPECT_GE(r.max_tokens, 1);
      EXPECT_LE(r.max_tokens, limits.context);
      for (int32_t id : r.prompt_ids) EXPECT_TRUE(id >= 0 && id < limits.vocab_size);
      ++accepted;
    } catch (const ApiError& e) {
      if (e.status() != 400) {
        ADD_FAILURE() << "iteration " << i << ": status " << e.status();
        return accepted;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << i << ": non-API exception: " << e.what();
      return accepted;
    }
  }
  return accepted;
}

TEST(ServeApiRequestFuzz, ChatBodies) {
  const int ok =
      Fuzz(Endpoint::kChat,
           R"({"model":"m","messages":[{"role":"system","content":"be brief"},)"
           R"({"role":"user","content":[{"type":"text","text":"hi"}]}],)"
           R"("max_tokens":12,"temperature":0.7,"top_p":0.9,"seed":3,)"
           R"("stop":["\n\n","END"],"stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_GT(ok, 0);  // Some mutants stay valid: the fuzzer reaches past the JSON syntax.
}

TEST(ServeApiRequestFuzz, CompletionBodies) {
  EXPECT_GT(Fuzz(Endpoint::kCompletion,
                 R"({"model":"m","prompt":[[1,2,3,50303]],"max_tokens":5,"top_k":40,"n":1,)"
                 R"("echo":false,"logprobs":null,"ignore_eos":true})"),
            0);
  EXPECT_GT(Fuzz(Endpoint::kCompletion, R"({"prompt":"Once upon a time","stop":"."})"), 0);
}

TEST(ServeApiRequestFuzz, MessagesBodies) {
  EXPECT_GT(Fuzz(Endpoint::kChat,
                 R"({"model":"m","max_tokens":12,"system":[{"type":"text","text":"be brief"}],)"
                 R"("messages":[{"role":"user","content":"hi"},{"role":"assistant","content":)"
                 R"([{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},{"role":"user",)"
                 R"("content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}],)"
                 R"("tools":[{"name":"f","input_schema":{"type":"object"}}],)"
                 R"("tool_choice":{"type":"auto"},"stop_sequences":["END"],"stream":true})",
                 Body::kMessages),
            0);
}

TEST(ServeApiRequestFuzz, ResponsesBodies) {
  EXPECT_GT(Fuzz(Endpoint::kChat,
                 R"({"model":"m","instructions":"be brief","max_output_tokens":12,"input":[)"
                 R"({"role":"user","content":[{"type":"input_text","text":"hi"}]},)"
                 R"({"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},)"
                 R"({"type":"function_call_output","call_id":"c1","output":"ok"}],)"
                 R"("tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],)"
                 R"("text":{"format":{"type":"json_object"}},"stream":true})",
                 Body::kResponses),
            0);
}

}  // namespace
}  // namespace moex::serve
