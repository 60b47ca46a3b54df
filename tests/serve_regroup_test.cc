// Token regrouping in the server (`--regroup N`, ExpertFlow §3.3): the scheduler runs units
// of N passes whose split the engine's policy may change; whatever the split, every request
// returns exactly the tokens it returns alone (its KV cache is its own, the kernels are
// batch-invariant and a prompt's chunks stay at fixed offsets).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/session.h"
#include "core/error.h"
#include "model/model.h"
#include "policy/composed_policy.h"
#include "policy/registry.h"
#include "serve/server.h"
#include "support/engine_runs.h"
#include "support/serve_fixtures.h"
#include "support/temp_dir.h"
#include "support/tiny_models.h"

namespace moex::serve {
namespace {

using nlohmann::json;
using testing::RunningServer;

cli::ModelOptions TinyModel(const std::string& budget, const std::string& policy = "lru") {
  cli::ModelOptions m;
  m.model = testing::TinyModelPath(Arch::kOlmoe);
  m.host_budget = budget;
  m.policy = policy;
  m.policy_worker = "sync";
  return m;
}

ServerOptions Units(int regroup) {
  ServerOptions o;
  o.scheduler.max_running = 8;
  o.scheduler.max_batch_tokens = 12;  // Prompts share passes in chunks.
  o.scheduler.prefill_chunk = 4;
  o.scheduler.regroup = regroup;
  return o;
}

json Completion(std::vector<int32_t> prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
}

// Prompts of 1..13 tokens (several span chunks), different lengths, so requests prefill and
// decode side by side and leave at different times.
const std::vector<json>& Requests() {
  static const std::vector<json> requests = {
      Completion({5, 9, 200, 31}, 9),
      Completion({77}, 7),
      Completion({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, 10),
      Completion({400, 401, 402, 403, 404, 405}, 8),
      Completion({11, 22, 33, 44, 55, 66, 77}, 12),
      Completion({300, 3}, 5),
  };
  return requests;
}

std::vector<int32_t> TokenIds(const HttpResult& r) {
  EXPECT_EQ(r.status, 200) << r.body << r.error;
  return json::parse(r.body)["choices"][0]["token_ids"].get<std::vector<int32_t>>();
}

std::vector<std::vector<int32_t>> Alone() {
  static const std::vector<std::vector<int32_t>> alone = [] {
    RunningServer s(TinyModel("25%"), Units(1));
    std::vector<std::vector<int32_t>> tokens;
    for (const json& r : Requests()) tokens.push_back(TokenIds(s.Post("/v1/completions", r)));
    return tokens;
  }();
  return alone;
}

std::vector<std::vector<int32_t>> Together(const RunningServer& s) {
  std::vector<std::vector<int32_t>> together(Requests().size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < Requests().size(); ++i)
    clients.emplace_back(
        [&, i] { together[i] = TokenIds(s.Post("/v1/completions", Requests()[i])); });
  for (auto& c : clients) c.join();
  return together;
}

// A counter or a histogram's _count from /metrics.
double Metric(const RunningServer& s, const std::string& name) {
  const std::string text = s.Get("/metrics").body;
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\n" + name + " ([0-9.e+]+)\n"))) return -1;
  return std::stod(m[1]);
}

// What the test policy saw.
struct Seen {
  std::atomic<int> calls{0}, max_candidates{0}, bad_tokens{0};
};

// Regroups by request id (group = id % groups), or answers out of range when `malformed`.
class ParityRegrouper : public policy::Policy {
 public:
  ParityRegrouper(Seen* seen, bool malformed) : seen_(seen), malformed_(malformed) {}
  std::string name() const override { return "parity"; }
  bool RegroupPasses(const std::vector<policy::PassCandidate>& candidates, int groups,
                     std::vector<int>* group) override {
    ++seen_->calls;
    const int n = static_cast<int>(candidates.size());
    if (n > seen_->max_candidates) seen_->max_candidates = n;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const policy::PassCandidate& c = candidates[i];
      if (c.n_tokens < 1 || c.n_tokens > 4 || c.tokens == nullptr) ++seen_->bad_tokens;
      (*group)[i] = malformed_ ? groups : static_cast<int>(c.request % groups);
    }
    return true;
  }

 private:
  Seen* seen_;
  bool malformed_;
};

// The tiny model offloaded at 25 % under parity+lru.
std::unique_ptr<cli::Session> ParitySession(Seen* seen, bool malformed) {
  auto session = cli::OpenSession(TinyModel("25%"));
  session->transformer.reset();
  OffloadOptions o;
  o.host_budget = "25%";
  o.policy.worker = policy::PolicyWorker::Mode::kSync;
  o.progress = false;
  o.policy.make = [seen, malformed](const policy::PolicyFacts& facts) {
    std::vector<policy::ComposedPolicy::Part> parts;
    parts.push_back({"parity", std::make_unique<ParityRegrouper>(seen, malformed)});
    parts.push_back({"lru", policy::MakePolicy("lru", facts)});
    return std::unique_ptr<policy::Policy>(new policy::ComposedPolicy(std::move(parts)));
  };
  session->executor = std::make_unique<OffloadMoeExecutor>(*session->model, o);
  session->transformer = std::make_unique<Transformer>(*session->model, *session->executor);
  return session;
}

class ServeRegroup : public ::testing::TestWithParam<int> {};

TEST_P(ServeRegroup, PolicySplitGivesEachRequestTheTokensItGetsAlone) {
  Seen seen;
  RunningServer s(ParitySession(&seen, false), Units(GetParam()));
  for (int round = 0; round < 2; ++round) {
    const auto together = Together(s);
    for (size_t i = 0; i < Requests().size(); ++i)
      EXPECT_EQ(together[i], Alone()[i]) << "round " << round << ", request " << i;
  }
  EXPECT_GT(seen.calls, 0);
  EXPECT_GT(seen.max_candidates, 1);  // Requests were regrouped together.
  EXPECT_EQ(seen.bad_tokens, 0);      // One decode token or a prompt chunk of at most 4.
  EXPECT_GT(Metric(s, "moex_regroup_units_regrouped_total"), 0);
  EXPECT_GE(Metric(s, "moex_regroup_units_total"), seen.calls);
  EXPECT_GT(Metric(s, "moex_pass_activated_experts_count"), 0);
}

INSTANTIATE_TEST_SUITE_P(Groups, ServeRegroup, ::testing::Values(2, 3));

TEST(ServeRegroupPolicy, PathRegroupingKeepsEveryRequestsTokens) {
  RunningServer s(TinyModel("25%", "regroup+lru"), Units(2));
  for (int round = 0; round < 2; ++round) {
    const auto together = Together(s);
    for (size_t i = 0; i < Requests().size(); ++i)
      EXPECT_EQ(together[i], Alone()[i]) << "round " << round << ", request " << i;
  }
  EXPECT_GT(Metric(s, "moex_regroup_units_total"), 0);
}

// ExpertFlow's own token scheduler: `expertflow` trained (--learn-from) on a trace of the same
// model answers the regrouping with its predicted paths; every request still gets exactly
// the tokens it gets alone.
TEST(ServeRegroupPolicy, ExpertFlowRegroupsByPredictedPathsAndKeepsEveryRequestsTokens) {
  testing::TempDir dir;
  const std::string trace = (dir.path() / "learn.trace").string();
  testing::RecordLearningTrace(*LoadModel(testing::TinyModelPath(Arch::kOlmoe)), trace);
  cli::ModelOptions model = TinyModel("25%", "expertflow:dim=8,hidden=32,epochs=3");
  model.learn_from = {trace};
  RunningServer s(model, Units(2));
  for (int round = 0; round < 2; ++round) {
    const auto together = Together(s);
    for (size_t i = 0; i < Requests().size(); ++i)
      EXPECT_EQ(together[i], Alone()[i]) << "round " << round << ", request " << i;
  }
  EXPECT_GT(Metric(s, "moex_regroup_units_total"), 0);
  EXPECT_GT(Metric(s, "moex_regroup_units_regrouped_total"), 0);  // The policy answered.
}

// The paths one run records, saved with --policy-state, predict the next identical run's
// passes exactly (an oracle for measurements); tokens stay those of requests run alone.
TEST(ServeRegroupPolicy, RecordedPathsFromAnEarlierRunAreUsed) {
  testing::TempDir dir;
  cli::ModelOptions model = TinyModel("25%", "regroup+lru");
  model.policy_state = (dir.path() / "paths.state").string();
  auto report = [](RunningServer& s) {
    json r;
    auto* offload = dynamic_cast<OffloadMoeExecutor*>(s.session->executor.get());
    offload->tier().controller().policy().ReportJson(&r);
    return r["regroup"];
  };
  {
    RunningServer s(model, Units(2));
    Together(s);
    const json r = report(s);
    EXPECT_EQ(r["predicted_from_recorded"], 0);  // Nothing recorded yet: last paths.
    EXPECT_GT(r["recorded_paths"].get<int>(), 0);
    s.session->SavePolicyState();
  }
  RunningServer s(model, Units(2));
  const auto together = Together(s);
  for (size_t i = 0; i < Requests().size(); ++i)
    EXPECT_EQ(together[i], Alone()[i]) << "request " << i;
  const json r = report(s);
  EXPECT_GT(r["predicted_from_recorded"].get<int>(), 0);
  // The first run recorded every pass of every request (prompt chunks at fixed offsets,
  // the same greedy tokens), so no candidate falls back to its last path.
  EXPECT_EQ(r["predicted_from_last"], 0);
}

TEST(ServeRegroupPolicy, MalformedSplitKeepsAdmissionOrder) {
  Seen seen;
  RunningServer s(ParitySession(&seen, true), Units(2));
  const auto together = Together(s);
  for (size_t i = 0; i < Requests().size(); ++i)
    EXPECT_EQ(together[i], Alone()[i]) << "request " << i;
  EXPECT_GT(seen.calls, 0);
  EXPECT_EQ(Metric(s, "moex_regroup_units_regrouped_total"), 0);
  EXPECT_GT(Metric(s, "moex_regroup_units_total"), 0);
}

TEST(ServeRegroupPolicy, ResidentModelRunsUnitsInAdmissionOrder) {
  RunningServer s(TinyModel(""), Units(2));  // No policy: the scheduler's own split.
  const auto together = Together(s);
  for (size_t i = 0; i < Requests().size(); ++i)
    EXPECT_EQ(together[i], Alone()[i]) << "request " << i;
  EXPECT_GT(Metric(s, "moex_regroup_units_total"), 0);
  EXPECT_EQ(Metric(s, "moex_regroup_units_regrouped_total"), 0);
}

// A pass holds one group, so the token cap must cover max_running / N decodes, not all.
TEST(ServeRegroupPolicy, PassCapCoversOneGroup) {
  auto session = cli::OpenSession(TinyModel(""));
  ServerOptions o = Units(1);
  o.port = 0;
  o.scheduler.max_running = 8;
  o.scheduler.max_batch_tokens = 4;
  EXPECT_THROW(Server(*session->transformer, nullptr, nullptr, o), Error);
  o.scheduler.regroup = 2;
  EXPECT_NO_THROW(Server(*session->transformer, nullptr, nullptr, o));
  o.scheduler.regroup = -1;
  EXPECT_THROW(Server(*session->transformer, nullptr, nullptr, o), Error);
}

}  // namespace
}  // namespace moex::serve
