// Normalizers, pre-tokenizers and post-processors of tokenizer.json (see
// engine/tokenizer/pipeline.h). Where the Rust library and the JS port differ, the JS reference is
// followed unless noted; regexes follow the Rust library (engine/tokenizer/regex.h).
#include "engine/tokenizer/pipeline.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace tandem::tok {

using json = nlohmann::json;

// A float (get<int32_t>() converted 2.6e114 to int: undefined behaviour, found by
// fuzz_tokenizer_json) or an out-of-range number (it would wrap onto another id) is refused.
int32_t token_id(const json& j, const std::string& where, const std::string& what) {
  TANDEM_REQUIRE(j.is_number_integer() && j.get<int64_t>() >= 0 &&
                     j.get<int64_t>() <= std::numeric_limits<int32_t>::max(),
                 kInvalidArgument, where, ": ", what, " ", j.dump(),
                 " is not a token id (not an integer, or outside [0, 2^31))");
  return static_cast<int32_t>(j.get<int64_t>());
}

char32_t single_char(const std::string& s, const std::string& where, const std::string& what) {
  const std::vector<char32_t> cps = utf8::code_points(s);
  TANDEM_REQUIRE(cps.size() == 1, kUnsupported, where, ": ", what, " '", s,
                 "' must be one character");
  return cps[0];
}

namespace {

std::string type_of(const json& j, const std::string& where, const char* what) {
  TANDEM_REQUIRE(j.is_object(), kInvalidArgument, where, ": ", what, " is not an object");
  const auto it = j.find("type");
  TANDEM_REQUIRE(it != j.end() && it->is_string(), kInvalidArgument, where, ": ", what,
                 " has no \"type\"");
  return it->get<std::string>();
}

std::string str_or(const json& j, const char* key, const std::string& fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool bool_or(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

const json& member(const json& j, const char* key, const std::string& where, const char* what) {
  const auto it = j.find(key);
  TANDEM_REQUIRE(it != j.end(), kInvalidArgument, where, ": ", what, " has no \"", key, "\"");
  return *it;
}

// {"String": s} or {"Regex": r} of Split / Replace.
Regex make_pattern(const json& pattern, const std::string& where) {
  TANDEM_REQUIRE(pattern.is_object(), kInvalidArgument, where, ": pattern is not an object");
  if (const auto s = pattern.find("String"); s != pattern.end() && s->is_string()) {
    return Regex::literal(s->get<std::string>());
  }
  if (const auto r = pattern.find("Regex"); r != pattern.end() && r->is_string()) {
    try {
      return Regex::compile(r->get<std::string>());
    } catch (const Error& e) {
      TANDEM_FAIL(kUnsupported, where, ": ", e.what());
    }
  }
  TANDEM_FAIL(kInvalidArgument, where, ": pattern is neither {\"String\"} nor {\"Regex\"}");
}

// Replaces every match of `re` in text by `content`.
std::string replace_all(const Regex& re, const std::string& text, const std::string& content) {
  const std::vector<char32_t> cps = utf8::code_points(text);
  const auto matches = re.find_all(cps.data(), cps.size());
  if (matches.empty()) return text;
  std::string out;
  size_t at = 0;
  for (const auto& [b, e] : matches) {
    for (size_t i = at; i < b; ++i) utf8::append(out, cps[i]);
    out += content;
    at = e;
  }
  for (size_t i = at; i < cps.size(); ++i) utf8::append(out, cps[i]);
  return out;
}

// ---- Normalizers
// ---------------------------------------------------------------------------------

class SequenceNormalizer final : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> steps;
  void apply(std::string& text) const override {
    for (const auto& s : steps) s->apply(text);
  }
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::NormForm f) : form_(f) {}
  void apply(std::string& text) const override { text = unicode::normalize(text, form_); }

 private:
  unicode::NormForm form_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prefix_(std::move(p)) {}
  void apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  void apply(std::string& text) const override { text = replace_all(re_, text, content_); }

 private:
  Regex re_;
  std::string content_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void apply(std::string& text) const override { text = unicode::to_lower(text); }
};

// Strip (JS trim: ECMAScript whitespace).
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& text) const override {
    std::vector<char32_t> cps = utf8::code_points(text);
    size_t b = 0, e = cps.size();
    if (left_) {
      while (b < e && unicode::is_js_space(cps[b])) ++b;
    }
    if (right_) {
      while (e > b && unicode::is_js_space(cps[e - 1])) --e;
    }
    if (b == 0 && e == cps.size()) return;
    text = utf8::encode(std::span<const char32_t>(cps.data() + b, cps.data() + e));
  }

 private:
  bool left_, right_;
};

