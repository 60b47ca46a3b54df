// MoEpic (Yan, Liu, Xu, Huang: "Accelerating Mixture-of-Expert Inference with Adaptive
// Expert Split Mechanism"): the policy `moepic`.
//
//  - Vertical expert split (§3.1): each layer i caches only the top segment, neurons
//    [0, θ_i·F), of its C_i highest-priority experts; the bottom segment is prefetched or
//    read on demand. A hit on a top computes the top at once and the bottom as it lands
//    (the executor computes an expert chunk by chunk, so θ_i is a whole number of chunks).
//  - Speculative prefetcher (§3.2, Eq. 3): layer i's gate input goes through layer i+1's
//    router; experts are prefetched in descending predicted score, only the bottom when
//    the top is cached, up to the prefetch buffer; the real gate ends the prefetch (its
//    unrouted predictions are dropped). The last layer predicts the next pass's first
//    layer (AdapMoE's trick).
//  - Cache manager (§3.3): LCP priority μ·ρ^(ν/ω) (moepic_lcp.h); on a miss the layer's
//    lowest-priority cached expert is replaced by the missed one's top.
//  - Cache configurator (§3.4, Algorithm 1, moepic_configurator.h): every τ tokens, on the
//    policy worker, per-layer budgets V_i and splits θ_i from online statistics and the
//    step costs; applied at the next pass boundary (the paper's "when the device is idle").
//
// Budgets: the cache (the paper's VRAM) holds the tops (V_e, split across the layers) and
// a prefetch buffer of `buffer` experts for the layer being prefetched plus as many for
// the layer computing from its buffer (the paper sizes one buffer, U_b = K experts, and
// is silent on how layer i's buffer coexists with layer i+1's prefetch). The policy keeps
// each layer's tops within V_i by construction: members ≤ C_i, each ≤ θ_i·F; everything
// else it brings in (bottoms, non-member experts) leaves the cache once computed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/common/router_prediction.h"
#include "policy/moe_layers.h"
#include "policy/moepic/moepic_configurator.h"
#include "policy/moepic/moepic_lcp.h"
#include "policy/policy_worker.h"
#include "policy/registry.h"

namespace moex::policy {
namespace {

// Modelled cost of the configurator job for the simulator (µs), so that its modelled worker
// is repeatable: a fixed part and one step per MoE layer, expert and split point (top
// chunks 0..chunks). Fitted on this repository's tiny shapes on the Intel Xeon host of the
// 2026-11-29 stop (64 jobs: median 8.7 µs for 3 layers x 16 experts x 5 split points).
constexpr double kConfigureJobUs = 2.0;
constexpr double kConfigureStepUs = 0.03;

enum class PrefetchMode { kRouter, kRandom, kNone };
enum class Budgets { kConfig, kUniform };  // Per-layer budgets: configurator or uniform.
enum class Replace { kMiss, kConfig };     // When cached tops change.

struct MoepicOptions {
  using Evict = ExpertPriorities::Kind;
  double theta = -1;
  Budgets budgets = Budgets::kConfig;
  PrefetchMode prefetch = PrefetchMode::kRouter;
  Evict evict = Evict::kLcp;
  Replace replace = Replace::kMiss;
  double rho = 0.25, omega = 128, zeta = 0.01;
  int64_t tau = 5000;
  int buffer = 0;
  double load_ms = 0, expert_ms = 0, attn_ms = 0, head_ms = 0;

