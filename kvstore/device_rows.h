// DeviceRows: how K/V rows reach the device blocks of a store and come back when a block is
// evicted, one strategy per kind of device memory:
//   - in place: the host can write backend memory (CPU backend): rows are converted straight
//     into the block, evictions read it in place;
//   - mirrored: a host mirror per block (hgca on a GPU, whose MAW update reads the keys every
//     step): rows go into the mirror and runs of them are uploaded; evictions read the mirror;
//   - device only: no host copy (full and topk on a GPU): rows are copied on the device from the
//     step's k and v, every row of a layer in one scatter per tensor; an eviction downloads the
//     block once.
// Rows are put for a whole layer of a batch, then flushed once.
#pragma once

#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kvstore/block_access.h"

namespace tandem {

// The step's k and v rows ([n, Hkv, d] f32) a layer stores from: host copies (null where the
// strategy does not read them on the host) and/or the backend's own rows.
struct RowSource {
  const float* k = nullptr;
  const float* v = nullptr;
  TensorView k_dev, v_dev;
};

class DeviceRows {
 public:
  virtual ~DeviceRows() = default;
  // Whether put reads the rows on the host (the caller then hands host copies in the source).
  virtual bool reads_host_rows() const = 0;
  // Whether the host has a copy of each device block (K, V and MAW readable on the host).
  virtual bool host_side() const = 0;
  // Row `i` of `src` into slot `slot` of device block `id`, with its MAW values (Hkv floats).
  virtual void put(int32_t id, int32_t slot, const RowSource& src, int64_t i, const float* maw) = 0;
  // Sends every row put since the last flush.
  virtual void flush() = 0;
  // The first `rows` K and V rows of a device block as host bytes ([rows, Hkv, d] in the KV
  // dtype), valid until the next call; flushes first.
  virtual void read_block(int32_t id, int32_t rows, const uint8_t*& k, const uint8_t*& v) = 0;

  static std::unique_ptr<DeviceRows> make(Backend& backend, const BlockAccess& blocks);
  // Device copies only (from the step's k and v on the device), whatever the pool's host side:
  // the device half of a store whose host side a host job writes (kvstore/hybrid_jobs.cpp).
  static std::unique_ptr<DeviceRows> make_scatter(Backend& backend, const BlockAccess& blocks);
};

}  // namespace tandem