// StripAccents: drops nonspacing marks (Mn), as the Rust library does.
class StripAccentsNormalizer final : public Normalizer {
 public:
  void apply(std::string& text) const override {
    std::string out;
    for (size_t pos = 0; pos < text.size();) {
      const char32_t c = utf8::next(text, pos);
      if (unicode::general_category(c) != unicode::Gc::kMn) utf8::append(out, c);
    }
    text = std::move(out);
  }
};

// ---- Pre-tokenizers
// ------------------------------------------------------------------------------

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const json& j, const std::string& where) {
  const std::string b = str_or(j, "behavior", "Isolated");
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  TANDEM_FAIL(kUnsupported, where, ": unknown split behavior '", b, "'");
}

struct Segment {
  size_t b, e;
  bool is_match;
};

// Splits one piece given its delimiter segments, following the Rust SplitDelimiterBehavior.
void split_segments(const std::vector<char32_t>& cps, std::vector<Segment> segs, Behavior behavior,
                    std::vector<std::string>& out) {
  std::vector<Segment> res;
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Segment& s : segs) {
        if (!s.is_match) res.push_back(s);
      }
      break;
    case Behavior::kIsolated:
      res = std::move(segs);
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && !prev_match && !res.empty()) {
          res.back().e = s.e;
        } else {
          res.push_back(s);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t i = segs.size(); i-- > 0;) {
        const Segment& s = segs[i];
        if (s.is_match && !prev_match && !res.empty()) {
          res.back().b = s.b;
        } else {
          res.push_back(s);
        }
        prev_match = s.is_match;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && prev_match && !res.empty()) {
          res.back().e = s.e;
        } else {
          res.push_back(s);
        }
        prev_match = s.is_match;
      }
      break;
    }
  }
  for (const Segment& s : res) {
    if (s.e > s.b) {
      out.push_back(utf8::encode(std::span<const char32_t>(cps.data() + s.b, cps.data() + s.e)));
    }
  }
}

// Delimiter segments covering cps from a list of matches (is_match flipped when inverted).
std::vector<Segment> segments_from_matches(size_t n,
                                           const std::vector<std::pair<size_t, size_t>>& m,
                                           bool invert) {
  std::vector<Segment> segs;
  size_t at = 0;
  for (const auto& [b, e] : m) {
    if (e == b) continue;
    if (b > at) segs.push_back({at, b, invert});
    segs.push_back({b, e, !invert});
    at = e;
  }
  if (at < n) segs.push_back({at, n, invert});
  return segs;
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void apply(std::vector<std::string>& pieces, bool at_start) const override {
    for (const auto& s : steps) s->apply(pieces, at_start);
  }
};

// Split on a regex or string (Split, Whitespace, WhitespaceSplit, Punctuation, Digits).
class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex re, Behavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) {
      const std::vector<char32_t> cps = utf8::code_points(p);
      split_segments(
          cps, segments_from_matches(cps.size(), re_.find_all(cps.data(), cps.size()), invert_),
          behavior_, out);
    }
    pieces = std::move(out);
  }

 private:
  Regex re_;
  Behavior behavior_;
  bool invert_;
};

