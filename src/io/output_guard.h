// What a command may write over (issue 41): an output never replaces a file the same command
// reads, nor anything inside a model directory it reads, even with --force; an existing file
// of another kind is replaced only with --force; an artefact of the same kind (a trace over a
// trace, a sim page over a sim page) is replaced as before. Checked before any work starts,
// so a refused run costs nothing and loses nothing. The error names the path and the flag.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace moex {

struct OutputRules {
  std::string flag;                // The option that names the output, for messages ("--out").
  std::vector<std::string> reads;  // Files and directories the command reads (empty: skipped).
  bool force = false;              // --force: another kind of existing file may be replaced.
  // Whether an existing file is an artefact this output may replace without --force.
  std::function<bool(const std::string& existing)> same_kind = nullptr;
};

void CheckOutputPath(const std::string& path, const OutputRules& rules);

// Whether the file starts with `magic` (the artefact test of binary formats).
bool FileStartsWith(const std::string& path, const std::string& magic);

}  // namespace moex
