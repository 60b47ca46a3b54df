// Chat templates: format a conversation the way the model was trained.
//
// moex renders the checkpoint's own chat_template (tokenizer_config.json, or the GGUF's
// tokenizer.chat_template) with a built-in interpreter for the subset of Jinja that chat
// templates use: {{ }}, {% if/elif/else %}, {% for %} (loop.*, "if" filters, else, tuple
// unpacking), {% set %} (also ns.attr and block form), {% macro %} (positional, keyword and
// default arguments), namespace(), raise_exception(), string/list/dict methods, the usual
// filters (length, tojson, trim, default, join, ...) and tests (defined, none, string, ...),
// with transformers' trim_blocks/lstrip_blocks. Anything outside the subset (call blocks,
// includes, macros' `caller`) is an Error naming the line, never a
// silently different prompt. Tested on Mixtral/Mistral instruct, Qwen ChatML (Qwen2/Qwen3),
// OLMoE/Tulu and DeepSeek templates against @huggingface/jinja.
//
// The rendered text already holds the BOS token when the template writes it: encode it with
// add_bos=false and special tokens parsed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moex {

class Tokenizer;
namespace jinja {
struct Node;
}

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool"
  std::string content;
};

class ChatTemplate {
 public:
  // Parses the template; throws Error for syntax outside the supported subset.
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The template of a loaded tokenizer, with its BOS/EOS token texts. Throws Error when the
  // checkpoint has no chat template.
  static ChatTemplate FromTokenizer(const Tokenizer& tokenizer);

  // Renders with arbitrary variables (messages, tools, add_generation_prompt, ...); bos_token
  // and eos_token are provided unless given.
  // `cancelled` (optional) is asked every few thousand evaluation steps; true ends the render
  // with an Error.
  std::string Render(const nlohmann::json& variables,
                     const std::function<bool()>& cancelled = nullptr) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Node>>> body_;
};

std::string ApplyChatTemplate(const ChatTemplate& chat_template,
                              const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const std::function<bool()>& cancelled = nullptr);

// Messages as JSON objects (role, content, and e.g. tool_calls), plus extra variables such as
// {"enable_thinking": false} or {"tools": [...]}.
std::string ApplyChatTemplateJson(const ChatTemplate& chat_template, const nlohmann::json& messages,
                                  bool add_generation_prompt,
                                  const nlohmann::json& extra = nlohmann::json::object(),
                                  const std::function<bool()>& cancelled = nullptr);

}  // namespace moex
