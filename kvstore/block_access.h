// BlockAccess: where the bytes of a block are, for both tiers of a store: the device block as
// the backend sees it, the host's side of it (the block itself where the host can read backend
// memory, else its mirror), and the host block's K, V, MAW and Quest digest.
#pragma once

#include "kernels/backend.h"
#include "kvstore/block_pool.h"
#include "kvstore/block_table.h"

namespace tandem {

struct BlockAccess {
  BlockPool& device;
  BlockPool& host;
  BlockLayout layout;

  // Device-side views of rows [0, rows) of a block (backend memory).
  TensorView dev_k(int32_t id, int32_t rows) const {
    return TensorView(device.data(id), layout.dtype, {rows, layout.n_head_kv, layout.head_dim},
                      device.memory());
  }
  TensorView dev_v(int32_t id, int32_t rows) const {
    TensorView t = dev_k(id, rows);
    t.data = static_cast<uint8_t*>(t.data) + layout.dev_kv_bytes();
    return t;
  }
  // The host's side of a device block: K [tokens, Hkv, d], V, MAW f32 [tokens, Hkv].
  uint8_t* mirror_k(int32_t id) const { return static_cast<uint8_t*>(device.host_data(id)); }
  uint8_t* mirror_v(int32_t id) const { return mirror_k(id) + layout.dev_kv_bytes(); }
  float* dev_maw(int32_t id) const {
    return reinterpret_cast<float*>(mirror_k(id) + 2 * layout.dev_kv_bytes());
  }
  // A host block: K [Hkv, tokens, d], V, digest min/max f32 [Hkv, d], with --value-offload the
  // key codes (its MAW values are the sequence's: LayerTable::maw).
  uint8_t* host_k(int32_t id) const { return static_cast<uint8_t*>(host.data(id)); }
  uint8_t* host_v(int32_t id) const { return host_k(id) + layout.dev_kv_bytes(); }
  float* host_kmin(int32_t id) const {
    return reinterpret_cast<float*>(host_k(id) + 2 * layout.dev_kv_bytes());
  }
  float* host_kmax(int32_t id) const {
    return host_kmin(id) + int64_t{layout.n_head_kv} * layout.head_dim;
  }
  // --value-offload: the block's key codes of head g, u8 [tokens, layout.code_row_bytes()].
  uint8_t* host_codes(int32_t id, int32_t g) const {
    return host_k(id) + 2 * layout.dev_kv_bytes() + 2 * row_elems() * 4 +
           int64_t{g} * layout.tokens * layout.code_row_bytes();
  }
  int64_t row_elems() const { return int64_t{layout.n_head_kv} * layout.head_dim; }
  int64_t row_bytes() const { return row_elems() * dtype_size(layout.dtype); }
};

}  // namespace tandem
