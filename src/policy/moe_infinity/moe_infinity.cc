#include "policy/moe_infinity/moe_infinity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"

namespace moex::policy {

// Modelled cost of the worker's jobs for the simulator (µs), fitted to bench/eamc_query on
// the AMD EPYC Zen 5 VM (docs/policies/moe-infinity.md: a per-gate job on the OLMoE shape
// took 45 µs with 1K stored EAMs and 216 µs with 10K): a fixed part, one multiply-add per
// query cell and stored EAM, one similarity per stored EAM, and the ranking of the later
// layers' cells.
namespace cost {
constexpr double kJobUs = 2.0;
constexpr double kCellEntryUs = 0.001;
constexpr double kEntryUs = 0.01;
constexpr double kFutureCellUs = 0.05;
}  // namespace cost

struct MoeInfinityPolicy::Matching {
  EamCollection prefill, decode;
  EamcMatcher matcher;
  int64_t query_pass = -1;
  bool query_prefill = false;
  EamCollection& Of(bool prefill_phase) { return prefill_phase ? prefill : decode; }
};

struct MoeInfinityPolicy::PrefetchQuery {
  // Request-level tracing: the collections to match against (else null and `prior`).
  std::shared_ptr<Matching> matching;
  ExpertActivationMatrix prior;  // Model-level counts, or every expert alike.
  int64_t pass = 0;
  bool prefill = false;
  int ordinal = 0;
  std::vector<float> row;  // The pass's EAM row of this layer.
  int matches = 0, observed = 0, lookahead = 0;
  bool proximity = false;
  int slots_free = 0;
};

struct MoeInfinityPolicy::CollectionInsert {
  std::shared_ptr<Matching> matching;
  ExpertActivationMatrix prefill, decode;  // A finished request's EAMs (zero: none).
};

MoeInfinityPolicy::MoeInfinityPolicy(const PolicyFacts& facts, MoeInfinityOptions options)
    : facts_(facts), opt_(std::move(options)) {
  Check(facts_.worker != nullptr, "policy moe-infinity needs a policy worker");
  moe_ = MoeLayers(facts_);
  Check(moe_.count() > 0 && facts_.num_experts > 0, "policy moe-infinity needs a MoE model");
  model_eam_ = ExpertActivationMatrix(moe_.count(), facts_.num_experts);
  cache_counts_ = model_eam_;
  last_touch_.assign(
      static_cast<size_t>(facts_.num_layers) * static_cast<size_t>(facts_.num_experts), 0);
  matching_ = std::make_shared<Matching>(
      Matching{EamCollection(moe_.count(), facts_.num_experts, opt_.eamc),
               EamCollection(moe_.count(), facts_.num_experts, opt_.eamc), EamcMatcher{}});
}

MoeInfinityPolicy::~MoeInfinityPolicy() = default;

MoeInfinityPolicy::RequestTrace& MoeInfinityPolicy::Trace(int64_t request, int64_t prompt_len) {
  auto it = requests_.find(request);
  if (it != requests_.end()) return it->second;
  RequestTrace t;
  t.prompt_len = prompt_len;
  t.prefill = ExpertActivationMatrix(moe_.count(), facts_.num_experts);
  t.decode = t.prefill;
  t.iteration = t.prefill;
  return requests_.emplace(request, std::move(t)).first->second;
}

void MoeInfinityPolicy::OnRequestBegin(const RequestBeginEvent& e, Decisions*) {
  requests_.erase(e.request);
  Trace(e.request, e.prompt_len);
}

void MoeInfinityPolicy::OnIterationBegin(const IterationBeginEvent& e, Decisions*) {
  ++pass_seq_;
  in_pass_ = true;
  current_ = -1;
  pass_.clear();
  protected_.clear();
  Check(e.n_requests == 0 || (e.requests != nullptr && e.token_counts != nullptr),
        "policy moe-infinity: a pass of ", e.n_requests, " requests without their ids");
  int64_t prefill_tokens = 0, decode_tokens = 0;
  if (opt_.cache == Cache::kEam) cache_counts_.Clear();
  for (int64_t r = 0; r < e.n_requests; ++r) {
    const int64_t tokens = e.token_counts[r];
    Check(tokens >= 0, "policy moe-infinity: request ", e.requests[r], " has ", tokens,
          " tokens in a pass");
    // A request first seen here (no request_begin) starts with this pass as its prompt.
    RequestTrace& t = Trace(e.requests[r], tokens);
    t.in_prefill = t.consumed < t.prompt_len;
    (t.in_prefill ? prefill_tokens : decode_tokens) += tokens;
    pass_.push_back({e.requests[r], tokens});
    if (opt_.cache == Cache::kEam) cache_counts_.Add(t.in_prefill ? t.prefill : t.decode);
  }
  pass_prefill_ = prefill_tokens > decode_tokens;
}

void MoeInfinityPolicy::OnGate(const GateEvent& e, Decisions* out) {
  const int ord = moe_.Ordinal(e.layer);
  if (ord < 0) return;
  Check(e.num_experts == facts_.num_experts && e.n_tokens >= 0 && e.top_k >= 0 &&
            (e.ids != nullptr || e.n_tokens * e.top_k == 0),
        "policy moe-infinity: gate of layer ", e.layer, " with ", e.num_experts,
        " experts where the model has ", facts_.num_experts);
  int64_t pass_tokens = 0;
  for (const Segment& s : pass_) pass_tokens += s.tokens;
  Check(pass_tokens == e.n_tokens, "policy moe-infinity: gate of layer ", e.layer, " routes ",
        e.n_tokens, " tokens where the pass has ", pass_tokens);

  // The iteration EAMs: each request's rows, and the pass's row for the query.
  std::vector<float> row(static_cast<size_t>(facts_.num_experts), 0.0f);
  int64_t token = 0;
  for (const Segment& s : pass_) {
    RequestTrace& t = requests_.at(s.request);
    for (int64_t i = 0; i < s.tokens; ++i, ++token)
      for (int k = 0; k < e.top_k; ++k) {
        const int32_t id = e.ids[token * e.top_k + k];
        Check(id >= 0 && id < facts_.num_experts, "policy moe-infinity: gate of layer ", e.layer,
              " routes to expert ", id, " of ", facts_.num_experts);
        t.iteration.Add(ord, id);
        row[static_cast<size_t>(id)] += 1;
      }
  }
  current_ = ord;

  // Prefetched experts of this layer are used now (reset case i) or found unused (case ii):
  // either way they lose their protection; unused ones stop using the link.
  for (auto it = protected_.begin(); it != protected_.end();) {
    if (it->first.layer != e.layer) {
      ++it;
      continue;
    }
    if (opt_.cancel && !learning() &&
        !std::ranges::binary_search(e.routed_experts(), it->first.expert))
      out->cancel.push_back(it->first);
    it = protected_.erase(it);
  }

  if (learning() || !opt_.prefetch) return;
  const int64_t slots =
      static_cast<int64_t>(std::floor(opt_.slots * static_cast<double>(facts_.capacity_experts)));
  SubmitPrefetch(ord, std::move(row), static_cast<int>(std::max<int64_t>(0, slots - e.n_routed)));
}

double MoeInfinityPolicy::QueryCostUs(int ordinal, int nonzero, Phase phase) const {
  const double entries =
      opt_.tracing == Tracing::kRequest ? eamc_size_[phase == Phase::kPrefill ? 0 : 1] : 0;
  const int future = opt_.lookahead > 0 ? std::min(opt_.lookahead, moe_.count() - 1 - ordinal)
                                        : moe_.count() - 1 - ordinal;
  return cost::kJobUs + cost::kCellEntryUs * nonzero * entries + cost::kEntryUs * entries +
         cost::kFutureCellUs * future * facts_.num_experts;
}

void MoeInfinityPolicy::SubmitPrefetch(int ordinal, std::vector<float> row, int slots_free) {
  const int nonzero =
      static_cast<int>(std::count_if(row.begin(), row.end(), [](float v) { return v != 0; }));
  const double cost_us =
      QueryCostUs(ordinal, nonzero, pass_prefill_ ? Phase::kPrefill : Phase::kDecode);
  PrefetchQuery q;
  q.pass = pass_seq_;
  q.prefill = pass_prefill_;
  q.ordinal = ordinal;
  q.lookahead = opt_.lookahead;
  q.proximity = opt_.proximity;
  q.slots_free = slots_free;
  if (opt_.tracing == Tracing::kRequest) {
    q.matching = matching_;
    q.row = std::move(row);
    q.matches = opt_.matches;
    q.observed = opt_.observed_rows;
  } else {
    // Model-level counts (BrainStorm), or every expert alike (dependency prefetching).
    q.prior = model_eam_;
    if (opt_.tracing == Tracing::kNone)
      for (int i = 0; i < moe_.count(); ++i)
        for (int j = 0; j < facts_.num_experts; ++j) q.prior.Add(i, j, 1);
  }
  const int64_t pass = q.pass;
  facts_.worker->Submit(
      std::move(q), &RankPrefetch,
      [this, pass, slots_free](const std::vector<PrefetchCandidate>& ranked, Decisions* out) {
        ApplyPrefetch(pass, slots_free, ranked, out);
      },
      cost_us);
}

std::vector<PrefetchCandidate> MoeInfinityPolicy::RankPrefetch(const PrefetchQuery& q) {
  const size_t slots_free = static_cast<size_t>(q.slots_free);
  if (!q.matching)
    return PrefetchPriorities(q.prior, q.ordinal, q.lookahead, q.proximity, slots_free);
  Matching* m = q.matching.get();
  EamCollection& c = m->Of(q.prefill);
  if (m->query_pass != q.pass || m->query_prefill != q.prefill) {
    m->matcher.Reset();
    m->query_pass = q.pass;
    m->query_prefill = q.prefill;
  }
  m->matcher.AddRow(c, q.ordinal, q.row);
  std::vector<int> slots;
  for (const EamcMatcher::Match& match : m->matcher.Nearest(c, q.matches, q.observed))
    slots.push_back(match.slot);
  return PrefetchPriorities(c.Sum(slots, q.ordinal + 1), q.ordinal, q.lookahead, q.proximity,
                            slots_free);
}

bool MoeInfinityPolicy::Insert(const CollectionInsert& q) {
  q.matching->prefill.Insert(q.prefill);
  q.matching->decode.Insert(q.decode);
  return true;
}

void MoeInfinityPolicy::ApplyPrefetch(int64_t pass, int slots_free,
                                      const std::vector<PrefetchCandidate>& ranked,
                                      Decisions* out) {
  if (pass != pass_seq_ || !in_pass_ || learning()) return;  // Its pass is over.
  // Layers at or before the latest gate are past (the worker may answer late): rank the
  // rest again, since the job ranked only its top K.
  std::vector<PrefetchCandidate> live;
  live.reserve(ranked.size());
  for (const PrefetchCandidate& c : ranked)
    if (c.layer > current_) live.push_back(c);
  if (live.size() != ranked.size()) RankCandidates(&live, static_cast<size_t>(slots_free));
  std::map<ExpertKey, double> top, rest;
  std::vector<std::pair<ExpertKey, double>> order;
  for (const PrefetchCandidate& c : live) {
    const ExpertKey key{moe_.Layer(c.layer), c.expert};
    if (static_cast<int>(top.size()) < slots_free) {
      top[key] = c.priority;
      order.emplace_back(key, c.priority);
    } else {
      rest[key] = c.priority;
    }
  }
  // Reset case iii: protected experts that left the top K become ordinary cached experts;
  // their queued reads fall back to their new priority (0 when no longer predicted).
  for (auto it = protected_.begin(); it != protected_.end();) {
    if (top.contains(it->first)) {
      ++it;
      continue;
    }
    const auto r = rest.find(it->first);
    out->reprioritize.push_back({it->first, r == rest.end() ? 0.0 : r->second});
    it = protected_.erase(it);
  }
  for (const auto& [key, priority] : order) {
    auto it = protected_.find(key);
    if (it == protected_.end()) {
      out->prefetch.push_back({key, Tier::kHost, priority, {}});
      protected_.emplace(key, priority);
    } else if (it->second != priority) {
      out->reprioritize.push_back({key, priority});
      it->second = priority;
    }
  }
}

void MoeInfinityPolicy::OnExpertDone(const ExpertDoneEvent& e, Decisions* out) {
  const ExpertKey key{e.layer, e.expert};
  protected_.erase(key);  // Reset case i.
  if (opt_.cache == Cache::kNone && !learning()) out->retain.push_back({key, {0, 0}});
}

void MoeInfinityPolicy::OnIterationEnd(Decisions*) {
  // §5.2: the iteration EAM joins the request-level EAM of its phase at the end of the pass.
  for (const Segment& s : pass_) {
    auto it = requests_.find(s.request);
    if (it == requests_.end()) continue;
    RequestTrace& t = it->second;
    (t.in_prefill ? t.prefill : t.decode).Add(t.iteration);
    model_eam_.Add(t.iteration);
    t.iteration.Clear();
    t.consumed += s.tokens;
  }
  pass_.clear();
  protected_.clear();
  in_pass_ = false;
  current_ = -1;
}

void MoeInfinityPolicy::OnRequestEnd(const RequestEndEvent& e, Decisions*) {
  auto it = requests_.find(e.request);
  if (it == requests_.end()) return;
  RequestTrace t = std::move(it->second);
  requests_.erase(it);
  // §4.2: the finished request's EAMs join the collections (on the worker, which owns them).
  const bool has_prefill = !t.prefill.IsZero(), has_decode = !t.decode.IsZero();
  if (!has_prefill && !has_decode) return;
  for (int p = 0; p < 2; ++p)
    if (p == 0 ? has_prefill : has_decode) eamc_size_[p] = std::min(eamc_size_[p] + 1, opt_.eamc);
  const double cells = static_cast<double>(moe_.count()) * facts_.num_experts;
  const double cost_us =
      cost::kJobUs + 2 * (cost::kCellEntryUs * cells * opt_.eamc + cells * 0.001);
  facts_.worker->Submit(
      CollectionInsert{matching_, std::move(t.prefill), std::move(t.decode)}, &Insert,
      [](bool, Decisions*) {}, cost_us);
}

void MoeInfinityPolicy::OnTouch(const ExpertKey& k, bool) {
  last_touch_[KeyIndex(k, facts_.num_experts)] = ++clock_;
}

double MoeInfinityPolicy::EvictScore(const ExpertKey& k) {
  if (auto it = protected_.find(k); it != protected_.end()) return kProtectedScore + it->second;
  const double touch = static_cast<double>(last_touch_[KeyIndex(k, facts_.num_experts)]);
  const int ord = moe_.Ordinal(k.layer);
  if (opt_.cache == Cache::kLru || opt_.cache == Cache::kNone || ord < 0) return touch;
  // Recency only breaks ties (below any difference of counts).
  const double recency = 1e-6 * touch / static_cast<double>(clock_ + 1);
  if (opt_.cache == Cache::kModel) return model_eam_.at(ord, k.expert) + recency;
  return CachePriority(cache_counts_.at(ord, k.expert), ord, moe_.count(), opt_.boost) + recency;
}

void MoeInfinityPolicy::OnLearnEnd() {
  Policy::OnLearnEnd();
  requests_.clear();  // Requests a learning trace left open are not the ones served next.
  pass_.clear();
  protected_.clear();
  in_pass_ = false;
}

void MoeInfinityPolicy::SaveState(StateWriter& out) const {
  facts_.worker->Drain();
  out.Floats(std::vector<float>(model_eam_.cells().begin(), model_eam_.cells().end()));
  matching_->prefill.Save(out);
  matching_->decode.Save(out);
}

void MoeInfinityPolicy::LoadState(StateReader& in) {
  facts_.worker->Drain();
  const std::vector<float> model = in.Floats();
  Check(model.size() == model_eam_.cells().size(), in.origin(), ": moe-infinity state of a ",
        model.size(), "-cell EAM where the model has ", model_eam_.cells().size());
  model_eam_.Clear();
  for (size_t c = 0; c < model.size(); ++c)
    model_eam_.Add(static_cast<int>(c / static_cast<size_t>(facts_.num_experts)),
                   static_cast<int>(c % static_cast<size_t>(facts_.num_experts)), model[c]);
  matching_->prefill.Load(in);
  matching_->decode.Load(in);
  eamc_size_[0] = matching_->prefill.size();
  eamc_size_[1] = matching_->decode.size();
}

const EamCollection& MoeInfinityPolicy::Collection(Phase phase) const {
  facts_.worker->Drain();
  return phase == Phase::kPrefill ? matching_->prefill : matching_->decode;
}

const ExpertActivationMatrix* MoeInfinityPolicy::RequestEam(int64_t request, Phase phase) const {
  auto it = requests_.find(request);
  if (it == requests_.end()) return nullptr;
  return phase == Phase::kPrefill ? &it->second.prefill : &it->second.decode;
}

MOEX_REGISTER_POLICY({
    .name = "moe-infinity",
    .roles = kPrefetches | kEvicts,
    .doc = "request-level expert activation tracing: match the pass's EAM against past "
           "requests' EAMs, prefetch every later layer by probability x layer proximity, "
           "evict by the request's EAM counts",
    .source = "MoE-Infinity (Xue et al.), sections 4-5",
    .params = ParamSpecsOf<MoeInfinityOptions>(),
    .test_specs = {"moe-infinity:cache=none", "moe-infinity:tracing=model,cache=model",
                   "moe-infinity:prefetch=0",
                   "moe-infinity:tracing=none,lookahead=1,proximity=0,cache=lru,matches=2"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<MoeInfinityPolicy>(f, p.As<MoeInfinityOptions>());
    },
});

}  // namespace moex::policy
