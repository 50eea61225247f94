// Tokenizer: a Hugging Face tokenizer.json (BPE model) read into C++, with encode, decode and an
// incremental StreamDecoder. Covers byte-level BPE (GPT-2, OPT, Llama-3, Qwen) and
// SentencePiece-style BPE with byte fallback (Llama-2, TinyLlama): normalizers, pre-tokenizers,
// added/special tokens, the post-processor (BOS etc.) and decoders as real files use them.
//
// Parity target: the JS port of the HF tokenizers in @lenml/tokenizers (transformers.js), and the
// Rust library itself for the ids of regex pre-tokenizers (their patterns are Oniguruma's), checked
// by tests/test_tokenizer.cpp on fixtures from scripts/gen_tokenizer_fixtures.mjs. Behaviour:
//  - Input that is not valid UTF-8 is repaired first: each maximal invalid subpart becomes U+FFFD
//    (what a TextDecoder does), so encode("\xFF") == encode("\uFFFD").
//  - encode() throws on text only when a regex of the pipeline runs out of its step limit or time
//    budget (engine/tokenizer/regex.h): tandem::Error(kInvalidArgument), never a hang.
//  - Added tokens are matched leftmost-longest on the raw text before normalization (as the JS
//    port does; the Rust library matches `normalized: true` tokens after normalization).
//  - decode() skips ids that are in neither the vocabulary nor the added tokens.
//  - Invalid byte sequences produced by <0xNN> or byte-level tokens decode to one U+FFFD per
//    maximal invalid subpart (JS TextDecoder; the Rust ByteFallback emits one per byte).
//  - clean_up_tokenization_spaces (a transformers-level option) is not applied.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

namespace tok {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Reads dir/tokenizer.json and, if present, dir/tokenizer_config.json (bos/eos token names,
  // add_bos_token/add_eos_token, additional_special_tokens). Throws tandem::Error (kNotFound /
  // kInvalidArgument / kUnsupported / kIo) with a one-line message naming the file.
  static Tokenizer load(const std::filesystem::path& dir);
  static Tokenizer from_json_file(const std::filesystem::path& tokenizer_json);
  // From JSON text; `config_json` is the tokenizer_config.json text or empty; `name` is used in
  // error messages.
  static Tokenizer from_json_text(std::string_view tokenizer_json,
                                  std::string_view config_json = {},
                                  const std::string& name = "tokenizer.json");

  // add_special: apply the post-processor (e.g. BOS); parse_special: recognise special added
  // tokens written in the text (non-special added tokens are always recognised).
  std::vector<int32_t> encode(std::string_view text, bool add_special = true,
                              bool parse_special = true) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  std::string id_to_token(int32_t id) const;  // raw vocabulary string; "" for an unknown id
  std::optional<int32_t> token_to_id(std::string_view tok) const;
  int32_t vocab_size() const;  // max id + 1 over vocab and added tokens
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  bool is_special(int32_t id) const;

 private:
  friend class StreamDecoder;
  explicit Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tok::TokenizerImpl> impl_;
};

// Incremental decoding: push() one id at a time returns only complete UTF-8 (incomplete byte
// sequences are held back until they complete or turn out invalid); flush() at the end returns
// the rest. The concatenation of all pieces equals Tokenizer::decode(ids, skip_special).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = true);
  ~StreamDecoder();
  StreamDecoder(StreamDecoder&&) noexcept;
  StreamDecoder& operator=(StreamDecoder&&) noexcept;

  std::string push(int32_t id);
  std::string flush();

 private:
  struct State;
  std::shared_ptr<const tok::TokenizerImpl> impl_;
  std::unique_ptr<State> state_;
};

}  // namespace tandem
