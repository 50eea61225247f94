// Grammar-constrained decoding at the token level.
//
// TokenVocab (built once per tokenizer): the exact bytes each token adds to the output when it
// follows other text — byte-level BPE tokens through their byte map, SentencePiece `▁` as a
// space, byte-fallback `<0xAB>` as that single byte (possibly part of a UTF-8 character) — and a
// trie of those byte strings in preorder, so tokens sharing a prefix share the matcher's work.
// Special tokens and tokens with no bytes are never allowed by a grammar (EOS is handled apart:
// allowed exactly when the grammar is complete). A byte-level vocabulary (or one with all 256
// byte-fallback tokens) can write every byte, so a state the mask leads to can always be
// completed; a vocabulary that cannot write some byte the grammar needs (tinystories-656k has no
// `{`) can leave a mask with nothing allowed: callers check `allowed()` / a fully -inf row.
//
// GrammarMatcher (one per sequence): the grammar state, the mask of allowed tokens for it, and
// `accept`. The mask is computed by walking the trie with the byte matcher, skipping a whole
// subtree as soon as its prefix is rejected, and cached per grammar state (the positions of all
// stacks — equal keys mean equal futures) in a cache shared by every matcher of the same grammar
// and vocabulary: in a JSON document most steps (inside strings, numbers, repeated structures)
// revisit a state already seen, by this sequence or an earlier request with the same schema.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"

namespace tandem {
class Tokenizer;
}

namespace tandem::grammar {

class MaskCache;

class TokenVocab {
 public:
  static std::shared_ptr<const TokenVocab> build(const Tokenizer& tokenizer);
  // From explicit bytes per id ("" = never allowed); for tests and tools.
  static std::shared_ptr<const TokenVocab> from_bytes(std::vector<std::string> token_bytes);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  const std::string& bytes(int32_t id) const;

  // The trie, in preorder; node 0 is the root (no byte).
  struct TrieNode {
    uint8_t byte;
    uint16_t depth;
    uint32_t end;        // one past the last node of this subtree
    uint32_t tok_begin;  // tokens whose bytes end here: tokens()[tok_begin, tok_end)
    uint32_t tok_end;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  size_t max_depth() const { return max_depth_; }

  // The mask cache shared by the matchers of one grammar on this vocabulary.
  std::shared_ptr<MaskCache> cache_for(const std::shared_ptr<const Grammar>& g) const;

 private:
  void build_trie();
  std::vector<std::string> bytes_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  size_t max_depth_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<std::pair<std::weak_ptr<const Grammar>, std::shared_ptr<MaskCache>>> caches_;
};

// Cache statistics, for the bench.
struct MaskStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
};

class GrammarMatcher {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenVocab> vocab);

  // Sets logits of tokens the grammar does not allow to -inf (ids beyond the vocabulary too);
  // EOS ids keep their value only when the grammar is complete.
  void mask(std::span<float> logits, const std::vector<int32_t>& eos_ids);
  // Bit t of word t/64 set: token t allowed (EOS not included: see complete()).
  const std::vector<uint64_t>& allowed();
  bool is_allowed(int32_t token);
  // Advances by the token's bytes; false (state unchanged) when they do not fit the grammar.
  // EOS is not a grammar token (false): when it is sampled, complete() was true; stop there.
  bool accept(int32_t token);
  bool complete() const { return bytes_.complete(); }
  // Nothing can follow and the grammar is not complete (cannot happen through the mask).
  bool dead() const { return bytes_.dead(); }
  // Complete and no byte can follow: only EOS is left.
  bool finished() const { return bytes_.complete() && !bytes_.can_continue(); }

  const ByteMatcher& byte_matcher() const { return bytes_; }
  const MaskStats& stats() const { return stats_; }

 private:
  void compute(std::vector<uint64_t>& bits);
  int32_t intern(const std::vector<uint32_t>& heads, bool complete);

  std::shared_ptr<const TokenVocab> vocab_;
  std::shared_ptr<MaskCache> cache_;
  ByteMatcher bytes_;
  std::shared_ptr<const std::vector<uint64_t>> allowed_;  // for the current state, or null
  // The automaton of one walk (compute): interned states, their heads, transitions by byte.
  static constexpr int32_t kUnknown = -2;
  struct State {
    uint32_t begin, size;  // heads: pool_[begin, begin + size)
  };
  std::unordered_map<std::string, int32_t> intern_;
  std::vector<State> states_;
  std::vector<uint32_t> pool_;
  std::vector<int32_t> trans_;  // [state * 256 + byte]: next state, -1 dead, kUnknown
  std::vector<int32_t> level_;  // state at each trie depth
  std::vector<uint32_t> scratch_;
  std::string walk_key_;
  std::string key_;  // of the current state (the mask cache's key)
  MaskStats stats_;
};

}  // namespace tandem::grammar
