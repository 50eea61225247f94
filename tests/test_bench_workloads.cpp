// The prefix-reuse workloads of the bench client: the prefix_repetition prompts (counts, shapes,
// the prefixes they share, determinism by seed), the multi_turn conversations and the history
// each turn sends, and a multi_turn run against a fake chat server written here (httplib on an
// ephemeral loopback port) that records every message list it gets and reports cached tokens:
// each turn must carry the earlier user messages and the replies the fake actually sent.
#include <httplib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "engine/tokenizer/tokenizer.h"
#include "server/options.h"
#include "server/tools/bench_client.h"
#include "tests/test_helpers.h"

namespace tandem::test {
namespace {

using json = nlohmann::json;

bench::BenchConfig prefix_config(int32_t n, int32_t prefixes) {
  bench::BenchConfig c;
  c.dataset = "prefix_repetition";
  c.num_prompts = n;
  c.num_prefixes = prefixes;
  c.prefix_len = 12;
  c.suffix_len = 5;
  c.prefix_output_len = 9;
  c.seed = 3;
  return c;
}

std::vector<std::string> words_of(const std::string& s) {
  std::vector<std::string> w;
  size_t at = 0;
  while (at < s.size()) {
    const size_t sp = s.find(' ', at);
    w.push_back(s.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
    if (sp == std::string::npos) break;
    at = sp + 1;
  }
  return w;
}

// The fake chat server: a streamed answer "reply C.T" (C: the first user message's first word,
// T: user messages so far) with usage whose cached_tokens counts the words of the history.
// Every request's messages are kept; turn 2 of the conversation whose first user message is
// fail_first_ gets an HTTP 500.
class FakeChat {
 public:
  FakeChat() {
    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body);
      const json& msgs = body.at("messages");
      {
        std::lock_guard<std::mutex> lock(mu_);
        seen_.push_back(msgs);
        if (body.contains("stream_options")) ++usage_asked_;
      }
      const std::string first = msgs.at(0).at("content");
      const size_t users = (msgs.size() + 1) / 2;
      if (first == fail_first_ && users == 2) {
        res.status = 500;
        res.set_content(R"({"error":{"message":"boom"}})", "application/json");
        return;
      }
      int prompt = 0, cached = 0;
      for (size_t i = 0; i < msgs.size(); ++i) {
        const int n = static_cast<int>(words_of(msgs[i].at("content")).size());
        prompt += n;
        if (i + 1 < msgs.size()) cached += n;
      }
      const std::string reply =
          "reply " + words_of(first).at(0) + "." + std::to_string(users) + " x";
      const std::string sse =
          "data: " + json{{"choices", {{{"index", 0}, {"delta", {{"content", reply}}}}}}}.dump() +
          "\n\ndata: " +
          json{{"choices", json::array()},
               {"usage",
                {{"prompt_tokens", prompt},
                 {"completion_tokens", 3},
                 {"prompt_tokens_details", {{"cached_tokens", cached}}}}}}
              .dump() +
          "\n\ndata: [DONE]\n\n";
      res.set_content(sse, "text/event-stream");
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~FakeChat() {
    http_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void fail_conversation(const std::string& first) { fail_first_ = first; }
  std::vector<json> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  int usage_asked() {
    std::lock_guard<std::mutex> lock(mu_);
    return usage_asked_;
  }

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
  std::string fail_first_;
  std::mutex mu_;
  std::vector<json> seen_;
  int usage_asked_ = 0;
};

}  // namespace

TEST_CASE("bench workloads: prefix_repetition prompts share their prefixes, spread evenly") {
  const bench::BenchConfig cfg = prefix_config(25, 4);
  const auto prompts = bench::make_prefix_repetition_prompts(cfg, nullptr);
  REQUIRE(prompts.size() == 25);
  std::map<int32_t, std::vector<const bench::BenchPrompt*>> by_prefix;
  for (const auto& p : prompts) {
    CHECK(p.output_len == 9);
    CHECK(p.prompt_len == 12 + 5);
    CHECK(words_of(p.text).size() == 17);
    by_prefix[p.prefix].push_back(&p);
  }
  REQUIRE(by_prefix.size() == 4);
  std::vector<size_t> counts;
  for (const auto& [g, v] : by_prefix) counts.push_back(v.size());
  std::sort(counts.begin(), counts.end());
  CHECK(counts == std::vector<size_t>{6, 6, 6, 7});  // 25 over 4: even up to one
  std::set<std::string> prefixes, suffixes;
  for (const auto& [g, v] : by_prefix) {
    const auto w0 = words_of(v[0]->text);
    const std::vector<std::string> head(w0.begin(), w0.begin() + 12);
    std::string joined;
    for (const auto& w : head) joined += w + " ";
    prefixes.insert(joined);
    for (const auto* p : v) {
      const auto w = words_of(p->text);
      CHECK(std::equal(head.begin(), head.end(), w.begin()));  // the same 12 words first
      std::string tail;
      for (size_t i = 12; i < w.size(); ++i) tail += w[i] + " ";
      suffixes.insert(tail);
    }
  }
  CHECK(prefixes.size() == 4);   // distinct prefixes
  CHECK(suffixes.size() >= 24);  // suffixes of 5 random words: all but a freak collision differ
  // Shuffled: the groups do not come in runs of their own.
  int32_t changes = 0;
  for (size_t i = 1; i < prompts.size(); ++i) changes += prompts[i].prefix != prompts[i - 1].prefix;
  CHECK(changes > 8);

  // Determinism by seed.
  const auto again = bench::make_prefix_repetition_prompts(cfg, nullptr);
  for (size_t i = 0; i < prompts.size(); ++i) CHECK(again[i].text == prompts[i].text);
  bench::BenchConfig other = cfg;
  other.seed = 4;
  const auto diff = bench::make_prefix_repetition_prompts(other, nullptr);
  CHECK(diff[0].text != prompts[0].text);

  // vllm's rule: fewer prompts than prefixes is an error.
  CHECK_THROWS_WITH(bench::make_prefix_repetition_prompts(prefix_config(3, 4), nullptr),
                    Catch::Contains("at least --prefix-repetition-num-prefixes"));
}

TEST_CASE("bench workloads: prefix_repetition with a tokenizer") {
  const Tokenizer tok = Tokenizer::load(repo_path("models/tandem-demo"));
  bench::BenchConfig cfg = prefix_config(12, 3);
  cfg.prefix_len = 40;
  cfg.suffix_len = 20;
  const auto prompts = bench::make_prefix_repetition_prompts(cfg, &tok);
  REQUIRE(prompts.size() == 12);
  std::map<int32_t, std::vector<std::vector<int32_t>>> ids;
  for (const auto& p : prompts) {
    const auto t = tok.encode(p.text, false, false);
    CHECK(p.prompt_len == static_cast<int32_t>(t.size()));
    CHECK(p.prompt_len <= 60);
    CHECK(p.prompt_len >= 50);  // decoded random ids re-encode to about as many tokens
    ids[p.prefix].push_back(t);
  }
  REQUIRE(ids.size() == 3);
  // The prompts of one prefix share their first tokens as the server will encode them (all but
  // the boundary with the suffix, which a merge may cross); those of different prefixes do not.
  auto shared = [](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
    size_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    return n;
  };
  for (const auto& [g, v] : ids)
    for (size_t i = 1; i < v.size(); ++i) CHECK(shared(v[0], v[i]) >= 35);
  CHECK(shared(ids[0][0], ids[1][0]) < 5);
  const auto again = bench::make_prefix_repetition_prompts(cfg, &tok);
  for (size_t i = 0; i < prompts.size(); ++i) CHECK(again[i].text == prompts[i].text);
}

TEST_CASE("bench workloads: multi_turn conversations and the history of each turn") {
  bench::BenchConfig cfg;
  cfg.dataset = "multi_turn";
  cfg.num_prompts = 3;
  cfg.turns = 4;
  cfg.turn_input_len = 6;
  cfg.turn_output_len = 5;
  cfg.seed = 11;
  const auto convs = bench::make_conversations(cfg, nullptr);
  REQUIRE(convs.size() == 3);
  std::set<std::string> texts;
  for (const auto& c : convs) {
    REQUIRE(c.turns.size() == 4);
    for (const auto& t : c.turns) {
      CHECK(words_of(t.text).size() == 6);
      CHECK(t.prompt_len == 6);
      CHECK(t.output_len == 5);
      CHECK(t.history.empty());
      texts.insert(t.text);
    }
  }
  CHECK(texts.size() == 12);
  const auto again = bench::make_conversations(cfg, nullptr);
  CHECK(again[2].turns[3].text == convs[2].turns[3].text);

  const bench::Conversation& c = convs[1];
  const bench::BenchPrompt first = bench::next_turn(c, {}, nullptr);
  CHECK(first.history.empty());
  CHECK(first.text == c.turns[0].text);
  const bench::BenchPrompt third = bench::next_turn(c, {"one two", "three"}, nullptr);
  REQUIRE(third.history.size() == 4);
  CHECK(third.history[0].role == "user");
  CHECK(third.history[0].content == c.turns[0].text);
  CHECK(third.history[1].role == "assistant");
  CHECK(third.history[1].content == "one two");
  CHECK(third.history[2].content == c.turns[1].text);
  CHECK(third.history[3].content == "three");
  CHECK(third.text == c.turns[2].text);
  CHECK(third.prompt_len == 6 + 2 + 6 + 1 + 6);
  CHECK(third.output_len == 5);
  CHECK_THROWS(bench::next_turn(c, {"a", "b", "c", "d"}, nullptr));

  // The request body: the history, then the turn's message.
  cfg.endpoint = "/v1/chat/completions";
  const json b = json::parse(bench::request_body(cfg, third, true));
  REQUIRE(b["messages"].size() == 5);
  CHECK(b["messages"][1] == json{{"role", "assistant"}, {"content", "one two"}});
  CHECK(b["messages"][4] == json{{"role", "user"}, {"content", c.turns[2].text}});
  CHECK(b["stream_options"]["include_usage"] == true);
}

TEST_CASE("bench workloads: a multi_turn run sends the replies it got, turn by turn") {
  FakeChat fake;
  bench::BenchConfig cfg;
  cfg.base_url = fake.url();
  cfg.endpoint = "/v1/chat/completions";
  cfg.model = "fake";
  cfg.dataset = "multi_turn";
  cfg.num_prompts = 5;
  cfg.turns = 3;
  cfg.turn_input_len = 4;
  cfg.turn_output_len = 8;
  cfg.max_concurrency = 2;
  cfg.warmup = false;
  cfg.timeout_s = 10;
  const auto convs = bench::make_conversations(cfg, nullptr);
  fake.fail_conversation(convs[3].turns[0].text);
  const bench::BenchOutcome out = bench::run_conversations(cfg, convs, nullptr);
  REQUIRE(out.results.size() == 15);
  for (size_t c = 0; c < 5; ++c)
    for (size_t t = 0; t < 3; ++t) {
      const bench::RequestResult& r = out.results[c * 3 + t];
      INFO("conversation " << c << " turn " << t << ": " << r.error);
      CHECK(r.turn == static_cast<int32_t>(t));
      if (c == 3 && t >= 1) {  // turn 2 failed; turn 3 was never sent
        CHECK_FALSE(r.success);
        continue;
      }
      REQUIRE(r.success);
      const std::string tag = words_of(convs[c].turns[0].text)[0];
      CHECK(r.text == "reply " + tag + "." + std::to_string(t + 1) + " x");
      CHECK(r.cached_tokens == static_cast<int32_t>(t * (4 + 3)));  // history words
      CHECK(r.prompt_len == static_cast<int32_t>(t * (4 + 3) + 4));
    }
  CHECK(out.results[3 * 3 + 2].error.find("turn 2 of its conversation failed") !=
        std::string::npos);

  // What the server got: per conversation, turns in order, each the whole history so far with
  // the replies it had sent.
  const std::vector<json> seen = fake.seen();
  CHECK(seen.size() == 4 * 3 + 2);  // conversation 3 stopped after its failed turn 2
  CHECK(fake.usage_asked() == static_cast<int>(seen.size()));
  std::map<std::string, std::vector<json>> by_conv;
  for (const json& m : seen) by_conv[m[0]["content"].get<std::string>()].push_back(m);
  for (size_t c = 0; c < 5; ++c) {
    const auto& got = by_conv[convs[c].turns[0].text];
    REQUIRE(got.size() == (c == 3 ? 2u : 3u));
    const std::string tag = words_of(convs[c].turns[0].text)[0];
    for (size_t t = 0; t < got.size(); ++t) {
      REQUIRE(got[t].size() == 2 * t + 1);
      for (size_t k = 0; k <= t; ++k) {
        CHECK(got[t][2 * k] == json{{"role", "user"}, {"content", convs[c].turns[k].text}});
        if (k < t)
          CHECK(got[t][2 * k + 1] ==
                json{{"role", "assistant"},
                     {"content", "reply " + tag + "." + std::to_string(k + 1) + " x"}});
      }
    }
  }

  // The report: TTFT by turn, turn 1 against the later ones, the cached share.
  const json j = bench::report_json(cfg, out);
  CHECK(j["completed"] == 13);
  CHECK(j["failed"] == 2);
  CHECK(j["dataset_name"] == "multi_turn");
  REQUIRE(j["turn_stats"].size() == 3);
  CHECK(j["turn_stats"][0]["completed"] == 5);
  CHECK(j["turn_stats"][2]["completed"] == 4);
  CHECK(j["turn_stats"][0]["cached_token_share"] == 0.0);
  CHECK(j["turn_stats"][1]["cached_token_share"].get<double>() == Approx(7.0 / 11));
  CHECK(j["mean_ttft_first_turn_ms"].get<double>() > 0);
  CHECK(j["mean_ttft_later_turns_ms"].get<double>() > 0);
  CHECK(j["cached_tokens_reported"] == 13);
  CHECK(j["total_cached_tokens"] == 4 * (7 + 14));  // conversation 3: turn 1, nothing cached
  const int64_t prompt = j["total_input_tokens"].get<int64_t>();
  CHECK(prompt == 4 * (4 + 11 + 18) + 4);
  CHECK(j["cached_token_share"].get<double>() == Approx(84.0 / prompt));
  const std::string table = bench::format_table(j);
  CHECK(table.find("Mean TTFT, turn 1 (ms):") != std::string::npos);
  CHECK(table.find("Mean TTFT, later turns (ms):") != std::string::npos);
  CHECK(table.find("  turn 3, mean TTFT (ms):") != std::string::npos);
  CHECK(table.find("% cached)") != std::string::npos);
  CHECK(table.find("Cached prompt tokens (server):           84 (") != std::string::npos);

  // Without the chat endpoint there is no history to send.
  cfg.endpoint = "/v1/completions";
  CHECK_THROWS_WITH(bench::run_conversations(cfg, convs, nullptr), Catch::Contains("chat"));
}

TEST_CASE("bench workloads: `tandem bench --help` lists bench's own options, no others") {
  const std::string help = command_help(Command::kBench);
  std::set<std::string> own;
  for (const OptionSpec* o : options_of(Command::kBench)) {
    own.insert(std::string(o->name));
    CHECK_THAT(help, Catch::Contains("\n  --" + std::string(o->name) + " "));
  }
  for (const char* name : {"prefix-repetition-num-prefixes", "multi-turn-turns", "dataset-name"})
    CHECK(own.count(name) == 1);
  for (const OptionSpec& o : option_table())
    if (own.count(std::string(o.name)) == 0)
      CHECK_THAT(help, !Catch::Contains("\n  --" + std::string(o.name) + " "));
}

TEST_CASE("bench workloads: the option table's defaults are BenchConfig's") {
  const Options b(Command::kBench);
  const bench::BenchConfig bc;
  CHECK(b.str("dataset-name") == bc.dataset);
  CHECK(b.integer("prefix-repetition-prefix-len") == bc.prefix_len);
  CHECK(b.integer("prefix-repetition-suffix-len") == bc.suffix_len);
  CHECK(b.integer("prefix-repetition-num-prefixes") == bc.num_prefixes);
  CHECK(b.integer("prefix-repetition-output-len") == bc.prefix_output_len);
  CHECK(b.integer("multi-turn-turns") == bc.turns);
  CHECK(b.integer("multi-turn-input-len") == bc.turn_input_len);
  CHECK(b.integer("multi-turn-output-len") == bc.turn_output_len);
}

}  // namespace tandem::test
