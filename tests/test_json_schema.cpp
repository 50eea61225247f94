// JSON Schema -> grammar (engine/grammar/json_schema.h): each supported keyword accepts valid
// instances and rejects invalid ones (whole texts through the byte matcher), the errors of
// unsupported keywords name them, and the limits against hostile schemas hold.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "kernels/common.h"

namespace {

using tandem::Error;
using tandem::ErrorKind;
using namespace tandem::grammar;
using json = nlohmann::json;

std::shared_ptr<const Grammar> schema(const std::string& text) {
  return compile_json_schema_text(text);
}

void check(const std::string& schema_text, const std::vector<std::string>& good,
           const std::vector<std::string>& bad) {
  const auto g = schema(schema_text);
  for (const std::string& s : good) {
    INFO(schema_text << " should accept " << s);
    CHECK(accepts_text(*g, s));
  }
  for (const std::string& s : bad) {
    INFO(schema_text << " should reject " << s);
    CHECK_FALSE(accepts_text(*g, s));
  }
}

// The error kind and that the message contains `needle`.
void check_error(const std::string& schema_text, ErrorKind kind, const std::string& needle) {
  INFO(schema_text);
  try {
    schema(schema_text);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == kind);
    CHECK_THAT(e.what(), Catch::Matchers::Contains(needle));
  }
}

TEST_CASE("json_schema: primitive types", "[grammar]") {
  check(R"({"type":"null"})", {"null"}, {"nul", "nulll", "0", "\"null\""});
  check(R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "tru"});
  check(R"({"type":"integer"})", {"0", "-7", "123456", "-0"}, {"01", "1.5", "1e3", "+1", "", "-"});
  check(R"({"type":"number"})", {"0", "-1.25", "3e5", "2.5E-3", "10"},
        {".5", "1.", "01", "1e", "--1", "1e400"});
  check(R"({"type":"string"})",
        {R"("")", R"("a b")", R"("\"\\\n\u00e9")", "\"\xC3\xA9\xE2\x82\xAC\""},
        {"\"a", R"("\x")", "\"a\nb\"", R"("\ud800")", "\"\xC3\""});
  check(R"({})", {"1", "[]", R"({"a":[null,{"b":"c"}]})"}, {"[", "{a:1}"});
  check(R"(true)", {"1", "\"x\""}, {""});
}

TEST_CASE("json_schema: integer and number bounds", "[grammar]") {
  check(R"({"type":"integer","minimum":-5,"maximum":120})", {"-5", "0", "9", "99", "120", "-1"},
        {"-6", "121", "1000", "-10"});
  check(R"({"type":"integer","minimum":10})", {"10", "99", "12345"}, {"9", "0", "-3"});
  check(R"({"type":"integer","exclusiveMaximum":0})", {"-1", "-99"}, {"0", "5"});
  check(R"({"type":"integer","minimum":0.5,"maximum":2.5})", {"1", "2"}, {"0", "3"});
  check(R"({"type":"number","minimum":0,"maximum":1})", {"0", "0.5", "1", "1.0", "0.999"},
        {"-0.1", "1.5", "2", "1.01", "-1"});
  check(R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", {"0.5", "0.001"},
        {"0", "1", "0.0", "1.5"});
  check(R"({"type":"number","minimum":-2.5,"maximum":-1})", {"-2", "-1", "-1.5"}, {"0", "-3", "1"});
}

TEST_CASE("json_schema: strings with lengths, enum, const, pattern, format", "[grammar]") {
  check(R"({"type":"string","minLength":2,"maxLength":3})",
        {R"("ab")", R"("abc")", "\"\xC3\xA9x\""}, {R"("a")", R"("abcd")"});
  check(R"({"enum":["red","green",3,null,{"a":1}]})",
        {R"("red")", R"("green")", "3", "null", R"({"a":1})"}, {R"("blue")", "4", R"("Red")"});
  check(R"({"const":"x"})", {R"("x")"}, {R"("y")"});
  check(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})", {R"("AB-123")"},
        {R"("AB-12")", R"("ab-123")", R"("xAB-123")"});
  check(R"({"type":"string","pattern":"b+c"})", {R"("bc")", R"("abbcd")"}, {R"("ac")"});
  check(R"({"type":"string","pattern":"^(cat|dog)s?$"})", {R"("cat")", R"("dogs")"},
        {R"("cow")", R"("cats!")"});
  check(R"({"type":"string","pattern":"^a\"b[^x]$"})", {R"("a\"by")", R"("a\"b\n")"},
        {R"("a"b")", R"("a\"bx")"});
  check(R"({"type":"string","pattern":"^.{2}$"})", {"\"\xC3\xA9x\"", R"("\"a")"}, {R"("a")"});
  check(R"({"type":"string","format":"date"})", {R"("2024-02-28")", R"("1999-12-31")"},
        {R"("2024-13-01")", R"("2024-02-30")", R"("24-01-01")"});
  check(R"({"type":"string","format":"date-time"})",
        {R"("2024-01-05T10:20:30Z")", R"("2024-01-05T10:20:30.5+02:00")"},
        {R"("2024-01-05 10:20:30Z")", R"("2024-01-05T25:00:00Z")"});
  check(R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"},
        {R"("123e4567e89b12d3a456426614174000")"});
  check(R"({"type":"string","format":"email"})", {R"("a.b@example.com")"},
        {R"("a@b")", R"("@x.com")", R"("a..b@x.com")"});
}

