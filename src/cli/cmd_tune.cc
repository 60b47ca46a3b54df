// `moex tune`: searches the registered policies, a small grid of their parameters and
// prefetcher+evictor compositions in the simulator, learning on one split of the routing
// and judging on another, and ranks them by modelled TPOT beside lru and the bounds
// (docs/simulator.md, "Choosing a policy"). Nothing here names a policy but the references
// (lru, belady, oracle): a newly registered policy is searched as it is.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "cli/policy_setup.h"
#include "cli/sim_setup.h"
#include "core/budget.h"
#include "core/error.h"
#include "core/progress.h"
#include "io/input_file.h"
#include "io/output_file.h"
#include "io/output_guard.h"
#include "policy/policy_spec.h"
#include "policy/registry.h"
#include "sim/replay.h"
#include "tiers/host_tier.h"
#include "trace/trace_split.h"

namespace moex::cli {

namespace {

namespace fs = std::filesystem;

struct TuneOptions {
  std::string trace;  // Split by request into learn and judge parts.
  std::string learn;
  std::string judge;
  double fraction = 0.7;
  std::string budget = "25%";
  SimFlags sim;          // --hardware, --scale-to, --chunk-neurons, --seed, --policy-worker.
  std::string policies;  // Names the candidates may use; empty: every registered policy.
  int max_candidates = 60;
  std::string save_state;
  bool force = false;  // --force: --save-state may replace a file that is not a policy state.
  bool json = false;
};

// A private directory under $TMPDIR, removed with everything in it when the command ends
// (the split traces and the candidates' states).
class ScratchDir {
 public:
  ScratchDir() {
    std::string name = (fs::temp_directory_path() / "moex-tune-XXXXXX").string();
    Check(mkdtemp(name.data()) != nullptr, "cannot create a temporary directory under ",
          fs::temp_directory_path().string());
    path_ = name;
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Learning on routing of another shape would teach a policy the wrong experts.
void CheckSameShape(const trace::TraceReader& learn, const trace::TraceReader& judge) {
  const trace::TraceModel& a = learn.header().model;
  const trace::TraceModel& b = judge.header().model;
  auto same = [&](const char* what, int64_t x, int64_t y) {
    Check(x == y, "--learn ", learn.path(), " and --judge ", judge.path(),
          " come from models of different shapes: ", what, " ", x, " and ", y);
  };
  same("decoder layers", a.num_layers, b.num_layers);
  same("MoE layers", static_cast<int64_t>(a.moe_layers.size()),
       static_cast<int64_t>(b.moe_layers.size()));
  same("experts per layer", a.num_experts, b.num_experts);
  same("top-k", a.top_k, b.top_k);
  same("hidden size", a.hidden_size, b.hidden_size);
  same("expert neurons", a.expert_neurons, b.expert_neurons);
  Check(a.moe_layers == b.moe_layers, "--learn ", learn.path(), " and --judge ", judge.path(),
        " come from models whose MoE layers are at different indices");
}

// The policy a spec builds, named as MakePolicy names it (an evictor-less spec gets lru),
// so that "nextgate" and "nextgate+lru" are searched once.
std::string CanonicalSpec(const std::string& spec) {
  std::string text;
  const std::vector<policy::ResolvedPart> parts = policy::ResolvePolicySpec(spec);
  for (const policy::ResolvedPart& p : parts) {
    text += (text.empty() ? "" : "+") + p.info->name;
    if (const std::string nd = p.params.NonDefault(); !nd.empty()) text += ":" + nd;
  }
  if (!(parts.back().info->roles & policy::kEvicts)) text += "+lru";
  return text;
}

bool IsTrue(const std::string& v) {
  return v == "1" || v == "true" || v == "on";
}

std::string NumberText(const policy::ParamSpec& p, double v) {
  if (p.type == policy::ParamType::kInt) return std::to_string(std::llround(v));
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

// A few values of one parameter besides its default: the other bool, the other choices,
// half and double a positive number; a default of 0 or below usually means "automatic",
// so a narrow range is probed at its middle and three quarters, a wide one just above.
std::vector<std::string> GridValues(const policy::ParamSpec& p) {
  std::vector<std::string> values;
  switch (p.type) {
    case policy::ParamType::kBool:
      values.push_back(IsTrue(p.default_value) ? "0" : "1");
      break;
    case policy::ParamType::kString:
      for (const std::string& c : p.choices)
        if (c != p.default_value) values.push_back(c);
      break;
    case policy::ParamType::kInt:
    case policy::ParamType::kReal: {
      const double d = std::stod(p.default_value);
      const double span = p.max - p.min;
      std::vector<double> tries;
      if (d > 0)
        tries = {d / 2, d * 2};
      else if (std::isfinite(span) && span <= 2)
        tries = {p.min + span / 2, p.min + span * 3 / 4};
      else
        tries = {d + 1, d + 4};
      for (double t : tries) {
        t = std::clamp(t, p.min, p.max);
        if (p.type == policy::ParamType::kInt) t = std::round(t);
        const std::string text = NumberText(p, t);
        if (t != d && std::find(values.begin(), values.end(), text) == values.end())
          values.push_back(text);
      }
      break;
    }
  }
  return values;
}

// Parameters that are not settings of the policy: the simulator's charge for its CPU work
// (changing it changes the model, not the policy) and seeds (tuning one fits noise).
bool Tunable(const policy::ParamSpec& p) {
  return p.name != policy::WorkerGflops::kName && p.name != "seed";
}

struct Skip {
  std::string name;
  std::string reason;
};

struct Plan {
  std::vector<std::string> candidates;  // Best-first order of trying: defaults first.
  std::vector<Skip> skipped;
  int64_t beyond_cap = 0;  // Grid points --max-candidates left out.
};

// The candidates: lru, every eligible policy at its defaults, every prefetcher with every
// pure evictor, then one parameter at a time off its default, taken round-robin over the
// policies so that a cap leaves every policy some of its grid.
Plan PlanCandidates(const TuneOptions& o, const std::vector<const trace::TraceHeader*>& traces) {
  std::set<std::string> allowed;  // Empty: every policy.
  if (!o.policies.empty()) {
    std::stringstream list(o.policies);
    std::string name;
    while (std::getline(list, name, ',')) {
      if (name.empty()) continue;
      Check(name.find_first_of(":+=") == std::string::npos, "--policies takes policy names (", name,
            " is a spec); the parameters and compositions are what tune searches");
      const policy::PolicyInfo* info = policy::FindPolicy(name);
      if (info == nullptr) {
        std::string valid;
        for (const policy::PolicyInfo* p : policy::RegisteredPolicies())
          valid += (valid.empty() ? "" : ", ") + p->name;
        Fail("--policies: unknown policy '", name, "' (valid: ", valid,
             "; `moex policies` lists them)");
      }
      allowed.insert(info->name);
    }
    Check(!allowed.empty(), "--policies is empty");
  }
  Plan plan;
  std::vector<const policy::PolicyInfo*> prefetchers, evictors, eligible;
  for (const policy::PolicyInfo* info : policy::RegisteredPolicies()) {
    if (!allowed.empty() && !allowed.count(info->name)) continue;
    auto skip = [&](std::string reason) { plan.skipped.push_back({info->name, reason}); };
    if (info->name == "test-probe") {
      skip("a test-only policy");
    } else if (info->needs_future) {
      skip("simulator only (it reads the future): a bound, not a candidate");
    } else if (!(info->roles & (policy::kPrefetches | policy::kEvicts))) {
      skip("it only regroups tokens, which the simulator does not replay");
    } else {
      std::string missing;
      for (const trace::TraceHeader* h : traces)
        if (missing.empty()) missing = sim::MissingTraceInputs(*h, info->trace_needs);
      if (!missing.empty()) {
        skip("it needs " + missing);
        continue;
      }
      eligible.push_back(info);
      if (info->roles & policy::kPrefetches) prefetchers.push_back(info);
      if ((info->roles & policy::kEvicts) && !(info->roles & policy::kPrefetches))
        evictors.push_back(info);
    }
  }

  std::vector<std::string> ordered = {"lru"};
  for (const policy::PolicyInfo* info : eligible) ordered.push_back(info->name);
  // Two prefetchers in one spec would compete for the link; an evictor that prefetches
  // already has its own prefetcher, so compositions pair with pure evictors.
  for (const policy::PolicyInfo* p : prefetchers)
    for (const policy::PolicyInfo* e : evictors) ordered.push_back(p->name + "+" + e->name);
  std::vector<std::vector<std::string>> grids;
  for (const policy::PolicyInfo* info : eligible) {
    std::vector<std::string> grid;
    for (const policy::ParamSpec& param : info->params)
      if (Tunable(param))
        for (const std::string& v : GridValues(param))
          grid.push_back(info->name + ":" + param.name + "=" + v);
    grids.push_back(std::move(grid));
  }
  for (size_t i = 0;; ++i) {
    bool any = false;
    for (const std::vector<std::string>& grid : grids)
      if (i < grid.size()) {
        ordered.push_back(grid[i]);
        any = true;
      }
    if (!any) break;
  }

  std::set<std::string> seen;
  for (const std::string& spec : ordered) {
    if (!seen.insert(CanonicalSpec(spec)).second) continue;
    if (static_cast<int64_t>(plan.candidates.size()) < o.max_candidates)
      plan.candidates.push_back(spec);
    else
      ++plan.beyond_cap;
  }
  return plan;
}

struct Scored {
  std::string spec;
  sim::ReplayResult r;
};

// Lower modelled TPOT first; equal TPOT (or untimed traces): fewer bytes per decoded token.
bool Better(const Scored& a, const Scored& b) {
  if (a.r.tpot_ms != b.r.tpot_ms) return a.r.tpot_ms < b.r.tpot_ms;
  return a.r.decode_bytes_per_token() < b.r.decode_bytes_per_token();
}

// The share of the way from lru to oracle+belady a result covers, in %.
std::optional<double> GapClosed(const sim::ReplayResult& r, double lru, double bound) {
  if (!r.timed || !(lru - bound > 0)) return std::nullopt;
  return 100 * (lru - r.tpot_ms) / (lru - bound);
}

nlohmann::json EntryJson(const Scored& s, double lru, double bound) {
  const std::optional<double> gap = GapClosed(s.r, lru, bound);
  return {{"spec", s.spec},
          {"tpot_ms", s.r.timed ? nlohmann::json(s.r.tpot_ms) : nlohmann::json()},
          {"ttft_ms", s.r.timed ? nlohmann::json(s.r.ttft_ms) : nlohmann::json()},
          {"hit_rate", s.r.hit_rate()},
          {"decode_hit_rate", s.r.decode_hit_rate()},
          {"decode_bytes_per_token", s.r.decode_bytes_per_token()},
          {"gap_closed", gap ? nlohmann::json(*gap) : nlohmann::json()}};
}

std::string Ms(const sim::ReplayResult& r) {
  char text[32] = "-";
  if (r.timed) std::snprintf(text, sizeof text, "%.2f", r.tpot_ms);
  return text;
}

std::string ReadBytes(const fs::path& path) { return ReadInputFile(path.string(), kMaxDataFileBytes); }

int RunTune(const TuneOptions& o) {
  // Arguments first: a bad one fails before the long replays.
  Check(o.learn.empty() || !o.judge.empty(), "--learn needs --judge (the traces to score on)");
  Check(!o.trace.empty() || !o.judge.empty(),
        "give --trace TRACE (split 70/30 by request) or --judge TRACE (with --learn TRACE)");
  Check(o.trace.empty() || (o.learn.empty() && o.judge.empty()),
        "--trace is split into the learning and judging parts itself: give it alone, or "
        "--learn and --judge");
  const std::pair<const char*, std::string> paths[] = {
      {"--trace", o.trace}, {"--learn", o.learn}, {"--judge", o.judge}};
  for (const auto& [flag, path] : paths)
    Check(path.empty() || fs::is_regular_file(path), flag, ": no trace file ", path);
  Check(o.fraction > 0 && o.fraction < 1, "--fraction ", o.fraction, " is not inside (0, 1)");
  ParseBudget(o.budget, 1);  // Throws naming a malformed budget.
  Check(o.save_state.empty() || !fs::is_directory(o.save_state), "--save-state ", o.save_state,
        " is a directory");
  if (!o.save_state.empty())  // A policy state may replace a policy state; nothing else may.
    CheckOutputPath(o.save_state,
                    {.flag = "--save-state",
                     .reads = {o.trace, o.learn, o.judge, o.sim.hardware, o.sim.scale_to},
                     .force = o.force,
                     .same_kind = [](const std::string& existing) {
                       return FileStartsWith(existing, "MOEXPOL1");
                     }});
  sim::ReplayOptions options = ReplayOptionsOf(o.sim);
  options.budget = o.budget;

  std::optional<ScratchDir> scratch;
  if (!o.trace.empty() || !o.save_state.empty()) scratch.emplace();
  std::string learn_path = o.learn, judge_path = o.judge;
  nlohmann::json split;
  if (!o.trace.empty()) {
    trace::SplitOptions so;
    so.input = o.trace;
    so.learn_out = (scratch->path() / "learn.trace").string();
    so.test_out = (scratch->path() / "judge.trace").string();
    so.learn_fraction = o.fraction;
    const trace::SplitSummary s = trace::SplitTrace(so);
    learn_path = so.learn_out;
    judge_path = so.test_out;
    auto part = [](const trace::SplitPart& p) {
      return nlohmann::json{{"requests", p.requests},
                            {"first_request", p.first_request},
                            {"last_request", p.last_request}};
    };
    split = {{"trace", o.trace},
             {"fraction", o.fraction},
             {"learn", part(s.learn)},
             {"judge", part(s.test)}};
  }
  trace::TraceReader judge(judge_path);
  std::vector<const trace::TraceHeader*> headers = {&judge.header()};
  std::optional<trace::TraceReader> learn;
  if (!learn_path.empty()) {
    learn.emplace(learn_path);
    CheckSameShape(*learn, judge);
    headers.push_back(&learn->header());
  }
  const Plan plan = PlanCandidates(o, headers);

  Progress progress("tuned candidates and bounds",
                    static_cast<int64_t>(plan.candidates.size()) + 3);
  int64_t done = 0;
  const policy::FutureDemand future = sim::ReadFutureDemand(judge);
  auto bound = [&](const std::string& spec) {
    options.policy.spec = spec;
    options.policy.make = nullptr;
    options.on_finish = nullptr;
    Scored s{spec, sim::Replay(judge, options, &future)};
    progress.Update(++done);
    return s;
  };
  const Scored belady = bound("belady");
  // MIN for a cache that may bypass: the bound for candidates that decide admission.
  const Scored belady_bypass = bound("belady:bypass=true");
  const Scored oracle_belady = bound("oracle+belady");

  std::vector<Scored> ranked;
  std::vector<Skip> skipped = plan.skipped;
  std::optional<fs::path> best_state;  // The best so far's saved state (--save-state).
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const std::string& spec = plan.candidates[i];
    PolicySetup setup;
    setup.spec = spec;
    if (!learn_path.empty()) setup.learn_from = {learn_path};
    // A fresh path per candidate: MakePolicyMaker would load a state that exists.
    const fs::path state =
        o.save_state.empty() ? fs::path() : scratch->path() / ("state-" + std::to_string(i));
    options.policy.spec = spec;
    options.policy.make = MakePolicyMaker(setup);
    options.on_finish = [setup, state](const policy::Policy& p, const policy::PolicyFacts& f) {
      if (state.empty()) return;
      PolicySetup save = setup;
      save.state_path = state.string();
      SavePolicyState(save, p, f);
    };
    try {
      Scored s{spec, sim::Replay(judge, options)};
      const bool best =
          ranked.empty() || Better(s, *std::min_element(ranked.begin(), ranked.end(), Better));
      if (!state.empty()) {
        std::error_code ignored;
        if (best && best_state) fs::remove(*best_state, ignored);
        if (best)
          best_state = state;
        else
          fs::remove(state, ignored);
      }
      ranked.push_back(std::move(s));
    } catch (const Error& e) {
      if (spec == "lru") throw;  // The reference must run; what stops it stops every one.
      skipped.push_back({spec, std::string("failed: ") + e.what()});
    }
    progress.Update(++done);
  }
  std::stable_sort(ranked.begin(), ranked.end(), Better);
  const Scored& best = ranked.front();
  const Scored& lru =
      *std::find_if(ranked.begin(), ranked.end(), [](const Scored& s) { return s.spec == "lru"; });
  const double lru_ms = lru.r.tpot_ms, bound_ms = oracle_belady.r.tpot_ms;

  if (!o.save_state.empty()) {
    Check(best_state.has_value(), "no state to save");
    if (options.scale_to &&
        options.scale_to->moe_intermediate_size != judge.header().model.expert_neurons)
      std::cerr << "moex tune: note: the state in " << o.save_state << " was learned with "
                << o.sim.scale_to << "'s expert width on the trace's routing shape; the engine "
                << "loads it only into a model of both (tune without --scale-to for one)\n";
    const std::string bytes = ReadBytes(*best_state);
    OutputFile out(o.save_state);
    out.Write(bytes.data(), bytes.size());
    out.Commit();
  }

  const trace::TraceHeader& h = judge.header();
  const std::string model =
      h.model.name + (o.sim.scale_to.empty() ? "" : " (costed as " + o.sim.scale_to + ")");
  if (o.json) {
    nlohmann::json out = {
        {"judge", o.trace.empty() ? o.judge : o.trace},
        {"learn",
         learn_path.empty() || !o.trace.empty() ? nlohmann::json() : nlohmann::json(o.learn)},
        {"model", model},
        {"hardware", options.hardware.name},
        {"budget", o.budget},
        {"budget_bytes", lru.r.budget_bytes},
        {"budget_fraction", lru.r.budget_fraction},
        {"best", EntryJson(best, lru_ms, bound_ms)},
        {"lru", EntryJson(lru, lru_ms, bound_ms)},
        {"belady", EntryJson(belady, lru_ms, bound_ms)},
        {"belady_bypass", EntryJson(belady_bypass, lru_ms, bound_ms)},
        {"oracle_belady", EntryJson(oracle_belady, lru_ms, bound_ms)},
        {"candidates", nlohmann::json::array()},
        {"skipped", nlohmann::json::array()},
        {"beyond_max_candidates", plan.beyond_cap}};
    if (!split.is_null()) out["split"] = split;
    if (!o.save_state.empty()) out["state"] = o.save_state;
    for (const Scored& s : ranked) out["candidates"].push_back(EntryJson(s, lru_ms, bound_ms));
    for (const Skip& s : skipped)
      out["skipped"].push_back({{"name", s.name}, {"reason", s.reason}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }

  if (!split.is_null())
    std::printf("learning on requests %lld..%lld of %s, judging on %lld..%lld\n",
                static_cast<long long>(split["learn"]["first_request"].get<int64_t>()),
                static_cast<long long>(split["learn"]["last_request"].get<int64_t>()),
                o.trace.c_str(),
                static_cast<long long>(split["judge"]["first_request"].get<int64_t>()),
                static_cast<long long>(split["judge"]["last_request"].get<int64_t>()));
  else
    std::printf("learning on %s, judging on %s\n", learn_path.empty() ? "nothing" : o.learn.c_str(),
                o.judge.c_str());
  std::printf("model %s, hardware %s, budget %s (%.1f%% of the expert bytes)\n", model.c_str(),
              options.hardware.name.c_str(), o.budget.c_str(), 100 * lru.r.budget_fraction);
  for (const Skip& s : skipped) std::printf("skipped %s: %s\n", s.name.c_str(), s.reason.c_str());
  if (plan.beyond_cap > 0)
    std::printf("skipped %lld more grid points beyond --max-candidates %d\n",
                static_cast<long long>(plan.beyond_cap), o.max_candidates);
  std::printf("%-36s %9s %12s %14s %11s\n", "spec", "TPOT ms", "decode hits", "B/decoded tok",
              "gap closed");
  auto row = [&](const Scored& s, const char* note) {
    char gap[32] = "-";
    if (const std::optional<double> g = GapClosed(s.r, lru_ms, bound_ms))
      std::snprintf(gap, sizeof gap, "%.1f%%", *g);
    std::printf("%-36s %9s %12.3f %14.0f %11s%s\n", s.spec.c_str(), Ms(s.r).c_str(),
                s.r.decode_hit_rate(), s.r.decode_bytes_per_token(), gap, note);
  };
  for (const Scored& s : ranked) row(s, "");
  row(belady, "  (bound)");
  row(belady_bypass, "  (bound with bypass)");
  row(oracle_belady, "  (bound)");
  std::printf("best: %s  TPOT %s ms (lru %s, belady %s, belady:bypass %s, oracle+belady %s)\n",
              best.spec.c_str(), Ms(best.r).c_str(), Ms(lru.r).c_str(), Ms(belady.r).c_str(),
              Ms(belady_bypass.r).c_str(), Ms(oracle_belady.r).c_str());
  if (!o.save_state.empty())
    std::printf("saved its state to %s (moex generate --policy '%s' --policy-state %s)\n",
                o.save_state.c_str(), best.spec.c_str(), o.save_state.c_str());
  return 0;
}

}  // namespace

Runner AddTuneCommand(CLI::App& app) {
  auto o = std::make_shared<TuneOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tune", "search the policies and their parameters for the lowest modelled TPOT");
  cmd->add_option("--trace", o->trace,
                  "trace to split by request: the first --fraction learn, the rest judge");
  cmd->add_option("--learn", o->learn, "trace the policies learn from (their --learn-from)");
  cmd->add_option("--judge", o->judge, "trace the candidates are replayed and ranked on");
  cmd->add_option("--fraction", o->fraction, "with --trace: share of requests that learn");
  cmd->add_option("--budget", o->budget,
                  "cache budget: bytes (4GiB) or share of expert bytes (25%)");
  AddSimFlags(*cmd, o->sim);
  cmd->add_option("--policies", o->policies,
                  "comma-separated policy names the candidates may use (default: all)");
  cmd->add_option("--max-candidates", o->max_candidates,
                  "most specs replayed: defaults first, then compositions, then the grid")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--save-state", o->save_state,
                  "write the best spec's learned state (for --policy-state of generate/serve)");
  cmd->add_flag("--force", o->force, "replace an existing --save-state that is not a policy state");
  cmd->add_flag("--json", o->json, "print one JSON object instead of a table");
  return [o] { return RunTune(*o); };
}

}  // namespace moex::cli
