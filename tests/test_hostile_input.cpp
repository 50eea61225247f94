// Hostile input: every input a fuzz target once failed on (tests/fuzz/regressions/<target>/),
// replayed through the same harness in the plain build, and a test per limit of the hand-written
// parsers and interpreters (docs/fuzzing.md): nesting depth, steps, output size. Each must end
// in a clear error (a 400 for requests) in bounded time, never a crash or a hang.
#define TANDEM_FUZZ_NO_ENTRY
#include "tests/fuzz/fuzz_chat_template.cpp"
#include "tests/fuzz/fuzz_config.cpp"
#include "tests/fuzz/fuzz_jinja.cpp"
#include "tests/fuzz/fuzz_json_schema.cpp"
#include "tests/fuzz/fuzz_openai.cpp"
#include "tests/fuzz/fuzz_safetensors.cpp"
#include "tests/fuzz/fuzz_tokenizer.cpp"
#include "tests/fuzz/fuzz_tokenizer_json.cpp"
#include "tests/fuzz/fuzz_tool_calls.cpp"
#undef TANDEM_FUZZ_NO_ENTRY

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>

#include "kernels/json_depth.h"

namespace {

namespace fs = std::filesystem;
using tandem::ChatTemplate;
using tandem::Error;
using tandem::ErrorKind;
using ojson = nlohmann::ordered_json;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The message of the tandem::Error (kInvalidArgument) that rendering `src` throws; "" if none.
std::string render_error(const std::string& src) {
  try {
    ChatTemplate(src).render(ojson::object());
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidArgument);
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

tandem::openai::ApiError request_error(tandem::openai::Endpoint ep, const std::string& body) {
  auto r = tandem::openai::parse_request(ep, body, tandem::SamplingParams{});
  REQUIRE(std::holds_alternative<tandem::openai::ApiError>(r));
  return std::get<tandem::openai::ApiError>(r);
}

}  // namespace

TEST_CASE("every saved fuzz finding replays without a crash", "[hostile]") {
  const std::map<std::string, std::function<int(const uint8_t*, size_t)>> harness = {
      {"chat_template", tandem::fuzz_chat_template::run},
      {"config", tandem::fuzz_config::run},
      {"jinja", tandem::fuzz_jinja::run},
      {"json_schema", tandem::fuzz_json_schema::run},
      {"openai", tandem::fuzz_openai::run},
      {"safetensors", tandem::fuzz_safetensors::run},
      {"tokenizer", tandem::fuzz_tokenizer::run},
      {"tokenizer_json", tandem::fuzz_tokenizer_json::run},
      {"tool_calls", tandem::fuzz_tool_calls::run}};
  const fs::path dir = fs::path(TANDEM_SOURCE_DIR) / "tests/fuzz/regressions";
  int replayed = 0;
  for (const auto& [target, run] : harness) {
    if (!fs::is_directory(dir / target)) continue;
    for (const auto& entry : fs::directory_iterator(dir / target)) {
      INFO(entry.path().string());
      const std::string data = read_bytes(entry.path());
      const auto t0 = std::chrono::steady_clock::now();
      CHECK(run(reinterpret_cast<const uint8_t*>(data.data()), data.size()) == 0);
      CHECK(seconds_since(t0) < 10.0);  // libFuzzer's -timeout in scripts/fuzz.sh
      ++replayed;
    }
  }
  for (const auto& entry : fs::directory_iterator(dir))  // a folder per target, no strays
    if (entry.is_directory()) CHECK(harness.count(entry.path().filename().string()) == 1);
  INFO("replayed " << replayed << " inputs");
  CHECK(replayed > 0);
}

TEST_CASE("json_depth skips strings and stops early", "[hostile]") {
  using tandem::json_depth;
  CHECK(json_depth("", 10) == 0);
  CHECK(json_depth("1", 10) == 0);
  CHECK(json_depth("[1, {\"a\": [2]}]", 10) == 3);
  CHECK(json_depth("[\"[[[[\\\"[[[\"]", 10) == 1);  // brackets and an escaped quote in a string
  CHECK(json_depth(std::string(100, '['), 10) == 11);
  CHECK(json_depth("]]]]{}", 10) == 1);
}

TEST_CASE("request bodies nested too deeply are a 400 before parsing", "[hostile]") {
  using tandem::openai::Endpoint;
  // 8 MB of '[' (the HTTP body cap) used to parse into gigabytes and overflow the stack when the
  // messages were copied; now refused at once.
  const std::string deep =
      "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], "
      "\"chat_template_kwargs\": {\"x\": " +
      std::string(8 << 20, '[') + "}";
  const auto t0 = std::chrono::steady_clock::now();
  const auto e = request_error(Endpoint::kChat, deep);
  CHECK(e.status == 400);
  CHECK(contains(e.message, "nested deeper than 128 levels"));
  CHECK(seconds_since(t0) < 10.0);
  // 128 levels still pass (tools carry deep JSON schemas).
  std::string ok_tools = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": ";
  ok_tools += std::string(126, '[') + std::string(126, ']') + "}";
  auto r = tandem::openai::parse_request(Endpoint::kChat, ok_tools, tandem::SamplingParams{});
  CHECK(std::holds_alternative<tandem::openai::ApiRequest>(r));
}

TEST_CASE("Jinja values nested or shared without bound fail cleanly", "[hostile]") {
  // A chain 100k lists deep: printing it stops at the depth limit, and freeing it (when the
  // render ends) does not recurse once per level.
  CHECK(contains(render_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}"
                              "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
                 "nested too deeply"));
  CHECK(render_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}"
                     "{% set ns.x = [ns.x] %}{% endfor %}done") == "");
  CHECK(contains(render_error("{% set ns = namespace(x=[]) %}{% for i in range(2000) %}"
                              "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x == ns.x }}"),
                 "nested too deeply"));
  // Shared halves print exponentially: the size check runs while printing.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(contains(render_error("{% set ns = namespace(x=[1]) %}{% for i in range(60) %}"
                              "{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x | tojson }}"),
                 "too long"));
  CHECK(seconds_since(t0) < 30.0);  // (was unbounded; generous for loaded CI machines)
}

