#include "text/grammar_matcher.h"

#include <algorithm>
#include <list>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/mutex.h"

namespace moex {
namespace {

using Element = Grammar::Element;

constexpr int32_t kDead = -1;
constexpr int32_t kUnknown = -2;
constexpr uint32_t kDropped = UINT32_MAX;
// Expand recurses once per rule entered without consuming a byte: bounded, so a chain of
// empty helper rules cannot exhaust the thread's stack.
constexpr int kMaxExpandDepth = 4096;

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h;
}

}  // namespace

TokenTrie::TokenTrie(std::vector<std::string> token_bytes, std::vector<bool> special)
    : tokens_(std::move(token_bytes)) {
  Check(special.empty() || special.size() == tokens_.size(), "token trie: ", special.size(),
        " special flags for ", tokens_.size(), " tokens");
  Check(tokens_.size() < size_t(INT32_MAX), "token trie: vocabulary too large");
  in_trie_.assign(tokens_.size(), false);
  std::vector<int32_t> ids;
  for (size_t id = 0; id < tokens_.size(); ++id) {
    const bool is_special = !special.empty() && special[id];
    if (is_special || tokens_[id].empty() || tokens_[id].size() >= UINT16_MAX) continue;
    in_trie_[id] = true;
    ids.push_back(int32_t(id));
  }
  // Sorted byte strings give the preorder directly (std::string compares bytes as unsigned).
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return tokens_[a] != tokens_[b] ? tokens_[a] < tokens_[b] : a < b;
  });
  std::vector<uint32_t> path;  // nodes from depth 1 down to the previous token's last byte
  std::vector<uint32_t> token_node;
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = tokens_[id];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    }
    while (path.size() > common) {
      end_[path.back()] = uint32_t(byte_.size());
      path.pop_back();
    }
    for (size_t k = common; k < s.size(); ++k) {
      path.push_back(uint32_t(byte_.size()));
      byte_.push_back(uint8_t(s[k]));
      depth_.push_back(uint16_t(k + 1));
      end_.push_back(0);
    }
    token_node.push_back(path.back());
    max_depth_ = std::max(max_depth_, uint16_t(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    end_[path.back()] = uint32_t(byte_.size());
    path.pop_back();
  }
  // token_node is nondecreasing: the tokens of a node are contiguous.
  token_start_.assign(byte_.size() + 1, 0);
  for (uint32_t node : token_node) ++token_start_[node + 1];
  std::partial_sum(token_start_.begin(), token_start_.end(), token_start_.begin());
  token_ids_ = ids;
}

// The interned states and the mask cache, shared by copies of a matcher.
struct GrammarMatcher::Space {
  struct Node {
    uint32_t pos, parent, depth;
  };

  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenTrie> trie;
  GrammarMatcherOptions options;
  const Element* el = nullptr;
  std::vector<std::vector<uint32_t>> initial;  // the initial state's stacks

  // Matchers that share the space (copies of one matcher) take it for every call.
  Mutex mutex;
  uint64_t epoch GUARDED_BY(mutex) = 1;
  std::vector<Node> nodes GUARDED_BY(mutex);  // nodes[0]: the empty stack
  std::unordered_map<uint64_t, uint32_t> node_index GUARDED_BY(mutex);
  // State s: its stacks' top nodes pool[set_begin[s] .. set_begin[s + 1]), sorted.
  std::vector<uint32_t> set_begin GUARDED_BY(mutex){0};
  std::vector<uint32_t> pool GUARDED_BY(mutex);
  // its row in `tables`, or -1 before its first transition
  std::vector<int32_t> set_table GUARDED_BY(mutex);
  std::unordered_multimap<uint64_t, int32_t> set_index GUARDED_BY(mutex);
  std::vector<int32_t> tables GUARDED_BY(mutex);  // 256 per row: a state, kDead or kUnknown

  struct Mask {
    std::vector<uint64_t> words;
    std::list<int32_t>::iterator lru;
  };
  std::unordered_map<int32_t, Mask> masks GUARDED_BY(mutex);
  std::list<int32_t> lru GUARDED_BY(mutex);  // most recently used first
  size_t mask_bytes GUARDED_BY(mutex) = 0;
  Stats stats GUARDED_BY(mutex);

