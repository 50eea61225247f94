// ByteMatcher: stack-set matching of a byte grammar (see engine/grammar/matcher.h).
#include "engine/grammar/matcher.h"

#include <algorithm>

#include "kernels/common.h"

namespace tandem::grammar {

namespace {

// Expansion steps allowed per byte and stack: enough for any practical grammar (a JSON value
// expands in a few dozen), small enough that a pathological one fails in microseconds.
constexpr size_t kWorkPerStack = 4096;
constexpr size_t kConsSize = 1 << 12;  // entries of the hash-consing cache (power of two)
// Arena size that triggers a compaction after an accepted byte.
constexpr size_t kCompactAt = 1 << 14;
constexpr int kMaxDepth = 1000;

}  // namespace

ByteMatcher::ByteMatcher(std::shared_ptr<const Grammar> g, size_t max_stacks)
    : g_(std::move(g)), max_stacks_(max_stacks), cons_(kConsSize, kNone) {
  TANDEM_CHECK(g_ != nullptr, "null grammar");
  ++epoch_;
  work_ = 0;
  for (uint32_t a : g_->alts(g_->root())) expand(a, kNone, heads_, complete_, 0);
  std::sort(heads_.begin(), heads_.end());
  heads_.erase(std::unique(heads_.begin(), heads_.end()), heads_.end());
}

uint32_t ByteMatcher::make_node(uint32_t pos, uint32_t parent) {
  const uint32_t h = (pos * 0x9E3779B1u ^ parent * 0x85EBCA77u) >> 20 & (kConsSize - 1);
  const uint32_t id = cons_[h];
  if (id < nodes_.size() && nodes_[id].pos == pos && nodes_[id].parent == parent) return id;
  nodes_.push_back({pos, parent});
  const uint32_t fresh = static_cast<uint32_t>(nodes_.size() - 1);
  cons_[h] = fresh;
  return fresh;
}

void ByteMatcher::expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out, bool& complete,
                         int depth) {
  // A chain of rules each starting the previous one recurses here: bound the C++ stack.
  TANDEM_REQUIRE(depth <= kMaxDepth, kInvalidArgument, "grammar too deep: more than ", kMaxDepth,
                 " nested rule references at one position");
  const std::vector<Elem>& elems = g_->elems();
  for (;;) {
    TANDEM_REQUIRE(++work_ <= kWorkPerStack * (max_stacks_ + 1), kInvalidArgument,
                   "grammar too ambiguous: expansion budget exceeded");
    const Elem e = elems[pos];
    if (e.kind == ElemKind::kClass) {
      out.push_back(make_node(pos, parent));
      return;
    }
    if (e.kind == ElemKind::kEnd) {
      if (parent == kNone) {
        complete = true;
        return;
      }
      // Several alternatives can end and return to the same node: continue from it once.
      if (visited_.size() < nodes_.size()) visited_.resize(nodes_.size() + 64, 0);
      if (visited_[parent] == epoch_) return;
      visited_[parent] = epoch_;
      pos = nodes_[parent].pos;
      parent = nodes_[parent].parent;
      continue;
    }
    // A rule reference: its alternatives return to the next element (or, at the end of this
    // alternative, straight to our own parent).
    const uint32_t cont =
        elems[pos + 1].kind == ElemKind::kEnd ? parent : make_node(pos + 1, parent);
    const std::vector<uint32_t>& alts = g_->alts(e.id);
    for (size_t i = 0; i + 1 < alts.size(); ++i) expand(alts[i], cont, out, complete, depth + 1);
    if (alts.empty()) return;
    pos = alts.back();
    parent = cont;
  }
}

