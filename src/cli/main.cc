// The `moex` command: dispatches to one subcommand; every error becomes one clear line on
// stderr and exit status 1 (2 for bad usage).
#include <iostream>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/usage_hints.h"
#include "core/error.h"
#include "kernels/cpu_requirements.h"

#ifndef MOEX_VERSION
#define MOEX_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  CLI::App app{"moex: serve Mixture-of-Experts models whose experts do not fit in memory"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("moex ") + MOEX_VERSION);
  // --help shows every option's default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  std::map<CLI::App*, moex::cli::Runner> runners;
  auto add = [&](moex::cli::Runner (*adder)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    moex::cli::Runner run = adder(app);
    runners[app.get_subcommands({})[before]] = std::move(run);
  };
  add(moex::cli::AddGenerateCommand);
  add(moex::cli::AddChatCommand);
  add(moex::cli::AddLogitsCommand);
  add(moex::cli::AddTokenizeCommand);
  add(moex::cli::AddBenchCommand);
  add(moex::cli::AddRandomModelCommand);
  add(moex::cli::AddPackCommand);
  add(moex::cli::AddTraceCommand);
  add(moex::cli::AddSimCommand);
  add(moex::cli::AddTuneCommand);
  add(moex::cli::AddPoliciesCommand);
  add(moex::cli::AddServeCommand);
  add(moex::cli::AddStoreCommand);
  // CLI11 would answer an unknown command with "A subcommand is required".
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* cmd : app.get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + cmd->get_name();
      known = known || cmd->get_name() == argv[1];
    }
    if (!known) {
      std::cerr << "moex: error: unknown command '" << argv[1] << "' (commands: " << names
                << "; `moex --help` describes them)\n";
      return 2;
    }
  }
  // The subcommand named by the leading words (`trace record`), for the messages below.
  const CLI::App* command = &app;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const CLI::App* sub = nullptr;
    for (const CLI::App* candidate : command->get_subcommands({}))
      if (candidate->get_name() == argv[i]) sub = candidate;
    if (sub == nullptr) break;
    command = sub;
  }
  if (const std::string message = moex::cli::LlamaCppFlagMessage(*command, argc, argv);
      command != &app && !message.empty()) {
    std::cerr << "moex: error: " << message << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError&) {
    // CLI11 lists the extras reversed and without a hint; name the first, in order.
    std::cerr << "moex: error: " << moex::cli::UnexpectedArgumentMessage(*command, argc, argv)
              << "\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    moex::kernels::CheckCpuRequirements();  // After parsing: --help and --version run anywhere.
    for (auto& [cmd, run] : runners)
      if (cmd->parsed()) return run();
  } catch (const moex::Error& e) {
    // One write: the lines of several processes (mpirun's ranks) on one stream stay whole.
    std::cerr << "moex: error: " + std::string(e.what()) + "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "moex: error: out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "moex: error: " + std::string(e.what()) + "\n";
    return 1;
  }
  return 2;
}