TEST_CASE("json_schema: objects", "[grammar]") {
  const std::string s = R"({"type":"object","properties":{"name":{"type":"string"},
    "age":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"}}},
    "required":["name","age"],"additionalProperties":false})";
  check(s,
        {R"({"name":"x","age":3})", R"({"name":"x","age":3,"tags":[]})",
         R"({ "name": "x", "age": 3, "tags": ["a"] })", "{\n  \"name\": \"x\",\n  \"age\": 3\n}"},
        {R"({"name":"x"})", R"({"age":3,"name":"x"})", R"({"name":"x","age":3,"z":1})",
         R"({"name":"x","age":"3"})", "{}", R"({"name":"x","age":3,})"});
  // Declared order follows the text (ordered parse); optional first property.
  check(R"({"properties":{"b":{"type":"integer"},"a":{"type":"integer"}},"required":["a"],
      "additionalProperties":false})",
        {R"({"a":1})", R"({"b":2,"a":1})"}, {R"({"a":1,"b":2})", R"({"b":2})"});
  // Additional properties: absent means none next to declared properties (strict, as xgrammar
  // and OpenAI structured outputs), true allows them but never under a declared name.
  check(R"({"properties":{"id":{"type":"integer"}},"required":["id"]})", {R"({"id":1})"},
        {R"({"id":1,"x":"y"})", R"({"id":1,"id":2})"});
  check(R"({"properties":{"id":{"type":"integer"}},"required":["id"],
      "additionalProperties":true})",
        {R"({"id":1})", R"({"id":1,"x":"y"})", R"({"id":1,"i":2,"idx":[]})"},
        {R"({"id":1,"id":2})"});
  check(R"({"type":"object","additionalProperties":{"type":"integer"}})",
        {"{}", R"({"a":1,"b":2})"}, {R"({"a":"x"})"});
  check(R"({"type":"object"})", {"{}", R"({"k":[1,{"z":null}]})"}, {"[]", "{"});
  // Whitespace is bounded: a run of spaces is not JSON the model can loop on.
  check(R"({"type":"object"})", {"{ }"}, {"{   }", "{\n\n\n}", "{\n" + std::string(30, ' ') + "}"});
}

TEST_CASE("json_schema: arrays", "[grammar]") {
  check(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
        {"[1]", "[1,2,3]", "[1, 2]"}, {"[]", "[1,2,3,4]", "[1,]", "[\"a\"]"});
  check(R"({"type":"array"})", {"[]", R"([1,"a",null])"}, {"[,]"});
  check(R"({"type":"array","items":false})", {"[]"}, {"[1]"});
}

TEST_CASE("json_schema: combinators, type lists, refs", "[grammar]") {
  check(R"({"type":["string","null"]})", {R"("a")", "null"}, {"1"});
  check(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})", {"1", R"("a")"},
        {R"("ab")", "null"});
  check(R"({"oneOf":[{"const":1},{"const":2}]})", {"1", "2"}, {"3"});
  check(R"({"allOf":[{"type":"integer","maximum":3}]})", {"3"}, {"4"});
  check(R"({"type":"string","nullable":true})", {"null", R"("a")"}, {"1"});
  check(
      R"({"$defs":{"pos":{"type":"integer","minimum":1}},"type":"array","items":{"$ref":"#/$defs/pos"}})",
      {"[1,2]"}, {"[0]"});
  check(R"({"definitions":{"n":{"enum":["a"]}},"$ref":"#/definitions/n"})", {R"("a")"}, {R"("b")"});
  // A recursive tree.
  const std::string tree = R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v"],"additionalProperties":false}},"$ref":"#/$defs/node"})";
  check(tree, {R"({"v":1})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})"},
        {R"({"v":1,"kids":[{}]})", R"({"kids":[]})"});
  check(R"({"properties":{"a":{"type":"integer"}},"anyOf":[{"required":["a"]},{"properties":{}}],
           "additionalProperties":false})",
        {R"({"a":1})", "{}"}, {R"({"b":1})"});
  check(R"({"title":"T","description":"d","examples":[1],"default":1,"$schema":"x","$comment":"c",
           "type":"integer"})",
        {"1"}, {"\"a\""});
}

