// Fuzz target: arbitrary text and ids through the tokenizer: normalizer, pre-tokenizer (PCRE2
// regexes with their step limit), BPE, decoder, StreamDecoder and the UTF-8 repair. Tokenizers,
// loaded once: models/tandem-demo and models/tandem-long (byte-level BPE); the demo vocabulary
// with the Llama-3 split regex (the backtracking \s+(?!\S)); a small SentencePiece-style one
// (Metaspace, byte fallback, a Sequence decoder). Input byte 0 picks the tokenizer and flags;
// the rest is text and, read as little-endian 16-bit words, ids (some out of range).
// Checked: nothing crashes; encode fails only with kInvalidArgument (a regex limit); every id it
// returns is in the vocabulary; the StreamDecoder's pieces are valid UTF-8 and concatenate to
// decode(); the incremental UTF-8 repair fed in fuzzed chunks equals the whole-string repair.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

// The harness is a function (tests/test_hostile_input.cpp runs the regression inputs through it
// in the plain build); the libFuzzer entry point is defined unless TANDEM_FUZZ_NO_ENTRY.
namespace tandem::fuzz_tokenizer {

using json = nlohmann::json;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A SentencePiece-style BPE (Llama 2 / TinyLlama layout) over a few pieces and byte fallback.
std::string sentencepiece_json() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    vocab[hex] = 3 + b;
  }
  int id = 259;
  for (const char* piece : {"\xE2\x96\x81", "\xE2\x96\x81t", "he", "\xE2\x96\x81the", "l", "o", "t",
                            "h", "e", "\xE2\x96\x81h", "ll", "llo", "\xE2\x96\x81hello"})
    vocab[piece] = id++;
  const json merges = {"\xE2\x96\x81 t",
                       "h e",
                       "\xE2\x96\x81t he",
                       "l l",
                       "ll o",
                       "\xE2\x96\x81 h",
                       "\xE2\x96\x81h e",
                       "\xE2\x96\x81he llo"};
  const json tj = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
        {{"id", 1}, {"content", "<s>"}, {"special", true}},
        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", json::array()},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}},
          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"byte_fallback", true},
        {"fuse_unk", true},
        {"vocab", vocab},
        {"merges", merges}}}};
  return tj.dump();
}

std::vector<Tokenizer> load_tokenizers() {
  const std::string root = TANDEM_SOURCE_DIR;
  std::vector<Tokenizer> out;
  out.push_back(Tokenizer::load(root + "/models/tandem-demo"));
  out.push_back(Tokenizer::load(root + "/models/tandem-long"));
  json demo = json::parse(read(root + "/models/tandem-demo/tokenizer.json"));
  const char* llama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  demo["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", llama3}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  out.push_back(Tokenizer::from_json_text(
      demo.dump(), read(root + "/models/tandem-demo/tokenizer_config.json")));
  out.push_back(Tokenizer::from_json_text(sentencepiece_json()));
  return out;
}

std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  StreamDecoder d(tok, skip);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = d.push(id);
    if (!utf8::is_valid(piece)) fail("StreamDecoder::push returned invalid UTF-8");
    out += piece;
  }
  const std::string tail = d.flush();
  if (!utf8::is_valid(tail)) fail("StreamDecoder::flush returned invalid UTF-8");
  return out + tail;
}

void check_decoders(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (bool skip : {false, true}) {
    const std::string whole = tok.decode(ids, skip);
    if (!utf8::is_valid(whole)) fail("decode returned invalid UTF-8");
    if (stream(tok, ids, skip) != whole) fail("StreamDecoder pieces differ from decode()");
  }
}

// Feeds text to utf8::Repairer in chunks whose sizes come from `sizes`.
void check_repair(std::string_view text, std::string_view sizes) {
  utf8::Repairer r;
  std::string out;
  size_t pos = 0, k = 0;
  while (pos < text.size()) {
    const size_t n = sizes.empty() ? 1 : 1 + static_cast<uint8_t>(sizes[k++ % sizes.size()]) % 7;
    r.feed(text.substr(pos, n), out);
    pos += n;
  }
  r.finish(out);
  if (out != utf8::repair(text)) fail("incremental UTF-8 repair differs from repair()");
  if (!utf8::is_valid(out)) fail("repair() returned invalid UTF-8");
  if (utf8::length(text) != utf8::code_points(text).size()) fail("length != code points");
  if (utf8::encode(utf8::code_points(text)) != out) fail("encode(code_points) != repair()");
}

int run(const uint8_t* data, size_t size) {
  static const std::vector<Tokenizer> tokenizers = load_tokenizers();
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const Tokenizer& tok = tokenizers[flags % tokenizers.size()];
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, (flags & 8) != 0, (flags & 16) != 0);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument) fail("encode threw another kind than a limit");
  }
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size() || tok.id_to_token(id).empty())
      fail("encode returned an id outside the vocabulary");
  check_decoders(tok, ids);

  std::vector<int32_t> raw;  // ids straight from the bytes: ~1 in 8 past the vocabulary
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    const int v = static_cast<uint8_t>(text[i]) | (static_cast<uint8_t>(text[i + 1]) << 8);
    raw.push_back(static_cast<int32_t>(v % (tok.vocab_size() + tok.vocab_size() / 8 + 1)));
  }
  check_decoders(tok, raw);
  check_repair(text, text.substr(text.size() / 2));
  return 0;
}

}  // namespace tandem::fuzz_tokenizer

#ifndef TANDEM_FUZZ_NO_ENTRY
// Loads the models before the first input: libFuzzer's per-input timeout does not apply here.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  return tandem::fuzz_tokenizer::run(nullptr, 0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tandem::fuzz_tokenizer::run(data, size);
}
#endif