  std::vector<uint32_t> out GUARDED_BY(mutex);  // Expand's result
  int expand_depth GUARDED_BY(mutex) = 0;       // Expand's recursion
  std::unordered_set<uint64_t> visited GUARDED_BY(mutex);
  std::vector<int32_t> walk GUARDED_BY(mutex);  // FillMask's state per trie depth
  // The special tokens (not in the trie) whose text the grammar names: FillMask tries each.
  std::vector<int32_t> special_ids;

  Space(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> t,
        const GrammarMatcherOptions& o)
      : grammar(std::move(g)), trie(std::move(t)), options(o) {
    Check(grammar != nullptr, "grammar matcher: no grammar");
    el = grammar->elements().data();
    Clear();
    out.clear();
    visited.clear();
    for (uint32_t alt : grammar->alternatives(grammar->root())) Expand(alt, 0);
    initial = StacksOf(InternSet());
    if (trie && !grammar->special_tokens().empty()) {
      const std::unordered_set<std::string> named(grammar->special_tokens().begin(),
                                                  grammar->special_tokens().end());
      for (int32_t id = 0; id < trie->vocab_size(); ++id)
        if (!trie->in_trie(id) && !trie->token(id).empty() && named.contains(trie->token(id)))
          special_ids.push_back(id);
    }
  }

  // Sets the bits of the special tokens whose whole text `state` accepts.
  void MarkSpecial(int32_t state, std::vector<uint64_t>* words) REQUIRES(mutex) {
    for (int32_t id : special_ids) {
      int32_t s = state;
      for (char c : trie->token(id)) {
        s = Advance(s, uint8_t(c));
        if (s < 0) break;
      }
      if (s >= 0) (*words)[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
    }
  }

  void Clear() REQUIRES(mutex) {
    nodes.assign(1, {UINT32_MAX, 0, 0});
    node_index.clear();
    set_begin.assign(1, 0);
    pool.clear();
    set_table.clear();
    set_index.clear();
    tables.clear();
    masks.clear();
    lru.clear();
    mask_bytes = 0;
  }

  bool TooBig() const REQUIRES(mutex) {
    const size_t states = set_table.size();
    return states > options.max_states || nodes.size() > 4 * options.max_states ||
           tables.size() / 256 > options.max_states / 4;
  }

  // Drops every interned state; matchers re-intern theirs (epoch changes).
  void Rebuild() REQUIRES(mutex) {
    Clear();
    ++epoch;
    ++stats.rebuilds;
  }

  uint32_t InternNode(uint32_t pos, uint32_t parent, bool bounded) REQUIRES(mutex) {
    const uint64_t key = (uint64_t(pos) << 32) | parent;
    auto it = node_index.find(key);
    if (it != node_index.end()) return it->second;
    const uint32_t depth = nodes[parent].depth + 1;
    if (bounded && depth > options.max_depth) return kDropped;
    const uint32_t id = uint32_t(nodes.size());
    nodes.push_back({pos, parent, depth});
    node_index.emplace(key, id);
    return id;
  }

  // Adds to `out` the stacks reached from position pos over `parent` without consuming a byte:
  // each ends at a byte range, or is the empty stack (0: the grammar is complete).
  void Expand(uint32_t pos, uint32_t parent) REQUIRES(mutex) {
    struct Nest {
      int* depth;
      explicit Nest(int* d) : depth(d) { ++*depth; }
      ~Nest() { --*depth; }
    } nest(&expand_depth);
    Check(expand_depth <= kMaxExpandDepth, "grammar nests more than ", kMaxExpandDepth,
          " rules deep without consuming input");
    for (;;) {
      const Element& e = el[pos];
      if (e.kind == Element::Kind::kEnd) {
        if (parent == 0) {
          out.push_back(0);
          return;
        }
        pos = nodes[parent].pos;  // Pop: continue after the rule reference.
        parent = nodes[parent].parent;
        continue;
      }
      // Meeting a (pos, parent) pair again adds nothing (a loop through empty alternatives).
      if (!visited.insert((uint64_t(pos) << 32) | parent).second) return;
      if (e.kind == Element::Kind::kBytes) {
        const uint32_t node = InternNode(pos, parent, true);
        if (node != kDropped) out.push_back(node);
        Check(out.size() <= 8 * options.max_stacks, "grammar is too ambiguous: more than ",
              options.max_stacks, " parse stacks");
        return;
      }
      uint32_t cont = parent;  // A reference in tail position pushes nothing.
      if (el[pos + 1].kind != Element::Kind::kEnd) {
        cont = InternNode(pos + 1, parent, true);
        if (cont == kDropped) return;
      }
      for (uint32_t alt : grammar->alternatives(e.rule)) Expand(alt, cont);
      return;
    }
  }

  // Interns `out` as a state.
  int32_t InternSet() REQUIRES(mutex) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    Check(out.size() <= options.max_stacks, "grammar is too ambiguous: ", out.size(),
          " parse stacks (limit ", options.max_stacks, ")");
    uint64_t h = out.size();
    for (uint32_t n : out) h = Mix(h, n);
    auto range = set_index.equal_range(h);
    for (auto it = range.first; it != range.second; ++it) {
      const int32_t s = it->second;
      if (set_begin[s + 1] - set_begin[s] == out.size() &&
          std::equal(out.begin(), out.end(), pool.begin() + set_begin[s])) {
        return s;
      }
    }
    const int32_t s = int32_t(set_table.size());
    pool.insert(pool.end(), out.begin(), out.end());
    set_begin.push_back(uint32_t(pool.size()));
    set_table.push_back(-1);
    set_index.emplace(h, s);
    return s;
  }

