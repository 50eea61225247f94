// JSON Schemas the constrained-decoding tests sample from (test_grammar: through the mask with
// random logits; test_engine_grammar: through the engine with the model's own): nested objects,
// enums of mixed types, bounded arrays of bounded numbers, anyOf with a pattern, a recursive
// $ref, formats, free additionalProperties.
#pragma once

namespace tandem::test {

inline constexpr const char* kSampleSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
        "kind":{"enum":["cat","dog",null,7]},"age":{"type":"integer","minimum":0,"maximum":150},
        "owner":{"type":"object","properties":{"id":{"type":"integer"},"vip":{"type":"boolean"}},
                 "required":["id"],"additionalProperties":false}},
        "required":["name","kind","owner"],"additionalProperties":false})",
    R"({"type":"array","items":{"type":"number","minimum":-1,"maximum":1},"minItems":2,"maxItems":4})",
    R"({"anyOf":[{"type":"string","pattern":"^[a-z]{2,5}-[0-9]{2}$"},{"type":"integer","exclusiveMinimum":10},
        {"type":"null"}]})",
    R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","maximum":99},
        "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"],
        "additionalProperties":false}},"$ref":"#/$defs/node"})",
    R"({"type":"object","properties":{"when":{"type":"string","format":"date"},
        "score":{"type":"number"},"tags":{"type":"array","items":{"type":"string","minLength":1,
        "maxLength":4},"maxItems":3}},"required":["when","score"]})",
    R"({"type":"object","additionalProperties":{"type":["integer","string"]}})",
};

}  // namespace tandem::test