// The pattern of ByteLevel's use_regex (GPT-2's), as both references write it.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        use_regex_(use_regex),
        re_(Regex::compile(kGpt2Pattern)) {}
  void apply(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> split;
    for (std::string p : pieces) {
      if (add_prefix_space_ && (p.empty() || p[0] != ' ')) p.insert(0, " ");
      if (!use_regex_) {
        split.push_back(std::move(p));
        continue;
      }
      const std::vector<char32_t> cps = utf8::code_points(p);
      split_segments(cps,
                     segments_from_matches(cps.size(), re_.find_all(cps.data(), cps.size()), false),
                     Behavior::kIsolated, split);
    }
    pieces.clear();
    for (const std::string& p : split) {
      std::string mapped;
      mapped.reserve(p.size() * 2);
      for (char c : p) mapped += byte_to_unicode_utf8(static_cast<uint8_t>(c));
      pieces.push_back(std::move(mapped));
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
  Regex re_;
};

// Metaspace (Rust semantics): spaces become the replacement, a replacement is prepended per
// prepend_scheme, and with split=true the piece is split before each replacement.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, std::string scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(std::move(scheme)), split_(split) {}
  void apply(std::vector<std::string>& pieces, bool at_start) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) {
      std::string s;
      for (char c : p) {
        if (c == ' ') {
          s += replacement_;
        } else {
          s.push_back(c);
        }
      }
      const bool prepend = scheme_ == "always" || (scheme_ == "first" && at_start);
      if (prepend && s.compare(0, replacement_.size(), replacement_) != 0)
        s.insert(0, replacement_);
      if (!split_) {
        out.push_back(std::move(s));
        continue;
      }
      size_t begin = 0;
      for (size_t at = s.find(replacement_, 1); at != std::string::npos;
           at = s.find(replacement_, at + replacement_.size())) {
        if (at > begin) out.push_back(s.substr(begin, at - begin));
        begin = at;
      }
      if (begin < s.size()) out.push_back(s.substr(begin));
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_, scheme_;
  bool split_;
};

}  // namespace

// ---- Factories
// ----------------------------------------------------------------------------------------

std::unique_ptr<Normalizer> make_normalizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where, "normalizer");
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    const json& list = member(j, "normalizers", where, "Sequence normalizer");
    TANDEM_REQUIRE(list.is_array(), kInvalidArgument, where, ": normalizers is not an array");
    for (const json& n : list) {
      if (auto step = make_normalizer(n, where)) seq->steps.push_back(std::move(step));
    }
    return seq;
  }
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::NormForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::NormForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::NormForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::NormForm::kNfkd);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(str_or(j, "prepend", ""));
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(
        make_pattern(member(j, "pattern", where, "Replace"), where), str_or(j, "content", ""));
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(bool_or(j, "strip_left", false),
                                             bool_or(j, "strip_right", false));
  }
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  TANDEM_FAIL(kUnsupported, where, ": normalizer type '", type, "' is not supported");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where, "pre_tokenizer");
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePreTokenizer>();
    const json& list = member(j, "pretokenizers", where, "Sequence pre_tokenizer");
    TANDEM_REQUIRE(list.is_array(), kInvalidArgument, where, ": pretokenizers is not an array");
    for (const json& p : list) {
      if (auto step = make_pre_tokenizer(p, where)) seq->steps.push_back(std::move(step));
    }
    return seq;
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(
        make_pattern(member(j, "pattern", where, "Split"), where), parse_behavior(j, where),
        bool_or(j, "invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(bool_or(j, "add_prefix_space", true),
                                                   bool_or(j, "use_regex", true));
  }
  if (type == "Whitespace") {
    return std::make_unique<SplitPreTokenizer>(Regex::compile("\\w+|[^\\w\\s]+"),
                                               Behavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit") {
    return std::make_unique<SplitPreTokenizer>(Regex::compile("\\s+"), Behavior::kRemoved, false);
  }
  if (type == "Punctuation") {
    return std::make_unique<SplitPreTokenizer>(
        Regex::compile("[\\p{P}\\x{21}-\\x{2F}\\x{3A}-\\x{40}\\x{5B}-\\x{60}\\x{7B}-\\x{7E}]"),
        parse_behavior(j, where), false);
  }
  if (type == "Digits") {
    const bool individual = bool_or(j, "individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(Regex::compile(individual ? "\\p{N}" : "\\p{N}+"),
                                               Behavior::kIsolated, false);
  }
  if (type == "Metaspace") {
    std::string scheme = str_or(j, "prepend_scheme", "");
    if (scheme.empty()) scheme = bool_or(j, "add_prefix_space", true) ? "always" : "never";
    std::string replacement = str_or(j, "replacement", "\xE2\x96\x81");
    // Exactly one character (an empty one made the split loop spin forever; found by
    // fuzz_tokenizer_json).
    single_char(replacement, where, "pre_tokenizer Metaspace replacement");
    return std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme,
                                                   bool_or(j, "split", true));
  }
  TANDEM_FAIL(kUnsupported, where, ": pre_tokenizer type '", type, "' is not supported");
}

