// Each `moex` subcommand registers itself on the app and returns the callback to run it.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace moex::cli {

using Runner = std::function<int()>;

Runner AddGenerateCommand(CLI::App& app);
Runner AddChatCommand(CLI::App& app);
Runner AddLogitsCommand(CLI::App& app);
Runner AddTokenizeCommand(CLI::App& app);
Runner AddBenchCommand(CLI::App& app);
Runner AddRandomModelCommand(CLI::App& app);
Runner AddPackCommand(CLI::App& app);
Runner AddTraceCommand(CLI::App& app);
Runner AddSimCommand(CLI::App& app);
Runner AddTuneCommand(CLI::App& app);
Runner AddPoliciesCommand(CLI::App& app);
Runner AddServeCommand(CLI::App& app);
Runner AddStoreCommand(CLI::App& app);

}  // namespace moex::cli
