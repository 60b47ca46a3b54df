#include "text/chat_template.h"

#include "core/error.h"
#include "text/chat_template_ast.h"
#include "text/chat_template_eval.h"
#include "text/tokenizer.h"

namespace moex {

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      body_(std::make_shared<const jinja::Body>(jinja::Parse(source_))) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::FromTokenizer(const Tokenizer& tokenizer) {
  Check(!tokenizer.chat_template().empty(), "no chat template in ", tokenizer.source(),
        " (no chat_template in tokenizer_config.json, no chat_template.jinja, no GGUF "
        "tokenizer.chat_template): use a plain prompt");
  const std::string bos = tokenizer.bos_id() >= 0 ? tokenizer.TokenText(tokenizer.bos_id()) : "";
  const std::string eos =
      tokenizer.eos_ids().empty() ? "" : tokenizer.TokenText(tokenizer.eos_ids().front());
  return ChatTemplate(tokenizer.chat_template(), bos, eos);
}

std::string ChatTemplate::Render(const nlohmann::json& variables,
                                 const std::function<bool()>& cancelled) const {
  Check(variables.is_object() || variables.is_null(),
        "chat template variables must be a JSON object");
  jinja::ValueDict vars;
  vars.emplace_back("bos_token", jinja::Value::String(bos_token_));
  vars.emplace_back("eos_token", jinja::Value::String(eos_token_));
  if (variables.is_object()) {
    for (const auto& [k, v] : variables.items()) vars.emplace_back(k, jinja::Value::FromJson(v));
  }
  return jinja::Render(*body_, vars, cancelled);
}

std::string ApplyChatTemplate(const ChatTemplate& chat_template,
                              const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const std::function<bool()>& cancelled) {
  nlohmann::json list = nlohmann::json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  nlohmann::json vars = nlohmann::json::object();
  vars["messages"] = std::move(list);
  vars["add_generation_prompt"] = add_generation_prompt;
  return chat_template.Render(vars, cancelled);
}

std::string ApplyChatTemplateJson(const ChatTemplate& chat_template, const nlohmann::json& messages,
                                  bool add_generation_prompt, const nlohmann::json& extra,
                                  const std::function<bool()>& cancelled) {
  nlohmann::json vars = extra.is_object() ? extra : nlohmann::json::object();
  vars["messages"] = messages;
  vars["add_generation_prompt"] = add_generation_prompt;
  return chat_template.Render(vars, cancelled);
}

}  // namespace moex