  int32_t Advance(int32_t s, uint8_t byte) REQUIRES(mutex) {
    int32_t row = set_table[s];
    if (row >= 0) {
      const int32_t next = tables[size_t(row) * 256 + byte];
      if (next != kUnknown) return next;
    } else {
      row = int32_t(tables.size() / 256);
      set_table[s] = row;
      tables.resize(tables.size() + 256, kUnknown);
    }
    out.clear();
    visited.clear();
    for (uint32_t i = set_begin[s]; i < set_begin[s + 1]; ++i) {
      const uint32_t n = pool[i];
      if (n == 0) continue;
      const Node node = nodes[n];
      const Element& e = el[node.pos];
      if (byte >= e.lo && byte <= e.hi) Expand(node.pos + 1, node.parent);
    }
    const int32_t next = out.empty() ? kDead : InternSet();
    tables[size_t(row) * 256 + byte] = next;
    return next;
  }

  std::vector<std::vector<uint32_t>> StacksOf(int32_t s) const REQUIRES(mutex) {
    std::vector<std::vector<uint32_t>> stacks;
    for (uint32_t i = set_begin[s]; i < set_begin[s + 1]; ++i) {
      std::vector<uint32_t> stack;
      for (uint32_t n = pool[i]; n != 0; n = nodes[n].parent) stack.push_back(nodes[n].pos);
      std::reverse(stack.begin(), stack.end());
      stacks.push_back(std::move(stack));
    }
    return stacks;
  }

  int32_t StateOf(const std::vector<std::vector<uint32_t>>& stacks) REQUIRES(mutex) {
    out.clear();
    for (const auto& stack : stacks) {
      uint32_t n = 0;
      for (uint32_t pos : stack) n = InternNode(pos, n, false);
      out.push_back(n);
    }
    return InternSet();
  }

  void Walk(int32_t state, std::vector<uint64_t>* words) REQUIRES(mutex) {
    const TokenTrie& t = *trie;
    walk.assign(size_t(t.max_depth_) + 1, kDead);
    walk[0] = state;
    const size_t n = t.byte_.size();
    uint64_t* w = words->data();
    for (size_t i = 0; i < n;) {
      const uint32_t depth = t.depth_[i];
      const int32_t s = walk[depth - 1];
      const uint8_t byte = t.byte_[i];
      const int32_t row = set_table[s];
      int32_t next = row >= 0 ? tables[size_t(row) * 256 + byte] : kUnknown;
      if (next == kUnknown) next = Advance(s, byte);
      if (next < 0) {
        i = t.end_[i];  // No stack takes this byte: skip every token under it.
        continue;
      }
      walk[depth] = next;
      for (uint32_t k = t.token_start_[i]; k < t.token_start_[i + 1]; ++k) {
        const uint32_t id = uint32_t(t.token_ids_[k]);
        w[id >> 6] |= uint64_t(1) << (id & 63);
      }
      ++i;
    }
  }

