// JSON in and out for the API dialects translated onto the chat scheduler (Anthropic's
// Messages, OpenAI's Responses): a body parsed in key order (a tool's schema keeps its
// property order) with nesting bounded, and output that survives a client's invalid UTF-8.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace moex::serve {

// The body as an object; throws ApiError (400) for invalid JSON, a non-object, or nesting
// deeper than 64 levels (checked before the parser recurses).
nlohmann::ordered_json ParseDialectBody(std::string_view body);

// Throws ApiError 400 "PARAM: MESSAGE" naming `param` (a dialect's field, e.g.
// "messages.0.content.1.type").
[[noreturn]] void BadField(const std::string& param, const std::string& message);

// obj[key] when it is a string; `fallback` when obj is no object, or key is missing or holds
// anything else (the caller's checks then refuse the value by name).
std::string StringField(const nlohmann::ordered_json& obj, const char* key,
                        const std::string& fallback = "");
// obj[key] when it is a boolean, else `fallback`.
bool BoolField(const nlohmann::ordered_json& obj, const char* key, bool fallback = false);

// Compact JSON text; invalid UTF-8 in strings is replaced rather than thrown on.
std::string DialectDump(const nlohmann::json& j);

}  // namespace moex::serve
