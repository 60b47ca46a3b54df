#include "policy/moepic/moepic_configurator.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace moex::policy {

LayerStatistics::LayerStatistics(int num_experts) : n_(num_experts) {
  hit_rank_.assign(static_cast<size_t>(n_), 0);
  pred_hit_.assign(static_cast<size_t>(n_), 0);
  pred_rank_.assign(static_cast<size_t>(n_) * static_cast<size_t>(n_), 0);
}

void LayerStatistics::Observe(const std::vector<int32_t>& priority_rank,
                              const std::vector<int32_t>& routed,
                              const std::vector<int32_t>& predicted) {
  Check(priority_rank.size() == static_cast<size_t>(n_),
        "MoEpic statistics: ", priority_rank.size(), " priority ranks for ", n_, " experts");
  ++gates_;
  std::vector<char> active(static_cast<size_t>(n_), 0);
  for (int32_t x : routed) {
    Check(x >= 0 && x < n_, "MoEpic statistics: expert ", x, " out of range");
    active[static_cast<size_t>(x)] = 1;
    ++activated_;
    ++hit_rank_[static_cast<size_t>(priority_rank[static_cast<size_t>(x)])];
  }
  if (predicted.empty()) return;
  Check(predicted.size() <= static_cast<size_t>(n_), "MoEpic statistics: too many predictions");
  ++predicted_gates_;
  for (size_t y = 0; y < predicted.size(); ++y) {
    const size_t x = static_cast<size_t>(predicted[y]);
    if (active[x]) ++pred_hit_[y];
    ++pred_rank_[y * static_cast<size_t>(n_) + static_cast<size_t>(priority_rank[x])];
  }
}

double LayerStatistics::K() const {
  return gates_ ? static_cast<double>(activated_) / static_cast<double>(gates_) : 0;
}

double LayerStatistics::H(int C) const {
  if (activated_ == 0) return 0;
  int64_t hits = 0;
  for (int r = 0; r < std::min(C, n_); ++r) hits += hit_rank_[static_cast<size_t>(r)];
  return static_cast<double>(hits) / static_cast<double>(activated_);
}

double LayerStatistics::P(int y) const {
  if (predicted_gates_ == 0 || y < 1 || y > n_) return 0;
  return static_cast<double>(pred_hit_[static_cast<size_t>(y - 1)]) /
         static_cast<double>(predicted_gates_);
}

double LayerStatistics::PH(int y, int C) const {
  if (predicted_gates_ == 0 || y < 1 || y > n_) return 0;
  int64_t hits = 0;
  const size_t row = static_cast<size_t>(y - 1) * static_cast<size_t>(n_);
  for (int r = 0; r < std::min(C, n_); ++r) hits += pred_rank_[row + static_cast<size_t>(r)];
  return static_cast<double>(hits) / static_cast<double>(predicted_gates_);
}

void LayerStatistics::Save(StateWriter& out) const {
  out.U64(static_cast<uint64_t>(n_));
  out.I64(gates_);
  out.I64(activated_);
  out.I64(predicted_gates_);
  for (int64_t v : hit_rank_) out.I64(v);
  for (int64_t v : pred_hit_) out.I64(v);
  for (int64_t v : pred_rank_) out.I64(v);
}

void LayerStatistics::Load(StateReader& in) {
  Check(in.U64() == static_cast<uint64_t>(n_), in.origin(),
        ": MoEpic statistics of another number of experts");
  gates_ = in.I64();
  activated_ = in.I64();
  predicted_gates_ = in.I64();
  for (int64_t& v : hit_rank_) v = in.I64();
  for (int64_t& v : pred_hit_) v = in.I64();
  for (int64_t& v : pred_rank_) v = in.I64();
}

namespace {

// m_i of Eq. (11) for a cache of C experts keeping `top` chunks each.
double ExpectedInMemory(const LayerStatistics& s, int C, int top, double window_ms,
                        const ConfiguratorInputs& in) {
  const double theta = static_cast<double>(top) / in.chunks;
  const double K = s.K();
  double m = K * s.H(C) * theta;  // A_cache.
  double spent = 0;
  const int Y = std::min(in.max_prefetch, in.num_experts);
  for (int y = 1; y <= Y; ++y) {
    const double share = 1 - s.PH(y, C) * theta;  // Bottom only when the top is cached.
    const double t = share * in.t_load;           // Eq. (9).
    if (spent + t > window_ms) break;             // Only whole prefetches count.
    spent += t;
    m += share * s.P(y);  // Eq. (10).
  }
  return std::min(m, K);
}

}  // namespace

