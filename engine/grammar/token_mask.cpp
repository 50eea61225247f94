// TokenVocab and GrammarMatcher (engine/grammar/token_mask.h).
#include "engine/grammar/token_mask.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "engine/tokenizer/pipeline.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/common.h"

namespace tandem::grammar {

// Allowed-token sets by grammar state. Bounded: cleared when full (a schema whose states never
// repeat just recomputes).
class MaskCache {
 public:
  static constexpr size_t kMaxBytes = size_t{64} << 20;

  std::shared_ptr<const std::vector<uint64_t>> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second;
  }
  void put(const std::string& key, std::shared_ptr<const std::vector<uint64_t>> bits) {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t cost = key.size() + bits->size() * 8 + 64;
    if (bytes_ + cost > kMaxBytes) {
      map_.clear();
      bytes_ = 0;
    }
    if (map_.emplace(key, std::move(bits)).second) bytes_ += cost;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> map_;
  size_t bytes_ = 0;
};

namespace {

// "<0xAB>" -> 0xAB, else -1.
int byte_fallback(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// The raw bytes of a byte-level BPE token (GPT-2's byte map), or nullopt when some character
// is not in the map.
std::optional<std::string> byte_level(const std::string& t) {
  std::string out;
  size_t pos = 0;
  while (pos < t.size()) {
    const int b = tok::unicode_to_byte(utf8::next(t, pos));
    if (b < 0) return std::nullopt;
    out.push_back(static_cast<char>(b));
  }
  return out;
}

}  // namespace

std::shared_ptr<const TokenVocab> TokenVocab::build(const Tokenizer& tok) {
  // A token's bytes are what decode adds after a plain prefix token ("a"): decoders that strip
  // or rewrite the first token (Metaspace, Strip) then act on the prefix. Where the result is
  // not valid UTF-8 on its own (a partial character), the decoder repairs it to U+FFFD: those
  // tokens are read from their vocabulary form instead (<0xAB>, or the byte-level map).
  const int32_t n = tok.vocab_size();
  std::optional<int32_t> prefix = tok.token_to_id("a");
  for (int32_t id = 0; !prefix && id < n; ++id)
    if (!tok.is_special(id) && tok.decode(std::vector<int32_t>{id}) == "a") prefix = id;
  TANDEM_REQUIRE(prefix.has_value(), kUnsupported,
                 "grammar: the tokenizer has no token for \"a\" to measure token bytes");
  const std::string base = tok.decode(std::vector<int32_t>{*prefix}, false);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (tok.is_special(id)) continue;
    const std::string raw = tok.id_to_token(id);
    if (raw.empty()) continue;
    const std::string both = tok.decode(std::vector<int32_t>{*prefix, id}, false);
    std::string b = both.compare(0, base.size(), base) == 0 ? both.substr(base.size()) : both;
    if (b.find("\xEF\xBF\xBD") != std::string::npos &&
        raw.find("\xEF\xBF\xBD") == std::string::npos) {
      if (const int fb = byte_fallback(raw); fb >= 0) {
        b = std::string(1, static_cast<char>(fb));
      } else if (auto bl = byte_level(raw)) {
        b = std::move(*bl);
      }
    }
    bytes[static_cast<size_t>(id)] = std::move(b);
  }
  return from_bytes(std::move(bytes));
}

std::shared_ptr<const TokenVocab> TokenVocab::from_bytes(std::vector<std::string> token_bytes) {
  auto v = std::make_shared<TokenVocab>();
  v->bytes_ = std::move(token_bytes);
  v->build_trie();
  return v;
}

const std::string& TokenVocab::bytes(int32_t id) const {
  static const std::string kNone;
  return id >= 0 && id < size() ? bytes_[static_cast<size_t>(id)] : kNone;
}

void TokenVocab::build_trie() {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < size(); ++id)
    if (!bytes_[static_cast<size_t>(id)].empty()) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  trie_.assign(1, {0, 0, 0, 0, 0});
  std::vector<uint32_t> path{0};  // path[d]: the open node at depth d
  const std::string* prev = nullptr;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth + 1) {
      trie_[path.back()].end = static_cast<uint32_t>(trie_.size());
      path.pop_back();
    }
  };
  for (int32_t id : ids) {
    const std::string& b = bytes_[static_cast<size_t>(id)];
    TANDEM_REQUIRE(b.size() < 65535, kInvalidArgument, "grammar: token ", id, " too long");
    size_t l = 0;
    if (prev)
      while (l < prev->size() && l < b.size() && (*prev)[l] == b[l]) ++l;
    close_to(l);
    for (size_t d = l; d < b.size(); ++d) {
      const auto t = static_cast<uint32_t>(trie_tokens_.size());
      trie_.push_back({static_cast<uint8_t>(b[d]), static_cast<uint16_t>(d + 1), 0, t, t});
      path.push_back(static_cast<uint32_t>(trie_.size() - 1));
    }
    trie_tokens_.push_back(id);
    trie_[path.back()].tok_end = static_cast<uint32_t>(trie_tokens_.size());
    max_depth_ = std::max(max_depth_, b.size());
    prev = &b;
  }
  close_to(0);
  trie_[0].end = static_cast<uint32_t>(trie_.size());
}

