// GGUF-embedded vocabularies: the tokenizer.ggml.* metadata of a GGUF file into a
// TokenizerSpec, so a GGUF model tokenizes on its own. "llama" vocabularies are SentencePiece
// BPE (scores, byte pieces); "gpt2" ones are byte-level BPE whose pre-tokenizer is named by
// tokenizer.ggml.pre.
#include <algorithm>

#include "core/error.h"
#include "io/gguf_file.h"
#include "text/tokenizer.h"

namespace moex {

TokenizerSpec LoadGgufTokenizerSpec(const std::string& path) {
  const GgufFile file(path);
  TokenizerSpec spec;
  spec.source = path;
  const std::string model = file.GetString("tokenizer.ggml.model");
  spec.vocab = file.GetStringArray("tokenizer.ggml.tokens");
  const int32_t n = static_cast<int32_t>(spec.vocab.size());
  std::vector<int64_t> types;
  if (file.Find("tokenizer.ggml.token_type")) {
    types = file.GetIntArray("tokenizer.ggml.token_type");
    Check(types.size() == spec.vocab.size(), path, ": ", types.size(), " token types for ", n,
          " tokens");
  }

  if (model == "llama") {
    spec.kind = TokenizerKind::kSentencePieceBpe;
    const std::vector<float> scores = file.GetFloatArray("tokenizer.ggml.scores");
    Check(scores.size() == spec.vocab.size(), path, ": ", scores.size(), " scores for ", n,
          " tokens");
    spec.scores = scores;
    const bool prefix = file.GetBool("tokenizer.ggml.add_space_prefix", true);
    spec.space_prefix = prefix ? SpacePrefix::kEverySpan : SpacePrefix::kNever;
    spec.strip_leading_space_on_decode = prefix;
    spec.remove_extra_whitespaces = file.GetBool("tokenizer.ggml.remove_extra_whitespaces", false);
  } else if (model == "gpt2") {
    spec.kind = TokenizerKind::kByteLevelBpe;
    for (const std::string& m : file.GetStringArray("tokenizer.ggml.merges")) {
      const size_t space = m.find(' ');
      Check(space != std::string::npos && m.find(' ', space + 1) == std::string::npos, path,
            ": malformed merge '", m, "'");
      spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
    const std::string pre = file.GetString("tokenizer.ggml.pre", "default");
    spec.split_patterns = PreTokenizerPatterns(pre);
    // GGUF does not record the normalizer: the GPT-2/NeoX/OLMo and Qwen2 tokenizer.json files
    // apply NFC, the DeepSeek, Qwen3.5, o200k (gpt-oss) and Llama 4 ones none (llama.cpp's qwen35
    // vectors keep a decomposed "e" + U+0301 as two tokens), nor GLM's (converted from
    // tiktoken, which normalizes nothing; llama.cpp normalizes nothing either).
    spec.nfc = pre.rfind("deepseek", 0) != 0 && pre != "qwen35" && pre != "gpt-4o" &&
               pre != "llama4" && pre != "glm4" && pre != "chatglm-bpe";
  } else {
    Fail(path, ": GGUF tokenizer model '", model, "' is not supported (only llama and gpt2)");
  }

  for (int32_t id = 0; id < n && static_cast<size_t>(id) < types.size(); ++id) {
    const auto t = static_cast<PieceType>(types[id]);
    Check(types[id] >= 1 && types[id] <= 6, path, ": token ", id, " has unknown type ", types[id]);
    spec.piece_types.push_back(t);
    if (t == PieceType::kByte) spec.byte_fallback = true;
    // Control and user-defined tokens are matched whole in the text, as HF's added tokens.
    if (t == PieceType::kControl || t == PieceType::kUserDefined ||
        (t == PieceType::kUnknown && spec.kind == TokenizerKind::kSentencePieceBpe)) {
      AddedToken a;
      a.content = spec.vocab[id];
      a.id = id;
      a.special = t != PieceType::kUserDefined;
      spec.added_tokens.push_back(std::move(a));
    }
  }
  if (spec.kind == TokenizerKind::kByteLevelBpe) spec.piece_types.clear();

  auto id_or_none = [&](const char* key) -> int32_t {
    const int64_t v = file.GetInt(key, -1);
    return v >= 0 && v < n ? static_cast<int32_t>(v) : -1;
  };
  spec.unk_id = id_or_none("tokenizer.ggml.unknown_token_id");
  spec.bos_id = id_or_none("tokenizer.ggml.bos_token_id");
  spec.add_bos = file.GetBool("tokenizer.ggml.add_bos_token", model == "llama") && spec.bos_id >= 0;
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    const int32_t id = id_or_none(key);
    if (id >= 0 && std::find(spec.eos_ids.begin(), spec.eos_ids.end(), id) == spec.eos_ids.end()) {
      spec.eos_ids.push_back(id);
    }
  }
  spec.chat_template = file.GetString("tokenizer.chat_template", "");
  return spec;
}

}  // namespace moex
