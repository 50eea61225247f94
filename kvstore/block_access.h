// BlockAccess: where the bytes of a block are, for both tiers of a store: the device block as
// the backend sees it, the host's side of it (the block itself where the host can read backend
// memory, else its mirror), and the host block's K, V, MAW and Quest digest. Host K is stored by
// channel and host V by tiles of channels (kvstore/block_table.h): their readers and writers go
// through the accessors here.
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
  // A host block: K [Hkv, d, tokens] (by channel per head), V [Hkv, d / kVTile, tokens, kVTile]
  // (by tiles per head; [Hkv, tokens, d] where !layout.host_v_tiled()), digest min/max
  // f32 [Hkv, d], with --value-offload the key codes (its MAW values are the sequence's:
  // LayerTable::maw).
  uint8_t* host_k(int32_t id) const { return static_cast<uint8_t*>(host.data(id)); }
  // Host K: the element offset from host_k(id) of (token t, channel c) of head g.
  int64_t host_k_elem(int32_t g, int32_t t, int32_t c) const {
    return (int64_t{g} * layout.head_dim + c) * layout.tokens + t;
  }
  // Head g's K in host block id: channel c's `tokens` rows contiguous from c * tokens elements
  // on (HostBlockRef::k with k_ld = tokens).
  uint8_t* host_k_head(int32_t id, int32_t g) const {
    return host_k(id) + host_k_elem(g, 0, 0) * dtype_size(layout.dtype);
  }
  // Row t of head g's K: head_dim values as f32 (exact from f16 and bf16).
  void read_host_k_row(int32_t id, int32_t g, int32_t t, float* out) const;
  // Row t of head g's K <- in (head_dim f32), rounded to the store's dtype as cpu::row_from_f32
  // rounds.
  void write_host_k_row(int32_t id, int32_t g, int32_t t, const float* in) const;
  // The block's K in the row layout [Hkv, tokens, d] of the store's dtype (dev_kv_bytes() at out):
  // for the readers that take K by rows (the exact prefill's paged attention, the device copies
  // of --device-budget).
  void host_k_as_rows(int32_t id, uint8_t* out) const;
  uint8_t* host_v(int32_t id) const { return host_k(id) + layout.dev_kv_bytes(); }
  // Host V: the element offset from host_v(id) of (token t, channel c) of head g (by tiles of
  // kVTile channels where layout.host_v_tiled(), else by rows).
  int64_t host_v_elem(int32_t g, int32_t t, int32_t c) const {
    const int64_t head = int64_t{g} * layout.tokens * layout.head_dim;
    if (!layout.host_v_tiled()) return head + int64_t{t} * layout.head_dim + c;
    return head + (c / kVTile) * layout.host_v_tile() + int64_t{t} * kVTile + c % kVTile;
  }
  // Head g's V in host block id (HostBlockRef::v, with v_tile = layout.host_v_tile()).
  uint8_t* host_v_head(int32_t id, int32_t g) const {
    return host_v(id) + host_v_elem(g, 0, 0) * dtype_size(layout.dtype);
  }
  // Row t of head g's V: head_dim values as f32 (exact from f16 and bf16).
  void read_host_v_row(int32_t id, int32_t g, int32_t t, float* out) const;
  // Row t of head g's V <- in (head_dim f32), rounded to the store's dtype as cpu::row_from_f32
  // rounds.
  void write_host_v_row(int32_t id, int32_t g, int32_t t, const float* in) const;
  // The block's V in the row layout [Hkv, tokens, d] of the store's dtype (dev_kv_bytes() at
  // out), for the readers that take V by rows (as host_k_as_rows for K).
  void host_v_as_rows(int32_t id, uint8_t* out) const;
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
