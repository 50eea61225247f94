// The load-test client's prompts (vllm's random dataset: random token ids, or words without a
// tokenizer) and request arrival times (Poisson or gamma-distributed gaps).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>

#include "engine/tokenizer/tokenizer.h"
#include "kernels/common.h"
#include "server/tools/bench_client.h"

namespace tandem::bench {

namespace {

// Common English words: prompts without a tokenizer.
constexpr const char* kWords[] = {
    "the",   "of",     "and",    "to",    "in",     "is",    "was",    "that",    "for",
    "it",    "with",   "as",     "his",   "on",     "be",    "at",     "by",      "had",
    "are",   "but",    "from",   "or",    "have",   "an",    "they",   "which",   "one",
    "you",   "were",   "her",    "all",   "she",    "there", "would",  "their",   "we",
    "him",   "been",   "has",    "when",  "who",    "will",  "more",   "no",      "if",
    "out",   "so",     "said",   "what",  "up",     "its",   "about",  "into",    "than",
    "them",  "can",    "only",   "other", "new",    "some",  "could",  "time",    "these",
    "two",   "may",    "then",   "do",    "first",  "any",   "my",     "now",     "such",
    "like",  "our",    "over",   "man",   "me",     "even",  "most",   "made",    "after",
    "also",  "did",    "many",   "off",   "before", "must",  "well",   "back",    "through",
    "years", "much",   "where",  "your",  "way",    "down",  "should", "because", "each",
    "just",  "little", "friend", "happy", "garden", "dog",   "cat",    "tree",    "ball",
    "play",  "sun"};

std::vector<int32_t> special_free_ids(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < tok.vocab_size(); ++i)
    if (!tok.is_special(i) && !tok.id_to_token(i).empty()) ids.push_back(i);
  return ids;
}

}  // namespace

std::vector<BenchPrompt> make_random_prompts(const BenchConfig& cfg, const Tokenizer* tok) {
  TANDEM_REQUIRE(cfg.num_prompts >= 1, kInvalidArgument, "--num-prompts must be at least 1");
  TANDEM_REQUIRE(cfg.range_ratio >= 0 && cfg.range_ratio < 1, kInvalidArgument,
                 "--random-range-ratio must be in [0, 1)");
  std::mt19937_64 rng(cfg.seed);
  auto length = [&](int32_t len) {
    const auto lo = static_cast<int64_t>(std::floor(len * (1 - cfg.range_ratio)));
    const auto hi = static_cast<int64_t>(std::ceil(len * (1 + cfg.range_ratio)));
    return static_cast<int32_t>(
        std::max<int64_t>(1, std::uniform_int_distribution<int64_t>(lo, hi)(rng)));
  };
  const std::vector<int32_t> ids = tok ? special_free_ids(*tok) : std::vector<int32_t>{};
  TANDEM_REQUIRE(!tok || !ids.empty(), kInvalidArgument, "the tokenizer has no ordinary tokens");
  std::vector<BenchPrompt> out;
  for (int32_t i = 0; i < cfg.num_prompts; ++i) {
    BenchPrompt p;
    const int32_t in_len = length(cfg.input_len);
    p.output_len = length(cfg.output_len);
    if (tok) {
      std::vector<int32_t> t(static_cast<size_t>(in_len));
      std::uniform_int_distribution<size_t> pick(0, ids.size() - 1);
      for (auto& x : t) x = ids[pick(rng)];
      // Decoded text re-encodes to about as many tokens, not exactly: cut to the length once.
      p.text = tok->decode(t);
      std::vector<int32_t> re = tok->encode(p.text, false, false);
      if (static_cast<int32_t>(re.size()) > in_len) {
        re.resize(static_cast<size_t>(in_len));
        p.text = tok->decode(re);
        re = tok->encode(p.text, false, false);
      }
      p.prompt_len = static_cast<int32_t>(re.size());
    } else {
      std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
      for (int32_t w = 0; w < in_len; ++w) {
        if (w) p.text += ' ';
        p.text += kWords[pick(rng)];
      }
      p.prompt_len = in_len;
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<double> arrival_times(int32_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(static_cast<size_t>(std::max(n, 0)), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return t;
  TANDEM_REQUIRE(burstiness > 0, kInvalidArgument, "--burstiness must be positive");
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  // Gamma(shape k, scale 1/(k*rate)) has mean 1/rate; k = 1 is the exponential (Poisson).
  std::gamma_distribution<double> gap(burstiness, 1.0 / (burstiness * rate));
  double at = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    t[i] = at;  // the first request goes at once
    at += gap(rng);
  }
  return t;
}

}  // namespace tandem::bench
