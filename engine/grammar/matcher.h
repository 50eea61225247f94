// ByteMatcher: the state of a grammar after some bytes, advanced one byte at a time.
//
// The state is a set of stacks (as in llama.cpp's grammar sampler): each stack is the position
// of the next byte class to match plus the positions to return to when the current alternatives
// end. Stacks are linked nodes in an arena, shared by their common tails and hash-consed, so a
// step costs a few node appends per live stack and never copies whole stacks; trying bytes and
// taking them back (the token mask's walk over the vocabulary trie) is `mark()` + `rewind()`.
// Rule references at the end of an alternative reuse the caller's return node (tail calls), so
// right-recursive repetitions do not grow the stacks.
//
// Bounds: at most max_stacks stacks per state and a budget of expansion work per byte; both end
// in tandem::Error(kInvalidArgument) ("grammar too ambiguous"), never in a blow-up.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/grammar.h"

namespace tandem::grammar {

inline constexpr size_t kDefaultMaxStacks = 1024;

class ByteMatcher {
 public:
  explicit ByteMatcher(std::shared_ptr<const Grammar> g, size_t max_stacks = kDefaultMaxStacks);

  // Advances by one byte; false (state unchanged) when the grammar cannot take it.
  bool accept_byte(uint8_t b);
  // All bytes or none.
  bool accept_bytes(std::string_view bytes);
  // The input so far is a whole sentence of the grammar.
  bool complete() const { return complete_; }
  // Some more bytes are possible.
  bool can_continue() const { return !heads_.empty(); }
  // Neither complete nor continuable (never after bytes the matcher accepted).
  bool dead() const { return heads_.empty() && !complete_; }

  // ---- Low level, for the token mask: try bytes from any head set, then forget them. ----
  const std::vector<uint32_t>& heads() const { return heads_; }
  size_t mark() const { return nodes_.size(); }
  void rewind(size_t mark);
  // The heads after byte b from `from` into `out` (cleared); returns whether the grammar is
  // complete after it. Appends nodes: rewind() to a mark taken before to drop them.
  bool step(std::span<const uint32_t> from, uint8_t b, std::vector<uint32_t>& out);
  // A key of the state: the positions of every stack. Equal states get equal keys in one arena
  // (stacks in node-id order); `canonical` sorts the stacks, so that equal states get equal keys
  // in any matcher of the grammar, at some cost.
  void state_key(std::span<const uint32_t> heads, bool complete, std::string& key,
                 bool canonical = false) const;
  const Grammar& grammar() const { return *g_; }

 private:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  struct Node {
    uint32_t pos;     // position of the element to match next (a class, or a return point)
    uint32_t parent;  // node to continue with when the alternative ends, or kNone
  };
  uint32_t make_node(uint32_t pos, uint32_t parent);
  void expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out, bool& complete, int depth);
  void compact();

  std::shared_ptr<const Grammar> g_;
  size_t max_stacks_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> cons_;     // direct-mapped cache (pos, parent) -> node, checked on use
  std::vector<uint32_t> visited_;  // per node: the step in which its return was expanded
  uint32_t epoch_ = 0;
  size_t work_ = 0;
  std::vector<uint32_t> heads_;
  std::vector<uint32_t> scratch_;
  mutable std::vector<std::string> key_parts_;
  bool complete_ = false;
};

// Whether the grammar accepts the whole text (tests, and checks of generated output).
bool accepts_text(const Grammar& g, std::string_view text);
// Whether text is a prefix of some sentence of the grammar.
bool accepts_prefix(const Grammar& g, std::string_view text);

}  // namespace tandem::grammar
