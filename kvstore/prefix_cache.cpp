// PrefixCache: chained chunk hashes, verified lookups, reference counts and LRU eviction.
#include "kvstore/prefix_cache.h"

#include <algorithm>

#include "kernels/common.h"

namespace tandem {

namespace {

// splitmix64's finaliser: a cheap, well-mixed 64-bit permutation.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

PrefixCache::PrefixCache(BlockPool& host, int32_t n_layer, int32_t sinks, int32_t block,
                         uint64_t salt)
    : host_(host), n_layer_(n_layer), sinks_(sinks), block_(block), salt_(mix(salt)) {
  TANDEM_CHECK(n_layer > 0 && block > 0 && sinks >= 0, "prefix cache geometry");
}

PrefixCache::~PrefixCache() {
  for (auto& [hash, e] : map_) {
    for (int32_t id : e->host) host_.free(id);
    delete e;
  }
}

int32_t PrefixCache::chunks_of(int64_t n) const {
  return n < sinks_ + block_ ? 0 : static_cast<int32_t>((n - sinks_) / block_);
}

std::span<const int32_t> PrefixCache::chunk_tokens(std::span<const int32_t> tokens,
                                                   int32_t j) const {
  const size_t at = j == 0 ? 0 : static_cast<size_t>(sinks_ + int64_t{j} * block_);
  const size_t n = static_cast<size_t>(j == 0 ? sinks_ + block_ : block_);
  TANDEM_CHECK(at + n <= tokens.size(), "chunk ", j, " past ", tokens.size(), " tokens");
  return tokens.subspan(at, n);
}

uint64_t PrefixCache::chunk_hash(std::span<const int32_t> tokens, int32_t j,
                                 uint64_t parent) const {
  uint64_t h = mix(j == 0 ? salt_ : parent ^ 0x5bd1e9955bd1e995ull);
  for (int32_t t : chunk_tokens(tokens, j)) h = mix(h ^ static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;  // 0 is the root's parent
}

PrefixCache::Entry* PrefixCache::find(uint64_t hash, uint64_t parent,
                                      std::span<const int32_t> tokens, int32_t j) const {
  const auto it = map_.find(hash);
  if (it == map_.end()) return nullptr;
  Entry* e = it->second;
  const std::span<const int32_t> mine = chunk_tokens(tokens, j);
  if (e->depth != j || e->parent != parent ||
      !std::equal(mine.begin(), mine.end(), e->tokens.begin(), e->tokens.end()))
    return nullptr;  // a hash collision: another prefix
  return e;
}

std::vector<PrefixCache::Entry*> PrefixCache::match(std::span<const int32_t> tokens,
                                                    int32_t max_chunks, int64_t queried) {
  std::vector<Entry*> chain;
  uint64_t parent = 0;
  const int32_t n = std::min(max_chunks, chunks_of(static_cast<int64_t>(tokens.size())));
  for (int32_t j = 0; j < n; ++j) {
    const uint64_t h = chunk_hash(tokens, j, parent);
    Entry* e = find(h, parent, tokens, j);
    if (e == nullptr) break;
    chain.push_back(e);
    parent = h;
  }
  // Touched tail first: the root ends most recently used.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) touch(*it);
  stats_.queried_tokens += queried;
  if (!chain.empty()) stats_.hit_tokens += sinks_ + int64_t{block_} * chain.size();
  return chain;
}

PrefixCache::Entry* PrefixCache::insert(uint64_t hash, uint64_t parent,
                                        std::span<const int32_t> tokens, int32_t j,
                                        std::vector<int32_t> host, std::vector<uint8_t> sinks) {
  TANDEM_CHECK(static_cast<int32_t>(host.size()) == n_layer_, "a cached chunk needs ", n_layer_,
               " host blocks, got ", host.size());
  TANDEM_CHECK(map_.find(hash) == map_.end(), "chunk already cached");
  auto* e = new Entry;
  e->hash = hash;
  e->parent = parent;
  e->depth = j;
  const std::span<const int32_t> mine = chunk_tokens(tokens, j);
  e->tokens.assign(mine.begin(), mine.end());
  e->host = std::move(host);
  e->sinks = std::move(sinks);
  lru_.push_back(e);
  e->lru = std::prev(lru_.end());
  map_.emplace(hash, e);
  cached_blocks_ += n_layer_;
  stats_.inserted_blocks += n_layer_;
  return e;
}

void PrefixCache::ref(Entry* e) {
  if (e->refs++ == 0) lru_.erase(e->lru);
}

void PrefixCache::unref(Entry* e) {
  TANDEM_CHECK(e->refs > 0, "unref of an unreferenced cache entry");
  if (--e->refs == 0) {
    lru_.push_back(e);
    e->lru = std::prev(lru_.end());
  }
}

void PrefixCache::touch(Entry* e) {
  if (e->refs > 0) return;
  lru_.splice(lru_.end(), lru_, e->lru);
}

void PrefixCache::drop(Entry* e) {
  lru_.erase(e->lru);
  map_.erase(e->hash);
  for (int32_t id : e->host) host_.free(id);
  cached_blocks_ -= n_layer_;
  delete e;
}

bool PrefixCache::evict_one() {
  if (lru_.empty()) return false;
  drop(lru_.front());
  stats_.evicted_blocks += n_layer_;
  return true;
}

void PrefixCache::make_room(int64_t blocks) {
  while (host_.free_within_limit() < blocks && evict_one()) {
  }
}

void PrefixCache::clear() {
  while (!lru_.empty()) drop(lru_.front());
}

}  // namespace tandem