  template <class V>
  void VisitParams(V& v) {
    v.Real("theta", theta, -1, 1,
           "split ratio for every layer; -1: chosen per layer by the configurator (1: no "
           "split, 0: prefetch only)");
    v.Choice("budgets", budgets, {{Budgets::kConfig, "config"}, {Budgets::kUniform, "uniform"}},
             "per-layer budgets from the configurator (Alg. 1) or uniform (Table 3's w/o CCA)");
    v.Choice("prefetch", prefetch,
             {{PrefetchMode::kRouter, "router"},
              {PrefetchMode::kRandom, "random"},
              {PrefetchMode::kNone, "none"}},
             "speculative prefetch by the next layer's router (Eq. 3), in random order (w/o "
             "SP), or none (Cache Only)");
    v.Choice("evict", evict,
             {{Evict::kLcp, "lcp"},
              {Evict::kLru, "lru"},
              {Evict::kLfu, "lfu"},
              {Evict::kRandom, "random"}},
             "cache priority: LCP mu*rho^(nu/omega) (Eq. 4) or the baselines of Table 1");
    v.Choice("replace", replace, {{Replace::kMiss, "miss"}, {Replace::kConfig, "config"}},
             "when cached tops change: on every miss (§3.3) or only at reconfiguration");
    v.Real("rho", rho, 1e-6, 0.999999, "LCP balance between frequency and recency");
    v.Real("omega", omega, 1, 1e9, "LCP observation window (tokens)");
    v.Real("zeta", zeta, 1e-4, 0.5, "budget moved per configurator step (share of V_e)");
    v.Int("tau", tau, 1, 1e12, "tokens between reconfigurations");
    v.Int("buffer", buffer, 0, 4096,
          "prefetch buffer in whole experts per layer (0: top-k, the paper's U_b)");
    v.Real("load_ms", load_ms, 0, 1e9, "T_load of one expert (0: from the driver's costs)");
    v.Real("expert_ms", expert_ms, 0, 1e9, "T_comp of one expert (0: from the driver)");
    v.Real("attn_ms", attn_ms, 0, 1e9, "T_comp of one attention block (0: from the driver)");
    v.Real("head_ms", head_ms, 0, 1e9, "T_comp of the LM head (0: from the driver)");
  }
};

class MoepicPolicy : public Policy {
 public:
  MoepicPolicy(const PolicyFacts& f, const MoepicOptions& o)
      : facts_(f),
        priorities_(f.num_layers, f.num_experts, o.evict, o.rho, o.omega, f.seed),
        prefetch_(o.prefetch),
        fixed_theta_(o.theta),
        uniform_(o.budgets == Budgets::kUniform),
        replace_on_miss_(o.replace == Replace::kMiss),
        zeta_(o.zeta),
        tau_(o.tau),
        rng_(f.seed * 0x9e3779b97f4a7c15ULL + 1) {
    if (prefetch_ == PrefetchMode::kRouter) routers_.emplace(f, "moepic");
    chunks_ = f.chunks_per_expert();
    chunk_neurons_ = f.chunk_neurons > 0 ? f.chunk_neurons : f.neurons;
    buffer_experts_ = o.buffer > 0 ? o.buffer : f.top_k;
    if (prefetch_ == PrefetchMode::kNone) buffer_experts_ = 0;

    // Costs: the parameters where given, else the driver's (simulator: its cost model).
    costs_ = f.step_costs;
    auto take = [&](double value, double* field) {
      if (value > 0) *field = value;
    };
    take(o.load_ms, &costs_.load_expert_ms);
    take(o.expert_ms, &costs_.expert_ms);
    take(o.attn_ms, &costs_.attention_ms);
    take(o.head_ms, &costs_.head_ms);

    moe_ = MoeLayers(f);
    Check(moe_.count() > 0, "policy moepic: the model has no MoE layer");
    const size_t L = static_cast<size_t>(moe_.count());
    stats_.assign(L, LayerStatistics(f.num_experts));
    predicted_.assign(static_cast<size_t>(f.num_layers), {});
    prefetched_.assign(static_cast<size_t>(f.num_layers), {});
    const size_t keys = static_cast<size_t>(f.num_layers) * static_cast<size_t>(f.num_experts);
    member_.assign(keys, 0);
    victim_.assign(keys, 0);
    top_present_.assign(keys, 0);
    members_.assign(static_cast<size_t>(f.num_layers), 0);

    // V_e: the cache less two prefetch buffers, in whole experts; at first uniform with
    // θ = 0.5 (Algorithm 1, line 4), or the fixed θ of an ablation.
    const int64_t reserve = 2 * static_cast<int64_t>(buffer_experts_) * chunks_;
    top_pages_ = std::max<int64_t>(0, f.capacity_pages - reserve);
    config_.layers.resize(L);
    for (size_t i = 0; i < L; ++i) {
      LayerChoice& c = config_.layers[i];
      c.budget = L ? static_cast<double>(top_pages_) / chunks_ / static_cast<double>(L) : 0;
      Resize(c, fixed_theta_ >= 0 ? fixed_theta_ : 0.5);
    }
  }

  std::string name() const override { return "moepic"; }
  bool evicts() const override { return true; }

  void OnLearnEnd() override {
    Policy::OnLearnEnd();
    // What the past traces taught configures the cache before serving.
    if (CanConfigure()) config_ = Configure(stats_, Budgets());
    ClearTransient();
    tokens_since_config_ = 0;
  }

