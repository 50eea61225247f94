// The block table of one (sequence, layer) of the hybrid store, and the arithmetic of where a
// sequence's tokens live: the first `sinks` tokens in one device block, a ring of recent blocks
// (`window` tokens) on the device, every older token in host blocks, moved there a whole block
// at a time when the window overflows. Pure bookkeeping: no memory is touched here.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "kernels/cpu/host_kernel.h"
#include "kernels/dtype.h"
#include "kvstore/kv_config.h"
#include "kvstore/step_plan.h"

namespace tandem {

// Byte layout of the blocks of one layer (shared by every sequence of a KvStore).
struct BlockLayout {
  int32_t tokens = 0, n_head_kv = 0, head_dim = 0;
  DType dtype = DType::kF32;
  int32_t key_bits = 0;  // --value-offload: bits of each host block's key codes (0: no codes)
  // Device block: K [tokens, n_head_kv, head_dim], V likewise, MAW f32 [tokens, n_head_kv].
  int64_t dev_kv_bytes() const {
    return int64_t{tokens} * n_head_kv * head_dim * dtype_size(dtype);
  }
  int64_t dev_bytes() const { return 2 * dev_kv_bytes() + int64_t{tokens} * n_head_kv * 4; }
  // Host block: K [n_head_kv, head_dim, tokens] (by channel per head: the CPU attention's score
  // pass then reads K in address order, each channel's tokens contiguous), V [n_head_kv,
  // head_dim / kVTile, tokens, kVTile] (by tiles of kVTile channels per head, host_v_tiled(): the
  // value passes then read V in address order too) or, for a head_dim that is not a larger
  // multiple of kVTile, [n_head_kv, tokens, head_dim], digest min and max f32 [n_head_kv, head_dim]
  // each, then with --value-offload the key codes u8 [n_head_kv, tokens, code_row_bytes()]. K and V
  // take dev_kv_bytes() each, as on the device. Its bytes are a function of the tokens alone
  // (immutable once full), so the prefix cache can share it; the MAW values live with each
  // sequence. Read and write host K through BlockAccess (kvstore/block_access.h), never by hand.
  int64_t code_row_bytes() const { return int64_t{head_dim} * key_bits / 8; }
  int64_t code_bytes() const { return int64_t{n_head_kv} * tokens * code_row_bytes(); }
  int64_t host_bytes() const {
    return 2 * dev_kv_bytes() + 2 * int64_t{n_head_kv} * head_dim * 4 + code_bytes();
  }
  // Whether host V is stored by tiles, and the elements from one tile of a head to the next
  // (HostBlockRef::v_tile; 0: by rows).
  bool host_v_tiled() const { return v_by_tiles(head_dim); }
  int64_t host_v_tile() const { return host_v_tiled() ? int64_t{tokens} * kVTile : 0; }
  int64_t maw_floats() const { return int64_t{tokens} * n_head_kv; }  // per host block
};

// The placement rule of a store's configuration.
struct TableGeometry {
  int32_t sinks = 0;   // effective: 0 when everything lives on the host (window 0)
  int32_t window = 0;  // 0: every token but none on the device
  int32_t block = 1;

  explicit TableGeometry(const KvConfig& cfg)
      : sinks(cfg.window == 0 ? 0 : std::min(cfg.sinks, cfg.block)),
        window(cfg.window),
        block(cfg.block) {}

  // Where the first `length` tokens of a sequence live, per layer.
  struct Counts {
    int32_t sink_tokens = 0, window_tokens = 0, host_tokens = 0;
    int64_t device_blocks = 0, host_blocks = 0;
  };
  Counts counts(int64_t length) const;
  // One layer's blocks taken and freed per tier when a sequence grows from `length` by n tokens
  // (the store evicts a window block before it allocates the next one, so the device peak is
  // the final count), and how many blocks move to the host.
  void growth(int64_t length, int64_t n, TierDelta& device, TierDelta& host,
              int32_t& evictions) const;
};

// One layer's blocks of one sequence.
struct LayerTable {
  int32_t sink = -1;           // device block holding the sink tokens
  std::deque<int32_t> window;  // device blocks, oldest first; the last may be partial
  int32_t window_tokens = 0;
  std::vector<int32_t> host;  // host blocks, oldest first; all full except with window 0
  int32_t host_tokens = 0;
  // Per host block: this sequence's MAW values f32 [n_head_kv, tokens] (hgca's selection state,
  // kept per sequence even where the block itself is shared through the prefix cache).
  std::vector<std::unique_ptr<float[]>> maw;
};

}  // namespace tandem
