#include "policy/moepic/moepic_lcp.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace moex::policy {

double LcpPriority(double mu, double nu, double rho, double omega) {
  return mu * std::pow(rho, nu / omega);
}

ExpertPriorities::ExpertPriorities(int num_layers, int num_experts, Kind kind, double rho,
                                   double omega, uint64_t seed)
    : num_layers_(num_layers),
      num_experts_(num_experts),
      kind_(kind),
      rho_(rho),
      omega_(omega),
      seed_(seed) {
  Check(rho > 0 && rho < 1, "LCP: rho must lie in (0, 1), not ", rho);
  Check(omega > 0, "LCP: the observation window omega must be positive, not ", omega);
  const size_t keys = static_cast<size_t>(num_layers) * static_cast<size_t>(num_experts);
  mu_.assign(keys, 0);
  nu_.assign(keys, 0);
  gates_.assign(static_cast<size_t>(num_layers), 0);
}

void ExpertPriorities::Observe(int layer, const int32_t* ids, int64_t n_ids, int64_t n_tokens) {
  Check(layer >= 0 && layer < num_layers_, "LCP: layer ", layer, " out of range");
  std::vector<int64_t> tokens(static_cast<size_t>(num_experts_), 0);
  for (int64_t i = 0; i < n_ids; ++i) {
    Check(ids[i] >= 0 && ids[i] < num_experts_, "LCP: expert ", ids[i], " out of range");
    ++tokens[static_cast<size_t>(ids[i])];
  }
  for (int x = 0; x < num_experts_; ++x) {
    const size_t k = Index(layer, x);
    if (tokens[static_cast<size_t>(x)] > 0) {
      mu_[k] += static_cast<double>(tokens[static_cast<size_t>(x)]);
      nu_[k] = 0;
    } else {
      nu_[k] += static_cast<double>(n_tokens);
    }
  }
  ++gates_[static_cast<size_t>(layer)];
}

double ExpertPriorities::Priority(int layer, int expert) const {
  const size_t k = Index(layer, expert);
  switch (kind_) {
    case Kind::kLcp:
      return LcpPriority(mu_[k], nu_[k], rho_, omega_);
    case Kind::kLfu:
      return mu_[k];
    case Kind::kLru:  // Most recent first; never activated last.
      return mu_[k] > 0 ? -nu_[k] : -1e300;
    case Kind::kRandom: {  // A fresh draw per gate of the layer (SplitMix64).
      uint64_t z =
          seed_ + 0x9e3779b97f4a7c15ULL * (k + 1) +
          0xbf58476d1ce4e5b9ULL * static_cast<uint64_t>(gates_[static_cast<size_t>(layer)]);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      return static_cast<double>(z >> 11) / 9007199254740992.0;
    }
  }
  return 0;
}

std::vector<int32_t> ExpertPriorities::Ranking(int layer) const {
  std::vector<double> p(static_cast<size_t>(num_experts_));
  for (int x = 0; x < num_experts_; ++x) p[static_cast<size_t>(x)] = Priority(layer, x);
  std::vector<int32_t> order(static_cast<size_t>(num_experts_));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
  });
  return order;
}

void ExpertPriorities::Save(StateWriter& out) const {
  out.U64(mu_.size());
  for (size_t k = 0; k < mu_.size(); ++k) {
    out.F64(mu_[k]);
    out.F64(nu_[k]);
  }
  for (int64_t g : gates_) out.I64(g);
}

void ExpertPriorities::Load(StateReader& in) {
  Check(in.U64() == mu_.size(), in.origin(), ": MoEpic priorities of another model shape");
  for (size_t k = 0; k < mu_.size(); ++k) {
    mu_[k] = in.F64();
    nu_[k] = in.F64();
  }
  for (int64_t& g : gates_) g = in.I64();
}

}  // namespace moex::policy