  void OnIterationBegin(const IterationBeginEvent& e, Decisions* out) override {
    tokens_since_config_ += e.n_tokens;
    if (learning()) return;
    if (pending_) {  // Between passes: the device is idle.
      ApplyConfiguration(*pending_, out);
      pending_.reset();
    }
  }

  void OnIterationEnd(Decisions*) override {
    if (learning() || job_pending_ || !CanConfigure() || tokens_since_config_ < tau_) return;
    tokens_since_config_ = 0;
    job_pending_ = true;
    // Algorithm 1, lines 8-9, on the worker: it computes on a copy of the statistics and of
    // the inputs, never on the policy.
    const double cost_us = kConfigureJobUs + kConfigureStepUs * static_cast<double>(moe_.count()) *
                                                 facts_.num_experts * (chunks_ + 1);
    facts_.worker->Submit(
        ConfigureSnapshot{stats_, Budgets(), Inputs(), zeta_},
        [](const ConfigureSnapshot& s) {
          return AllocateBudgets(s.stats, s.budgets, s.zeta, s.in);
        },
        [this](const Configuration& c, Decisions*) {
          pending_ = c;
          job_pending_ = false;
        },
        cost_us);
  }

  void ComputeOrder(int layer, std::vector<ExpertKey>* experts) override {
    routed_now_.clear();
    for (const ExpertKey& k : *experts) routed_now_.insert(k.expert);
    routed_layer_ = layer;
  }

  // A miss: a cached top stays (the bottom streams past the cache); otherwise, when the
  // layer caches anything, the missed expert's top replaces the layer's lowest-priority
  // cached expert (§3.3, "evicts the lowest-priority expert ... replaces it with the newly
  // loaded expert").
  NeuronRange KeepOnMiss(const ExpertKey& k) override {
    const LayerChoice& c = Layer(k.layer);
    const size_t key = Key(k);
    if (!member_[key] && !Admit(k, /*at_gate=*/true)) return {0, 0};
    top_present_[key] = static_cast<uint8_t>(c.top_chunks);
    return TopRange(c.top_chunks);
  }

  // Victims of this gate first, then transient pages (bottoms, non-cached experts), then
  // the cached tops by priority.
  double EvictScore(const ExpertKey& k) override {
    const size_t key = Key(k);
    if (victim_[key]) return -1;
    if (!member_[key]) return 0;
    return 1 + priorities_.Priority(k.layer, k.expert);
  }

  void OnGate(const GateEvent& e, Decisions* out) override {
    const int layer = e.layer;
    if (moe_.Ordinal(layer) < 0) return;
    const std::vector<int32_t> routed(e.routed_experts().begin(), e.routed_experts().end());

    if (!learning()) {
      // The real gate ends the layer's prefetch: unrouted predictions leave (a cached top
      // stays, its prefetched bottom goes).
      for (int32_t x : prefetched_[static_cast<size_t>(layer)]) {
        if (std::binary_search(routed.begin(), routed.end(), x)) continue;
        const ExpertKey k{layer, x};
        if (member_[Key(k)])
          out->retain.push_back({k, TopRange(top_present_[Key(k)])});
        else
          out->cancel.push_back(k);
      }
      // Routed experts whose top was not cached but that the prefetch buffer served are
      // misses of the cache too: they replace the lowest-priority tops now, in id order,
      // so the engine and the simulator decide alike whatever order experts finish in.
      // (Misses that could not be admitted at the gate are refused again here.)
      for (int32_t x : routed)
        if (!member_[Key({layer, x})]) Admit({layer, x}, /*at_gate=*/false, out);
      for (const ExpertKey& v : victims_) {
        out->retain.push_back({v, {0, 0}});
        victim_[Key(v)] = 0;
      }
      victims_.clear();
    }
    prefetched_[static_cast<size_t>(layer)].clear();

    // Statistics (H, P, PH) with the priorities as they were when the gate came, then the
    // priorities learn this gate.
    const std::vector<int32_t> ranking = priorities_.Ranking(layer);
    std::vector<int32_t> rank_of(ranking.size());
    for (size_t r = 0; r < ranking.size(); ++r)
      rank_of[static_cast<size_t>(ranking[r])] = static_cast<int32_t>(r);
    stats_[static_cast<size_t>(moe_.Ordinal(layer))].Observe(
        rank_of, routed, predicted_[static_cast<size_t>(layer)]);
    predicted_[static_cast<size_t>(layer)].clear();
    priorities_.Observe(layer, e.ids, e.n_tokens * e.top_k, e.n_tokens);

    // Predict the next MoE layer (the last layer predicts the next pass's first one).
    int next = facts_.NextMoeLayer(layer);
    if (next < 0) next = moe_.Layer(0);
    std::vector<int32_t> order;
    if (prefetch_ == PrefetchMode::kRouter && e.hidden != nullptr) {
      order = routers_->Predict(next, e.hidden, e.n_tokens, e.d).ranking;
    } else if (prefetch_ == PrefetchMode::kRandom) {
      order.resize(static_cast<size_t>(facts_.num_experts));
      std::iota(order.begin(), order.end(), 0);
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[Next() % i]);
    }
    predicted_[static_cast<size_t>(next)] = order;
    if (learning() || order.empty()) return;

