// `tandem bench-grammar`: the cost per decode step of grammar-constrained decoding
// (engine/grammar/) on a model's tokenizer: the token mask (plus the accept that follows it) per
// step, at batch 1 and 8, for a few JSON Schemas (or --schema FILE). Each sequence walks a
// different valid document token by token, masking before each token: the documents are drawn
// through the mask with seeded random logits, checked (they parse and the grammar accepts them),
// then re-tokenized by the tokenizer as a model would write them. "cold" walks a freshly
// compiled grammar (empty mask cache), "warm" walks again with the cache filled; each --reps
// times. Figures per batch step: wall time, and the thread's CPU time (the machine may be
// shared). JSON lines. Not a test.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "engine/grammar/json_schema.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_mask.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"
#include "server/tools/commands.h"

namespace tandem {

namespace {

using grammar::GrammarMatcher;
using grammar::TokenVocab;
using Clock = std::chrono::steady_clock;

struct Schema {
  std::string name;
  std::string text;
};

const Schema kSchemas[] = {
    {"person",
     R"({"type":"object","properties":{"name":{"type":"string","maxLength":40},
     "age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},
     "role":{"enum":["admin","user","guest"]},"address":{"type":"object","properties":{
     "street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},
     "required":["street","city"],"additionalProperties":false},
     "tags":{"type":"array","items":{"type":"string","maxLength":12},"maxItems":5}},
     "required":["name","age","role","address"],"additionalProperties":false})"},
    {"tool_call",
     R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{"type":"object",
     "properties":{"location":{"type":"string"},"unit":{"enum":["celsius","fahrenheit"]},
     "days":{"type":"integer","minimum":1,"maximum":14}},"required":["location","unit"],
     "additionalProperties":false}},"required":["name","arguments"],"additionalProperties":false})"},
    {"tree",
     R"({"$defs":{"node":{"type":"object","properties":{"label":{"type":"string","maxLength":16},
     "weight":{"type":"number"},"children":{"type":"array","items":{"$ref":"#/$defs/node"},
     "maxItems":3}},"required":["label"],"additionalProperties":false}},"$ref":"#/$defs/node"})"},
    {"json_object", ""},
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::min<double>(v.size() - 1, std::floor(p * v.size())));
  return v[i];
}

// A valid document drawn through the mask with seeded random logits (favouring quotes, and a
// little the bytes that close containers, so that strings end and documents stay a few hundred
// bytes long) and its tokens; "" when it did not end in time.
std::string draw_document(std::vector<int32_t>& ids,
                          const std::shared_ptr<const grammar::Grammar>& g,
                          const std::shared_ptr<const TokenVocab>& vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  GrammarMatcher m(g, vocab);
  const int32_t eos = vocab->size();
  std::vector<float> logits(static_cast<size_t>(vocab->size()) + 1);
  std::string text;
  ids.clear();
  for (int step = 0; step < 2000; ++step) {
    for (int32_t i = 0; i <= vocab->size(); ++i) {
      const std::string& b = vocab->bytes(i);
      logits[static_cast<size_t>(i)] =
          normal(rng) + (b.find('"') != std::string::npos              ? 2.5f
                         : b.find_first_of("]},") != std::string::npos ? 1.0f
                                                                       : 0.0f);
    }
    m.mask(logits, {eos});
    const auto best =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (!std::isfinite(logits[static_cast<size_t>(best)])) return "";
    if (best == eos) return text;
    m.accept(best);
    ids.push_back(best);
    text += vocab->bytes(best);
  }
  return "";
}

// CPU time of this thread: on a shared machine, wall time also counts the time the thread was
// not running (both are reported).
double thread_us() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

struct Walk {
  // Per batch step: masks only (wall, thread CPU); masks + accepts (thread CPU).
  std::vector<double> mask_us, mask_cpu_us, step_cpu_us;
  uint64_t hits = 0, misses = 0;
};

// Masks then accepts each document's tokens, all sequences in lockstep.
void walk(Walk& w, const std::shared_ptr<const grammar::Grammar>& g,
          const std::shared_ptr<const TokenVocab>& vocab,
          const std::vector<std::vector<int32_t>>& docs, const std::vector<int32_t>& eos) {
  std::vector<GrammarMatcher> ms;
  for (size_t i = 0; i < docs.size(); ++i) ms.emplace_back(g, vocab);
  std::vector<std::vector<float>> logits(docs.size(),
                                         std::vector<float>(static_cast<size_t>(vocab->size())));
  size_t longest = 0;
  for (const auto& d : docs) longest = std::max(longest, d.size());
  for (size_t step = 0; step <= longest; ++step) {
    for (auto& l : logits) std::fill(l.begin(), l.end(), 0.0f);
    const auto t0 = Clock::now();
    const double c0 = thread_us();
    for (size_t i = 0; i < docs.size(); ++i)
      if (step <= docs[i].size()) ms[i].mask(logits[i], eos);
    const double c1 = thread_us();
    const auto t1 = Clock::now();
    for (size_t i = 0; i < docs.size(); ++i) {
      if (step == docs[i].size()) {
        TANDEM_REQUIRE(ms[i].complete(), kInternal, "bench-grammar: document incomplete");
      } else if (step < docs[i].size()) {
        const int32_t t = docs[i][step];
        TANDEM_REQUIRE(std::isfinite(logits[i][static_cast<size_t>(t)]) && ms[i].accept(t),
                       kInternal, "bench-grammar: the mask refused a token of a valid document");
      }
    }
    const double c2 = thread_us();
    w.mask_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    w.mask_cpu_us.push_back(c1 - c0);
    w.step_cpu_us.push_back(c2 - c0);
  }
  for (const auto& m : ms) {
    w.hits += m.stats().hits;
    w.misses += m.stats().misses;
  }
}