  void CacheMask(int32_t state, const std::vector<uint64_t>& words) REQUIRES(mutex) {
    const size_t bytes = words.size() * sizeof(uint64_t);
    if (bytes > options.mask_cache_bytes) return;
    while (mask_bytes + bytes > options.mask_cache_bytes && !lru.empty()) {
      auto it = masks.find(lru.back());
      mask_bytes -= it->second.words.size() * sizeof(uint64_t);
      masks.erase(it);
      lru.pop_back();
    }
    lru.push_front(state);
    masks.emplace(state, Mask{words, lru.begin()});
    mask_bytes += bytes;
  }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenTrie> trie,
                               const GrammarMatcherOptions& options)
    : space_(std::make_shared<Space>(std::move(grammar), std::move(trie), options)) {
  Reset();
}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(const GrammarMatcher&) = default;
GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher&) = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

// Under the space's lock: makes state_ valid in the current epoch.
void GrammarMatcher::Sync() const {
  Space& sp = *space_;
  // Space is incomplete in the header, so Sync and Enter cannot say REQUIRES(space_->mutex)
  // there; every caller takes the lock first.
  sp.mutex.AssertHeld();
  if (sp.TooBig()) sp.Rebuild();
  if (epoch_ != sp.epoch) {
    state_ = sp.StateOf(stacks_);
    epoch_ = sp.epoch;
  }
}

void GrammarMatcher::Enter(int32_t state) {
  Space& sp = *space_;
  sp.mutex.AssertHeld();  // As in Sync.
  state_ = state;
  stacks_ = sp.StacksOf(state);
  const uint32_t b = sp.set_begin[state], e = sp.set_begin[state + 1];
  complete_ = b < e && sp.pool[b] == 0;  // Sorted: the empty stack comes first.
  can_continue_ = e > b + (complete_ ? 1 : 0);
}

void GrammarMatcher::Reset() {
  MutexLock lock(&space_->mutex);
  stacks_ = space_->initial;
  epoch_ = 0;
  Sync();
  Enter(state_);
}

bool GrammarMatcher::AcceptByte(uint8_t byte) {
  return AcceptBytes(std::string_view(reinterpret_cast<const char*>(&byte), 1));
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  MutexLock lock(&space_->mutex);
  Sync();
  int32_t s = state_;
  for (char c : bytes) {
    s = space_->Advance(s, uint8_t(c));
    if (s < 0) return false;
  }
  Enter(s);
  return true;
}

bool GrammarMatcher::AcceptToken(int32_t id) {
  const TokenTrie* trie = space_->trie.get();
  Check(trie != nullptr, "grammar matcher: AcceptToken needs a token trie");
  if (id < 0 || id >= trie->vocab_size()) return false;
  if (!trie->in_trie(id) && std::find(space_->special_ids.begin(), space_->special_ids.end(), id) ==
                                space_->special_ids.end())
    return false;
  return AcceptBytes(trie->token(id));
}

void GrammarMatcher::FillMask(std::vector<uint64_t>* words) {
  Space& sp = *space_;
  Check(sp.trie != nullptr, "grammar matcher: FillMask needs a token trie");
  MutexLock lock(&sp.mutex);
  Sync();
  auto it = sp.masks.find(state_);
  if (it != sp.masks.end()) {
    ++sp.stats.mask_hits;
    sp.lru.splice(sp.lru.begin(), sp.lru, it->second.lru);
    *words = it->second.words;
    return;
  }
  ++sp.stats.mask_misses;
  words->assign((size_t(sp.trie->vocab_size()) + 63) / 64, 0);
  sp.Walk(state_, words);
  sp.MarkSpecial(state_, words);
  sp.CacheMask(state_, *words);
}

std::vector<int32_t> GrammarMatcher::AllowedTokens() {
  std::vector<uint64_t> words;
  FillMask(&words);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < space_->trie->vocab_size(); ++id) {
    if (Allows(words, id)) ids.push_back(id);
  }
  return ids;
}

GrammarMatcher::Stats GrammarMatcher::stats() const {
  MutexLock lock(&space_->mutex);
  Stats s = space_->stats;
  s.states = space_->set_table.size();
  s.stack_nodes = space_->nodes.size();
  return s;
}

}  // namespace moex
