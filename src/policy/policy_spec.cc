#include "policy/policy_spec.h"

#include <cctype>

#include "core/error.h"

namespace moex::policy {

namespace {

bool IsNameChar(char c) {
  return std::islower(static_cast<unsigned char>(c)) ||
         std::isdigit(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

void CheckName(const std::string& name, const char* what, const std::string& spec) {
  bool ok = !name.empty() && std::islower(static_cast<unsigned char>(name[0]));
  for (char c : name) ok = ok && IsNameChar(c);
  Check(ok, "policy spec '", spec, "': ", what, " '", name,
        "' must be lower-case letters, digits, '_' or '-', starting with a letter");
}

// Splits on '+' except inside a number's exponent ("1e+3"): a '+' right after a digit and
// 'e'/'E' that is followed by a digit.
std::vector<std::string> SplitParts(const std::string& text) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool exponent = c == '+' && i >= 2 && (text[i - 1] == 'e' || text[i - 1] == 'E') &&
                          std::isdigit(static_cast<unsigned char>(text[i - 2])) &&
                          i + 1 < text.size() &&
                          std::isdigit(static_cast<unsigned char>(text[i + 1]));
    if (c == '+' && !exponent)
      parts.emplace_back();
    else
      parts.back() += c;
  }
  return parts;
}

}  // namespace

PolicySpec ParsePolicySpec(const std::string& text) {
  PolicySpec spec;
  spec.text = text;
  Check(!text.empty(), "empty policy spec");
  for (const std::string& part_text : SplitParts(text)) {
    Check(!part_text.empty(), "policy spec '", text, "' has an empty part (around '+')");
    PolicyPartSpec part;
    const size_t colon = part_text.find(':');
    part.name = part_text.substr(0, colon);
    CheckName(part.name, "policy name", text);
    if (colon != std::string::npos) {
      const std::string params = part_text.substr(colon + 1);
      Check(!params.empty(), "policy spec '", text, "': no parameters after ':' in '", part_text,
            "'");
      size_t at = 0;
      while (at <= params.size()) {
        size_t comma = params.find(',', at);
        if (comma == std::string::npos) comma = params.size();
        const std::string item = params.substr(at, comma - at);
        const size_t eq = item.find('=');
        Check(eq != std::string::npos, "policy spec '", text, "': parameter '", item,
              "' is not key=value");
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        CheckName(key, "parameter", text);
        Check(!value.empty(), "policy spec '", text, "': parameter '", key, "' has no value");
        for (const auto& [k, v] : part.params)
          Check(k != key, "policy spec '", text, "': parameter '", key, "' given twice");
        part.params.emplace_back(key, value);
        at = comma + 1;
      }
    }
    spec.parts.push_back(std::move(part));
  }
  return spec;
}

std::vector<std::string> SplitPolicyList(const std::string& text) {
  std::vector<std::string> specs;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(at, comma - at);
    const size_t eq = item.find('='), colon = item.find(':');
    // "window=64" after "moepic:theta=0.5" is the same spec's next parameter.
    const bool continues = eq != std::string::npos && (colon == std::string::npos || eq < colon);
    if (continues && !specs.empty() && specs.back().find(':') != std::string::npos)
      specs.back() += "," + item;
    else if (!item.empty())
      specs.push_back(item);
    at = comma + 1;
  }
  Check(!specs.empty(), "empty policy list");
  return specs;
}

}  // namespace moex::policy
