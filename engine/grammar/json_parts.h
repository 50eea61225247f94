// Internal to engine/grammar/: the JSON building blocks the schema compiler assembles (bounded
// whitespace, string characters, numbers and integer ranges, any value) and the regex subset of
// `pattern` / `format`, all emitted into one GrammarBuilder. Each lazily built shared rule is
// created once per compilation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"

namespace tandem::grammar {

// Largest count of a pattern's {m,n}, of minLength/maxLength and of minItems/maxItems.
inline constexpr uint32_t kMaxCount = 1000;
// Longest `pattern` accepted, in bytes.
inline constexpr size_t kMaxPattern = 4096;

class JsonParts {
 public:
  explicit JsonParts(GrammarBuilder& b) : b_(b) {}
  GrammarBuilder& builder() { return b_; }

  // At most one space, or a newline and at most 24 spaces/tabs: JSON whitespace a model cannot
  // repeat forever. It goes after '{', '[' and ',' and before '}' and ']' (the layouts of
  // json.dumps and of pretty printers); a key's colon takes one space at most. A model trained on
  // indented code otherwise spends most of its tokens on indentation, and a weak one can run a
  // document of many small objects past max_tokens on whitespace alone.
  Elem ws();
  Elem sep();    // "," ws
  Elem colon();  // ":" or ": "
  // One character of a JSON string (raw UTF-8 or an escape; never a lone surrogate escape).
  Elem string_char();
  Elem string();  // "..." of any length
  Elem string_len(uint32_t min, uint32_t max);
  Elem number();   // any number (digit counts bounded so that every output parses as a double)
  Elem integer();  // any integer
  Elem boolean();
  Elem null();
  Elem value();  // any JSON value
  Elem object();
  // Integers in [lo, hi] (either side may be open).
  Elem integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
  // Numbers within bounds; exclusive flags per side. Bounds are integers here (the schema
  // compiler rounds fractional bounds inward, which stays valid).
  Elem number_range(std::optional<int64_t> lo, bool lo_excl, std::optional<int64_t> hi,
                    bool hi_excl);
  // The content of a JSON string (between the quotes) whose value matches the regex; JSON
  // Schema semantics: unanchored sides may have anything around the match.
  Elem pattern(std::string_view regex);
  // The same, the whole content matching (no implicit anchors-free padding).
  Elem regex_exact(std::string_view regex);
  // A literal of the given bytes (e.g. a serialised enum value).
  Elem literal(std::string_view bytes);
  // Any of the byte strings, as a trie of rules (shared prefixes share a stack).
  Elem literal_set(std::vector<std::string> values);

 private:
  GrammarBuilder& b_;
  std::optional<Elem> ws_, sep_, colon_, char_, string_, number_, integer_, boolean_, null_, value_,
      object_;
};

inline constexpr uint64_t kNoBound = UINT64_MAX;
// Regex text for integers in [lo, hi] (hi = kNoBound: no bound; integer parts have at most 16
// digits either way): [0-9] classes, alternation, groups, compiled by JsonParts::regex_exact.
std::string nonneg_range_regex(uint64_t lo, uint64_t hi);

}  // namespace tandem::grammar