TEST_CASE("json_schema: unsupported keywords are named", "[grammar]") {
  for (const char* k : {"patternProperties", "not", "if", "dependentRequired", "multipleOf",
                        "propertyNames", "minProperties", "prefixItems", "unevaluatedProperties"}) {
    check_error(std::string(R"({"type":"object",")") + k + R"(":{}})", ErrorKind::kUnsupported,
                std::string("'") + k + "'");
  }
  check_error(R"({"type":"array","uniqueItems":true})", ErrorKind::kUnsupported, "'uniqueItems'");
  CHECK_NOTHROW(schema(R"({"type":"array","uniqueItems":false})"));
  check_error(R"({"allOf":[{"type":"integer"},{"minimum":1}]})", ErrorKind::kUnsupported,
              "'allOf'");
  check_error(R"({"$ref":"https://example.com/s.json"})", ErrorKind::kUnsupported, "'$ref'");
  check_error(R"({"type":"string","pattern":"(?=a)b"})", ErrorKind::kUnsupported, "lookaround");
  check_error(R"({"type":"string","pattern":"(a)\\1"})", ErrorKind::kUnsupported, "backreference");
  check_error(R"({"type":"string","pattern":"(a*)*"})", ErrorKind::kUnsupported, "empty string");
}

TEST_CASE("json_schema: malformed schemas and limits", "[grammar]") {
  check_error(R"({"type":"strin"})", ErrorKind::kInvalidArgument, "strin");
  check_error(R"({"$ref":"#/$defs/missing"})", ErrorKind::kInvalidArgument, "not found");
  check_error(R"({"type":"string","maxLength":100000})", ErrorKind::kInvalidArgument, "maxLength");
  check_error(R"({"type":"string","pattern":"a{5000}"})", ErrorKind::kInvalidArgument,
              "repetition");
  check_error(R"({"type":"string","pattern":")" + std::string(5000, 'a') + "\"}",
              ErrorKind::kInvalidArgument, "longer than");
  check_error(R"({"type":"integer","minimum":1e20})", ErrorKind::kInvalidArgument, "minimum");
  check_error(R"({"$ref":"#"})", ErrorKind::kInvalidArgument, "matches no string");
  check_error(
      R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})",
      ErrorKind::kInvalidArgument, "left-recursive");
  check_error(R"({"enum":[]})", ErrorKind::kInvalidArgument, "matches no string");
  check_error("{\"type\":", ErrorKind::kInvalidArgument, "not valid JSON");
  // Depth: 70 nested array schemas.
  std::string deep = R"({"type":"integer"})";
  for (int i = 0; i < 70; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  check_error(deep, ErrorKind::kInvalidArgument, "nested deeper");
  // Many $ref targets.
  json many = {{"$defs", json::object()}, {"anyOf", json::array()}};
  for (int i = 0; i < 1100; ++i) {
    many["$defs"]["d" + std::to_string(i)] = {{"const", i}};
    many["anyOf"].push_back({{"$ref", "#/$defs/d" + std::to_string(i)}});
  }
  try {
    compile_json_schema(many);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Matchers::Contains("$ref"));
  }
  // A long enum is one trie: one matcher stack whatever the number of values.
  json countries = {{"enum", json::array()}};
  for (int i = 0; i < 3000; ++i) countries["enum"].push_back("c" + std::to_string(i));
  const auto g = compile_json_schema(countries);
  CHECK(accepts_text(*g, "\"c2999\""));
  CHECK(accepts_text(*g, "\"c0\""));
  CHECK_FALSE(accepts_text(*g, "\"c3000\""));
  CHECK_FALSE(accepts_text(*g, "\"c\""));
  // Rule count: a schema that multiplies counted repetitions.
  std::string big = R"({"type":"array","maxItems":1000,"items":{"type":"array","maxItems":1000,
      "items":{"type":"string","maxLength":1000}}})";
  CHECK_NOTHROW(schema(big));  // repetitions share their item rule: linear, not multiplied
}

TEST_CASE("json_schema: json_object and any-value grammars", "[grammar]") {
  const auto obj = json_object_grammar();
  CHECK(accepts_text(*obj, R"({"a":[1,2,{"b":null}],"c":"d"})"));
  CHECK_FALSE(accepts_text(*obj, "[1]"));
  CHECK_FALSE(accepts_text(*obj, R"({"a":1}x)"));
  const auto any = json_value_grammar();
  for (const char* s : {"1", "\"s\"", "[]", "{}", "null", "true", "-0.5e-3"})
    CHECK(accepts_text(*any, s));
}

}  // namespace
