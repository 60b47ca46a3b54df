#include "serve/dialect_json.h"

#include "serve/api_error.h"

namespace moex::serve {

nlohmann::ordered_json ParseDialectBody(std::string_view body) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if ((c == '[' || c == '{') && ++depth > 64) {
      throw ApiError(400, "the JSON body is nested more than 64 levels deep");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_discarded()) throw ApiError(400, "the body is not valid JSON");
  if (!j.is_object()) throw ApiError(400, "the body must be a JSON object");
  return j;
}

void BadField(const std::string& param, const std::string& message) {
  throw ApiError(400, param + ": " + message, param);
}

std::string StringField(const nlohmann::ordered_json& obj, const char* key,
                        const std::string& fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool BoolField(const nlohmann::ordered_json& obj, const char* key, bool fallback) {
  if (!obj.is_object()) return fallback;
  const auto it = obj.find(key);
  return it != obj.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

std::string DialectDump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace moex::serve
