// LRU: evict the expert whose last use (routing or prefetch insertion) is oldest.
#include <vector>

#include "policy/composed_policy.h"

namespace moex::policy {
namespace {

class LruEvictor : public Evictor {
 public:
  explicit LruEvictor(const ModelConfig& c)
      : experts_(c.num_experts), last_(static_cast<size_t>(c.num_layers) * c.num_experts, 0) {}
  std::string name() const override { return "lru"; }
  void Touch(const ExpertKey& k, bool demand) override { last_[Index(k)] = ++clock_; }
  double Score(const ExpertKey& k) override { return static_cast<double>(last_[Index(k)]); }

 private:
  size_t Index(const ExpertKey& k) const {
    return static_cast<size_t>(k.layer) * experts_ + static_cast<size_t>(k.expert);
  }
  int experts_;
  std::vector<uint64_t> last_;
  uint64_t clock_ = 0;
};

}  // namespace

std::unique_ptr<Evictor> MakeLruEvictor(const ModelConfig& config) {
  return std::make_unique<LruEvictor>(config);
}

}  // namespace moex::policy