TEST_CASE("Jinja reference cycles are refused when printed and freed after the render",
          "[hostile]") {
  // Under the address sanitizer (TANDEM_SANITIZE) a leak here fails the test program.
  CHECK(contains(render_error("{% set a = [] %}{% set _ = a.append(a) %}{{ a }}"),
                 "nested too deeply"));
  CHECK(render_error("{% set a = [] %}{% set _ = a.append(a) %}{% set d = {} %}"
                     "{% set _ = d.update({'d': d}) %}{% set ns = namespace() %}"
                     "{% set ns.me = ns %}ok") == "");
  CHECK(ChatTemplate("{% macro f() %}{% set a = [1] %}{% set _ = a.append(a) %}{% endmacro %}"
                     "{% for i in range(1000) %}{{ f() }}{% endfor %}x")
            .render(ojson::object()) == "x");
}

TEST_CASE("Jinja step and output limits", "[hostile]") {
  CHECK(contains(render_error("{% for i in range(999999) %}{% for j in range(999999) %}"
                              "{% endfor %}{% endfor %}"),
                 "too many loop iterations"));
  CHECK(contains(render_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"),
                 "too long"));
  CHECK(contains(render_error("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}"),
                 "nested too deeply"));
}

TEST_CASE("prompt text past the prompt cap is a 400 before it is tokenized", "[hostile]") {
  using namespace tandem::openai;
  const tandem::fuzz_openai::Model model;
  const std::string body = "{\"prompt\": \"" + std::string(9 << 20, 'a') + "\"}";
  auto r = parse_request(Endpoint::kCompletions, body, tandem::SamplingParams{});
  REQUIRE(std::holds_alternative<ApiRequest>(r));
  const auto t0 = std::chrono::steady_clock::now();
  auto p = plan_request(std::get<ApiRequest>(r), model.info());
  REQUIRE(std::holds_alternative<ApiError>(p));
  const ApiError& e = std::get<ApiError>(p);
  CHECK(e.status == 400);
  CHECK(contains(e.message, "bytes of text"));
  CHECK(seconds_since(t0) < 10.0);
}

TEST_CASE("model files nested too deeply are refused naming the file", "[hostile]") {
  std::string norm = "{\"type\": \"Lowercase\"}";
  for (int i = 0; i < 40; ++i) norm = "{\"type\": \"Sequence\", \"normalizers\": [" + norm + "]}";
  const std::string tj = "{\"normalizer\": " + norm +
                         ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}";
  try {
    (void)tandem::Tokenizer::from_json_text(tj, "", "deep/tokenizer.json");
    FAIL("a tokenizer.json nested 80 levels deep loaded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidArgument);
    CHECK(contains(e.what(), "deep/tokenizer.json: JSON nested deeper than 64 levels"));
  }
  const std::string cfg =
      "{\"model_type\": \"llama\", \"rope_scaling\": {\"x\": " + std::string(100, '[') +
      std::string(100, ']') + "}}";
  try {
    (void)tandem::parse_config(cfg, "", "deep/config.json");
    FAIL("a config.json nested 100 levels deep loaded");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "deep/config.json: JSON nested deeper than 64 levels"));
  }
}

TEST_CASE("a safetensors shape whose element count overflows is refused", "[hostile]") {
  // 2^32 x 2^32 elements wrap around to 0 bytes, which used to match data_offsets [0, 0]: a
  // tensor of 2^64 elements over no data.
  const std::string header =
      R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  try {
    (void)tandem::parse_safetensors(reinterpret_cast<const uint8_t*>(file.data()), file.size(),
                                    "overflow.safetensors");
    FAIL("the overflowing shape was accepted");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidArgument);
    CHECK(contains(e.what(), "overflow.safetensors: tensor \"w\" has 0 bytes for shape"));
  }
}

