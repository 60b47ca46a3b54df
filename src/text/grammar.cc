#include "text/grammar.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "text/tokenizer_utf8.h"

namespace moex {
namespace {

using Element = Grammar::Element;
using Ranges = std::vector<std::pair<char32_t, char32_t>>;
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;

constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Sorted, merged, without surrogates (they have no UTF-8 encoding).
Ranges Normalize(Ranges ranges) {
  Ranges cut;
  for (auto [lo, hi] : ranges) {
    Check(lo <= hi, "character range is reversed (U+", std::hex, uint32_t(lo), " > U+",
          uint32_t(hi), ")");
    Check(hi <= kMaxCodePoint, "character U+", std::hex, uint32_t(hi), " is above U+10FFFF");
    if (lo < 0xD800 && hi > 0xDFFF) {
      cut.push_back({lo, 0xD7FF});
      cut.push_back({0xE000, hi});
    } else if (hi < 0xD800 || lo > 0xDFFF) {
      cut.push_back({lo, hi});
    } else {
      if (lo < 0xD800) cut.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    }
  }
  std::sort(cut.begin(), cut.end());
  Ranges out;
  for (auto r : cut) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

Ranges Complement(const Ranges& ranges) {
  Ranges out;
  char32_t next = 0;
  for (auto [lo, hi] : ranges) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return Normalize(out);
}

int Utf8Length(char32_t c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

// The classic range split: [lo, hi] (no surrogates) as byte-range sequences, each matching
// exactly the encodings of a sub-range. First split where the encoding length changes, then
// where a continuation byte's range would not cover all of 80-BF.
void SplitUtf8(char32_t lo, char32_t hi, std::vector<ByteSeq>* out) {
  for (char32_t m : {char32_t(0x7F), char32_t(0x7FF), char32_t(0xFFFF)}) {
    if (lo <= m && hi > m) {
      SplitUtf8(lo, m, out);
      SplitUtf8(m + 1, hi, out);
      return;
    }
  }
  const int n = Utf8Length(hi);
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  ByteSeq seq;
  for (int i = 0; i < n; ++i) seq.push_back({uint8_t(a[size_t(i)]), uint8_t(b[size_t(i)])});
  out->push_back(std::move(seq));
}

std::string ByteText(uint8_t b) {
  if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\' && b != '[' && b != ']' && b != '-' &&
      b != '^') {
    return std::string(1, char(b));
  }
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", b);
  return buf;
}

}  // namespace

GrammarExpr GrammarExpr::Literal(std::string bytes) {
  GrammarExpr e;
  e.kind = Kind::kBytes;
  e.bytes = std::move(bytes);
  return e;
}

GrammarExpr GrammarExpr::Chars(std::vector<std::pair<char32_t, char32_t>> ranges, bool negated) {
  GrammarExpr e;
  e.kind = Kind::kChars;
  e.chars = Normalize(std::move(ranges));
  if (negated) e.chars = Complement(e.chars);
  return e;
}

GrammarExpr GrammarExpr::Ref(uint32_t rule) {
  GrammarExpr e;
  e.kind = Kind::kRule;
  e.rule = rule;
  return e;
}

GrammarExpr GrammarExpr::Seq(std::vector<GrammarExpr> items) {
  if (items.size() == 1) return std::move(items[0]);
  GrammarExpr e;
  e.kind = Kind::kSeq;
  e.items = std::move(items);
  return e;
}

GrammarExpr GrammarExpr::Alt(std::vector<GrammarExpr> items) {
  if (items.size() == 1) return std::move(items[0]);
  GrammarExpr e;
  e.kind = Kind::kAlt;
  e.items = std::move(items);
  return e;
}

GrammarExpr GrammarExpr::Repeat(GrammarExpr item, uint32_t min, uint32_t max) {
  Check(min <= max, "repetition {", min, ",", max, "} has min > max");
  Check(min <= kGrammarMaxRepeat && (max == kUnbounded || max <= kGrammarMaxRepeat),
        "repetition bound over ", kGrammarMaxRepeat, " is not supported");
  GrammarExpr e;
  e.kind = Kind::kRepeat;
  e.items.push_back(std::move(item));
  e.min = min;
  e.max = max;
  return e;
}

uint32_t GrammarBuilder::Rule(std::string_view name, std::string_view where) {
  auto it = by_name_.find(std::string(name));
  if (it != by_name_.end()) return it->second;
  const uint32_t id = uint32_t(names_.size());
  names_.emplace_back(name);
  first_use_.emplace_back(where);
  defined_.push_back(false);
  rules_.emplace_back();
  by_name_.emplace(std::string(name), id);
  CheckSize();
  return id;
}

uint32_t GrammarBuilder::NewRule(std::string_view hint) {
  std::string name(hint);
  for (size_t n = by_name_.size();; ++n) {
    if (!by_name_.count(name)) break;
    name = std::string(hint) + "-" + std::to_string(n);
  }
  return Rule(name);
}

void GrammarBuilder::CheckSize() const {
  Check(names_.size() <= kGrammarMaxRules, "grammar has more than ", kGrammarMaxRules, " rules");
  Check(elements_ <= kGrammarMaxElements, "grammar has more than ", kGrammarMaxElements,
        " elements");
}

void GrammarBuilder::Define(uint32_t rule, const GrammarExpr& body) {
  Check(rule < names_.size(), "rule id ", rule, " out of range");
  Check(!defined_[rule], "rule '", names_[rule], "' is defined twice");
  defined_[rule] = true;  // Before lowering: helper rules must not take the name.
  std::vector<Sequence> alternatives;
  if (body.kind == GrammarExpr::Kind::kAlt) {
    for (const GrammarExpr& item : body.items) {
      Sequence seq;
      Lower(item, rule, &seq);
      alternatives.push_back(std::move(seq));
    }
  } else {
    Sequence seq;
    Lower(body, rule, &seq);
    alternatives.push_back(std::move(seq));
  }
  for (const Sequence& s : alternatives) elements_ += s.size() + 1;
  rules_[rule] = std::move(alternatives);
  CheckSize();
}

uint32_t GrammarBuilder::AddRule(std::string_view hint, const GrammarExpr& body) {
  const uint32_t rule = NewRule(hint);
  Define(rule, body);
  return rule;
}

uint32_t GrammarBuilder::LowerChars(const GrammarExpr& e, uint32_t owner, Sequence* out) {
  std::vector<ByteSeq> seqs;
  for (auto [lo, hi] : e.chars) SplitUtf8(lo, hi, &seqs);
  auto append = [](const ByteSeq& s, Sequence* to) {
    for (auto [lo, hi] : s) to->push_back({Element::Kind::kBytes, lo, hi, 0});
  };
  if (seqs.size() == 1) {
    append(seqs[0], out);
    return 0;
  }
  auto it = char_rules_.find(e.chars);
  uint32_t rule;
  if (it != char_rules_.end()) {
    rule = it->second;
  } else {
    rule = NewRule(names_[owner] + "-char");
    defined_[rule] = true;
    std::vector<Sequence> alternatives(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      append(seqs[i], &alternatives[i]);
      elements_ += alternatives[i].size() + 1;
    }
    rules_[rule] = std::move(alternatives);  // Zero alternatives: an empty class never matches.
    char_rules_.emplace(e.chars, rule);
    CheckSize();
  }
  out->push_back({Element::Kind::kRule, 0, 0, rule});
  return rule;
}

void GrammarBuilder::Lower(const GrammarExpr& e, uint32_t owner, Sequence* out) {
  using Kind = GrammarExpr::Kind;
  switch (e.kind) {
    case Kind::kEmpty:
      return;
    case Kind::kBytes:
      for (char c : e.bytes) out->push_back({Element::Kind::kBytes, uint8_t(c), uint8_t(c), 0});
      elements_ += e.bytes.size();
      break;
    case Kind::kChars:
      LowerChars(e, owner, out);
      break;
    case Kind::kRule:
      Check(e.rule < names_.size(), "rule id ", e.rule, " out of range");
      out->push_back({Element::Kind::kRule, 0, 0, e.rule});
      break;
    case Kind::kSeq:
      for (const GrammarExpr& item : e.items) Lower(item, owner, out);
      break;
    case Kind::kAlt: {
      const uint32_t rule = NewRule(names_[owner] + "-alt");
      Define(rule, e);
      out->push_back({Element::Kind::kRule, 0, 0, rule});
      break;
    }
    case Kind::kRepeat: {
      Sequence item;
      Lower(e.items[0], owner, &item);
      if (item.empty()) break;  // A repeated empty sequence is empty.
      if (item.size() > 2) {    // Copied min + 1 times: share it as a rule.
        const uint32_t rule = NewRule(names_[owner] + "-item");
        defined_[rule] = true;
        elements_ += item.size() + 1;
        rules_[rule] = {std::move(item)};
        item = {{Element::Kind::kRule, 0, 0, rule}};
      }
      for (uint32_t i = 0; i < e.min; ++i) out->insert(out->end(), item.begin(), item.end());
      elements_ += size_t(e.min) * item.size();
      CheckSize();
      if (e.max == GrammarExpr::kUnbounded) {
        // star ::= item star | (empty): the recursion is a tail call, the stack stays flat.
        const uint32_t star = NewRule(names_[owner] + "-star");
        defined_[star] = true;
        Sequence loop = item;
        loop.push_back({Element::Kind::kRule, 0, 0, star});
        elements_ += loop.size() + 2;
        rules_[star] = {std::move(loop), {}};
        out->push_back({Element::Kind::kRule, 0, 0, star});
      } else if (e.max > e.min) {
        // opt_k ::= item opt_{k-1} | (empty), k = max - min down to 1.
        uint32_t prev = 0;
        for (uint32_t k = 1; k <= e.max - e.min; ++k) {
          const uint32_t opt = NewRule(names_[owner] + "-opt");
          defined_[opt] = true;
          Sequence seq = item;
          if (k > 1) seq.push_back({Element::Kind::kRule, 0, 0, prev});
          elements_ += seq.size() + 2;
          rules_[opt] = {std::move(seq), {}};
          prev = opt;
          CheckSize();
        }
        out->push_back({Element::Kind::kRule, 0, 0, prev});
      }
      CheckSize();
      break;
    }
  }
}

Grammar GrammarBuilder::Build(uint32_t root) const {
  Check(root < names_.size(), "grammar has no root rule");
  for (uint32_t r = 0; r < names_.size(); ++r) {
    if (!defined_[r]) {
      Fail("rule '", names_[r], "' is used", first_use_[r].empty() ? "" : " at ", first_use_[r],
           " but not defined");
    }
  }
  CheckSize();
  const size_t n = names_.size();

  // Nullable rules (they can match the empty string): a worklist over the alternatives, each
  // waiting for its rule references to become nullable (linear, however long helper chains are).
  std::vector<bool> nullable(n, false);
  std::vector<uint32_t> waiting;                  // per alternative
  std::vector<uint32_t> alt_rule;                 // its rule
  std::vector<std::vector<uint32_t>> waiters(n);  // alternatives that reference r
  std::vector<uint32_t> ready;
  for (uint32_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r]) {
      const uint32_t a = uint32_t(waiting.size());
      const bool has_bytes = std::any_of(
          s.begin(), s.end(), [](const Element& el) { return el.kind != Element::Kind::kRule; });
      waiting.push_back(has_bytes ? UINT32_MAX : uint32_t(s.size()));
      alt_rule.push_back(r);
      if (has_bytes) continue;
      for (const Element& el : s) waiters[el.rule].push_back(a);
      if (s.empty() && !nullable[r]) {
        nullable[r] = true;
        ready.push_back(r);
      }
    }
  }
  while (!ready.empty()) {
    const uint32_t r = ready.back();
    ready.pop_back();
    for (uint32_t a : waiters[r]) {
      if (--waiting[a] == 0 && !nullable[alt_rule[a]]) {
        nullable[alt_rule[a]] = true;
        ready.push_back(alt_rule[a]);
      }
    }
  }

