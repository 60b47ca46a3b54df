#include "policy/fmoe/fmoe.h"

#include <algorithm>
#include <chrono>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/fmoe/fmoe_selection.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"

namespace moex::policy {

// Modelled cost of the worker's jobs for the simulator (µs): a fixed part and one
// multiply-add per stored map and compared value (docs/policies/fmoe.md, "Matching cost").
namespace fmoe_cost {
constexpr double kJobUs = 2.0;
constexpr double kMacUs = 0.001;
}  // namespace fmoe_cost

namespace {

double ElapsedUs(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

struct FmoePolicy::Matching {
  ExpertMapStore store;
  int64_t pass = -1;
  std::vector<TrajectoryMatch> matches;          // One per request of `pass`.
  std::vector<std::vector<float>> trajectories;  // Their layers so far, [layers·J] each.
};

struct FmoePolicy::SemanticQuery {
  std::shared_ptr<Matching> matching;
  std::vector<std::vector<float>> sems;  // One per request of the pass.
  int distance = 0;
  bool whole = false;  // search=semantic: whole maps.
  int experts = 0;
};

struct FmoePolicy::TrajectoryQuery {
  std::shared_ptr<Matching> matching;
  int64_t pass = 0;
  int ordinal = 0, target = 0;
  std::vector<std::vector<float>> rows;  // The gated layer's distribution, per request.
  int experts = 0;
};

struct FmoePolicy::StoreInsert {
  std::shared_ptr<Matching> matching;
  std::vector<std::pair<std::vector<float>, std::vector<float>>> entries;  // (semantic, map)
};

FmoePolicy::FmoePolicy(const PolicyFacts& facts, FmoeOptions options)
    : facts_(facts), opt_(std::move(options)) {
  Check(facts_.worker != nullptr, "policy fmoe needs a policy worker");
  moe_ = MoeLayers(facts_);
  Check(moe_.count() > 0 && facts_.num_experts > 0, "policy fmoe needs a MoE model");
  const int d = std::min(opt_.distance, moe_.count());
  guide_.assign(static_cast<size_t>(moe_.count()) * facts_.num_experts,
                1.0f / static_cast<float>(facts_.num_experts));
  freq_.assign(static_cast<size_t>(facts_.num_layers) * facts_.num_experts, 0);
  protected_score_.assign(freq_.size(), -1);
  matching_ = std::make_shared<Matching>(Matching{
      ExpertMapStore(moe_.count(), facts_.num_experts, opt_.store, d, opt_.dedup), -1, {}, {}});
}

FmoePolicy::~FmoePolicy() = default;

void FmoePolicy::ClearProtected() {
  for (const auto& entry : protected_) protected_score_[Index(entry.first)] = -1;
  protected_.clear();
}

size_t FmoePolicy::Index(const ExpertKey& k) const {
  return KeyIndex(k, facts_.num_experts);
}

void FmoePolicy::OnRequestBegin(const RequestBeginEvent& e, Decisions*) {
  prompt_sem_.erase(e.request);
}

void FmoePolicy::OnIterationBegin(const IterationBeginEvent& e, Decisions*) {
  ++pass_seq_;
  in_pass_ = true;
  current_ = -1;
  gates_seen_ = 0;
  pass_.clear();
  ClearProtected();
  semantic_maps_.clear();
  Check(e.n_requests == 0 || (e.requests != nullptr && e.token_counts != nullptr),
        "policy fmoe: a pass of ", e.n_requests, " requests without their ids");
  Check(e.n_requests == 0 || (e.pooled != nullptr && e.d > 0),
        "policy fmoe needs each request's pooled input embedding, which this event stream does "
        "not carry (record traces with --pooled)");
  const size_t cells = static_cast<size_t>(moe_.count()) * facts_.num_experts;
  for (int64_t r = 0; r < e.n_requests; ++r) {
    Check(e.token_counts[r] >= 0, "policy fmoe: request ", e.requests[r], " has ",
          e.token_counts[r], " tokens in a pass");
    const float* pooled = e.pooled + r * e.d;
    Segment s{e.requests[r], e.token_counts[r], std::vector<float>(pooled, pooled + e.d),
              std::vector<float>(cells, 0.0f)};
    if (opt_.semantic == FmoeSemantic::kPrompt) {
      // The request's first pass is its prompt (a request first seen here included).
      auto [it, fresh] = prompt_sem_.try_emplace(s.request, s.sem);
      if (!fresh) s.sem = it->second;
    }
    pass_.push_back(std::move(s));
  }
  if (!learning() && opt_.search != FmoeSearch::kTrajectory && !pass_.empty()) SubmitSemantic();
}

void FmoePolicy::SubmitSemantic() {
  std::vector<std::vector<float>> sems;
  for (const Segment& s : pass_) sems.push_back(s.sem);
  const int d = std::min(opt_.distance, moe_.count());
  // search=semantic guides every layer from this match: keep whole maps.
  const bool whole = opt_.search == FmoeSearch::kSemantic;
  const int J = facts_.num_experts;
  const double cost_us = fmoe_cost::kJobUs +
                         fmoe_cost::kMacUs * static_cast<double>(store_size_) *
                             static_cast<double>(sems.size() * (sems.empty() ? 0 : sems[0].size()));
  const int64_t pass = pass_seq_;
  facts_.worker->Submit(
      SemanticQuery{matching_, std::move(sems), d, whole, J}, &SearchSemantic,
      [this, pass, whole](const Searched& r, Decisions* out) {
        if (pass != pass_seq_ || !in_pass_ || learning()) return;  // Its pass is over.
        CountSearches(r.guides, r.us, true);
        if (!whole) {
          ApplyGuides(r.guides, out);
          return;
        }
        // search=semantic: this match guides every layer; those whose turn came while the
        // worker searched (layers up to the latest gate's + d) are prefetched now.
        semantic_maps_ = r.guides;
        const int d_now = std::min(opt_.distance, moe_.count());
        for (int t = current_ + 1; t <= current_ + d_now && t < moe_.count(); ++t)
          PrefetchSemanticTarget(t, out);
      },
      cost_us);
}

FmoePolicy::Searched FmoePolicy::SearchSemantic(const SemanticQuery& q) {
  const auto start = std::chrono::steady_clock::now();
  ExpertMapStore& store = q.matching->store;
  const int J = q.experts;
  Searched r;
  for (const std::vector<float>& sem : q.sems) {
    const ExpertMapStore::Match match = store.MatchSemantic(sem);
    if (match.slot < 0) continue;
    const float* map = store.Map(match.slot);
    if (q.whole) {
      r.guides.push_back({-1, match.score, std::vector<float>(map, map + store.layers() * J)});
      continue;
    }
    for (int t = 0; t < q.distance; ++t)
      r.guides.push_back({t, match.score, std::vector<float>(map + t * J, map + (t + 1) * J)});
  }
  r.us = ElapsedUs(start);
  return r;
}

void FmoePolicy::PrefetchSemanticTarget(int target, Decisions* out) {
  const int J = facts_.num_experts;
  std::vector<Guide> guides;
  for (const Guide& g : semantic_maps_)
    guides.push_back(
        {target, g.score,
         std::vector<float>(g.probs.begin() + static_cast<ptrdiff_t>(target) * J,
                            g.probs.begin() + static_cast<ptrdiff_t>(target + 1) * J)});
  ApplyGuides(guides, out);
}

void FmoePolicy::OnGate(const GateEvent& e, Decisions* out) {
  const int ord = moe_.Ordinal(e.layer);
  if (ord < 0) return;
  const int J = facts_.num_experts;
  Check(e.num_experts == J && e.n_tokens >= 0 && e.top_k >= 0 &&
            (e.ids != nullptr || e.n_tokens * e.top_k == 0),
        "policy fmoe: gate of layer ", e.layer, " with ", e.num_experts,
        " experts where the model has ", J);
  Check(e.probs != nullptr || e.n_tokens == 0,
        "policy fmoe needs the gate probabilities, which this event stream does not carry "
        "(record traces with --probs f16)");
  int64_t pass_tokens = 0;
  for (const Segment& s : pass_) pass_tokens += s.tokens;
  Check(pass_tokens == e.n_tokens, "policy fmoe: gate of layer ", e.layer, " routes ", e.n_tokens,
        " tokens where the pass has ", pass_tokens);

  // §4.1: each request's distribution at this layer, the mean over its tokens of the pass.
  int64_t token = 0;
  for (Segment& s : pass_) {
    float* row = &s.map[static_cast<size_t>(ord) * J];
    for (int64_t i = 0; i < s.tokens; ++i, ++token)
      for (int j = 0; j < J; ++j) row[j] += e.probs[token * J + j];
    if (s.tokens > 0)
      for (int j = 0; j < J; ++j) row[j] /= static_cast<float>(s.tokens);
  }
  current_ = ord;
  ++gates_seen_;

  // This layer's prefetched experts are used now or were mispredicted: either way they are
  // ordinary cached experts from here on.
  for (auto it = protected_.begin(); it != protected_.end();) {
    if (it->second.ordinal > ord) {
      ++it;
      continue;
    }
    if (opt_.cancel && !learning() && it->first.layer == e.layer &&
        !std::ranges::binary_search(e.routed_experts(), it->first.expert))
      out->cancel.push_back(it->first);
    protected_score_[Index(it->first)] = -1;
    it = protected_.erase(it);
  }
  if (learning()) return;
  // PRI^prefetch = p / (l − l_now): l_now moved, so queued prefetches change order.
  for (auto& [key, p] : protected_) {
    const double priority = fmoe::PrefetchPriority(p.p, p.ordinal - ord);
    if (priority != p.priority) {
      p.priority = priority;
      protected_score_[Index(key)] = kProtectedScore + priority;
      out->reprioritize.push_back({key, priority});
    }
  }
  const int target = ord + std::min(opt_.distance, moe_.count());
  if (target >= moe_.count()) return;
  if (opt_.search == FmoeSearch::kSemantic)
    PrefetchSemanticTarget(target, out);
  else
    SubmitTrajectory(ord);
}

void FmoePolicy::SubmitTrajectory(int ordinal) {
  const int J = facts_.num_experts;
  std::vector<std::vector<float>> rows;
  for (const Segment& s : pass_)
    rows.emplace_back(s.map.begin() + static_cast<ptrdiff_t>(ordinal) * J,
                      s.map.begin() + static_cast<ptrdiff_t>(ordinal + 1) * J);
  const int target = ordinal + std::min(opt_.distance, moe_.count());
  const double cost_us = fmoe_cost::kJobUs + fmoe_cost::kMacUs * static_cast<double>(store_size_) *
                                                 static_cast<double>(rows.size()) * J;
  const int64_t pass = pass_seq_;
  facts_.worker->Submit(
      TrajectoryQuery{matching_, pass, ordinal, target, std::move(rows), J}, &SearchTrajectory,
      [this, pass](const Searched& r, Decisions* out) {
        if (pass != pass_seq_ || !in_pass_ || learning()) return;  // Its pass is over.
        CountSearches(r.guides, r.us, false);
        ApplyGuides(r.guides, out);
      },
      cost_us);
}

FmoePolicy::Searched FmoePolicy::SearchTrajectory(const TrajectoryQuery& q) {
  const auto start = std::chrono::steady_clock::now();
  Matching* m = q.matching.get();
  const int J = q.experts, ordinal = q.ordinal, target = q.target;
  const std::vector<std::vector<float>>& rows = q.rows;
  if (m->pass != q.pass || m->matches.size() != rows.size()) {
    m->pass = q.pass;
    m->matches.assign(rows.size(), TrajectoryMatch{});
    m->trajectories.assign(rows.size(), {});
  }
  Searched found;
  for (size_t r = 0; r < rows.size(); ++r) {
    TrajectoryMatch& match = m->matches[r];
    std::vector<float>& traj = m->trajectories[r];
    traj.insert(traj.end(), rows[r].begin(), rows[r].end());
    // A store that changed (or layers missed) since the pass began: match from scratch.
    if (match.stale(m->store) || match.layers_added() != ordinal) {
      match.Reset(m->store);
      for (int l = 0; l < ordinal && static_cast<size_t>(l + 1) * J <= traj.size(); ++l)
        match.AddLayer(m->store, l, &traj[static_cast<size_t>(l) * J]);
      if (match.layers_added() != ordinal) continue;
    }
    match.AddLayer(m->store, ordinal, rows[r].data());
    const ExpertMapStore::Match best = match.Best(m->store);
    if (best.slot < 0) continue;
    const float* p = m->store.Map(best.slot) + static_cast<size_t>(target) * J;
    found.guides.push_back({target, best.score, std::vector<float>(p, p + J)});
  }
  found.us = ElapsedUs(start);
  return found;
}

double FmoePolicy::Insert(const StoreInsert& q) {
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [sem, map] : q.entries) q.matching->store.Insert(sem, map);
  return ElapsedUs(start);
}

void FmoePolicy::CountSearches(const std::vector<Guide>& guides, double job_us, bool semantic) {
  match_us_ += job_us;
  ++match_jobs_;
  // The semantic search yields a guide per request and target layer: count requests.
  for (const Guide& g : guides) {
    if (semantic && g.ordinal > 0) continue;
    (semantic ? semantic_searches_ : trajectory_searches_) += 1;
    (semantic ? semantic_score_sum_ : trajectory_score_sum_) += g.score;
  }
}

void FmoePolicy::ApplyGuides(const std::vector<Guide>& guides, Decisions* out) {
  const int J = facts_.num_experts;
  // The union over the pass's requests: the highest priority and probability of each.
  std::map<ExpertKey, Protected> chosen;
  std::set<int> rows_reset;
  for (const Guide& g : guides) {
    // The worker may answer after the target's gate: then it is too late to prefetch.
    if (g.ordinal <= current_) continue;
    const double delta = opt_.delta >= 0 ? opt_.delta : fmoe::SelectionThreshold(g.score);
    const std::vector<int32_t> experts =
        fmoe::SelectExperts(g.probs.data(), J, delta, std::min(facts_.top_k, J));
    ++targets_;
    experts_selected_ += static_cast<int64_t>(experts.size());
    // The matched map becomes the layer's p for eviction (§4.5); several requests: the max.
    float* row = &guide_[static_cast<size_t>(g.ordinal) * J];
    if (rows_reset.insert(g.ordinal).second) std::copy(g.probs.begin(), g.probs.end(), row);
    for (int j = 0; j < J; ++j) row[j] = std::max(row[j], g.probs[static_cast<size_t>(j)]);
    for (int32_t j : experts) {
      const ExpertKey key{moe_.Layer(g.ordinal), j};
      const double p = g.probs[static_cast<size_t>(j)];
      const double priority = fmoe::PrefetchPriority(p, g.ordinal - current_);
      Protected& c = chosen[key];
      c.ordinal = g.ordinal;
      if (priority >= c.priority) {
        c.p = p;
        c.priority = priority;
      }
    }
  }
  // Highest priority first (ties: lower key), so equal-priority reads keep a stable order.
  std::vector<std::pair<ExpertKey, Protected>> order(chosen.begin(), chosen.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second.priority > b.second.priority;
  });
  for (const auto& [key, c] : order) {
    auto it = protected_.find(key);
    if (it == protected_.end()) {
      out->prefetch.push_back({key, Tier::kHost, c.priority, {}});
      protected_.emplace(key, c);
      protected_score_[Index(key)] = kProtectedScore + c.priority;
    } else if (c.priority > it->second.priority) {
      it->second = c;
      protected_score_[Index(key)] = kProtectedScore + c.priority;
      out->reprioritize.push_back({key, c.priority});
    }
  }
}

void FmoePolicy::OnIterationEnd(Decisions*) {
  // §3.2 step 5: the pass's complete maps join the store (on the worker, which owns it).
  std::vector<std::pair<std::vector<float>, std::vector<float>>> entries;
  if (gates_seen_ == moe_.count())
    for (Segment& s : pass_)
      if (s.tokens > 0) entries.emplace_back(std::move(s.sem), std::move(s.map));
  if (!entries.empty()) {
    const double full = store_size_ >= opt_.store ? 1 : 0;
    const double values = static_cast<double>(entries[0].first.size() + entries[0].second.size());
    const double cost_us = fmoe_cost::kJobUs + fmoe_cost::kMacUs * full * opt_.store * values *
                                                   static_cast<double>(entries.size());
    store_size_ = std::min(store_size_ + static_cast<int>(entries.size()), opt_.store);
    facts_.worker->Submit(
        StoreInsert{matching_, std::move(entries)}, &Insert,
        [this, learning = learning()](double us, Decisions*) {
          if (learning) return;
          insert_us_ += us;
          ++insert_jobs_;
        },
        cost_us);
  }
  if (!learning()) ++served_passes_;
  pass_.clear();
  ClearProtected();
  semantic_maps_.clear();
  in_pass_ = false;
  current_ = -1;
}

void FmoePolicy::OnRequestEnd(const RequestEndEvent& e, Decisions*) {
  prompt_sem_.erase(e.request);
}

void FmoePolicy::OnTouch(const ExpertKey& k, bool demand) {
  if (demand) ++freq_[Index(k)];
}

double FmoePolicy::EvictScore(const ExpertKey& k) {
  // Called for every eviction candidate whenever the cache makes room: flat lookups only.
  if (const double kept = protected_score_[Index(k)]; kept >= 0) return kept;
  return fmoe::EvictionScore(GuideProbability(k), freq_[Index(k)]);
}

double FmoePolicy::GuideProbability(const ExpertKey& k) const {
  const int ord = moe_.Ordinal(k.layer);
  if (ord < 0) return 1;
  return guide_[static_cast<size_t>(ord) * facts_.num_experts + static_cast<size_t>(k.expert)];
}

int64_t FmoePolicy::Frequency(const ExpertKey& k) const {
  return freq_[Index(k)];
}

void FmoePolicy::OnLearnEnd() {
  Policy::OnLearnEnd();
  prompt_sem_.clear();  // Requests a learning trace left open are not the ones served next.
  pass_.clear();
  ClearProtected();
  semantic_maps_.clear();
  in_pass_ = false;
  current_ = -1;
}

void FmoePolicy::SaveState(StateWriter& out) const {
  facts_.worker->Drain();
  matching_->store.Save(out);
}

void FmoePolicy::LoadState(StateReader& in) {
  facts_.worker->Drain();
  matching_->store.Load(in);
  matching_->pass = -1;
  store_size_ = matching_->store.size();
}

const ExpertMapStore& FmoePolicy::Store() const {
  facts_.worker->Drain();
  return matching_->store;
}

void FmoePolicy::ReportJson(nlohmann::json* report) const {
  auto mean = [](double sum, int64_t n) { return n > 0 ? sum / static_cast<double>(n) : 0.0; };
  (*report)["fmoe"] = {
      {"store_maps", Store().size()},
      {"store_capacity", opt_.store},
      {"passes", served_passes_},
      {"semantic_searches", semantic_searches_},
      {"mean_semantic_score", mean(semantic_score_sum_, semantic_searches_)},
      {"trajectory_searches", trajectory_searches_},
      {"mean_trajectory_score", mean(trajectory_score_sum_, trajectory_searches_)},
      {"mean_experts_per_target", mean(static_cast<double>(experts_selected_), targets_)},
      {"match_us_per_pass", mean(match_us_, served_passes_)},
      {"match_jobs", match_jobs_},
      {"insert_us_per_pass", mean(insert_us_, served_passes_)},
  };
}

MOEX_REGISTER_POLICY({
    .name = "fmoe",
    .roles = kPrefetches | kEvicts,
    .doc = "fine-grained expert maps: match the pass's semantic embedding and gate-probability "
           "trajectory against stored iterations, prefetch d layers ahead the smallest expert "
           "set reaching clip(1 - similarity), evict by map probability x frequency",
    .source = "fMoE (Yu et al.), sections 4.1-4.5",
    .params = ParamSpecsOf<FmoeOptions>(),
    .trace_needs = kNeedsProbs | kNeedsPooled,
    .test_specs = {"fmoe:store=2", "fmoe:search=semantic,semantic=prompt",
                   "fmoe:search=trajectory,dedup=0,store=3", "fmoe:delta=0,distance=1,cancel=1"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<FmoePolicy>(f, p.As<FmoeOptions>());
    },
});

}  // namespace moex::policy