LayerChoice SolveLayer(const LayerStatistics& s, double budget, double window_ms,
                       const ConfiguratorInputs& in) {
  LayerChoice best;
  best.budget = budget;
  best.window_ms = window_ms;
  // A budget below one chunk caches nothing: prefetching alone.
  best.m = ExpectedInMemory(s, 0, 0, window_ms, in);
  const int64_t pages = static_cast<int64_t>(std::floor(std::max(0.0, budget) * in.chunks + 1e-9));
  auto consider = [&](int C, int top) {
    if (C < 1 || top < 1) return;
    const double m = ExpectedInMemory(s, C, top, window_ms, in);
    if (m > best.m) {
      best.m = m;
      best.cache_size = C;
      best.top_chunks = top;
    }
  };
  if (in.fixed_top_chunks >= 0) {
    const int top = std::min(in.fixed_top_chunks, in.chunks);
    if (top > 0) consider(static_cast<int>(std::min<int64_t>(in.num_experts, pages / top)), top);
  } else {
    for (int C = 1; C <= in.num_experts; ++C)  // θ = V/C in whole chunks, at most 1.
      consider(C, static_cast<int>(std::min<int64_t>(in.chunks, pages / C)));
  }
  const double K = s.K();
  const double hide = best.m * in.t_exp, miss = (K - best.m) * in.t_load;  // Eq. (5).
  best.exposed_ms = std::max(0.0, miss - hide);                            // Eq. (6).
  return best;
}

Configuration ExpertSplit(const std::vector<LayerStatistics>& stats,
                          const std::vector<double>& budgets, const ConfiguratorInputs& in) {
  Check(stats.size() == budgets.size(), "MoEpic configurator: ", budgets.size(), " budgets for ",
        stats.size(), " layers");
  Configuration c;
  double window = in.t_head + in.t_att;  // Line 30.
  for (size_t i = 0; i < stats.size(); ++i) {
    LayerChoice l = SolveLayer(stats[i], budgets[i], window, in);
    const double K = stats[i].K();
    const double hide = l.m * in.t_exp, miss = (K - l.m) * in.t_load;
    window = (K * in.t_exp - std::min(hide, miss)) + in.t_att;  // Eq. (7).
    c.exposed_ms += l.exposed_ms;
    c.layers.push_back(l);
  }
  return c;
}

Configuration AllocateBudgets(const std::vector<LayerStatistics>& stats,
                              std::vector<double> budgets, double zeta,
                              const ConfiguratorInputs& in) {
  Check(zeta > 0 && zeta < 1, "MoEpic configurator: zeta must lie in (0, 1), not ", zeta);
  double total = 0;
  for (double v : budgets) total += v;
  const double step = zeta * total;
  const size_t L = budgets.size();
  int accepted = 0;
  for (int iter = 0; iter < in.max_iterations && step > 0 && L >= 2; ++iter) {
    const Configuration t1 = ExpertSplit(stats, budgets, in);  // Line 16.
    std::vector<double> more = budgets, less = budgets;
    for (size_t i = 0; i < L; ++i) {
      more[i] += step;
      less[i] = std::max(0.0, less[i] - step);
    }
    const Configuration t2 = ExpertSplit(stats, more, in);  // Line 17: every layer + ζV_e.
    const Configuration t3 = ExpertSplit(stats, less, in);  // Line 18: every layer - ζV_e.
    // Line 19: the largest profit from more budget (no layer beyond N experts).
    size_t i1 = L;
    double profit = -std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < L; ++i) {
      if (budgets[i] + step > in.num_experts + 1e-9) continue;
      const double p = t1.layers[i].exposed_ms - t2.layers[i].exposed_ms;
      if (p > profit) profit = p, i1 = i;
    }
    // Line 20: the smallest cost from less budget, among layers that have ζV_e to give.
    size_t i2 = L;
    double cost = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < L; ++i) {
      if (i == i1 || budgets[i] < step - 1e-12) continue;
      const double c = t3.layers[i].exposed_ms - t1.layers[i].exposed_ms;
      if (c < cost) cost = c, i2 = i;
    }
    if (i1 == L || i2 == L) break;
    std::vector<double> moved = budgets;  // Line 21.
    moved[i1] += step;
    moved[i2] -= step;
    const Configuration t4 = ExpertSplit(stats, moved, in);  // Line 22.
    if (t4.exposed_ms - t1.exposed_ms >= 0) break;           // Lines 23-25: roll back and stop.
    budgets = moved;
    ++accepted;
  }
  Configuration c = ExpertSplit(stats, budgets, in);
  c.iterations = accepted;
  return c;
}

}  // namespace moex::policy
