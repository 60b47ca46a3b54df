// LoadTokenizer: finds the tokenizer files of a checkpoint and picks the loader.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/input_file.h"
#include "text/tokenizer.h"

namespace moex {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  return ReadInputFile(path.string(), kMaxTokenizerFileBytes);
}

bool Exists(const fs::path& path) { return RegularFileExists(path.string()); }

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// generation_config.json lists the ids that end generation (one id or a list).
void ApplyGenerationConfig(const fs::path& path, TokenizerSpec* spec) {
  if (!Exists(path)) return;
  const nlohmann::json g = nlohmann::json::parse(ReadFile(path), nullptr, false);
  if (!g.is_object() || !g.contains("eos_token_id")) return;
  auto add = [&](const nlohmann::json& v) {
    if (!v.is_number_integer()) return;
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) return;
    const int64_t wide = v.get<int64_t>();
    if (wide < 0 || wide > INT32_MAX) return;
    const auto id = static_cast<int32_t>(wide);
    size_t limit = spec->vocab.size();  // added tokens may lie past the model vocabulary
    for (const AddedToken& t : spec->added_tokens) limit = std::max(limit, size_t(t.id) + 1);
    if (id < 0 || static_cast<size_t>(id) >= limit) return;
    for (int32_t e : spec->eos_ids) {
      if (e == id) return;
    }
    spec->eos_ids.push_back(id);
  };
  const nlohmann::json& e = g["eos_token_id"];
  if (e.is_array()) {
    for (const auto& v : e) add(v);
  } else {
    add(e);
  }
}

}  // namespace

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& model_dir_or_file) {
  const fs::path path(model_dir_or_file);
  Check(fs::exists(path), "tokenizer: ", model_dir_or_file, " does not exist");
  if (fs::is_directory(path)) {
    const fs::path config = path / "tokenizer_config.json";
    const std::string config_text = Exists(config) ? ReadFile(config) : "";
    TokenizerSpec spec;
    if (Exists(path / "tokenizer.json")) {
      const fs::path file = path / "tokenizer.json";
      spec = ParseTokenizerJson(ReadFile(file), config_text, file.string());
    } else if (Exists(path / "tokenizer.model")) {
      const fs::path file = path / "tokenizer.model";
      spec = ParseSentencePieceModel(ReadFile(file), file.string());
      ApplyTokenizerConfig(config_text, &spec);
    } else {
      Fail("no tokenizer.json or tokenizer.model in ", model_dir_or_file);
    }
    // Checkpoints saved by transformers >= 4.47 keep the template in its own file.
    if (spec.chat_template.empty() && Exists(path / "chat_template.jinja"))
      spec.chat_template = ReadFile(path / "chat_template.jinja");
    ApplyGenerationConfig(path / "generation_config.json", &spec);
    return std::make_unique<Tokenizer>(std::move(spec));
  }
  const std::string name = path.filename().string();
  if (EndsWith(name, ".gguf")) {
    return std::make_unique<Tokenizer>(LoadGgufTokenizerSpec(path.string()));
  }
  if (EndsWith(name, ".json")) {
    // "x.tokenizer.json" pairs with "x.tokenizer_config.json", as "tokenizer.json" does with
    // "tokenizer_config.json".
    std::string config_text;
    if (EndsWith(name, "tokenizer.json")) {
      const fs::path config =
          path.parent_path() / (name.substr(0, name.size() - 5) + "_config.json");
      if (Exists(config)) config_text = ReadFile(config);
    }
    return std::make_unique<Tokenizer>(
        ParseTokenizerJson(ReadFile(path), config_text, path.string()));
  }
  if (EndsWith(name, ".model")) {
    return std::make_unique<Tokenizer>(ParseSentencePieceModel(ReadFile(path), path.string()));
  }
  Fail("tokenizer: cannot tell the format of ", model_dir_or_file,
       " (expected a directory, tokenizer.json, a SentencePiece .model or a .gguf)");
}

}  // namespace moex
