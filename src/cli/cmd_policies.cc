// `moex policies`: every registered offloading policy with its role, parameters, defaults
// and ranges (one JSON array with --json), straight from the registry.
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "policy/registry.h"

namespace moex::cli {

Runner AddPoliciesCommand(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "policies", "list the offloading policies, their parameters and defaults");
  cmd->add_flag("--json", *json, "print JSON instead of text");
  return [json] {
    if (*json)
      std::cout << policy::PoliciesJson().dump(2) << "\n";
    else
      std::cout << policy::PoliciesText();
    return 0;
  };
}

}  // namespace moex::cli
