#include "text/tokenizer_bpe.h"

#include <climits>
#include <queue>

namespace moex {
namespace {

uint64_t Mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

// Words up to this many symbols use the quadratic scan, which beats a heap on short inputs.
constexpr size_t kShortWord = 48;

}  // namespace

void BpeMerges::Grow() {
  std::vector<Entry> old = std::move(table_);
  table_.assign(old.empty() ? 1024 : old.size() * 2, Entry{kEmpty, 0, 0});
  const size_t mask = table_.size() - 1;
  for (const Entry& e : old) {
    if (e.key == kEmpty) continue;
    size_t i = Mix(e.key) & mask;
    while (table_[i].key != kEmpty) i = (i + 1) & mask;
    table_[i] = e;
  }
}

void BpeMerges::Add(int32_t left, int32_t right, int32_t merged, int32_t rank) {
  if ((count_ + 1) * 2 > table_.size()) Grow();
  const uint64_t key = Key(left, right);
  const size_t mask = table_.size() - 1;
  size_t i = Mix(key) & mask;
  while (table_[i].key != kEmpty) {
    if (table_[i].key == key) return;
    i = (i + 1) & mask;
  }
  table_[i] = Entry{key, rank, merged};
  ++count_;
}

void BpeMerges::Prefetch(int32_t a, int32_t b) const {
  if (a < 0 || b < 0 || table_.empty()) return;
  __builtin_prefetch(&table_[Mix(Key(a, b)) & (table_.size() - 1)]);
}

const BpeMerges::Entry* BpeMerges::Find(int32_t a, int32_t b) const {
  if (a < 0 || b < 0 || table_.empty()) return nullptr;
  const uint64_t key = Key(a, b);
  const size_t mask = table_.size() - 1;
  size_t i = Mix(key) & mask;
  while (true) {
    const Entry& e = table_[i];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
    i = (i + 1) & mask;
  }
}

void BpeMerges::Apply(std::vector<int32_t>* symbols) const {
  if (symbols->size() < 2) return;
  if (symbols->size() <= kShortWord) {
    ApplyShort(symbols);
  } else {
    ApplyLong(symbols);
  }
}

void BpeMerges::ApplyShort(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  // Cache each adjacent pair's entry; only the neighbours of a merge need a new lookup.
  int32_t ranks[kShortWord];
  int32_t merged[kShortWord];
  auto lookup = [&](size_t i) {
    const Entry* e = Find(s[i], s[i + 1]);
    ranks[i] = e ? e->rank : INT32_MAX;
    merged[i] = e ? e->merged : kNoSymbol;
  };
  // The table is larger than the CPU caches: start every first lookup before using any.
  for (size_t i = 0; i + 1 < s.size(); ++i) Prefetch(s[i], s[i + 1]);
  for (size_t i = 0; i + 1 < s.size(); ++i) lookup(i);
  while (s.size() >= 2) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == INT32_MAX) break;
    s[best] = merged[best];
    s.erase(s.begin() + best + 1);
    for (size_t i = best + 1; i + 1 < s.size(); ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    if (best + 1 < s.size()) lookup(best);
    if (best > 0) lookup(best - 1);
  }
}

void BpeMerges::ApplyLong(std::vector<int32_t>* symbols) const {
  std::vector<int32_t>& s = *symbols;
  const int n = static_cast<int>(s.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // Candidate merges, best first; stale ones are skipped when popped.
  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push = [&](int i) {
    const int j = next[i];
    if (i < 0 || j < 0) return;
    if (const Entry* e = Find(s[i], s[j])) queue.push({e->rank, i, s[i], s[j], e->merged});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int j = next[c.left];
    if (s[c.left] != c.left_id || j < 0 || s[j] != c.right_id) continue;
    s[c.left] = c.merged;
    s[j] = kNoSymbol - 1;  // removed
    next[c.left] = next[j];
    if (next[j] >= 0) prev[next[j]] = c.left;
    if (prev[c.left] >= 0) push(prev[c.left]);
    push(c.left);
  }
  int w = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) s[w++] = s[i];
  s.resize(w);
}

}  // namespace moex
