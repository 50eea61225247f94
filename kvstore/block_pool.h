// BlockPool: fixed-size blocks of one memory tier. The device pool has a fixed capacity and lives
// in backend memory; the host pool grows in chunks of host memory. Blocks never move, so a pointer
// to a block stays valid until it is freed.
//
// Threads: alloc, free and the counters belong to the owner's thread. data, host_data and
// capacity may also be called from other threads (host attention workers pick blocks by id while
// the owner's thread may grow the pool): the chunks' addresses sit in an array that never moves,
// published by a release store of the chunk count.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace tandem {

class BlockPool {
 public:
  // capacity: blocks available (fixed pool) or allocated per chunk (growable pool). Without a
  // backend the blocks are host memory tagged `memory`; with one they are the backend's memory,
  // and where the host cannot read that memory and `mirror` is set every block also has a host
  // mirror of the same size (host_data), which the owner keeps in step with upload.
  BlockPool(int64_t block_bytes, int64_t capacity, bool growable, MemoryKind memory,
            Backend* backend = nullptr, bool mirror = true);

  // A free block id, or -1 when a fixed pool is exhausted or the limit is reached.
  int32_t alloc();
  void free(int32_t id);
  void* data(int32_t id) const;       // the block (backend memory in a backend pool)
  void* host_data(int32_t id) const;  // the host mirror, or the block itself without one
  bool mirrored() const { return mirrored_; }
  // Whether host_data may be used: the blocks are host-readable or mirrored.
  bool host_side() const { return backend_ == nullptr || backend_->host_accessible() || mirrored_; }

  int64_t block_bytes() const { return block_bytes_; }
  int64_t used() const { return used_; }
  int64_t capacity() const;  // blocks the pool can hand out now without growing
  int64_t free_blocks() const { return capacity() - used_; }
  // At most this many blocks in use at once (a growable pool grows no further); 0: no limit.
  void set_limit(int64_t blocks) { limit_ = blocks; }
  int64_t limit() const { return limit_; }
  // Blocks alloc can still hand out: up to the limit, or what is free in a fixed pool without
  // one (a growable pool without a limit: effectively unbounded).
  int64_t free_within_limit() const;
  bool growable() const { return growable_; }
  MemoryKind memory() const { return backend_ ? backend_->memory_kind() : memory_; }

 private:
  void grow();

  int64_t block_bytes_;
  int64_t chunk_blocks_;
  bool growable_;
  MemoryKind memory_;
  Backend* backend_;
  bool mirrored_;
  std::vector<Buffer> backend_chunks_;
  std::vector<Buffer> chunks_;  // host blocks, or the mirrors of the backend blocks
  // Chunk addresses for data (the blocks) and host_data (their host side): max_chunks_ entries,
  // the first n_chunks_ set. Unlike the vectors above, never moved by a grow.
  int64_t max_chunks_;
  std::unique_ptr<uint8_t*[]> bases_, host_bases_;
  std::atomic<int64_t> n_chunks_{0};
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;  // guards against double free
  int64_t used_ = 0;
  int64_t limit_ = 0;
};

}  // namespace tandem
