// The `moex` command: dispatches to one subcommand; every error becomes one clear line on
// stderr and exit status 1 (2 for bad usage).
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"moex: serve Mixture-of-Experts models whose experts do not fit in memory"};
  app.require_subcommand(1);
  std::map<CLI::App*, moex::cli::Runner> runners;
  auto add = [&](moex::cli::Runner (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    moex::cli::Runner run = adder(app);
    runners[app.get_subcommands({})[before]] = std::move(run);
  };
  add(moex::cli::AddGenerateCommand);
  add(moex::cli::AddLogitsCommand);
  add(moex::cli::AddTokenizeCommand);
  add(moex::cli::AddBenchCommand);
  add(moex::cli::AddRandomModelCommand);
  add(moex::cli::AddPackCommand);
  add(moex::cli::AddTraceCommand);
  add(moex::cli::AddSimCommand);
  add(moex::cli::AddPoliciesCommand);
  add(moex::cli::AddServeCommand);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [cmd, run] : runners)
      if (cmd->parsed()) return run();
  } catch (const moex::Error& e) {
    std::cerr << "moex: error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "moex: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "moex: error: " << e.what() << "\n";
    return 1;
  }
  return 2;
}
