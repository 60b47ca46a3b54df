// `moex pack`: builds the expert store (neuron-major experts, checksummed, O_DIRECT-aligned;
// docs/expert-store.md). Offloading commands also pack on first use.
#include <iostream>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/progress.h"
#include "model/expert_store_packer.h"
#include "model/model_identity.h"
#include "model/store_location.h"

namespace moex::cli {

namespace {

struct PackCliOptions {
  std::string model;
  std::string out;
  bool verify = false;
};

int RunPack(const PackCliOptions& o) {
  const std::string path = o.model.empty() ? DefaultModelPath() : o.model;
  const Stopwatch watch;
  auto model = LoadModel(path);
  PackOptions options;
  options.source_id = ModelContentId(path);
  options.out_path = o.out.empty() ? DefaultExpertStorePath(path, options.source_id) : o.out;
  options.source_path = path;
  options.path_option = "--out";
  // --verify checks a store that is already current for this checkpoint as it is; anything
  // else (none yet, stale, bad header or table) is packed first, as plain `pack` always does.
  const bool current =
      o.verify && WhyExpertStoreUnusable(*model->weights, model->config, options).empty();
  if (!current) PackExpertStore(*model->weights, model->config, options);
  nlohmann::json out = {{"store", options.out_path},
                        {"packed", !current},
                        {"expert_bytes", model->TotalExpertBytes()},
                        {"seconds", watch.ElapsedMs() / 1000.0}};
  if (o.verify) {
    // Reads the store back and checks every block's checksum (a full scan).
    const Stopwatch verify_watch;
    const ExpertStore store = ExpertStore::Open(options.out_path);
    Progress progress("verifying " + options.out_path,
                      store.num_experts() * static_cast<int64_t>(store.moe_layers().size()));
    try {
      store.VerifyData(
          [&](uint64_t done, uint64_t) { progress.Update(static_cast<int64_t>(done)); });
    } catch (const Error& e) {
      // The next offloading run repacks it rather than failing on this block mid-generation.
      MarkExpertStoreCorrupt(options.out_path, e.what());
      Fail(e.what(), "; the next run that offloads (or `moex pack` without --verify) repacks it");
    }
    out["verified"] = true;
    out["verify_seconds"] = verify_watch.ElapsedMs() / 1000.0;
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

Runner AddPackCommand(CLI::App& app) {
  auto o = std::make_shared<PackCliOptions>();
  CLI::App* cmd = app.add_subcommand("pack", "build the expert store of a model");
  cmd->add_option("--model", o->model, "HF checkpoint directory or .gguf (default: demo)");
  cmd->add_option("--out", o->out, "store file (default: in the cache directory, named after the model: `moex store list`)");
  cmd->add_flag("--verify", o->verify,
                "check every block's checksum: of the store as it is when it is current for "
                "the model (no repacking), else of the freshly packed one");
  return [o] { return RunPack(*o); };
}

}  // namespace moex::cli