nlohmann::json summary(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return {{"mean", v.empty() ? 0 : sum / static_cast<double>(v.size())},
          {"p50", percentile(v, 0.5)},
          {"p99", percentile(v, 0.99)}};
}

}  // namespace

int cmd_bench_grammar(const Options& f) {
  const Tokenizer tok = Tokenizer::load(f.str("model"));
  const auto t0 = Clock::now();
  const auto vocab = TokenVocab::build(tok);
  const double build_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::vector<int32_t> eos;
  if (tok.eos_id()) eos.push_back(*tok.eos_id());
  const int64_t max_steps = f.integer("steps");
  const int64_t reps = f.integer("reps");

  std::vector<Schema> schemas;
  if (f.has("schema")) {
    std::ifstream in(f.str("schema"));
    TANDEM_REQUIRE(in.good(), kNotFound, "--schema: cannot read ", f.str("schema"));
    std::stringstream ss;
    ss << in.rdbuf();
    schemas.push_back({f.str("schema"), ss.str()});
  } else {
    schemas.assign(std::begin(kSchemas), std::end(kSchemas));
  }
  for (const Schema& s : schemas) {
    auto compile = [&] {
      return s.text.empty() ? grammar::json_object_grammar()
                            : grammar::compile_json_schema_text(s.text);
    };
    const auto tc = Clock::now();
    const auto g_draw = compile();
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - tc).count();
    // Eight documents, validated before anything is timed.
    std::vector<std::vector<int32_t>> docs;
    size_t bytes = 0;
    for (uint32_t seed = 1; docs.size() < 8 && seed < 64; ++seed) {
      std::vector<int32_t> drawn;
      const std::string text = draw_document(drawn, g_draw, vocab, seed);
      if (text.empty()) continue;
      TANDEM_REQUIRE(nlohmann::json::accept(text), kInternal,
                     "bench-grammar: a drawn document is not JSON");
      TANDEM_REQUIRE(grammar::accepts_text(*g_draw, text), kInternal,
                     "bench-grammar: a drawn document is not in the grammar");
      // As the tokenizer would split it; the drawn tokens where that does not give the same
      // bytes (SentencePiece prepends a space at the start of a text).
      std::vector<int32_t> ids = tok.encode(text, false, false);
      std::string rebuilt;
      for (int32_t id : ids) rebuilt += vocab->bytes(id);
      if (rebuilt != text) ids = drawn;
      if (static_cast<int64_t>(ids.size()) > max_steps) continue;
      bytes += text.size();
      docs.push_back(std::move(ids));
    }
    TANDEM_REQUIRE(docs.size() == 8, kInternal,
                   "bench-grammar: could not draw 8 documents of "
                   "at most --steps tokens for ",
                   s.name);
    for (size_t batch : {size_t{1}, size_t{8}}) {
      const std::vector<std::vector<int32_t>> use(docs.begin(), docs.begin() + batch);
      // Cold: each repetition on a freshly compiled grammar (an empty mask cache); warm: the
      // same walks again on the last one.
      Walk cold, warm;
      std::shared_ptr<const grammar::Grammar> g;
      for (int64_t r = 0; r < reps; ++r) {
        g = compile();
        walk(cold, g, vocab, use, eos);
      }
      for (int64_t r = 0; r < reps; ++r) walk(warm, g, vocab, use, eos);
      for (const char* pass : {"cold", "warm"}) {
        const Walk& w = pass[0] == 'c' ? cold : warm;
        const nlohmann::json j = {{"schema", s.name},
                                  {"batch", batch},
                                  {"cache", pass},
                                  {"vocab", vocab->size()},
                                  {"steps", w.mask_us.size()},
                                  {"mask_us", summary(w.mask_us)},
                                  {"mask_cpu_us", summary(w.mask_cpu_us)},
                                  {"mask_accept_cpu_us", summary(w.step_cpu_us)},
                                  {"cache_hits", w.hits},
                                  {"cache_misses", w.misses},
                                  {"compile_ms", compile_ms},
                                  {"vocab_build_ms", build_ms},
                                  {"doc_bytes_mean", static_cast<double>(bytes) / 8.0}};
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace tandem
