// The pre-tokenizer regexes of the byte-level BPE families, by llama.cpp's
// "tokenizer.ggml.pre" name, for GGUF files (which do not carry the regexes themselves). Each
// list is what the family's own tokenizer.json applies as a Sequence of Isolated splits.
#include "core/error.h"
#include "text/tokenizer.h"

namespace moex {
namespace {

constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

constexpr const char* kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// GLM-4 / GLM-4.5 ("glm4", older "chatglm-bpe"): Qwen2's splits with digits in runs of up to
// three (the cl100k-style split of GLM's tiktoken-derived tokenizer), as llama.cpp's CHATGLM4.
constexpr const char* kGlm4 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Qwen3.5: Qwen2's splits with combining marks (\p{M}) counted as letters, so a base letter
// and its marks stay one piece.
constexpr const char* kQwen35 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?"
    "[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// o200k (GPT-4o, gpt-oss; llama.cpp "gpt-4o"): letter runs split at case changes
// (upper-then-lower, or all upper) with an optional contraction, numbers in threes, and
// punctuation runs that keep a trailing newline or slash. As gpt-oss's tokenizer.json has it.
constexpr const char* kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// deepseek-ai/deepseek-llm: newlines, Latin/Greek/Cyrillic/... letter runs, ASCII and CJK
// punctuation, trailing whitespace, CJK runs, then single digits (HF Digits).
// Written with escapes: the class names compatibility characters (U+1F7D, U+2126, U+212A...)
// that editors and tools may silently NFC-normalize into other characters.
constexpr const char* kDeepSeekLlmLetters =
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-"
    "\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}"
    "\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-"
    "\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-"
    "\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}"
    "\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-"
    "\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}"
    "-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-"
    "\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-"
    "\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-"
    "\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-"
    "\\x{1E943}]+";

}  // namespace

std::vector<std::string> PreTokenizerPatterns(const std::string& name) {
  if (name.empty() || name == "default" || name == "gpt2" || name == "gpt-2" || name == "olmo" ||
      name == "gpt-neox") {
    return {kGpt2};
  }
  if (name == "qwen2") return {kQwen2};
  if (name == "qwen35") return {kQwen35};
  if (name == "gpt-4o" || name == "llama4") return {kGpt4o};  // llama.cpp: Llama 4 is o200k's.
  if (name == "glm4" || name == "chatglm-bpe") return {kGlm4};
  if (name == "deepseek-llm") {
    return {"[\\r\\n]", kDeepSeekLlmLetters,        "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
            "\\s+$",    "[一-龥ࠀ-一가-퟿]+", "\\p{N}"};
  }
  if (name == "deepseek-v3") {
    return {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
            "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
  }
  Fail("GGUF pre-tokenizer '", name,
       "' is not supported (known: gpt2/default, olmo, gpt-neox, qwen2, qwen35, gpt-4o, llama4, "
       "deepseek-llm, deepseek-v3, glm4)");
}

}  // namespace moex
