#include "text/byte_tokenizer_json.h"

#include <map>
#include <string>

#include "core/error.h"
#include "text/tokenizer_utf8.h"

namespace moex {

namespace {

// GPT-2's byte-to-character map (as HF's ByteLevel pre-tokenizer uses): printable Latin-1
// bytes stand for themselves, the others for U+0100 onwards.
std::string ByteLevelPiece(int byte) {
  static const auto* table = [] {
    auto* t = new std::string[256];
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      AppendUtf8(printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++), &t[b]);
    }
    return t;
  }();
  return table[byte];
}

constexpr const char* kBosName = "<|startoftext|>";
constexpr const char* kEosName = "<|endoftext|>";

// A plain role-tagged template (Tulu's layout), enough to exercise --chat.
constexpr const char* kChatTemplate =
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}";

}  // namespace

ByteTokenizerFiles ByteLevelTokenizerFor(int vocab_size, int bos_id,
                                         const std::vector<int>& eos_ids) {
  std::map<int, std::string> specials;
  for (int id : eos_ids)
    specials[id] = specials.empty() ? kEosName : "<|eos_" + std::to_string(id) + "|>";
  if (bos_id >= 0 && !specials.count(bos_id)) specials[bos_id] = kBosName;
  for (const auto& [id, name] : specials)
    Check(id >= 0 && id < vocab_size, "byte tokenizer: special token id ", id,
          " is outside the vocabulary of ", vocab_size);
  Check(vocab_size >= 256 + static_cast<int>(specials.size()), "byte tokenizer: a vocabulary of ",
        vocab_size, " cannot hold 256 bytes and ", specials.size(), " special tokens");

  nlohmann::json vocab = nlohmann::json::object();
  nlohmann::json added = nlohmann::json::array();
  int next_byte = 0;
  for (int id = 0; id < vocab_size; ++id) {
    std::string piece;
    if (auto it = specials.find(id); it != specials.end()) {
      piece = it->second;
      added.push_back({{"id", id},
                       {"content", piece},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    } else if (next_byte < 256) {
      piece = ByteLevelPiece(next_byte++);
    } else {
      piece = "<|reserved_" + std::to_string(id) + "|>";
    }
    vocab[piece] = id;
  }

  ByteTokenizerFiles files;
  files.tokenizer = {{"version", "1.0"},
                     {"added_tokens", added},
                     {"normalizer", nullptr},
                     {"pre_tokenizer",
                      {{"type", "ByteLevel"},
                       {"add_prefix_space", false},
                       {"trim_offsets", true},
                       {"use_regex", true}}},
                     {"post_processor", nullptr},
                     {"decoder",
                      {{"type", "ByteLevel"},
                       {"add_prefix_space", true},
                       {"trim_offsets", true},
                       {"use_regex", true}}},
                     {"model",
                      {{"type", "BPE"},
                       {"dropout", nullptr},
                       {"unk_token", nullptr},
                       {"continuing_subword_prefix", nullptr},
                       {"end_of_word_suffix", nullptr},
                       {"fuse_unk", false},
                       {"byte_fallback", false},
                       {"vocab", vocab},
                       {"merges", nlohmann::json::array()}}}};
  files.config = {{"add_bos_token", bos_id >= 0},
                  {"add_eos_token", false},
                  {"bos_token", bos_id >= 0 ? nlohmann::json(specials[bos_id]) : nlohmann::json()},
                  {"eos_token", eos_ids.empty() ? nlohmann::json() : nlohmann::json(kEosName)},
                  {"model_max_length", 1 << 20},
                  {"chat_template", kChatTemplate},
                  {"tokenizer_class", "PreTrainedTokenizerFast"}};
  return files;
}

}  // namespace moex
