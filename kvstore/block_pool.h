// BlockPool: fixed-size blocks of one memory tier. The device pool has a fixed capacity; the host
// pool grows in chunks. Blocks never move, so a pointer to a block stays valid until it is freed.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/tensor.h"

namespace tandem {

class BlockPool {
 public:
  // capacity: blocks available (fixed pool) or allocated per chunk (growable pool).
  BlockPool(int64_t block_bytes, int64_t capacity, bool growable, MemoryKind memory);

  // A free block id, or -1 when a fixed pool is exhausted.
  int32_t alloc();
  void free(int32_t id);
  void* data(int32_t id) const;

  int64_t block_bytes() const { return block_bytes_; }
  int64_t used() const { return used_; }
  int64_t capacity() const;  // blocks the pool can hand out now without growing
  int64_t free_blocks() const { return capacity() - used_; }
  bool growable() const { return growable_; }
  MemoryKind memory() const { return memory_; }

 private:
  void grow();

  int64_t block_bytes_;
  int64_t chunk_blocks_;
  bool growable_;
  MemoryKind memory_;
  std::vector<Buffer> chunks_;
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;  // guards against double free
  int64_t used_ = 0;
};

}  // namespace tandem
