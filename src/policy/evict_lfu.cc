// LFU: evict the expert routed to least often; among equals, the least recently used.
// A prefetch insertion refreshes recency but is not a use.
#include <vector>

#include "policy/composed_policy.h"

namespace moex::policy {
namespace {

class LfuEvictor : public Evictor {
 public:
  explicit LfuEvictor(const ModelConfig& c)
      : experts_(c.num_experts),
        count_(static_cast<size_t>(c.num_layers) * c.num_experts, 0),
        last_(count_.size(), 0) {}
  std::string name() const override { return "lfu"; }
  void Touch(const ExpertKey& k, bool demand) override {
    if (demand) ++count_[Index(k)];
    last_[Index(k)] = ++clock_;
  }
  // count + recency fraction in [0, 1): frequency first, recency breaks ties.
  double Score(const ExpertKey& k) override {
    const size_t i = Index(k);
    return static_cast<double>(count_[i]) +
           static_cast<double>(last_[i]) / static_cast<double>(clock_ + 1);
  }

 private:
  size_t Index(const ExpertKey& k) const {
    return static_cast<size_t>(k.layer) * experts_ + static_cast<size_t>(k.expert);
  }
  int experts_;
  std::vector<uint64_t> count_;
  std::vector<uint64_t> last_;
  uint64_t clock_ = 0;
};

}  // namespace

std::unique_ptr<Evictor> MakeLfuEvictor(const ModelConfig& config) {
  return std::make_unique<LfuEvictor>(config);
}

}  // namespace moex::policy
