// PrefixCache: the hybrid store's automatic prefix cache in the host tier (in the manner of vLLM's
// automatic prefix caching and SGLang's HiCache, but attended in place by the CPU: a cached
// prefix never goes back to the device, only its sinks and last window are copied there).
//
// Unit: a chunk of `block` tokens that fills one host block per layer. Chunk j of a sequence holds
// tokens [sinks + j*block, sinks + (j+1)*block) (the placement of kvstore/block_table.h: the first
// `sinks` tokens live in a device block of their own); chunk 0 also carries the sinks' rows. The
// KV of a token depends on every token before it, so a chunk is named by a chained hash: of the
// store's salt (everything that changes the KV bytes) and the tokens for chunk 0, of the parent's
// hash and its own tokens after that. An entry keeps its tokens and its parent's hash and a
// lookup compares them, so a 64-bit collision can never hand out another prefix's KV.
//
// A finished, cancelled or preempted sequence leaves its full chunks here (HybridKv::release);
// a new sequence adopts the longest cached chain (HybridKv::adopt): the host blocks of the chunks
// that stay on the host are shared, read-only and reference-counted; those that would be in its
// device window are copied to its own device blocks. Host blocks of unreferenced entries are
// evicted least-recently-used when the host pool (bounded by --kv-host-gib) needs room. A
// sequence's selection state (hgca's MAW values) lives beside its block table, never in a shared
// block (kvstore/block_table.h), so sharing never mixes two sequences' statistics.
//
// Single-threaded: only the engine thread (which creates, steps and frees sequences) touches it.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvstore/block_pool.h"

namespace tandem {

class PrefixCache {
 public:
  struct Entry {
    uint64_t hash = 0, parent = 0;    // parent: 0 for chunk 0
    int32_t depth = 0;                // chunk index j
    std::vector<int32_t> tokens;      // chunk 0: sinks + block tokens; later: block tokens
    std::vector<int32_t> host;        // per layer: the host block (owned by the entry)
    std::vector<uint8_t> sinks;       // chunk 0: per layer the sinks' K then V rows (device layout)
    int32_t refs = 0;                 // sequences whose block tables hold these host blocks
    std::list<Entry*>::iterator lru;  // in lru_ while refs == 0
  };
  struct Stats {
    int64_t queried_tokens = 0;  // prompt tokens looked up (adoptable ones: all but the last)
    int64_t hit_tokens = 0;      // of which found cached
    int64_t evicted_blocks = 0;  // host blocks evicted (all layers)
    int64_t inserted_blocks = 0;
  };

  // host: the store's host pool, whose blocks entries own and free on eviction.
  PrefixCache(BlockPool& host, int32_t n_layer, int32_t sinks, int32_t block, uint64_t salt);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  int32_t sinks() const { return sinks_; }
  int32_t block() const { return block_; }
  // Full chunks among the first n tokens.
  int32_t chunks_of(int64_t n) const;
  // The chained hash of chunk j of `tokens` given the hash of chunk j-1 (parent, 0 for j = 0).
  uint64_t chunk_hash(std::span<const int32_t> tokens, int32_t j, uint64_t parent) const;
  // The chunk's tokens in `tokens`.
  std::span<const int32_t> chunk_tokens(std::span<const int32_t> tokens, int32_t j) const;

  // The entry of chunk j of `tokens` (hash given) if it is cached with exactly these tokens and
  // parent; null otherwise. Counts nothing.
  Entry* find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens, int32_t j) const;
  bool find_hash(uint64_t hash) const { return map_.count(hash) != 0; }
  // The longest cached chain of tokens' first `max_chunks` chunks, root first; each entry is
  // touched (most recently used). Counts the query in the stats (`queried` tokens).
  std::vector<Entry*> match(std::span<const int32_t> tokens, int32_t max_chunks, int64_t queried);
  // A new entry for chunk j: takes the host blocks (one per layer) and the sinks' rows. The
  // chunk must not be cached (find is null).
  Entry* insert(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens, int32_t j,
                std::vector<int32_t> host, std::vector<uint8_t> sinks);
  void ref(Entry* e);
  void unref(Entry* e);
  // Marks an unreferenced entry most recently used (the tail of a chain is touched first by its
  // releaser, so that tails are evicted before the roots that other chains share).
  void touch(Entry* e);
  // Evicts the least recently used unreferenced entry (its host blocks freed); false if none.
  bool evict_one();
  // Evicts until the host pool has `blocks` free blocks within its limit (or nothing is left).
  void make_room(int64_t blocks);

  // Host blocks held by entries, and by the unreferenced ones (which eviction can free).
  int64_t cached_blocks() const { return cached_blocks_; }
  int64_t evictable_blocks() const { return static_cast<int64_t>(lru_.size()) * n_layer_; }
  int64_t entries() const { return static_cast<int64_t>(map_.size()); }
  const Stats& stats() const { return stats_; }
  // Drops every unreferenced entry (tests, shutdown).
  void clear();
  // Calls f(const Entry&) for every entry (tests and diagnostics).
  template <typename F>
  void for_each(F&& f) const {
    for (const auto& [hash, e] : map_) f(*e);
  }

 private:
  void drop(Entry* e);

  BlockPool& host_;
  int32_t n_layer_, sinks_, block_;
  uint64_t salt_;
  std::unordered_map<uint64_t, Entry*> map_;
  std::list<Entry*> lru_;  // unreferenced entries, least recently used first
  int64_t cached_blocks_ = 0;
  Stats stats_;
};

}  // namespace tandem
