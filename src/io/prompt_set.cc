#include "io/prompt_set.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/input_file.h"

namespace moex {

namespace {

std::string ReadAll(const std::string& path) {
  try {
    return ReadInputFile(path, kMaxDataFileBytes);
  } catch (const Error& e) {
    Fail("prompt file: ", e.what());
  }
}

std::string DetectFormat(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "text";
  if (text[first] == '[') return "sharegpt";
  if (text[first] == '{') {
    const size_t eol = text.find('\n', first);
    try {
      const nlohmann::json j = nlohmann::json::parse(text.substr(first, eol - first));
      if (j.contains("turns")) return "mtbench";
      if (j.contains("question")) return "gsm8k";
    } catch (const nlohmann::json::exception&) {
    }
  }
  return "text";
}

std::vector<PromptEntry> ShareGpt(const std::string& path, const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail(path, ": not valid JSON: ", e.what());
  }
  Check(j.is_array(), path, ": a ShareGPT file is a JSON array of conversations");
  std::vector<PromptEntry> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& c = j[i];
    Check(c.is_object() && c.contains("conversations") && c["conversations"].is_array(), path,
          ": entry ", i, " has no 'conversations' array");
    for (const nlohmann::json& turn : c["conversations"]) {
      if (!turn.is_object() || turn.value("from", "") != "human") continue;
      Check(turn.contains("value") && turn["value"].is_string(), path, ": entry ", i,
            " has a human turn without a string 'value'");
      out.push_back(
          {c.value("id", std::to_string(i)), turn["value"].get<std::string>(), "sharegpt"});
      break;
    }
  }
  return out;
}

std::vector<PromptEntry> JsonLines(const std::string& path, const std::string& text,
                                   const std::string& format) {
  std::vector<PromptEntry> out;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      Fail(path, ":", n, ": not valid JSON: ", e.what());
    }
    Check(j.is_object(), path, ":", n, ": expected a JSON object");
    if (format == "mtbench") {
      Check(j.contains("turns") && j["turns"].is_array() && !j["turns"].empty() &&
                j["turns"][0].is_string(),
            path, ":", n, ": MT-Bench lines need a non-empty 'turns' array of strings");
      const std::string id =
          j.contains("question_id") ? j["question_id"].dump() : std::to_string(n);
      out.push_back({id, j["turns"][0].get<std::string>(), j.value("category", "mtbench")});
    } else {
      Check(j.contains("question") && j["question"].is_string(), path, ":", n,
            ": GSM8K lines need a string 'question'");
      out.push_back({std::to_string(n), j["question"].get<std::string>(), "gsm8k"});
    }
  }
  return out;
}

std::vector<PromptEntry> TextLines(const std::string& text) {
  std::vector<PromptEntry> out;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    out.push_back({std::to_string(n), line, "text"});
  }
  return out;
}

}  // namespace

std::vector<PromptEntry> LoadPromptSet(const std::string& path, const std::string& format) {
  const std::string text = ReadAll(path);
  const std::string f = format == "auto" ? DetectFormat(text) : format;
  std::vector<PromptEntry> out;
  if (f == "sharegpt")
    out = ShareGpt(path, text);
  else if (f == "mtbench" || f == "gsm8k")
    out = JsonLines(path, text, f);
  else if (f == "text")
    out = TextLines(text);
  else
    Fail("unknown prompt format '", format, "' (valid: auto, sharegpt, mtbench, gsm8k, text)");
  Check(!out.empty(), path, ": no prompts found (format ", f, ")");
  return out;
}

}  // namespace moex
