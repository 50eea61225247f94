// The option table (server/option_table.cpp) and what reads it: every entry well formed, its
// default within its own range and equal to the default of the struct it feeds; the command line
// and the --config JSON parsed by it, with their precedence; one-line errors naming the option;
// --help listing every option; docs/options.md generated from it.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/http_server.h"
#include "server/options.h"
#include "server/tools/bench_client.h"
#include "server/tools/kv_options.h"
#include "test_helpers.h"

namespace tandem::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Args = std::vector<std::string>;

// The message of the tandem::Error `f` throws (fails when it throws none or another type).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() != ErrorKind::kInternal);
    return e.what();
  }
  FAIL("no error thrown");
  return "";
}

std::string parse_error(Command c, const Args& args) {
  return error_of([&] { parse_command_line(c, args); });
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the tandem binary; returns the exit code, stdout and stderr in *out and *err.
int run_tandem(const std::string& args, std::string* out, std::string* err) {
  const fs::path dir = fs::temp_directory_path();
  const fs::path o = dir / ("tandem-options-" + std::to_string(getpid()) + ".out");
  const fs::path e = dir / ("tandem-options-" + std::to_string(getpid()) + ".err");
  const int status = std::system(
      (std::string(TANDEM_TANDEM_BIN) + " " + args + " > " + o.string() + " 2> " + e.string())
          .c_str());
  *out = read_file(o);
  *err = read_file(e);
  fs::remove(o);
  fs::remove(e);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("every entry of the option table is well formed", "[options]") {
  std::set<std::string_view> command_names;
  CommandSet all = 0;
  for (const CommandSpec& c : command_table()) {
    CHECK(command_names.insert(c.name).second);
    CHECK(&command_spec(c.id) == &c);
    CHECK(find_command(c.name) == &c);
    CHECK(!c.summary.empty());
    all |= command_bit(c.id);
  }
  for (const OptionSpec& o : option_table()) {
    CAPTURE(o.name);
    CHECK(!o.name.empty());
    CHECK(o.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos);
    CHECK(!o.help.empty());
    CHECK(o.commands != 0);
    CHECK((o.commands & ~all) == 0);
    if (o.type == OptType::kBool)
      CHECK((o.meta.empty() && o.def.empty() && o.def_doc.empty() && !o.required));
    else
      CHECK(!o.meta.empty());
    if (o.type == OptType::kInt || o.type == OptType::kIntList) CHECK(o.int_lo <= o.int_hi);
    if (o.type == OptType::kFloat || o.type == OptType::kFloatList) CHECK(o.lo <= o.hi);
    if (o.type == OptType::kEnum || o.type == OptType::kEnumList) CHECK(!o.choices.empty());
    // A default is a value the option accepts; a required option has none; a computed default
    // is documented in place of a written one.
    if (!o.def.empty()) CHECK_NOTHROW(check_value(o, std::string(o.def)));
    CHECK(!(o.required && (!o.def.empty() || !o.def_doc.empty())));
    CHECK(!(!o.def.empty() && !o.def_doc.empty()));
    CHECK(!(o.optional_value && o.multi_word));
  }
  // No command sees one name twice: a name with two meanings has disjoint command sets.
  for (const CommandSpec& c : command_table()) {
    std::set<std::string_view> seen;
    for (const OptionSpec* o : options_of(c.id)) {
      CAPTURE(c.name, o->name);
      CHECK(seen.insert(o->name).second);
      CHECK(find_option(c.id, o->name) == o);
    }
  }
}

TEST_CASE("the table's defaults are the defaults of the structs they fill", "[options]") {
  const Options serve(Command::kServe);
  const KvConfig kv = kv_config_of(serve), want;
  CHECK(kv.dense == want.dense);
  CHECK(kv.sinks == want.sinks);
  CHECK(kv.window == want.window);
  CHECK(kv.block == want.block);
  CHECK(kv.sparse == want.sparse);
  CHECK(kv.hgca_beta == want.hgca_beta);
  CHECK(kv.topk_blocks == want.topk_blocks);
  CHECK(kv.similarity_reuse == want.similarity_reuse);
  CHECK(kv.reuse_eta == want.reuse_eta);
  CHECK(kv.reuse_power == want.reuse_power);
  CHECK(kv.value_offload == want.value_offload);
  CHECK(kv.key_bits == want.key_bits);
  CHECK(kv.cpu_attn == want.cpu_attn);
  CHECK(kv.cpu_threads == want.cpu_threads);
  CHECK(kv.maw_alpha == want.maw_alpha);
  CHECK(kv.kv_dtype == want.kv_dtype);
  CHECK(kv.device_budget == want.device_budget);
  CHECK(kv.recall_interval == want.recall_interval);
  CHECK(kv.recall_threshold == want.recall_threshold);
  const EngineOptions eo;
  CHECK(serve.integer("max-batch") == eo.max_batch);
  CHECK(serve.integer("max-waiting") == eo.max_waiting);
  CHECK(serve.integer("prefill-chunk") == eo.prefill_chunk);
  CHECK(serve.integer("step-token-budget") == eo.step_token_budget);
  const HttpOptions ho;
  CHECK(serve.str("host") == ho.host);
  CHECK(serve.integer("port") == ho.port);
  CHECK(serve.str("api-key") == ho.api_key);
  CHECK(serve.integer("max-body-bytes") == static_cast<int64_t>(ho.conn.max_body_bytes));
  CHECK(serve.integer("max-header-bytes") == static_cast<int64_t>(ho.conn.max_header_bytes));
  CHECK(serve.number("request-timeout") == ho.conn.request_timeout_s);
  CHECK(serve.integer("keep-alive-timeout") == ho.conn.keep_alive_s);
  CHECK(!ho.metrics_public);
  const Options b(Command::kBench);
  const bench::BenchConfig bc;
  CHECK("http://" + b.str("host") + ":" + std::to_string(b.integer("port")) == bc.base_url);
  CHECK(b.integer("num-prompts") == bc.num_prompts);
  CHECK(b.integer("max-concurrency") == bc.max_concurrency);
  CHECK(b.number("burstiness") == bc.burstiness);
  CHECK(b.integer("random-input-len") == bc.input_len);
  CHECK(b.integer("random-output-len") == bc.output_len);
  CHECK(b.number("random-range-ratio") == bc.range_ratio);
  CHECK(b.number("temperature") == bc.temperature);
  CHECK(b.number("timeout") == bc.timeout_s);
  CHECK(b.list("percentile-metrics") == bc.percentile_metrics);
  CHECK(b.number_list("metric-percentiles") == bc.metric_percentiles);
}

TEST_CASE("the command line is read by the table", "[options]") {
  const Options o = parse_command_line(
      Command::kServe, {"--model", "m", "--port=9000", "--dense", "--sparse", "topk", "--port",
                        "9001", "--hgca-beta", "0.5", "--api-key", "--not-an-option"});
  CHECK(o.str("model") == "m");
  CHECK(o.integer("port") == 9001);  // the last occurrence wins
  CHECK(o.flag("dense"));
  CHECK_FALSE(o.has("window"));
  CHECK(o.integer("window") == 1024);  // the table's default
  CHECK(o.number("hgca-beta") == 0.5);
  CHECK(o.str("api-key") == "--not-an-option");  // a value is the next argument, whatever it is
  CHECK(o.integer("max-model-len", 77) == 77);   // a default computed at run time
  CHECK(o.integer_in("max-model-len", 77, 1, 100) == 77);
  CHECK(kv_config_of(o).sparse == SparsePolicy::kTopk);
  const KvConfig r = kv_config_of(parse_command_line(
      Command::kBenchDecode, {"--model", "m", "--sparse", "tau", "--similarity-reuse",
                              "--reuse-eta", "0.9", "--reuse-power", "3"}));
  CHECK(r.similarity_reuse);
  CHECK(r.reuse_eta == 0.9f);
  CHECK(r.reuse_power == 3.0f);

  // vllm's forms: a bare --save-result, a several-word --goodput, lists.
  const Options b = parse_command_line(
      Command::kBench, {"--save-result", "--goodput", "ttft:500", "tpot:50", "--metric-percentiles",
                        "50,90,99", "--percentile-metrics", "ttft,e2el,"});
  CHECK(b.has("save-result"));
  CHECK(b.str("save-result").empty());
  CHECK(b.str("goodput") == "ttft:500 tpot:50");
  CHECK(b.number_list("metric-percentiles") == std::vector<double>{50, 90, 99});
  CHECK(b.list("percentile-metrics") == Args{"ttft", "e2el"});
  CHECK(parse_command_line(Command::kBench, {"--save-result", "out.json"}).str("save-result") ==
        "out.json");

  const Options d = parse_command_line(Command::kBenchDecode,
                                       {"--model", "m", "--batch", "1,max", "--depth", "64,128"});
  CHECK(d.list("batch") == Args{"1", "max"});
  CHECK(d.int_list("depth") == std::vector<int64_t>{64, 128});
  CHECK_FALSE(any_kv_option(d));
  CHECK(
      any_kv_option(parse_command_line(Command::kBenchDecode, {"--model", "m", "--window", "8"})));
}

TEST_CASE("a bad command line is one error naming the option", "[options][errors]") {
  using Catch::Contains;
  const Args m = {"--model", "m"};
  auto with = [&](Args extra) {
    extra.insert(extra.begin(), m.begin(), m.end());
    return extra;
  };
  CHECK_THAT(parse_error(Command::kServe, with({"--prot", "1"})),
             Contains("unknown option --prot") && Contains("did you mean --port?"));
  CHECK_THAT(parse_error(Command::kServe, with({"--gen", "3"})),
             Contains("--gen") && Contains("an option of bench-decode"));
  CHECK_THAT(parse_error(Command::kServe, with({"--port", "x"})),
             Contains("--port must be an integer in [0, 65535], got \"x\""));
  CHECK_THAT(parse_error(Command::kServe, with({"--port", "65536"})), Contains("--port"));
  CHECK_THAT(parse_error(Command::kServe, with({"--port", "1.5"})), Contains("--port"));
  CHECK_THAT(parse_error(Command::kServe, with({"--hgca-beta", "nan"})),
             Contains("--hgca-beta must be a number"));
  CHECK_THAT(parse_error(Command::kServe, with({"--hgca-beta", "0"})), Contains("--hgca-beta"));
  CHECK_THAT(parse_error(Command::kServe, with({"--kv-dtype", "q4"})),
             Contains("--kv-dtype must be f32, bf16 or f16, got \"q4\""));
  CHECK_THAT(error_of([&] {
               kv_config_of(parse_command_line(Command::kServe, with({"--similarity-reuse"})));
             }),
             Contains("--similarity-reuse needs --sparse topk or tau, not hgca"));
  CHECK_THAT(parse_error(Command::kServe, with({"--dense=1"})), Contains("--dense takes no value"));
  CHECK_THAT(parse_error(Command::kServe, with({"--port"})), Contains("--port needs a value"));
  CHECK_THAT(parse_error(Command::kServe, with({"serve"})), Contains("unexpected argument"));
  CHECK_THAT(parse_error(Command::kServe, {}), Contains("--model is required"));
  CHECK_THAT(parse_error(Command::kRun, m), Contains("--prompt is required"));
  CHECK_THAT(parse_error(Command::kBenchDecode, with({"--batch", "2,0"})),
             Contains("--batch: \"0\" is not an integer in [1, 16777216] or max"));
  CHECK_THAT(parse_error(Command::kBenchDecode, with({"--batch", ","})),
             Contains("--batch needs at least one item"));
  CHECK_THAT(parse_error(Command::kBench, {"--percentile-metrics", "ttft,p99"}),
             Contains("--percentile-metrics: \"p99\" is not ttft, tpot, itl or e2el"));
  CHECK_THAT(parse_error(Command::kBenchDecode, with({"--fill", "magic"})), Contains("--fill"));
  // A range known only at run time (the model's context).
  const Options o = parse_command_line(Command::kServe, with({"--max-model-len", "5000"}));
  CHECK_THAT(error_of([&] { o.integer_in("max-model-len", 512, 1, 512); }),
             Contains("--max-model-len must be in [1, 512]"));
  // Asking for an option the command does not take is a bug, not a user error.
  CHECK_THROWS_AS(o.str("gen"), Error);
}

TEST_CASE("a config file is read by the table; the command line wins", "[options]") {
  const json j = {{"//", "a comment"}, {"#note", 1},       {"model", "from-config"},
                  {"port", 9000},      {"max_batch", "8"},  // '_' for '-', a number as a string
                  {"hgca-beta", 2.5},  {"dense", false},   {"config", "ignored"}};
  const Options c = parse_config(Command::kServe, j, "x.json");
  CHECK(c.str("model") == "from-config");
  CHECK(c.integer("port") == 9000);
  CHECK(c.integer("max-batch") == 8);
  CHECK(c.number("hgca-beta") == 2.5);
  CHECK_FALSE(c.flag("dense"));
  CHECK(parse_config(Command::kServe, {{"dense", true}}, "x.json").flag("dense"));
  CHECK(parse_config(Command::kBench, {{"metric-percentiles", {50, 99}}}, "x.json")
            .number_list("metric-percentiles") == std::vector<double>{50, 99});

  using Catch::Contains;
  auto err = [](const json& bad) {
    return error_of([&] { parse_config(Command::kServe, bad, "x.json"); });
  };
  CHECK_THAT(err({{"prot", 1}}),
             Contains("x.json: unknown setting \"prot\"") && Contains("did you mean \"port\"?"));
  CHECK_THAT(err({{"port", "x"}}), Contains("x.json: --port must be an integer"));
  CHECK_THAT(err({{"port", 1e9}}), Contains("x.json: --port"));
  CHECK_THAT(err({{"port", true}}), Contains("x.json: \"port\" must be a string or a number"));
  CHECK_THAT(err({{"dense", "yes"}}), Contains("\"dense\" must be true or false"));
  CHECK_THAT(err({{"sparse", "most"}}), Contains("--sparse must be full, hgca, topk or tau"));
  CHECK_THAT(err(json::array({1})), Contains("must be a JSON object"));

  // Through the command line: defaults < file < command line.
  const fs::path file =
      fs::temp_directory_path() / ("tandem-config-" + std::to_string(getpid()) + ".json");
  std::ofstream(file) << json{{"model", "m"}, {"port", 9000}, {"window", 128}}.dump();
  const Options o = parse_command_line(Command::kServe, {"--config", file.string(), "--port", "1"});
  CHECK(o.integer("port") == 1);      // the command line wins
  CHECK(o.integer("window") == 128);  // the file's
  CHECK(o.integer("block") == 64);    // the table's
  CHECK(o.str("model") == "m");       // a required option may come from the file
  std::ofstream(file) << "{\"model\": ";
  CHECK_THAT(parse_error(Command::kServe, {"--config", file.string()}), Contains("not valid JSON"));
  fs::remove(file);
}

TEST_CASE("the shipped configs are valid settings of serve", "[options]") {
  for (const auto& entry : fs::directory_iterator(repo_path("configs"))) {
    CAPTURE(entry.path());
    CHECK_NOTHROW(
        parse_config(Command::kServe, json::parse(read_file(entry.path())), entry.path().string()));
  }
}

TEST_CASE("--help lists every command and every option", "[options][cli]") {
  const std::string global = global_help();
  CHECK(global.rfind("usage: tandem <command>", 0) == 0);
  for (const CommandSpec& c : command_table()) {
    CAPTURE(c.name);
    CHECK(global.find("\n  " + std::string(c.name) + " ") != std::string::npos);
    const std::string help = command_help(c.id);
    CHECK(help.rfind("usage: tandem " + std::string(c.name) + " ", 0) == 0);
    for (const OptionSpec* o : options_of(c.id)) {
      CAPTURE(o->name);
      CHECK(help.find("\n  --" + std::string(o->name) + " ") != std::string::npos);
    }
    std::istringstream lines(help);
    for (std::string l; std::getline(lines, l);) CHECK(l.size() <= 100);
  }
}

TEST_CASE("docs/options.md is the table's markdown", "[options][docs]") {
  // Regenerate with: build/tandem help --markdown > docs/options.md
  CHECK(read_file(repo_path("docs/options.md")) == options_markdown());
  for (const OptionSpec& o : option_table())
    CHECK(options_markdown().find("`--" + std::string(o.name)) != std::string::npos);
}

TEST_CASE("the tandem binary prints help and reports option errors in one line", "[options][cli]") {
  std::string out, err;
  CHECK(run_tandem("serve --help", &out, &err) == 0);
  CHECK(out == command_help(Command::kServe));
  CHECK(run_tandem("help bench-decode", &out, &err) == 0);
  CHECK(out == command_help(Command::kBenchDecode));
  CHECK(run_tandem("help --markdown", &out, &err) == 0);
  CHECK(out == options_markdown());
  CHECK(run_tandem("serve --model x --prot 1", &out, &err) == 1);
  CHECK_THAT(
      err, Catch::StartsWith("tandem: error: unknown option --prot") && Catch::Contains("--port"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK(run_tandem("bench-decode --model x --gen 1", &out, &err) == 1);
  CHECK_THAT(err, Catch::Contains("--gen must be an integer in [2, 16777216], got \"1\""));
  CHECK(run_tandem("serv --model x", &out, &err) == 2);
  CHECK_THAT(err, Catch::Contains("unknown command \"serv\" (did you mean serve?)"));
}

}  // namespace
}  // namespace tandem::test
