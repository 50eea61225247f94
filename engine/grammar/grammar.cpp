// GrammarBuilder: lowering of literals, repetitions and code point ranges to byte rules, and the
// checks of finish() (see engine/grammar/grammar.h).
#include "engine/grammar/grammar.h"

#include <functional>

#include "kernels/common.h"

namespace tandem::grammar {

namespace {

constexpr char32_t kMaxCp = 0x10FFFF;

void encode(char32_t cp, int n, uint8_t* out) {
  if (n == 1) {
    out[0] = static_cast<uint8_t>(cp);
    return;
  }
  static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  for (int i = n - 1; i > 0; --i) {
    out[i] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    cp >>= 6;
  }
  out[0] = static_cast<uint8_t>(kLead[n] | cp);
}

// [lo, hi] of one encoded length, split until every byte position is an independent range.
void split_same_len(char32_t lo, char32_t hi, int n,
                    std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) == (hi & ~m)) continue;
    if ((lo & m) != 0) {
      split_same_len(lo, lo | m, n, out);
      split_same_len((lo | m) + 1, hi, n, out);
      return;
    }
    if ((hi & m) != m) {
      split_same_len(lo, (hi & ~m) - 1, n, out);
      split_same_len(hi & ~m, hi, n, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  encode(lo, n, a);
  encode(hi, n, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(char32_t lo, char32_t hi) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  static constexpr char32_t kBounds[4] = {0x7F, 0x7FF, 0xFFFF, kMaxCp};
  for (int n = 1; n <= 4 && lo <= hi; ++n) {
    if (lo > kBounds[n - 1]) continue;
    const char32_t top = std::min(hi, kBounds[n - 1]);
    split_same_len(lo, top, n, out);
    lo = top + 1;
  }
  return out;
}

void GrammarBuilder::check_size() const {
  TANDEM_REQUIRE(rules_.size() <= kMaxRules && n_elems_ <= kMaxElems, kInvalidArgument,
                 "grammar too large: more than ", kMaxRules, " rules or ", kMaxElems, " elements");
}

Elem GrammarBuilder::byte_class(const ByteSet& s) {
  const auto [it, added] = class_ids_.emplace(s, static_cast<uint32_t>(classes_.size()));
  if (added) classes_.push_back(s);
  return {ElemKind::kClass, it->second};
}

Seq GrammarBuilder::literal(std::string_view bytes) {
  Seq s;
  for (char c : bytes) s.push_back(byte(static_cast<uint8_t>(c)));
  return s;
}

Elem GrammarBuilder::declare(std::string_view name) {
  std::string unique(name);
  const uint32_t n = name_count_[unique]++;
  if (n > 0) unique += "_" + std::to_string(n);
  rules_.push_back({std::move(unique), {}, false});
  check_size();
  return {ElemKind::kRule, static_cast<uint32_t>(rules_.size() - 1)};
}

void GrammarBuilder::define(Elem rule, std::vector<Seq> alts) {
  TANDEM_CHECK(rule.kind == ElemKind::kRule && rule.id < rules_.size(), "not a rule");
  Rule& r = rules_[rule.id];
  TANDEM_REQUIRE(!r.defined, kInvalidArgument, "grammar rule '", r.name, "' defined twice");
  for (const Seq& s : alts) n_elems_ += s.size() + 1;
  r.alts = std::move(alts);
  r.defined = true;
  check_size();
}

Elem GrammarBuilder::rule(std::string_view name, std::vector<Seq> alts) {
  const Elem r = declare(name);
  define(r, std::move(alts));
  return r;
}

Elem GrammarBuilder::repeat(std::string_view name, const Seq& body, uint32_t min, uint32_t max) {
  TANDEM_REQUIRE(min <= max, kInvalidArgument, "repetition {", min, ",", max,
                 "}: minimum above maximum");
  const std::string n(name);
  const Elem item = body.size() == 1 ? body[0] : rule(n + "_item", {body});
  Seq seq(min, item);
  n_elems_ += min;
  check_size();
  if (max == kUnbounded) {
    const Elem star = declare(n + "_star");
    define(star, {{item, star}, {}});
    seq.push_back(star);
  } else if (max > min) {
    // O_k ::= item O_{k-1} | "" : at most k more items, without left recursion.
    Elem prev = rule(n + "_opt", {{item}, {}});
    for (uint32_t k = 1; k < max - min; ++k) prev = rule(n + "_opt", {{item, prev}, {}});
    seq.push_back(prev);
  }
  return rule(n, {seq});
}

std::vector<CpRange> normalize_ranges(std::vector<CpRange> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<CpRange> merged;
  for (const CpRange& r : ranges) {
    if (r.first > r.second || r.first > kMaxCp) continue;
    const CpRange c{r.first, std::min(r.second, kMaxCp)};
    if (!merged.empty() && c.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, c.second);
    } else {
      merged.push_back(c);
    }
  }
  if (!negate) return merged;
  std::vector<CpRange> comp;
  char32_t next = 0;
  for (const CpRange& r : merged) {
    if (r.first > next) comp.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCp) comp.emplace_back(next, kMaxCp);
  return comp;
}

Elem GrammarBuilder::codepoints(std::string_view name, std::vector<CpRange> ranges, bool negate) {
  const std::vector<CpRange> merged = normalize_ranges(std::move(ranges), negate);
  // Surrogates have no UTF-8 form.
  std::vector<CpRange> valid;
  for (const CpRange& r : merged) {
    if (r.second < 0xD800 || r.first > 0xDFFF) {
      valid.push_back(r);
      continue;
    }
    if (r.first < 0xD800) valid.emplace_back(r.first, 0xD7FF);
    if (r.second > 0xDFFF) valid.emplace_back(0xE000, r.second);
  }
  ByteSet ascii;
  std::vector<Seq> alts;
  for (const CpRange& r : valid) {
    for (const auto& seq : utf8_sequences(r.first, r.second)) {
      if (seq.size() == 1) {
        ascii.add_range(seq[0].first, seq[0].second);
        continue;
      }
      Seq s;
      for (const auto& [lo, hi] : seq) {
        ByteSet b;
        b.add_range(lo, hi);
        s.push_back(byte_class(b));
      }
      alts.push_back(std::move(s));
    }
  }
  if (!ascii.empty()) alts.insert(alts.begin(), Seq{byte_class(ascii)});
  return rule(name, std::move(alts));
}

std::shared_ptr<const Grammar> GrammarBuilder::finish(Elem root) {
  TANDEM_CHECK(root.kind == ElemKind::kRule && root.id < rules_.size(), "root is not a rule");
  const size_t n = rules_.size();
  for (const Rule& r : rules_)
    TANDEM_REQUIRE(r.defined, kInvalidArgument, "grammar rule '", r.name, "' is not defined");

  // Alternatives that cannot derive a finite string are dropped (their rules' other
  // alternatives stay): then every live matcher state can still be completed.
  std::vector<char> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (const Seq& s : rules_[r].alts) {
        bool ok = true;
        for (const Elem& e : s)
          ok = ok && (e.kind == ElemKind::kClass ? !classes_[e.id].empty() : productive[e.id]);
        if (ok) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  TANDEM_REQUIRE(productive[root.id], kInvalidArgument, "grammar rule '", rules_[root.id].name,
                 "' matches no string");
  for (Rule& r : rules_) {
    std::erase_if(r.alts, [&](const Seq& s) {
      for (const Elem& e : s)
        if (e.kind == ElemKind::kClass ? classes_[e.id].empty() : !productive[e.id]) return true;
      return false;
    });
  }

  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& s : rules_[r].alts) {
        bool ok = true;
        for (const Elem& e : s) ok = ok && e.kind == ElemKind::kRule && nullable[e.id];
        if (ok) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }

  // Left recursion: a cycle of rules each reached at the start of an alternative, or after a
  // prefix that can match nothing. Iterative DFS (a deep chain must not overflow the stack).
  std::vector<std::vector<uint32_t>> first(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Seq& s : rules_[r].alts) {
      for (const Elem& e : s) {
        if (e.kind != ElemKind::kRule) break;
        first[r].push_back(e.id);
        if (!nullable[e.id]) break;
      }
    }
  }
  std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
  for (size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(start), 0}};
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, i] = path.back();
      if (i == first[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t next = first[r][i++];
      TANDEM_REQUIRE(color[next] != 1, kInvalidArgument, "grammar rule '", rules_[next].name,
                     "' is left-recursive (it can reach itself without consuming input)");
      if (color[next] == 0) {
        color[next] = 1;
        path.emplace_back(next, 0);
      }
    }
  }

  auto g = std::make_shared<Grammar>();
  g->alts_.resize(n);
  g->names_.reserve(n);
  for (size_t r = 0; r < n; ++r) {
    g->names_.push_back(std::move(rules_[r].name));
    for (const Seq& s : rules_[r].alts) {
      g->alts_[r].push_back(static_cast<uint32_t>(g->elems_.size()));
      g->elems_.insert(g->elems_.end(), s.begin(), s.end());
      g->elems_.push_back({ElemKind::kEnd, 0});
    }
  }
  g->classes_ = std::move(classes_);
  g->root_ = root.id;
  *this = GrammarBuilder();
  return g;
}

}  // namespace tandem::grammar