std::shared_ptr<MaskCache> TokenVocab::cache_for(const std::shared_ptr<const Grammar>& g) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(caches_, [](const auto& e) { return e.first.expired(); });
  for (const auto& [w, c] : caches_)
    if (w.lock() == g) return c;
  caches_.emplace_back(g, std::make_shared<MaskCache>());
  return caches_.back().second;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g,
                               std::shared_ptr<const TokenVocab> vocab)
    : vocab_(std::move(vocab)), cache_(vocab_->cache_for(g)), bytes_(std::move(g)) {}

// The walk builds the automaton of the states it meets on the fly: states are interned by their
// key (equal stacks, whatever their node ids), and each (state, byte) transition is computed once
// by the byte matcher, then looked up. Inside a string nearly every byte leads back to the same
// state, so most trie nodes cost one table lookup instead of a matcher step.
int32_t GrammarMatcher::intern(const std::vector<uint32_t>& heads, bool complete) {
  if (heads.empty() && !complete) return -1;
  bytes_.state_key(heads, complete, walk_key_);
  const auto [it, added] = intern_.emplace(walk_key_, static_cast<int32_t>(states_.size()));
  if (added) {
    states_.push_back({static_cast<uint32_t>(pool_.size()), static_cast<uint32_t>(heads.size())});
    pool_.insert(pool_.end(), heads.begin(), heads.end());
    trans_.resize(trans_.size() + 256, kUnknown);
  }
  return it->second;
}

void GrammarMatcher::compute(std::vector<uint64_t>& bits) {
  bits.assign((static_cast<size_t>(vocab_->size()) + 63) / 64, 0);
  const auto& trie = vocab_->trie();
  const auto& toks = vocab_->trie_tokens();
  intern_.clear();
  states_.clear();
  pool_.clear();
  trans_.clear();
  level_.resize(vocab_->max_depth() + 1);
  const size_t mark = bytes_.mark();
  try {
    level_[0] = intern(bytes_.heads(), bytes_.complete());
    for (size_t i = 1; level_[0] >= 0 && i < trie.size();) {
      const TokenVocab::TrieNode& node = trie[i];
      const size_t d = node.depth;
      const auto from = static_cast<size_t>(level_[d - 1]);
      const size_t slot = from * 256 + node.byte;
      if (trans_[slot] == kUnknown) {
        const State st = states_[from];
        const bool complete = bytes_.step(
            std::span<const uint32_t>(pool_.data() + st.begin, st.size), node.byte, scratch_);
        const int32_t to = intern(scratch_, complete);
        trans_[slot] = to;
      }
      const int32_t to = trans_[slot];
      if (to < 0) {
        i = node.end;  // no token under this prefix fits
        continue;
      }
      level_[d] = to;
      for (uint32_t t = node.tok_begin; t < node.tok_end; ++t) {
        const auto id = static_cast<uint32_t>(toks[t]);
        bits[id >> 6] |= uint64_t{1} << (id & 63);
      }
      i = states_[static_cast<size_t>(to)].size == 0 ? node.end : i + 1;
    }
  } catch (...) {
    bytes_.rewind(mark);
    throw;
  }
  bytes_.rewind(mark);
}

const std::vector<uint64_t>& GrammarMatcher::allowed() {
  if (!allowed_) {
    bytes_.state_key(bytes_.heads(), bytes_.complete(), key_, true);
    allowed_ = cache_->find(key_);
    if (allowed_) {
      ++stats_.hits;
    } else {
      ++stats_.misses;
      auto bits = std::make_shared<std::vector<uint64_t>>();
      compute(*bits);
      cache_->put(key_, bits);
      allowed_ = std::move(bits);
    }
  }
  return *allowed_;
}

bool GrammarMatcher::is_allowed(int32_t token) {
  if (token < 0 || token >= vocab_->size()) return false;
  const auto id = static_cast<uint32_t>(token);
  return (allowed()[id >> 6] >> (id & 63)) & 1;
}

void GrammarMatcher::mask(std::span<float> logits, const std::vector<int32_t>& eos_ids) {
  const std::vector<uint64_t>& bits = allowed();
  const bool eos_ok = complete();
  std::vector<std::pair<size_t, float>> eos_keep;
  if (eos_ok)
    for (int32_t e : eos_ids)
      if (e >= 0 && static_cast<size_t>(e) < logits.size())
        eos_keep.emplace_back(static_cast<size_t>(e), logits[static_cast<size_t>(e)]);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t covered = std::min(logits.size(), bits.size() * 64);
  for (size_t w = 0; w * 64 < covered; ++w) {
    const uint64_t word = bits[w];
    if (word == ~uint64_t{0}) continue;
    const size_t top = std::min(covered, w * 64 + 64);
    if (word == 0) {  // the common case outside strings: a plain (vectorised) fill
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(w * 64),
                logits.begin() + static_cast<std::ptrdiff_t>(top), kNegInf);
      continue;
    }
    for (size_t i = w * 64; i < top; ++i)
      if (!((word >> (i & 63)) & 1)) logits[i] = kNegInf;
  }
  for (size_t i = covered; i < logits.size(); ++i) logits[i] = kNegInf;
  for (const auto& [i, v] : eos_keep) logits[i] = v;
}

bool GrammarMatcher::accept(int32_t token) {
  const std::string& b = vocab_->bytes(token);
  if (b.empty() || !bytes_.accept_bytes(b)) return false;
  allowed_.reset();
  return true;
}

}  // namespace tandem::grammar