    // One by one in descending predicted score, only the bottom when the top is cached,
    // until the buffer is full.
    int64_t room = static_cast<int64_t>(buffer_experts_) * chunks_;
    for (size_t y = 0; y < order.size(); ++y) {
      const ExpertKey k{next, order[y]};
      const int top = member_[Key(k)] ? top_present_[Key(k)] : 0;
      const int need = chunks_ - top;
      if (need > room) break;
      room -= need;
      if (need == 0) continue;  // Wholly cached (θ = 1).
      Prefetch p;
      p.expert = k;
      p.priority = -static_cast<double>(y);
      p.range = {top * chunk_neurons_, -1};
      out->prefetch.push_back(p);
      prefetched_[static_cast<size_t>(next)].push_back(k.expert);
    }
  }

  // A computed expert keeps its top if it is cached (admitted at the gate); bottoms and
  // everything else leave.
  void OnExpertDone(const ExpertDoneEvent& e, Decisions* out) override {
    if (learning() || moe_.Ordinal(e.layer) < 0) return;
    const ExpertKey k{e.layer, e.expert};
    if (member_[Key(k)]) {
      const int top = Layer(e.layer).top_chunks;
      top_present_[Key(k)] = static_cast<uint8_t>(top);
      if (top < chunks_) out->retain.push_back({k, TopRange(top)});
    } else {
      out->retain.push_back({k, {0, 0}});
    }
  }

  void SaveState(StateWriter& out) const override {
    priorities_.Save(out);
    out.U64(stats_.size());
    for (const LayerStatistics& s : stats_) s.Save(out);
    for (const LayerChoice& c : config_.layers) {
      out.F64(c.budget);
      out.I64(c.cache_size);
      out.I64(c.top_chunks);
    }
  }
  void LoadState(StateReader& in) override {
    priorities_.Load(in);
    Check(in.U64() == stats_.size(), in.origin(), ": MoEpic state of another number of layers");
    for (LayerStatistics& s : stats_) s.Load(in);
    Configuration saved = config_;
    double saved_total = 0, total = 0;
    for (size_t i = 0; i < saved.layers.size(); ++i) {
      LayerChoice& c = saved.layers[i];
      c.budget = in.F64();
      c.cache_size = static_cast<int>(in.I64());
      c.top_chunks = static_cast<int>(in.I64());
      Check(std::isfinite(c.budget) && c.budget >= 0 && c.cache_size >= 0 &&
                c.cache_size <= facts_.num_experts && c.top_chunks >= 0 && c.top_chunks <= chunks_,
            in.origin(), ": MoEpic state with an impossible configuration");
      saved_total += c.budget;
      total += config_.layers[i].budget;
    }
    // The saved configuration is kept only for the budget it was made for; what was learned
    // (statistics, priorities) configures any other budget afresh, as after learning.
    if (std::abs(saved_total - total) <= 1e-6 * std::max(1.0, total))
      config_ = saved;
    else if (CanConfigure())
      config_ = Configure(stats_, Budgets());
  }

  void ReportJson(nlohmann::json* report) const override {
    nlohmann::json layers = nlohmann::json::array();
    for (size_t i = 0; i < config_.layers.size(); ++i) {
      const LayerChoice& c = config_.layers[i];
      layers.push_back({{"layer", moe_.Layer(static_cast<int>(i))},
                        {"budget_experts", c.budget},
                        {"theta", c.theta(chunks_)},
                        {"cache_size", c.cache_size},
                        {"top_chunks", c.top_chunks},
                        {"expected_in_memory", c.m},
                        {"modelled_exposed_ms", c.exposed_ms},
                        {"hit_rate_at_cache_size", stats_[i].H(c.cache_size)},
                        {"gates", stats_[i].gates()}});
    }
    (*report)["moepic"] = {{"budget_experts", static_cast<double>(top_pages_) / chunks_},
                           {"buffer_experts", buffer_experts_},
                           {"chunks_per_expert", chunks_},
                           {"reconfigurations", reconfigurations_},
                           {"charts", {"budget_experts", "theta"}},
                           {"last_allocation_moves", config_.iterations},
                           {"costs_ms",
                            {{"attention", costs_.attention_ms},
                             {"expert", costs_.expert_ms},
                             {"head", costs_.head_ms},
                             {"load_expert", costs_.load_expert_ms}}},
                           {"layers", layers}};
  }

