// Constrained decoding through the engine with the model's own logits (models/tandem-demo and
// models/tandem-long, models that write Python, not JSON): for each of six schemas (nested objects,
// enums, bounded arrays of numbers, anyOf with a pattern, $refs into $defs, formats, free
// additionalProperties) 100 seeded samples at temperature 1 all end by themselves (the grammar
// completes: finish stop) and parse and validate under an independent validator
// (tests/json_validate.h); json_object output is an object; a grammar the vocabulary cannot
// write fails the request with a clear error instead of drawing a token it forbids.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/grammar/json_schema.h"
#include "tests/engine_fixture.h"
#include "tests/json_validate.h"
#include "tests/sample_schemas.h"

using namespace tandem;
using namespace tandem::test;
using json = nlohmann::json;

namespace {

GenerationRequest sampled(const std::vector<int32_t>& prompt, uint64_t seed,
                          std::shared_ptr<const grammar::Grammar> g) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = seed;
  r.max_tokens = 1000;
  r.grammar = std::move(g);
  return r;
}

}  // namespace

// The sample schemas whose documents a model ends by itself. Not the recursive tree and the free
// map of strings: a model that likes '[' or never closes a string makes their expected size
// unbounded, and no grammar can end a document that max_tokens cuts (OpenAI's strict mode
// refuses such schemas for the same reason). In their place $refs into $defs, and an enum with a
// bounded string.
std::vector<std::string> engine_schemas() {
  std::vector<std::string> out;
  for (const char* s : kSampleSchemas)
    if (std::string(s).find("#/$defs/node") == std::string::npos &&
        std::string(s).find(R"("additionalProperties":{)") == std::string::npos)
      out.emplace_back(s);
  out.emplace_back(R"({"type": "object", "properties": {
      "status": {"enum": ["ok", "failed", "retry"]}, "note": {"type": "string", "maxLength": 16},
      "code": {"type": "integer", "minimum": 100, "maximum": 599}},
      "required": ["status", "code"]})");
  out.emplace_back(R"({"$defs": {"point": {"type": "object", "properties": {
      "x": {"type": "integer", "minimum": -5, "maximum": 5}, "y": {"type": "number"}},
      "required": ["x", "y"], "additionalProperties": false}},
    "type": "object", "properties": {"from": {"$ref": "#/$defs/point"},
      "to": {"$ref": "#/$defs/point"}, "via": {"type": "array", "items": {"$ref": "#/$defs/point"},
      "maxItems": 2}}, "required": ["from", "to"], "additionalProperties": false})");
  return out;
}

TEST_CASE("engine: 100 seeded samples per schema all parse and validate, on both bundled models",
          "[engine][grammar]") {
  const char* dir = GENERATE("models/tandem-demo", "models/tandem-long");
  INFO(dir);
  Setup s(dir);
  KvStore store(s.model->backend(), s.model->kv_shape(), dense_config(), 64, 1024);
  Engine engine(*s.model, demo_tokenizer(), store, EngineOptions{});
  const auto prompt = demo_tokenizer().encode("# the answer as JSON:\n");
  size_t total_tokens = 0;
  const std::vector<std::string> schemas = engine_schemas();
  REQUIRE(schemas.size() == 6);
  for (const std::string& text : schemas) {
    const json schema = json::parse(text);
    const auto g = grammar::compile_json_schema(nlohmann::ordered_json::parse(text));
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (uint64_t seed = 0; seed < 100; ++seed)
      streams.push_back(engine.submit(sampled(prompt, seed, g)));
    for (size_t i = 0; i < streams.size(); ++i) {
      const Result r = collect(*streams[i]);
      INFO(text << "\nseed " << i << ": " << r.text << " (" << r.error << ")");
      CHECK(r.finish == FinishReason::kStop);
      total_tokens += r.tokens.size();
      const json doc = json::parse(r.text, nullptr, /*allow_exceptions=*/false);
      REQUIRE_FALSE(doc.is_discarded());
      CHECK(json_valid(doc, schema, schema));
    }
  }
  WARN("tokens generated: " << total_tokens);
  // json_object: any object. Free strings let a rambling model run to max_tokens (then the text
  // is a cut document); those that end are objects.
  int ended = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    const Result o = collect(*engine.submit(sampled(prompt, seed, grammar::json_object_grammar())));
    if (o.finish != FinishReason::kStop) continue;
    ++ended;
    INFO(o.text);
    CHECK(json::parse(o.text).is_object());
  }
  CHECK(ended >= 3);
}

TEST_CASE("engine: a grammar the vocabulary cannot write fails the request",
          "[engine][grammar][shared]") {
  // tinystories-656k's vocabulary has no token that writes '{'.
  const char* dir = "../shared/models/tinystories-656k";
  Setup s(dir);
  const Tokenizer tok = Tokenizer::load(repo_path(dir));
  KvStore store(s.model->backend(), s.model->kv_shape(), dense_config(), 4, 256);
  Engine engine(*s.model, tok, store, EngineOptions{});
  const Result r =
      collect(*engine.submit(sampled(tok.encode("Once"), 1, grammar::json_object_grammar())));
  CHECK(r.finish == FinishReason::kError);
  CHECK(r.error.find("grammar allows no token") != std::string::npos);
  CHECK(r.tokens.empty());
}