TEST_CASE("Jinja int filter: a float past the 64-bit range is an error, not a conversion",
          "[hostile]") {
  // 2e91 | int converted a double out of int64's range (undefined behaviour; found by fuzz_jinja).
  CHECK(contains(render_error("{{ 2e91 | int }}"), "outside the 64-bit integer range"));
  CHECK(contains(render_error("{{ -9.3e18 | int }}"), "outside the 64-bit integer range"));
  CHECK(ChatTemplate("{{ -9.2e18 | int }} {{ 2.9 | int }} {{ -2.9 | int }}")
            .render(ojson::object()) == "-9200000000000000000 2 -2");
}

TEST_CASE("Jinja repetition: overflowing and empty sequences times huge counts", "[hostile]") {
  const auto t0 = std::chrono::steady_clock::now();
  // 4 * 2^62 wrapped around to 0 bytes and passed the size check, then looped 2^62 times.
  CHECK(contains(render_error("{{ 'abcd' * 4611686018427387904 }}"), "too long"));
  CHECK(contains(render_error("{{ ([1, 2, 3, 4] * 4611686018427387904) | length }}"),
                 "repetition too long"));
  // An empty string or list repeated 2^63 - 1 times looped that many times.
  CHECK(ChatTemplate("[{{ '' * 9223372036854775807 }}]").render(ojson::object()) == "[]");
  CHECK(ChatTemplate("{{ ([] * 9223372036854775807) | length }}").render(ojson::object()) == "0");
  CHECK(seconds_since(t0) < 10.0);
  // The strings a render builds are counted: 1000 iterations of 1 MB each pass the step limit.
  CHECK(contains(render_error("{% for i in range(1000) %}{% set s = 'x' * 1000000 %}{% endfor %}"),
                 "more than 256 MiB of strings"));
}

TEST_CASE("config.json values that used to load wrong or hit undefined behaviour", "[hostile]") {
  const std::string base =
      read_bytes(fs::path(TANDEM_SOURCE_DIR) / "models/tandem-demo/config.json");
  const auto with = [&](const std::string& key, const std::string& value) {
    auto j = nlohmann::json::parse(base);
    j[key] = nlohmann::json::parse(value);
    return j.dump();
  };
  const auto error_of = [](const std::string& text) -> std::string {
    try {
      (void)tandem::parse_config(text, "");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // 1e300 * head_dim cast to int (undefined behaviour).
  CHECK(contains(error_of(with("partial_rotary_factor", "1e300")), "partial_rotary_factor"));
  CHECK(contains(error_of(with("partial_rotary_factor", "0")), "partial_rotary_factor"));
  // theta <= 0 gave NaN / infinite frequencies and loaded.
  CHECK(contains(error_of(with("rope_theta", "-1")), "rope_theta must be > 0"));
  CHECK(contains(error_of(with("rope_theta", "0")), "rope_theta must be > 0"));
  CHECK(contains(error_of(with("rope_scaling", R"({"rope_type": "linear", "factor": 0})")),
                 "non-finite"));
  CHECK(contains(error_of(with("rms_norm_eps", "1e300")), "rms_norm_eps"));
  CHECK(error_of(base) == "");
  // n_params() multiplied sizes of up to 2^30 in int64 (signed overflow).
  auto big = nlohmann::json::parse(base);
  for (const char* k : {"hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size"})
    big[k] = 1 << 30;
  big["num_attention_heads"] = big["num_key_value_heads"] = 1;
  big["head_dim"] = 2;
  CHECK(tandem::parse_config(big.dump(), "").n_params() == INT64_MAX);
}

TEST_CASE("a tokenizer.json number past the double range is an error naming the file",
          "[hostile]") {
  // Found by fuzz_tokenizer_json: nlohmann throws out_of_range (not parse_error) for 1e400,
  // which escaped the loader as a foreign exception.
  try {
    (void)tandem::Tokenizer::from_json_text(
        R"({"model": {"type": "BPE", "vocab": {"a": 1e400}, "merges": []}})", "",
        "big/tokenizer.json");
    FAIL("1e400 loaded");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInvalidArgument);
    CHECK(contains(e.what(), "big/tokenizer.json: invalid JSON"));
  }
}

TEST_CASE("a token id far past the vocabulary is refused, not allocated", "[hostile]") {
  // Found by fuzz_tokenizer_json: id 100012292 in a 12-entry vocabulary sized the id tables for
  // 100M tokens (3.2 GB); an added token's id sized the vocabulary the same way.
  for (const char* text :
       {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 100012292}, "merges": []}})",
        R"({"added_tokens": [{"id": 900000000, "content": "<x>"}],
            "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})"}) {
    INFO(text);
    try {
      (void)tandem::Tokenizer::from_json_text(text, "", "sparse/tokenizer.json");
      FAIL("a sparse id loaded");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidArgument);
      CHECK(contains(e.what(), "sparse/tokenizer.json"));
      CHECK(contains(e.what(), "far past"));
    }
  }
  // A few holes are fine.
  CHECK(tandem::Tokenizer::from_json_text(
            R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 70}, "merges": []}})", "",
            "holes/tokenizer.json")
            .vocab_size() == 71);
}
