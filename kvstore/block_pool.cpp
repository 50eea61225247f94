// BlockPool: chunked allocation with a free list; double frees and foreign ids are bugs.
#include "kvstore/block_pool.h"

#include <algorithm>

namespace tandem {
namespace {

constexpr int64_t kMaxBlocks = int64_t{1} << 31;  // ids are int32
constexpr int64_t kMaxChunks = int64_t{1} << 16;

}  // namespace

BlockPool::BlockPool(int64_t block_bytes, int64_t capacity, bool growable, MemoryKind memory,
                     Backend* backend, bool mirror)
    : block_bytes_((block_bytes + 63) / 64 * 64),
      chunk_blocks_(capacity),
      growable_(growable),
      memory_(memory),
      backend_(backend),
      mirrored_(backend != nullptr && !backend->host_accessible() && mirror),
      // Block ids are int32; 65536 chunks of a host pool's 32 MiB are 2 TiB.
      max_chunks_(growable
                      ? std::max<int64_t>(1, std::min<int64_t>(kMaxChunks, kMaxBlocks / capacity))
                      : 1),
      bases_(new uint8_t*[static_cast<size_t>(max_chunks_)]),
      host_bases_(new uint8_t*[static_cast<size_t>(max_chunks_)]) {
  TANDEM_CHECK(block_bytes > 0 && capacity > 0, "pool of ", capacity, " blocks of ", block_bytes);
  grow();
}

void BlockPool::grow() {
  const int64_t n = n_chunks_.load(std::memory_order_relaxed);
  const int64_t base = n * chunk_blocks_;
  TANDEM_REQUIRE(n < max_chunks_ && base + chunk_blocks_ < kMaxBlocks, kOutOfMemory,
                 "KV pool too large");
  const int64_t bytes = chunk_blocks_ * block_bytes_;
  if (backend_ != nullptr)
    backend_chunks_.emplace_back(*backend_, DType::kU8, std::initializer_list<int64_t>{bytes});
  // Host chunks on huge pages where they are large enough (host_heap_huge): the host attention
  // streams them.
  if (backend_ == nullptr || mirrored_)
    chunks_.emplace_back(host_heap_huge(backend_ ? MemoryKind::kHost : memory_), DType::kU8,
                         std::initializer_list<int64_t>{bytes});
  const size_t c = static_cast<size_t>(n);
  bases_[c] = static_cast<uint8_t*>(backend_ ? backend_chunks_.back().view().data
                                             : chunks_.back().view().data);
  host_bases_[c] = mirrored_ ? static_cast<uint8_t*>(chunks_.back().view().data) : bases_[c];
  in_use_.resize(static_cast<size_t>(base + chunk_blocks_), false);
  for (int64_t i = chunk_blocks_ - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(base + i));
  n_chunks_.store(n + 1, std::memory_order_release);  // the addresses above, then the count
}

int64_t BlockPool::capacity() const {
  return n_chunks_.load(std::memory_order_acquire) * chunk_blocks_;
}

int64_t BlockPool::free_within_limit() const {
  if (limit_ > 0) return std::max<int64_t>(0, limit_ - used_);
  return growable_ ? (int64_t{1} << 40) : free_blocks();
}

int32_t BlockPool::alloc() {
  if (limit_ > 0 && used_ >= limit_) return -1;
  if (free_.empty()) {
    if (!growable_) return -1;
    grow();
  }
  const int32_t id = free_.back();
  free_.pop_back();
  in_use_[static_cast<size_t>(id)] = true;
  ++used_;
  return id;
}

void BlockPool::free(int32_t id) {
  TANDEM_CHECK(id >= 0 && id < capacity() && in_use_[static_cast<size_t>(id)], "free of block ",
               id);
  in_use_[static_cast<size_t>(id)] = false;
  free_.push_back(id);
  --used_;
}

void* BlockPool::data(int32_t id) const {
  TANDEM_CHECK(id >= 0 && id < capacity(), "block ", id);
  const int64_t chunk = id / chunk_blocks_, at = id % chunk_blocks_;
  return bases_[static_cast<size_t>(chunk)] + at * block_bytes_;
}

void* BlockPool::host_data(int32_t id) const {
  TANDEM_CHECK(host_side(), "host side of a device block without a mirror");
  TANDEM_CHECK(id >= 0 && id < capacity(), "block ", id);
  const int64_t chunk = id / chunk_blocks_, at = id % chunk_blocks_;
  return host_bases_[static_cast<size_t>(chunk)] + at * block_bytes_;
}

}  // namespace tandem
