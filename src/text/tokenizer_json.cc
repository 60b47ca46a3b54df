// Reads HF tokenizers' tokenizer.json (with tokenizer_config.json) into a TokenizerSpec. Only
// the components the supported families use are accepted; anything else is a clear error
// rather than a silently different tokenization.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "text/tokenizer.h"

namespace moex {
namespace {

using nlohmann::json;

// GPT-2's pattern, used by HF's ByteLevel pre-tokenizer when use_regex is set.
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr const char* kSpaceMark = "\xE2\x96\x81";

struct Walk {
  TokenizerSpec* spec;
  const std::string& source;
  bool byte_level = false;
  bool sentencepiece = false;
};

std::string QuoteRegex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void ReadNormalizer(const json& n, Walk* w) {
  if (n.is_null()) return;
  const std::string type = n.value("type", "");
  if (type == "Sequence") {
    for (const json& child : n.at("normalizers")) ReadNormalizer(child, w);
  } else if (type == "NFC") {
    w->spec->nfc = true;
  } else if (type == "Prepend" && n.value("prepend", "") == kSpaceMark) {
    w->spec->space_prefix = SpacePrefix::kEverySpan;  // normalizers see each span
    w->sentencepiece = true;
  } else if (type == "Replace" && n.contains("pattern") && n["pattern"].contains("String") &&
             n["pattern"]["String"] == " " && n.value("content", "") == kSpaceMark) {
    w->sentencepiece = true;
  } else {
    Fail("tokenizer ", w->source, ": unsupported normalizer ", n.dump());
  }
}

void ReadPreTokenizer(const json& p, Walk* w) {
  if (p.is_null()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence") {
    for (const json& child : p.at("pretokenizers")) ReadPreTokenizer(child, w);
  } else if (type == "ByteLevel") {
    w->byte_level = true;
    if (p.value("add_prefix_space", false)) w->spec->add_prefix_space = true;
    if (p.value("use_regex", true)) w->spec->split_patterns.push_back(kGpt2Pattern);
  } else if (type == "Split") {
    const std::string behavior = p.value("behavior", "");
    Check(behavior == "Isolated" && !p.value("invert", false), "tokenizer ", w->source,
          ": unsupported Split pre-tokenizer ", p.dump());
    const json& pattern = p.at("pattern");
    if (pattern.contains("Regex")) {
      w->spec->split_patterns.push_back(pattern["Regex"].get<std::string>());
    } else {
      w->spec->split_patterns.push_back(QuoteRegex(pattern.at("String").get<std::string>()));
    }
  } else if (type == "Digits") {
    w->spec->split_patterns.push_back(p.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else if (type == "Metaspace") {
    Check(p.value("replacement", kSpaceMark) == std::string(kSpaceMark), "tokenizer ", w->source,
          ": unsupported Metaspace replacement");
    w->sentencepiece = true;
    std::string scheme = p.value("prepend_scheme", "");
    if (scheme.empty()) scheme = p.value("add_prefix_space", true) ? "always" : "never";
    w->spec->space_prefix = scheme == "first"   ? SpacePrefix::kFirst
                            : scheme == "never" ? SpacePrefix::kNever
                                                : SpacePrefix::kEverySpan;
    w->spec->split_on_space_mark = p.value("split", true);
  } else {
    Fail("tokenizer ", w->source, ": unsupported pre-tokenizer ", p.dump());
  }
}

// The leading-space rule of SentencePiece-style decoders (Strip after Fuse, or Metaspace).
bool DecoderStripsLeadingSpace(const json& d) {
  if (d.is_null()) return false;
  const std::string type = d.value("type", "");
  if (type == "Sequence") {
    for (const json& child : d.at("decoders")) {
      if (DecoderStripsLeadingSpace(child)) return true;
    }
    return false;
  }
  if (type == "Strip") {
    const auto start = d.find("start");
    // A float here (1e300, say) must not be converted to an integer: that is undefined.
    return start != d.end() && start->is_number() && start->get<double>() > 0;
  }
  if (type == "Metaspace") return d.value("prepend_scheme", "always") != "never";
  return false;
}

// A vocabulary or added-token id: an integer in 0..2^24 (a float or a huge value, which a
// conversion would turn into undefined behaviour or a wrapped id, is an error).
int64_t TokenIdOf(const json& id, const std::string& source, const std::string& piece) {
  const bool small = id.is_number_integer() && !(id.is_number_unsigned() && id.get<uint64_t>() >= (1u << 24));
  const int64_t i = small ? id.get<int64_t>() : -1;
  Check(i >= 0 && i < (1 << 24), "tokenizer ", source, ": bad id ", id.dump(), " for ", piece);
  return i;
}

// A token named in tokenizer_config.json: a string, an AddedToken object, or null.
std::string ConfigTokenContent(const json& v, const char* key, const std::string& source) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  const auto content = v.is_object() ? v.find("content") : v.end();
  Check(v.is_object() && content != v.end() && content->is_string(), "tokenizer_config.json for ",
        source, ": ", key, " must be a string, an object with a string 'content', or null; got ",
        v.type_name());
  return content->get<std::string>();
}

// Applies a parsed tokenizer_config.json: BOS/EOS, add_bos_token, chat_template.
void ApplyConfigObject(const json& config, TokenizerSpec* spec_ptr) {
  TokenizerSpec& spec = *spec_ptr;
  auto find_id = [&](const std::string& content) -> int32_t {
    if (content.empty()) return -1;
    for (const AddedToken& t : spec.added_tokens) {
      if (t.content == content) return t.id;
    }
    for (size_t i = 0; i < spec.vocab.size(); ++i) {
      if (spec.vocab[i] == content) return static_cast<int32_t>(i);
    }
    return -1;
  };
  if (config.contains("bos_token")) {
    const int32_t id = find_id(ConfigTokenContent(config["bos_token"], "bos_token", spec.source));
    spec.bos_id = id;
    if (id < 0) spec.add_bos = false;
  }
  if (config.contains("add_bos_token") && !config["add_bos_token"].is_null()) {
    Check(config["add_bos_token"].is_boolean(), "tokenizer_config.json for ", spec.source,
          ": add_bos_token must be true or false, got ", config["add_bos_token"].dump());
    spec.add_bos = config["add_bos_token"].get<bool>() && spec.bos_id >= 0;
  }
  if (config.contains("eos_token")) {
    const int32_t id = find_id(ConfigTokenContent(config["eos_token"], "eos_token", spec.source));
    if (id >= 0) {
      std::erase(spec.eos_ids, id);
      spec.eos_ids.insert(spec.eos_ids.begin(), id);
    }
  }
  if (config.contains("chat_template")) {
    const json& t = config["chat_template"];
    const auto wrong = [&](const char* what) {
      Fail("tokenizer_config.json for ", spec.source,
           ": chat_template must be a string or a list of {\"name\", \"template\"} objects (",
           what, ")");
    };
    if (t.is_string()) {
      spec.chat_template = t.get<std::string>();
    } else if (t.is_array()) {
      // Named templates: take "default".
      for (const json& item : t) {
        if (!item.is_object()) wrong("an entry is not an object");
        const auto name = item.find("name");
        const auto text = item.find("template");
        if (name == item.end() || !name->is_string() || text == item.end() || !text->is_string())
          wrong("an entry lacks a string name or template");
        if (*name == "default") spec.chat_template = text->get<std::string>();
      }
    } else if (!t.is_null()) {
      wrong((std::string("got ") + t.type_name()).c_str());
    }
  }
}

}  // namespace

void ApplyTokenizerConfig(std::string_view config_json, TokenizerSpec* spec) {
  if (config_json.empty()) return;
  json config;
  try {
    config = json::parse(config_json);
  } catch (const json::exception& e) {
    Fail("tokenizer_config.json for ", spec->source, " is not valid JSON: ", e.what());
  }
  Check(config.is_object(), "tokenizer_config.json for ", spec->source, " is not an object");
  ApplyConfigObject(config, spec);
}

TokenizerSpec ParseTokenizerJson(std::string_view tokenizer_json, std::string_view config_json,
                                 const std::string& source) {
  json j;
  try {
    j = json::parse(tokenizer_json);
  } catch (const json::exception& e) {
    Fail("tokenizer ", source, " is not valid JSON: ", e.what());
  }

  TokenizerSpec spec;
  spec.source = source;
  try {
    const json& model = j.at("model");
    const std::string model_type = model.value("type", "BPE");
    Check(model_type == "BPE", "tokenizer ", source, ": model type ", model_type,
          " is not supported (only BPE)");
    for (const auto& [piece, id] : model.at("vocab").items()) {
      const int64_t i = TokenIdOf(id, source, piece);
      if (static_cast<size_t>(i) >= spec.vocab.size()) spec.vocab.resize(i + 1);
      spec.vocab[i] = piece;
    }
    for (const json& m : model.at("merges")) {
      if (m.is_array()) {
        spec.merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
      } else {
        const std::string line = m.get<std::string>();
        const size_t space = line.find(' ');
        Check(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
              "tokenizer ", source, ": malformed merge '", line, "'");
        spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
      }
    }
    spec.byte_fallback = model.value("byte_fallback", false);
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const std::string unk = model["unk_token"];
      for (size_t i = 0; i < spec.vocab.size(); ++i) {
        if (spec.vocab[i] == unk) spec.unk_id = static_cast<int32_t>(i);
      }
    }
    if (j.contains("added_tokens")) {
      for (const json& a : j["added_tokens"]) {
        AddedToken t;
        t.content = a.at("content").get<std::string>();
        t.id = static_cast<int32_t>(TokenIdOf(a.at("id"), source, t.content));
        t.special = a.value("special", false);
        t.lstrip = a.value("lstrip", false);
        t.rstrip = a.value("rstrip", false);
        t.normalized = a.value("normalized", !t.special);
        t.single_word = a.value("single_word", false);
        spec.added_tokens.push_back(std::move(t));
      }
    }

    Walk w{&spec, source};
    spec.space_prefix = SpacePrefix::kNever;
    ReadNormalizer(j.value("normalizer", json()), &w);
    ReadPreTokenizer(j.value("pre_tokenizer", json()), &w);
    const json decoder = j.value("decoder", json());
    if (!w.byte_level && decoder.is_object() && decoder.value("type", "") == "ByteLevel") {
      w.byte_level = true;
    }
    Check(w.byte_level != w.sentencepiece, "tokenizer ", source,
          ": cannot tell byte-level BPE from SentencePiece BPE (pre_tokenizer ",
          j.value("pre_tokenizer", json()).dump().substr(0, 200), ")");
    if (w.byte_level) {
      spec.kind = TokenizerKind::kByteLevelBpe;
    } else {
      spec.kind = TokenizerKind::kSentencePieceBpe;
      Check(!spec.nfc, "tokenizer ", source, ": NFC with SentencePiece is not supported");
      spec.strip_leading_space_on_decode = DecoderStripsLeadingSpace(decoder);
    }

    // BOS from the post-processor template ("<s> $A"), then tokenizer_config.json.
    const json post = j.value("post_processor", json());
    if (post.is_object() && post.value("type", "") == "TemplateProcessing" &&
        post.contains("single")) {
      for (const json& item : post["single"]) {
        if (item.contains("Sequence")) break;
        if (item.contains("SpecialToken")) {
          const std::string name = item["SpecialToken"].at("id");
          for (const AddedToken& t : spec.added_tokens) {
            if (t.content == name) spec.bos_id = t.id;
          }
          spec.add_bos = spec.bos_id >= 0;
        }
      }
    }
  } catch (const json::exception& e) {
    Fail("tokenizer ", source, ": ", e.what());
  }

  ApplyTokenizerConfig(config_json, &spec);
  if (spec.eos_ids.empty()) {
    // No config: the end-of-text marker of the known families.
    for (const char* name :
         {"<|endoftext|>", "</s>", "<|im_end|>", "<｜end▁of▁sentence｜>", "<|end_of_text|>"}) {
      for (const AddedToken& t : spec.added_tokens) {
        if (t.content == name && spec.eos_ids.empty()) spec.eos_ids.push_back(t.id);
      }
    }
  }
  return spec;
}

}  // namespace moex