 private:
  size_t Key(const ExpertKey& k) const { return KeyIndex(k, facts_.num_experts); }
  NeuronRange TopRange(int top_chunks) const {
    if (top_chunks >= chunks_) return {};
    return {0, top_chunks * chunk_neurons_};
  }
  const LayerChoice& Layer(int layer) const {
    return config_.layers[static_cast<size_t>(moe_.Ordinal(layer))];
  }
  uint64_t Next() {  // SplitMix64.
    uint64_t z = (rng_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Replacement on a cache miss (§3.3): the missed expert's top joins the layer's cached
  // set, in place of its lowest-priority member that is not in use by this gate. At the
  // gate's demand insert the victim is marked (evicted first should the insert need room)
  // and dropped once the gate's decisions are made; otherwise it is dropped at once.
  bool Admit(const ExpertKey& k, bool at_gate, Decisions* out = nullptr) {
    const LayerChoice& c = Layer(k.layer);
    if (!replace_on_miss_ || c.top_chunks < 1 || c.cache_size < 1) return false;
    if (members_[static_cast<size_t>(k.layer)] >= c.cache_size) {
      int32_t victim = -1;
      double lowest = 0;
      for (int x = 0; x < facts_.num_experts; ++x) {
        if (!member_[Key({k.layer, x})]) continue;
        if (k.layer == routed_layer_ && routed_now_.contains(x)) continue;  // In use now.
        const double p = priorities_.Priority(k.layer, x);
        if (victim < 0 || p < lowest) victim = x, lowest = p;
      }
      if (victim < 0) return false;
      const ExpertKey v{k.layer, victim};
      Leave(v);
      if (at_gate) {
        victim_[Key(v)] = 1;
        victims_.push_back(v);
      } else {
        out->retain.push_back({v, {0, 0}});
      }
    }
    Join(k);
    return true;
  }
  void Join(const ExpertKey& k) {
    member_[Key(k)] = 1;
    ++members_[static_cast<size_t>(k.layer)];
  }
  void Leave(const ExpertKey& k) {
    member_[Key(k)] = 0;
    top_present_[Key(k)] = 0;
    --members_[static_cast<size_t>(k.layer)];
  }

  // C and top chunks from a budget and a fixed θ (the initial split and the ablations).
  void Resize(LayerChoice& c, double theta) const {
    const int64_t pages = static_cast<int64_t>(std::floor(c.budget * chunks_ + 1e-9));
    c.top_chunks =
        theta <= 0 ? 0
                   : std::clamp(static_cast<int>(std::floor(theta * chunks_ + 1e-9)), 1, chunks_);
    c.cache_size =
        c.top_chunks > 0
            ? static_cast<int>(std::min<int64_t>(facts_.num_experts, pages / c.top_chunks))
            : 0;
  }

  bool CanConfigure() const {
    return !uniform_ && costs_.known() && moe_.count() >= 2 && top_pages_ > 0;
  }
  std::vector<double> Budgets() const {
    std::vector<double> b;
    for (const LayerChoice& c : config_.layers) b.push_back(c.budget);
    return b;
  }
  // What the configurator needs besides the statistics and budgets.
  ConfiguratorInputs Inputs() const {
    ConfiguratorInputs in;
    in.t_att = costs_.attention_ms;
    in.t_exp = costs_.expert_ms;
    in.t_head = costs_.head_ms;
    in.t_load = costs_.load_expert_ms;
    in.num_experts = facts_.num_experts;
    in.chunks = chunks_;
    in.max_prefetch = buffer_experts_;
    if (fixed_theta_ >= 0) {
      LayerChoice probe;
      probe.budget = facts_.num_experts;
      Resize(probe, fixed_theta_);
      in.fixed_top_chunks = probe.top_chunks;
    }
    return in;
  }
  Configuration Configure(const std::vector<LayerStatistics>& stats,
                          const std::vector<double>& budgets) const {
    return AllocateBudgets(stats, budgets, zeta_, Inputs());
  }
  // The configuration job's input, taken by value on the driver's thread.
  struct ConfigureSnapshot {
    std::vector<LayerStatistics> stats;
    std::vector<double> budgets;
    ConfiguratorInputs in;
    double zeta = 0;
  };

  // Algorithm 1, line 10: each layer caches the tops of its C_i highest-priority experts.
  // Tops that shrink or leave drop their chunks now; new or grown tops are kept when the
  // expert is next read (a miss or a prefetch brings the whole expert anyway).
  void ApplyConfiguration(const Configuration& c, Decisions* out) {
    config_ = c;
    ++reconfigurations_;
    for (size_t i = 0; i < moe_.layers().size(); ++i) {
      const int layer = moe_.layers()[i];
      const LayerChoice& lc = config_.layers[i];
      const std::vector<int32_t> ranking = priorities_.Ranking(layer);
      std::vector<char> keep(static_cast<size_t>(facts_.num_experts), 0);
      for (int r = 0; r < lc.cache_size; ++r)
        keep[static_cast<size_t>(ranking[static_cast<size_t>(r)])] = 1;
      for (int x = 0; x < facts_.num_experts; ++x) {
        const ExpertKey k{layer, x};
        const size_t key = Key(k);
        if (member_[key] && !keep[static_cast<size_t>(x)]) {
          Leave(k);
          out->retain.push_back({k, {0, 0}});
        } else if (member_[key] && top_present_[key] > lc.top_chunks) {
          top_present_[key] = static_cast<uint8_t>(lc.top_chunks);
          out->retain.push_back({k, TopRange(lc.top_chunks)});
        } else if (!member_[key] && keep[static_cast<size_t>(x)]) {
          Join(k);
        }
      }
    }
  }

  // Forget what belongs to one run (predictions, cached sets): learning had no cache.
  void ClearTransient() {
    for (auto& p : predicted_) p.clear();
    for (auto& p : prefetched_) p.clear();
    std::fill(member_.begin(), member_.end(), 0);
    std::fill(victim_.begin(), victim_.end(), 0);
    std::fill(top_present_.begin(), top_present_.end(), 0);
    std::fill(members_.begin(), members_.end(), 0);
    victims_.clear();
  }

  PolicyFacts facts_;
  ExpertPriorities priorities_;
  std::optional<RouterTable> routers_;
  PrefetchMode prefetch_;  // The options' (MoepicOptions).
  double fixed_theta_;
  bool uniform_, replace_on_miss_;
  double zeta_;
  int64_t tau_;
  int chunks_ = 1, chunk_neurons_ = 0, buffer_experts_ = 0;
  StepCosts costs_;
  int64_t top_pages_ = 0;

  MoeLayers moe_;  // Decoder layer <-> MoE ordinal.
  std::vector<LayerStatistics> stats_;
  Configuration config_;
  std::optional<Configuration> pending_;
  bool job_pending_ = false;
  int64_t tokens_since_config_ = 0, reconfigurations_ = 0;

  std::vector<std::vector<int32_t>> predicted_;         // Per layer: the order predicted for it.
  std::vector<std::vector<int32_t>> prefetched_;        // Per layer: what was prefetched for it.
  std::vector<uint8_t> member_, victim_, top_present_;  // Per key.
  std::vector<int> members_;                            // Per layer: cached tops.
  std::vector<ExpertKey> victims_;
  std::set<int32_t> routed_now_;
  int routed_layer_ = -1;
  uint64_t rng_;
};

MOEX_REGISTER_POLICY({
    .name = "moepic",
    .roles = kPrefetches | kEvicts,
    .doc = "cache the top segment of each layer's highest-priority experts (LCP), prefetch "
           "bottoms by next-layer gate speculation, per-layer budgets and splits from the "
           "exposed-latency configurator",
    .source = "MoEpic (Yan et al.) §3.1-3.4, Algorithm 1",
    .params = ParamSpecsOf<MoepicOptions>(),
    .trace_needs = kNeedsRouterWeights | kNeedsHidden,
    .test_specs = {"moepic:tau=8,load_ms=2,expert_ms=0.5,attn_ms=0.2,head_ms=0.3",
                   "moepic:theta=1,prefetch=none,evict=lfu", "moepic:theta=0"},
    .make = [](const PolicyFacts& f, const Params& p) -> std::unique_ptr<Policy> {
      return std::make_unique<MoepicPolicy>(f, p.As<MoepicOptions>());
    },
});

}  // namespace
}  // namespace moex::policy
