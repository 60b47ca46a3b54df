// Prompt collections for trace recording and benchmarks: ShareGPT (JSON array of
// conversations), MT-Bench (JSONL with "turns"), GSM8K (JSONL with "question"), or plain
// text (one prompt per non-empty line). Each prompt is the first user turn.
#pragma once

#include <string>
#include <vector>

namespace moex {

struct PromptEntry {
  std::string id;
  std::string text;
  std::string category;  // MT-Bench's category, or the format name.
};

// `format`: "auto" (by content), "sharegpt", "mtbench", "gsm8k" or "text". Throws Error
// naming the file and line for malformed input, and when no prompt is found.
std::vector<PromptEntry> LoadPromptSet(const std::string& path, const std::string& format = "auto");

}  // namespace moex
