// The load-test client's prompts: vllm's random and prefix_repetition datasets (random token
// ids, or words without a tokenizer), the multi_turn conversations and the history each turn
// sends; and the request arrival times (Poisson or gamma-distributed gaps).
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

// Random text: ordinary token ids decoded with the tokenizer, or words from kWords without one.
class TextMaker {
 public:
  explicit TextMaker(const Tokenizer* tok)
      : tok_(tok), ids_(tok ? special_free_ids(*tok) : std::vector<int32_t>{}) {
    TANDEM_REQUIRE(!tok || !ids_.empty(), kInvalidArgument, "the tokenizer has no ordinary tokens");
  }

  // n random ordinary ids (tokenizer only).
  std::vector<int32_t> ids(int32_t n, std::mt19937_64& rng) const {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::uniform_int_distribution<size_t> pick(0, ids_.size() - 1);
    for (auto& x : t) x = ids_[pick(rng)];
    return t;
  }

  // `ids` as text of at most `len` tokens: decoded text re-encodes to about as many tokens, not
  // exactly, so it is cut to the length (a cut text may re-encode longer again: a few rounds,
  // each cutting shorter by what the last one grew).
  // Sets p.text and p.prompt_len.
  void set_text(BenchPrompt& p, const std::vector<int32_t>& t, int32_t len) const {
    p.text = tok_->decode(t);
    std::vector<int32_t> re = tok_->encode(p.text, false, false);
    int32_t cut = len;
    for (int round = 0; round < 4 && static_cast<int32_t>(re.size()) > len && cut > 0; ++round) {
      re.resize(static_cast<size_t>(std::min<int32_t>(cut, static_cast<int32_t>(re.size()))));
      p.text = tok_->decode(re);
      const int32_t before = static_cast<int32_t>(re.size());
      re = tok_->encode(p.text, false, false);
      cut -= std::max<int32_t>(0, static_cast<int32_t>(re.size()) - before);  // what it grew by
    }
    p.prompt_len = static_cast<int32_t>(re.size());
  }

  // A random prompt of about `len` tokens (words without a tokenizer).
  BenchPrompt prompt(int32_t len, std::mt19937_64& rng) const {
    BenchPrompt p;
    if (tok_) {
      set_text(p, ids(len, rng), len);
    } else {
      p.text = words(len, rng);
      p.prompt_len = len;
    }
    return p;
  }

  std::string words(int32_t n, std::mt19937_64& rng) const {
    std::string s;
    std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
    for (int32_t w = 0; w < n; ++w) {
      if (w) s += ' ';
      s += kWords[pick(rng)];
    }
    return s;
  }

  // Tokens (or words) of `text`.
  int32_t count(const std::string& text) const {
    if (tok_) return static_cast<int32_t>(tok_->encode(text, false, false).size());
    int32_t n = 0;
    bool in_word = false;
    for (char ch : text) {
      const bool space = ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r';
      n += !space && !in_word ? 1 : 0;
      in_word = !space;
    }
    return n;
  }

  const Tokenizer* tokenizer() const { return tok_; }

 private:
  const Tokenizer* tok_;
  std::vector<int32_t> ids_;
};

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
  const TextMaker maker(tok);
  std::vector<BenchPrompt> out;
  for (int32_t i = 0; i < cfg.num_prompts; ++i) {
    const int32_t in_len = length(cfg.input_len);
    const int32_t out_len = length(cfg.output_len);
    BenchPrompt p = maker.prompt(in_len, rng);
    p.output_len = out_len;
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<BenchPrompt> make_prefix_repetition_prompts(const BenchConfig& cfg,
                                                        const Tokenizer* tok) {
  TANDEM_REQUIRE(cfg.num_prefixes >= 1 && cfg.prefix_len >= 1 && cfg.suffix_len >= 1,
                 kInvalidArgument,
                 "--prefix-repetition-num-prefixes, -prefix-len and -suffix-len must be positive");
  TANDEM_REQUIRE(cfg.num_prompts >= cfg.num_prefixes, kInvalidArgument, "--num-prompts (",
                 cfg.num_prompts, ") must be at least --prefix-repetition-num-prefixes (",
                 cfg.num_prefixes, ")");
  std::mt19937_64 rng(cfg.seed);
  const TextMaker maker(tok);
  const int32_t total = cfg.prefix_len + cfg.suffix_len;
  std::vector<BenchPrompt> out;
  for (int32_t g = 0; g < cfg.num_prefixes; ++g) {
    // Prefix g carries prompts g, g + P, g + 2P, ... of num_prompts: an even spread.
    const int32_t count = (cfg.num_prompts - g + cfg.num_prefixes - 1) / cfg.num_prefixes;
    BenchPrompt prefix;
    std::vector<int32_t> prefix_ids;
    if (tok) {
      maker.set_text(prefix, maker.ids(cfg.prefix_len, rng), cfg.prefix_len);
      prefix_ids = tok->encode(prefix.text, false, false);  // what the text re-encodes to
    } else {
      prefix.text = maker.words(cfg.prefix_len, rng);
    }
    for (int32_t k = 0; k < count; ++k) {
      BenchPrompt p;
      if (tok) {
        std::vector<int32_t> t = prefix_ids;
        const std::vector<int32_t> suffix = maker.ids(cfg.suffix_len, rng);
        t.insert(t.end(), suffix.begin(), suffix.end());
        maker.set_text(p, t, total);  // a cut only shortens the suffix
      } else {
        p.text = prefix.text + " " + maker.words(cfg.suffix_len, rng);
        p.prompt_len = total;
      }
      p.output_len = cfg.prefix_output_len;
      p.prefix = g;
      out.push_back(std::move(p));
    }
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

std::vector<Conversation> make_conversations(const BenchConfig& cfg, const Tokenizer* tok) {
  TANDEM_REQUIRE(cfg.num_prompts >= 1, kInvalidArgument, "--num-prompts must be at least 1");
  TANDEM_REQUIRE(cfg.turns >= 1 && cfg.turn_input_len >= 1 && cfg.turn_output_len >= 1,
                 kInvalidArgument,
                 "--multi-turn-turns, -input-len and -output-len must be positive");
  std::mt19937_64 rng(cfg.seed);
  const TextMaker maker(tok);
  std::vector<Conversation> out(static_cast<size_t>(cfg.num_prompts));
  for (Conversation& c : out)
    for (int32_t t = 0; t < cfg.turns; ++t) {
      BenchPrompt p = maker.prompt(cfg.turn_input_len, rng);
      p.output_len = cfg.turn_output_len;
      c.turns.push_back(std::move(p));
    }
  return out;
}

BenchPrompt next_turn(const Conversation& conv, const std::vector<std::string>& replies,
                      const Tokenizer* tok) {
  const size_t k = replies.size();
  TANDEM_REQUIRE(k < conv.turns.size(), kInvalidArgument, "the conversation has ",
                 conv.turns.size(), " turns, all sent");
  const TextMaker counter(nullptr);
  auto count = [&](const std::string& s) {
    return tok ? static_cast<int32_t>(tok->encode(s, false, false).size()) : counter.count(s);
  };
  BenchPrompt p = conv.turns[k];
  p.history.clear();
  p.prompt_len = conv.turns[k].prompt_len;
  for (size_t j = 0; j < k; ++j) {
    p.history.push_back({"user", conv.turns[j].text});
    p.history.push_back({"assistant", replies[j]});
    p.prompt_len += conv.turns[j].prompt_len + count(replies[j]);
  }
  return p;
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