  // Left edges r -> s: s can be entered from r without consuming a byte. An edge "grows" when
  // something follows s in the sequence (its continuation is pushed on the stack). A cycle of
  // left edges with a growing edge would expand forever; cycles of tail edges are harmless
  // (the matcher meets the same stack again and stops).
  struct Edge {
    uint32_t to;
    bool grows;
  };
  std::vector<std::vector<Edge>> edges(n);
  for (uint32_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r]) {
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i].kind != Element::Kind::kRule) break;
        edges[r].push_back({s[i].rule, i + 1 < s.size()});
        if (!nullable[s[i].rule]) break;
      }
    }
  }
  // Tarjan's strongly connected components, iterative (helper chains can be long).
  std::vector<int32_t> index(n, -1), low(n, 0), component(n, -1);
  std::vector<bool> on_stack(n, false);
  std::vector<uint32_t> stack;
  std::vector<std::pair<uint32_t, size_t>> work;
  int32_t counter = 0, components = 0;
  for (uint32_t start = 0; start < n; ++start) {
    if (index[start] >= 0) continue;
    work.push_back({start, 0});
    while (!work.empty()) {
      auto& [v, next] = work.back();
      if (next == 0) {
        index[v] = low[v] = counter++;
        stack.push_back(v);
        on_stack[v] = true;
      }
      if (next < edges[v].size()) {
        const uint32_t w = edges[v][next++].to;
        if (index[w] < 0) {
          work.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = false;
          component[w] = components;
        } while (w != v);
        ++components;
      }
      const uint32_t done = v;
      work.pop_back();
      if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
    }
  }
  for (uint32_t r = 0; r < n; ++r) {
    for (const Edge& e : edges[r]) {
      if (e.grows && component[e.to] == component[r]) {
        Fail("rule '", names_[r], "' is left-recursive: it reaches '", names_[e.to],
             "' again without consuming input");
      }
    }
  }

  Grammar g;
  g.root_ = root;
  g.names_ = names_;
  g.special_tokens_ = special_tokens_;
  g.alternatives_.resize(n);
  size_t total = 0;
  for (const auto& alts : rules_) {
    for (const Sequence& s : alts) total += s.size() + 1;
  }
  g.elements_.reserve(total);
  for (uint32_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r]) {
      g.alternatives_[r].push_back(uint32_t(g.elements_.size()));
      g.elements_.insert(g.elements_.end(), s.begin(), s.end());
      g.elements_.push_back({Element::Kind::kEnd, 0, 0, 0});
    }
  }
  return g;
}

std::string Grammar::ToString() const {
  std::string out;
  for (uint32_t r = 0; r < names_.size(); ++r) {
    out += names_[r] + " ::=";
    const auto& alts = alternatives_[r];
    for (size_t a = 0; a < alts.size(); ++a) {
      if (a > 0) out += " |";
      if (elements_[alts[a]].kind == Element::Kind::kEnd) out += " \"\"";
      for (uint32_t p = alts[a]; elements_[p].kind != Element::Kind::kEnd; ++p) {
        const Element& el = elements_[p];
        if (el.kind == Element::Kind::kRule) {
          out += " " + names_[el.rule];
        } else if (el.lo == el.hi) {
          out += " \"" + ByteText(el.lo) + "\"";
        } else {
          out += " [" + ByteText(el.lo) + "-" + ByteText(el.hi) + "]";
        }
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace moex
