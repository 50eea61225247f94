// The decoder of tokenizer.json as a per-token stage plus a streaming per-character stage, and
// the ByteLevel byte map (see engine/tokenizer/pipeline.h).
#include <array>
#include <nlohmann/json.hpp>

#include "engine/tokenizer/pipeline.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace tandem::tok {

using json = nlohmann::json;

namespace {

// bytes_to_unicode() of GPT-2: printable bytes map to themselves, the other 68 to U+0100...
struct ByteMap {
  std::array<std::string, 256> text;  // the UTF-8 of each byte's code point
  std::array<int16_t, 324> byte_of;   // indexed by code point (all mapped ones are < 324)
  ByteMap() {
    byte_of.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c =
          printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      utf8::append(text[b], c);
      byte_of[c] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

std::string str_or(const json& j, const char* key, const std::string& fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

int int_or(const json& j, const char* key, int fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

// "<0xNN>" -> NN, else -1 (strict two hex digits, as the Rust library parses them).
int byte_token(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[i];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return -1;
    }
    v = v * 16 + d;
  }
  return v;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

}  // namespace

const std::string& byte_to_unicode_utf8(uint8_t b) { return byte_map().text[b]; }

int unicode_to_byte(char32_t c) { return c < 324 ? byte_map().byte_of[c] : -1; }

DecoderPlan DecoderPlan::from_json(const json& j, const std::string& where) {
  DecoderPlan plan;
  if (j.is_null()) {
    plan.join_with_space_ = true;
    return plan;
  }
  plan.add(j, where);
  return plan;
}

void DecoderPlan::add(const json& j, const std::string& where) {
  TANDEM_REQUIRE(j.is_object() && j.contains("type") && j["type"].is_string(), kInvalidArgument,
                 where, ": decoder has no \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    TANDEM_REQUIRE(j.contains("decoders") && j["decoders"].is_array(), kInvalidArgument, where,
                   ": Sequence decoder has no \"decoders\" array");
    for (const json& d : j["decoders"]) add(d, where);
    return;
  }
  if (type == "Fuse") {
    fused_ = true;
    return;
  }
  if (type == "Replace") {
    const json& pattern = j.value("pattern", json::object());
    TANDEM_REQUIRE(pattern.contains("String") && pattern["String"].is_string(), kUnsupported, where,
                   ": decoder Replace supports only {\"String\"} patterns");
    const std::string from = pattern["String"].get<std::string>();
    const std::string to = str_or(j, "content", "");
    if (!fused_) {
      token_steps_.push_back({TokenStep::kReplace, from, to});
    } else {
      CharStep c{CharStep::kReplace};
      c.from = single_char(from, where, "decoder Replace pattern");
      c.to = utf8::code_points(to);
      char_steps_.push_back(std::move(c));
    }
    return;
  }
  if (type == "Strip") {
    const char32_t content = single_char(str_or(j, "content", " "), where, "decoder Strip content");
    const int start = int_or(j, "start", 0), stop = int_or(j, "stop", 0);
    if (!fused_) {
      TokenStep t{TokenStep::kStrip};
      t.content = content;
      t.start = start;
      t.stop = stop;
      token_steps_.push_back(std::move(t));
    } else {
      CharStep c{CharStep::kStrip};
      c.content = content;
      c.start = start;
      c.stop = stop;
      char_steps_.push_back(std::move(c));
    }
    return;
  }
  TANDEM_REQUIRE(!fused_, kUnsupported, where, ": decoder ", type,
                 " after Fuse/ByteFallback/ByteLevel is not supported");
  if (type == "ByteFallback" || type == "ByteLevel") {
    token_steps_.push_back(
        {type == "ByteLevel" ? TokenStep::kByteLevel : TokenStep::kByteFallback});
    fused_ = true;  // later steps see decoded text
    return;
  }
  if (type == "Metaspace") {
    TokenStep t{TokenStep::kMetaspace, str_or(j, "replacement", "\xE2\x96\x81")};
    single_char(t.from, where, "decoder Metaspace replacement");
    const std::string scheme = str_or(j, "prepend_scheme", "");
    const bool add_prefix = j.contains("add_prefix_space") && j["add_prefix_space"].is_boolean()
                                ? j["add_prefix_space"].get<bool>()
                                : true;
    t.strip_first = scheme.empty() ? add_prefix : scheme != "never";
    token_steps_.push_back(std::move(t));
    return;
  }
  if (type == "BPEDecoder") {
    // The Rust decoder turns the suffix into a space except in the last token; here every
    // suffix becomes a space and one trailing space is dropped at the end of the text.
    token_steps_.push_back({TokenStep::kBpeSuffix, str_or(j, "suffix", "</w>")});
    CharStep c{CharStep::kStrip};
    c.content = ' ';
    c.stop = 1;
    char_steps_.push_back(std::move(c));
    fused_ = true;
    return;
  }
  TANDEM_FAIL(kUnsupported, where, ": decoder type '", type, "' is not supported");
}

void DecoderPlan::token_bytes(std::string_view token, bool added, bool first,
                              std::string& out) const {
  std::string t(token);
  for (const TokenStep& s : token_steps_) {
    switch (s.kind) {
      case TokenStep::kReplace:
        replace_all(t, s.from, s.to);
        break;
      case TokenStep::kBpeSuffix:
        replace_all(t, s.from, " ");
        break;
      case TokenStep::kMetaspace:
        replace_all(t, s.from, " ");
        if (first && s.strip_first && !t.empty() && t[0] == ' ') t.erase(0, 1);
        break;
      case TokenStep::kStrip: {
        std::vector<char32_t> cps = utf8::code_points(t);
        size_t b = 0, e = cps.size();
        while (b < e && b < static_cast<size_t>(s.start) && cps[b] == s.content) ++b;
        while (e > b && cps.size() - e < static_cast<size_t>(s.stop) && cps[e - 1] == s.content)
          --e;
        t = utf8::encode(std::span<const char32_t>(cps.data() + b, cps.data() + e));
        break;
      }
      case TokenStep::kByteFallback: {
        const int b = byte_token(t);
        if (b >= 0) t.assign(1, static_cast<char>(b));
        break;
      }
      case TokenStep::kByteLevel: {
        if (added) break;  // added tokens are kept as written (as the JS reference does)
        std::string bytes;
        bool ok = true;
        for (size_t pos = 0; pos < t.size() && ok;) {
          const int b = unicode_to_byte(utf8::next(t, pos));
          ok = b >= 0;
          bytes.push_back(static_cast<char>(b));
        }
        if (ok) t = std::move(bytes);  // otherwise the token's own bytes, as in Rust
        break;
      }
    }
  }
  out += t;
}

CharStepper::CharStepper(const std::vector<DecoderPlan::CharStep>& steps)
    : steps_(&steps), state_(steps.size()) {
  for (size_t i = 0; i < steps.size(); ++i) state_[i].start_left = steps[i].start;
}

void CharStepper::emit(size_t step, char32_t c, std::string& out) {
  if (step == steps_->size()) {
    utf8::append(out, c);
    return;
  }
  const DecoderPlan::CharStep& s = (*steps_)[step];
  State& st = state_[step];
  if (s.kind == DecoderPlan::CharStep::kReplace) {
    if (c != s.from) {
      emit(step + 1, c, out);
    } else {
      for (char32_t r : s.to) emit(step + 1, r, out);
    }
    return;
  }
  if (st.start_left > 0 && c == s.content) {  // leading content characters are dropped
    --st.start_left;
    return;
  }
  st.start_left = 0;
  if (s.stop > 0 && c == s.content) {  // trailing ones are held until something follows
    st.held.push_back(c);
    return;
  }
  for (char32_t h : st.held) emit(step + 1, h, out);
  st.held.clear();
  emit(step + 1, c, out);
}

void CharStepper::flush(std::string& out) {
  for (size_t step = 0; step < steps_->size(); ++step) {
    State& st = state_[step];
    const size_t keep = st.held.size() > static_cast<size_t>((*steps_)[step].stop)
                            ? st.held.size() - (*steps_)[step].stop
                            : 0;
    std::vector<char32_t> held;
    held.swap(st.held);
    for (size_t i = 0; i < keep; ++i) emit(step + 1, held[i], out);
  }
}

}  // namespace tandem::tok
