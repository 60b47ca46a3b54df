#include "text/tokenizer_nfc.h"

#include <algorithm>
#include <vector>

#include "text/tokenizer_utf8.h"

namespace moex {
namespace {

using namespace nfc_data;

// Hangul syllables compose and decompose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

bool IsUnstable(char32_t cp) {
  if (cp < 0x300) return false;
  const CodeRange* end = kUnstableRanges + kNumUnstableRanges;
  const CodeRange* it = std::upper_bound(
      kUnstableRanges, end, cp, [](char32_t c, const CodeRange& r) { return c < r.first; });
  return it != kUnstableRanges && cp <= (it - 1)->last;
}

uint8_t Ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningClass* end = kCombiningClasses + kNumCombiningClasses;
  const CombiningClass* it = std::lower_bound(
      kCombiningClasses, end, cp, [](const CombiningClass& c, char32_t v) { return c.cp < v; });
  return (it != end && it->cp == cp) ? it->ccc : 0;
}

void Decompose(char32_t cp, std::vector<char32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecompositions + kNumDecompositions;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, cp, [](const Decomposition& d, char32_t v) { return d.cp < v; });
  if (it != end && it->cp == cp) {
    out->insert(out->end(), kDecompositionPool + it->offset,
                kDecompositionPool + it->offset + it->length);
  } else {
    out->push_back(cp);
  }
}

// Returns 0 when the pair does not compose.
char32_t Compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const Composition* end = kCompositions + kNumCompositions;
  const Composition* it =
      std::lower_bound(kCompositions, end, std::make_pair(a, b),
                       [](const Composition& c, const std::pair<char32_t, char32_t>& v) {
                         return c.first < v.first || (c.first == v.first && c.second < v.second);
                       });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

// Normalizes a region that starts at a stable starter (or the text start) and ends before one.
void NormalizeRegion(std::string_view s, std::string* out) {
  // Canonical decomposition, then canonical ordering of each run of non-starters.
  std::vector<char32_t> cps;
  cps.reserve(s.size() + 4);
  size_t pos = 0;
  char32_t cp;
  while (pos < s.size()) {
    if (!DecodeUtf8(s, &pos, &cp)) {
      cp = 0xFFFD;
      ++pos;
    }
    Decompose(cp, &cps);
  }
  for (size_t i = 0; i < cps.size();) {
    if (Ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && Ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return Ccc(a) < Ccc(b); });
    i = j;
  }

  // Canonical composition: a character joins the last starter unless blocked by a character
  // in between with the same or higher combining class.
  std::vector<char32_t> res;
  res.reserve(cps.size());
  long starter = -1;
  int last_ccc = -1;
  for (char32_t c : cps) {
    const int ccc = Ccc(c);
    if (starter >= 0) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        const char32_t comp = Compose(res[starter], c);
        if (comp != 0) {
          res[starter] = comp;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = static_cast<long>(res.size());
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    res.push_back(c);
  }
  for (char32_t c : res) AppendUtf8(c, out);
}

}  // namespace

bool NfcIfNeeded(std::string_view s, std::string* out) {
  // Only regions around unstable characters change: each runs from the stable character
  // before the first unstable one (it may compose with it) to the next stable character, which
  // is a starter that nothing before it can reach.
  size_t pos = 0;
  size_t copied = 0;       // s[0, copied) is already in *out
  size_t last_stable = 0;  // start of the last stable character
  bool changed = false;
  char32_t cp;
  while (pos < s.size()) {
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      last_stable = pos++;
      continue;
    }
    const size_t at = pos;
    if (!DecodeUtf8(s, &pos, &cp)) {
      pos = at + 1;
      last_stable = at;
      continue;
    }
    if (!IsUnstable(cp)) {
      last_stable = at;
      continue;
    }
    const size_t begin = std::max(last_stable, copied);
    size_t end = pos;
    while (end < s.size()) {
      size_t next = end;
      if (!DecodeUtf8(s, &next, &cp)) break;
      if (!IsUnstable(cp)) break;
      end = next;
    }
    if (!changed) {
      out->clear();
      out->reserve(s.size() + 16);
      changed = true;
    }
    out->append(s.substr(copied, begin - copied));
    NormalizeRegion(s.substr(begin, end - begin), out);
    copied = end;
    pos = end;
    last_stable = end;
  }
  if (!changed) return false;
  out->append(s.substr(copied));
  if (*out == s) return false;
  return true;
}

std::string Nfc(std::string_view s) {
  std::string out;
  if (!NfcIfNeeded(s, &out)) return std::string(s);
  return out;
}

}  // namespace moex
