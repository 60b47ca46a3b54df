#include "policy/common/routing_path.h"

#include <bit>
#include <stdexcept>
#include <string>

namespace moex::policy {

RoutingPath::RoutingPath(int layers, int experts)
    : layers_(layers), experts_(experts), words_per_layer_((experts + 63) / 64) {
  if (layers < 0 || experts < 0) throw std::invalid_argument("RoutingPath: negative shape");
  words_.assign(static_cast<size_t>(layers) * words_per_layer_, 0);
}

void RoutingPath::Set(int layer, int expert) {
  if (layer < 0 || layer >= layers_ || expert < 0 || expert >= experts_) {
    throw std::out_of_range("RoutingPath: (" + std::to_string(layer) + ", " +
                            std::to_string(expert) + ") outside " + std::to_string(layers_) +
                            " x " + std::to_string(experts_));
  }
  words_[static_cast<size_t>(layer) * words_per_layer_ + expert / 64] |= uint64_t{1}
                                                                         << (expert % 64);
}

bool RoutingPath::Test(int layer, int expert) const {
  if (layer < 0 || layer >= layers_ || expert < 0 || expert >= experts_) return false;
  return (words_[static_cast<size_t>(layer) * words_per_layer_ + expert / 64] >> (expert % 64)) & 1;
}

int64_t RoutingPath::Count() const {
  int64_t n = 0;
  for (uint64_t w : words_) n += std::popcount(w);
  return n;
}

int64_t RoutingPath::CountLayer(int layer) const {
  int64_t n = 0;
  if (layer < 0 || layer >= layers_) return 0;
  for (int i = 0; i < words_per_layer_; ++i) {
    n += std::popcount(words_[static_cast<size_t>(layer) * words_per_layer_ + i]);
  }
  return n;
}

void RoutingPath::CheckSameShape(const RoutingPath& other) const {
  if (other.layers_ != layers_ || other.experts_ != experts_) {
    throw std::invalid_argument("RoutingPath: shapes differ (" + std::to_string(layers_) + " x " +
                                std::to_string(experts_) + " vs " + std::to_string(other.layers_) +
                                " x " + std::to_string(other.experts_) + ")");
  }
}

int64_t RoutingPath::CountAnd(const RoutingPath& other) const {
  CheckSameShape(other);
  int64_t n = 0;
  for (size_t i = 0; i < words_.size(); ++i) n += std::popcount(words_[i] & other.words_[i]);
  return n;
}

void RoutingPath::OrWith(const RoutingPath& other) {
  CheckSameShape(other);
  for (size_t i = 0; i < words_.size(); ++i) words_[i] |= other.words_[i];
}

int64_t RoutingPath::Hamming(const RoutingPath& other) const {
  CheckSameShape(other);
  int64_t n = 0;
  for (size_t i = 0; i < words_.size(); ++i) n += std::popcount(words_[i] ^ other.words_[i]);
  return n;
}

}  // namespace moex::policy