PostProcessor make_post_processor(const json& j, const TokenLookup& lookup,
                                  const std::string& where) {
  PostProcessor pp;
  if (j.is_null()) return pp;
  const std::string type = type_of(j, where, "post_processor");
  const auto resolve = [&](const std::string& token) {
    const auto id = lookup(token);
    TANDEM_REQUIRE(id.has_value(), kInvalidArgument, where, ": post_processor token '", token,
                   "' is not in the vocabulary");
    return *id;
  };
  if (type == "ByteLevel") return pp;
  if (type == "Sequence") {
    const json& list = member(j, "processors", where, "Sequence post_processor");
    TANDEM_REQUIRE(list.is_array(), kInvalidArgument, where, ": processors is not an array");
    for (const json& p : list) {
      PostProcessor inner = make_post_processor(p, lookup, where);
      pp.prefix.insert(pp.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      pp.suffix.insert(pp.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return pp;
  }
  if (type == "TemplateProcessing") {
    const json& single = member(j, "single", where, "TemplateProcessing");
    TANDEM_REQUIRE(single.is_array(), kInvalidArgument, where,
                   ": template \"single\" is not an array");
    const json* specials = j.contains("special_tokens") ? &j["special_tokens"] : nullptr;
    bool seen_sequence = false;
    for (const json& item : single) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      TANDEM_REQUIRE(item.contains("SpecialToken") && item["SpecialToken"].contains("id"),
                     kInvalidArgument, where,
                     ": template item is neither Sequence nor SpecialToken");
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<int32_t> ids;
      if (specials != nullptr && specials->contains(name) && (*specials)[name].contains("ids")) {
        for (const json& id : (*specials)[name]["ids"])
          ids.push_back(token_id(id, where, "special token id"));
      } else {
        ids.push_back(resolve(name));
      }
      auto& side = seen_sequence ? pp.suffix : pp.prefix;
      side.insert(side.end(), ids.begin(), ids.end());
    }
    return pp;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const json& cls = member(j, "cls", where, type.c_str());
    const json& sep = member(j, "sep", where, type.c_str());
    TANDEM_REQUIRE(cls.is_array() && cls.size() == 2 && sep.is_array() && sep.size() == 2,
                   kInvalidArgument, where, ": ", type, " cls/sep must be [token, id]");
    pp.prefix.push_back(token_id(cls[1], where, "cls id"));
    pp.suffix.push_back(token_id(sep[1], where, "sep id"));
    return pp;
  }
  TANDEM_FAIL(kUnsupported, where, ": post_processor type '", type, "' is not supported");
}

}  // namespace tandem::tok
