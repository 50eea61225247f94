// The configurable stages of a tokenizer.json around the model: normalizers, pre-tokenizers,
// the post-processor (reduced to the ids put before and after a single sequence) and the
// decoder (split into a per-token stage and a streaming per-character stage, so that decode()
// and StreamDecoder share one implementation). Unsupported component types throw
// tandem::Error(kUnsupported) naming the file and the type.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::tok {

using TokenLookup = std::function<std::optional<int32_t>(std::string_view)>;

// Checked readers of tokenizer.json fields, shared by the loaders (pipeline.cpp, decoder.cpp,
// tokenizer.cpp); a bad value is refused naming `where` (the file) and `what` (the field).
// A token id: an integer in [0, 2^31) (kInvalidArgument).
int32_t token_id(const nlohmann::json& j, const std::string& where, const std::string& what);
// The single code point of s, for fields that are a Rust `char` (kUnsupported).
char32_t single_char(const std::string& s, const std::string& where, const std::string& what);

// GPT-2's reversible byte <-> printable character map used by ByteLevel.
const std::string& byte_to_unicode_utf8(uint8_t b);
// The byte for a ByteLevel character, or -1.
int unicode_to_byte(char32_t c);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& text) const = 0;
};
// nullptr for a JSON null.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its sub-pieces. `at_start`: the section begins the input (for
  // Metaspace's prepend_scheme "first").
  virtual void apply(std::vector<std::string>& pieces, bool at_start) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);

// Ids a post-processor puts around a single sequence.
struct PostProcessor {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
};
PostProcessor make_post_processor(const nlohmann::json& j, const TokenLookup& lookup,
                                  const std::string& where);

// The decoder, in two stages:
//  1. per token: the decoder steps that act on single tokens (Replace, Strip, Metaspace, BPE
//     suffix) and the byte conversions (ByteFallback <0xNN>, ByteLevel), giving bytes;
//  2. the concatenated bytes are repaired to UTF-8 (each maximal invalid subpart -> U+FFFD),
//     then the steps that follow a Fuse/ByteFallback/ByteLevel act on characters as a stream.
class DecoderPlan {
 public:
  static DecoderPlan from_json(const nlohmann::json& j, const std::string& where);

  // Stage 1 for one token; `added`: an added token (ByteLevel leaves those as they are);
  // `first`: the first token given to the decoder.
  void token_bytes(std::string_view token, bool added, bool first, std::string& out) const;
  // Without a decoder, tokens are joined with spaces.
  bool join_with_space() const { return join_with_space_; }

  struct CharStep {
    enum Kind : uint8_t { kReplace, kStrip } kind;
    char32_t from = 0;              // kReplace
    std::vector<char32_t> to = {};  // kReplace
    char32_t content = 0;           // kStrip
    int start = 0, stop = 0;        // kStrip
  };
  const std::vector<CharStep>& char_steps() const { return char_steps_; }

 private:
  struct TokenStep {
    enum Kind : uint8_t { kReplace, kStrip, kMetaspace, kBpeSuffix, kByteFallback, kByteLevel };
    Kind kind;
    std::string from = {}, to = {};  // kReplace; kMetaspace: from = replacement; kBpeSuffix: from
    char32_t content = 0;            // kStrip
    int start = 0, stop = 0;         // kStrip
    bool strip_first = false;        // kMetaspace
  };
  void add(const nlohmann::json& j, const std::string& where);

  std::vector<TokenStep> token_steps_;
  std::vector<CharStep> char_steps_;
  bool fused_ = false;  // later steps act on characters
  bool join_with_space_ = false;
};

// Streaming state of DecoderPlan::char_steps().
class CharStepper {
 public:
  explicit CharStepper(const std::vector<DecoderPlan::CharStep>& steps);
  void push(char32_t c, std::string& out) { emit(0, c, out); }
  void flush(std::string& out);

 private:
  void emit(size_t step, char32_t c, std::string& out);
  struct State {
    int start_left = 0;
    std::vector<char32_t> held;
  };
  const std::vector<DecoderPlan::CharStep>* steps_;
  std::vector<State> state_;
};

}  // namespace tandem::tok