bool ByteMatcher::step(std::span<const uint32_t> from, uint8_t b, std::vector<uint32_t>& out) {
  out.clear();
  bool complete = false;
  ++epoch_;
  work_ = 0;
  const std::vector<Elem>& elems = g_->elems();
  for (uint32_t h : from) {
    const Node n = nodes_[h];
    if (!g_->byte_class(elems[n.pos].id).has(b)) continue;
    expand(n.pos + 1, n.parent, out, complete, 0);
  }
  if (out.size() > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  TANDEM_REQUIRE(out.size() <= max_stacks_, kInvalidArgument, "grammar too ambiguous: ", out.size(),
                 " simultaneous stacks (limit ", max_stacks_, ")");
  return complete;
}

void ByteMatcher::rewind(size_t mark) {
  if (mark < nodes_.size()) nodes_.resize(mark);
}

bool ByteMatcher::accept_byte(uint8_t b) {
  const char c = static_cast<char>(b);
  return accept_bytes(std::string_view(&c, 1));
}

bool ByteMatcher::accept_bytes(std::string_view bytes) {
  const size_t m = mark();
  std::vector<uint32_t> cur = heads_;
  bool complete = complete_;
  try {
    for (char c : bytes) {
      complete = step(cur, static_cast<uint8_t>(c), scratch_);
      if (scratch_.empty() && !complete) {
        rewind(m);
        return false;
      }
      cur.swap(scratch_);
    }
  } catch (...) {
    rewind(m);
    throw;
  }
  heads_ = std::move(cur);
  complete_ = complete;
  if (nodes_.size() > kCompactAt && nodes_.size() > 8 * heads_.size()) compact();
  return true;
}

// Keeps only the nodes the current stacks reach (the arena grows with every accepted byte).
void ByteMatcher::compact() {
  std::vector<uint32_t> remap(nodes_.size(), kNone);
  std::vector<Node> kept;
  // Parents before children: walk each stack down, then copy from its bottom.
  std::vector<uint32_t> chain;
  for (uint32_t& h : heads_) {
    chain.clear();
    for (uint32_t n = h; n != kNone && remap[n] == kNone; n = nodes_[n].parent) chain.push_back(n);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const Node& old = nodes_[*it];
      remap[*it] = static_cast<uint32_t>(kept.size());
      kept.push_back({old.pos, old.parent == kNone ? kNone : remap[old.parent]});
    }
    h = remap[h];
  }
  nodes_ = std::move(kept);
  std::fill(cons_.begin(), cons_.end(), kNone);
  visited_.assign(nodes_.size(), 0);
  std::sort(heads_.begin(), heads_.end());
}

void ByteMatcher::state_key(std::span<const uint32_t> heads, bool complete, std::string& key,
                            bool canonical) const {
  key.clear();
  key.push_back(complete ? 'c' : 'o');
  if (!canonical || heads.size() == 1) {
    for (uint32_t h : heads) {
      for (uint32_t n = h; n != kNone; n = nodes_[n].parent)
        key.append(reinterpret_cast<const char*>(&nodes_[n].pos), sizeof(uint32_t));
      key.append(4, '\xFF');
    }
    return;
  }
  // Canonical: heads are ordered by node id, which depends on the arena's history; sorted
  // stacks give equal states equal keys in every matcher.
  key_parts_.resize(heads.size());
  for (size_t i = 0; i < heads.size(); ++i) {
    std::string& part = key_parts_[i];
    part.clear();
    for (uint32_t n = heads[i]; n != kNone; n = nodes_[n].parent) {
      const uint32_t p = nodes_[n].pos;
      part.append(reinterpret_cast<const char*>(&p), sizeof p);
    }
    part.append(4, '\xFF');
  }
  std::sort(key_parts_.begin(), key_parts_.end());
  for (const std::string& part : key_parts_) key += part;
}

bool accepts_text(const Grammar& g, std::string_view text) {
  ByteMatcher m(std::shared_ptr<const Grammar>(std::shared_ptr<const Grammar>{}, &g));
  for (char c : text)
    if (!m.accept_byte(static_cast<uint8_t>(c))) return false;
  return m.complete();
}

bool accepts_prefix(const Grammar& g, std::string_view text) {
  ByteMatcher m(std::shared_ptr<const Grammar>(std::shared_ptr<const Grammar>{}, &g));
  for (char c : text)
    if (!m.accept_byte(static_cast<uint8_t>(c))) return false;
  return true;
}

}  // namespace tandem::grammar
