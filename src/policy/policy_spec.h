// Policy specs: `name[:key=value,...]`, composed with `+` (`nextgate+lfu`,
// `moepic:theta=0.5,window=64`, `oracle+belady`). One grammar for every command:
//   spec  := part ('+' part)*
//   part  := name [':' param (',' param)*]
//   param := key '=' value
// Names and keys are [a-z0-9_-] starting with a letter; a value is any text without ',',
// '+' only inside a number's exponent (1e+3). Lists of specs (`moex sim --policy a,b`) are
// comma-separated; a comma-separated item holding '=' but no ':' continues the previous
// spec's parameters, so `lru,moepic:theta=0.5,window=64` is two specs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace moex::policy {

struct PolicyPartSpec {
  std::string name;
  std::vector<std::pair<std::string, std::string>> params;  // In the order given.
};

struct PolicySpec {
  std::vector<PolicyPartSpec> parts;
  std::string text;  // As given.
};

// Throws Error saying what is malformed (not whether names or keys exist: the registry
// checks those).
PolicySpec ParsePolicySpec(const std::string& text);
// Splits a comma-separated list of specs as described above.
std::vector<std::string> SplitPolicyList(const std::string& text);

}  // namespace moex::policy
