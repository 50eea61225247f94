// The three ways rows reach device blocks (kvstore/device_rows.h).
#include "kvstore/device_rows.h"

#include <algorithm>

#include "kernels/cpu/simd.h"

namespace tandem {

namespace {

// Host-accessible backend memory: the block is written and read in place.
class InPlaceRows final : public DeviceRows {
 public:
  explicit InPlaceRows(const BlockAccess& b) : b_(b) {}
  bool reads_host_rows() const override { return true; }
  bool host_side() const override { return true; }
  void put(int32_t id, int32_t slot, const RowSource& src, int64_t i, const float* maw) override {
    const int64_t row = b_.row_elems(), at = int64_t{slot} * b_.row_bytes();
    cpu::row_from_f32(src.k + i * row, b_.mirror_k(id) + at, b_.layout.dtype, row);
    cpu::row_from_f32(src.v + i * row, b_.mirror_v(id) + at, b_.layout.dtype, row);
    std::copy_n(maw, b_.layout.n_head_kv, b_.dev_maw(id) + int64_t{slot} * b_.layout.n_head_kv);
  }
  void flush() override {}
  void read_block(int32_t id, int32_t, const uint8_t*& k, const uint8_t*& v) override {
    k = b_.mirror_k(id);
    v = b_.mirror_v(id);
  }

 private:
  BlockAccess b_;
};

// A host mirror per block: rows are written there and uploaded a run at a time.
class MirroredRows final : public DeviceRows {
 public:
  MirroredRows(Backend& be, const BlockAccess& b) : be_(be), b_(b) {}
  bool reads_host_rows() const override { return true; }
  bool host_side() const override { return true; }
  void put(int32_t id, int32_t slot, const RowSource& src, int64_t i, const float* maw) override {
    const int64_t row = b_.row_elems(), at = int64_t{slot} * b_.row_bytes();
    cpu::row_from_f32(src.k + i * row, b_.mirror_k(id) + at, b_.layout.dtype, row);
    cpu::row_from_f32(src.v + i * row, b_.mirror_v(id) + at, b_.layout.dtype, row);
    std::copy_n(maw, b_.layout.n_head_kv, b_.dev_maw(id) + int64_t{slot} * b_.layout.n_head_kv);
    if (!runs_.empty() && runs_.back().id == id && runs_.back().hi == slot) {
      ++runs_.back().hi;
      return;
    }
    runs_.push_back({id, slot, slot + 1});
  }
  void flush() override {
    const int64_t row = b_.row_elems();
    const MemoryKind mem = b_.device.memory();
    for (const Run& r : runs_) {
      const int64_t at = int64_t{r.lo} * b_.row_bytes(), n = (r.hi - r.lo) * row;
      auto* dev = static_cast<uint8_t*>(b_.device.data(r.id));
      be_.upload(TensorView(b_.mirror_k(r.id) + at, b_.layout.dtype, {n}),
                 TensorView(dev + at, b_.layout.dtype, {n}, mem));
      be_.upload(TensorView(b_.mirror_v(r.id) + at, b_.layout.dtype, {n}),
                 TensorView(dev + b_.layout.dev_kv_bytes() + at, b_.layout.dtype, {n}, mem));
    }
    runs_.clear();
  }
  void read_block(int32_t id, int32_t, const uint8_t*& k, const uint8_t*& v) override {
    flush();
    k = b_.mirror_k(id);
    v = b_.mirror_v(id);
  }

 private:
  struct Run {
    int32_t id, lo, hi;
  };
  Backend& be_;
  BlockAccess b_;
  std::vector<Run> runs_;
};

// No host copy: rows are copied on the device (from the step's rows) or uploaded converted (rows
// that exist only on the host: imports).
class DeviceOnlyRows final : public DeviceRows {
 public:
  DeviceOnlyRows(Backend& be, const BlockAccess& b) : be_(be), b_(b) {}
  bool reads_host_rows() const override { return false; }
  bool host_side() const override { return false; }
  void put(int32_t id, int32_t slot, const RowSource& src, int64_t i, const float*) override {
    if (!puts_.empty() && (src.k_dev.data != src_.k_dev.data || src.k != src_.k)) flush();
    src_ = src;
    const int64_t es = dtype_size(b_.layout.dtype);
    TANDEM_CHECK(b_.device.block_bytes() % es == 0, "device blocks of whole elements");
    const int64_t dst = id * (b_.device.block_bytes() / es) + int64_t{slot} * b_.row_elems();
    puts_.push_back({dst, i});
  }
  void flush() override {
    if (puts_.empty()) return;
    const int64_t row = b_.row_elems();
    const DType t = b_.layout.dtype;
    const int64_t es = dtype_size(t);
    if (!src_.k_dev.empty() && consecutive()) {
      // The usual case, a layer of a batch: every row of the step's k and v, in order. One
      // scatter per tensor into the pool (one chunk: block id's K starts id * block_bytes after
      // block 0's, its V dev_kv_bytes later).
      const int64_t s0 = puts_.front().src, n = static_cast<int64_t>(puts_.size());
      const TensorView pool(b_.device.data(0), t,
                            {b_.device.capacity() * b_.device.block_bytes() / es},
                            b_.device.memory());
      k_off_.resize(puts_.size());
      v_off_.resize(puts_.size());
      for (size_t i = 0; i < puts_.size(); ++i) {
        k_off_[i] = puts_[i].dst;
        v_off_[i] = puts_[i].dst + b_.layout.dev_kv_bytes() / es;
      }
      auto rows_of = [&](const TensorView& x) {
        return x.reshape({x.dim(0), row}).slice(s0, s0 + n);
      };
      be_.scatter_rows(rows_of(src_.k_dev), pool, k_off_.data(), n);
      be_.scatter_rows(rows_of(src_.v_dev), pool, v_off_.data(), n);
      puts_.clear();
      return;
    }
    // The block pool is one chunk: block id's K starts id * block_bytes after block 0's.
    const TensorView k0 = b_.dev_k(0, 1), v0 = b_.dev_v(0, 1);
    auto dst_rows = [&](const TensorView& base, int64_t at, int64_t rows) {
      return TensorView(static_cast<uint8_t*>(base.data) + at * es, t, {rows, row}, base.memory);
    };
    // Runs of rows contiguous in both the source and the destination.
    for (size_t a = 0; a < puts_.size();) {
      size_t z = a + 1;
      while (z < puts_.size() && puts_[z].dst == puts_[z - 1].dst + row &&
             puts_[z].src == puts_[z - 1].src + 1)
        ++z;
      const int64_t rows = static_cast<int64_t>(z - a), s = puts_[a].src, d = puts_[a].dst;
      if (!src_.k_dev.empty()) {
        be_.copy(src_.k_dev.reshape({src_.k_dev.dim(0), row}).slice(s, s + rows),
                 dst_rows(k0, d, rows));
        be_.copy(src_.v_dev.reshape({src_.v_dev.dim(0), row}).slice(s, s + rows),
                 dst_rows(v0, d, rows));
      } else {
        // Rows that exist only on the host (imports): converted and uploaded a run at a time.
        TANDEM_CHECK(src_.k != nullptr && src_.v != nullptr, "KV rows without a source");
        stage_.resize(static_cast<size_t>(2 * rows * row * es));
        uint8_t* ks = stage_.data();
        uint8_t* vs = ks + rows * row * es;
        cpu::row_from_f32(src_.k + s * row, ks, t, rows * row);
        cpu::row_from_f32(src_.v + s * row, vs, t, rows * row);
        be_.upload(TensorView(ks, t, {rows, row}), dst_rows(k0, d, rows));
        be_.upload(TensorView(vs, t, {rows, row}), dst_rows(v0, d, rows));
      }
      a = z;
    }
    puts_.clear();
  }
  void read_block(int32_t id, int32_t rows, const uint8_t*& k, const uint8_t*& v) override {
    flush();
    const int64_t bytes = rows * b_.row_bytes(), elems = rows * b_.row_elems();
    k_.resize(static_cast<size_t>(bytes));
    v_.resize(static_cast<size_t>(bytes));
    be_.download(b_.dev_k(id, rows).reshape({elems}),
                 TensorView(k_.data(), b_.layout.dtype, {elems}));
    be_.download(b_.dev_v(id, rows).reshape({elems}),
                 TensorView(v_.data(), b_.layout.dtype, {elems}));
    k = k_.data();
    v = v_.data();
  }

 private:
  struct Put {
    int64_t dst;  // element offset of the row from block 0's K
    int64_t src;  // row of the source
  };
  // Whether the rows put are consecutive rows of the source.
  bool consecutive() const {
    for (size_t i = 1; i < puts_.size(); ++i)
      if (puts_[i].src != puts_[i - 1].src + 1) return false;
    return true;
  }
  Backend& be_;
  BlockAccess b_;
  RowSource src_;
  std::vector<Put> puts_;
  std::vector<uint8_t> stage_, k_, v_;
  std::vector<int64_t> k_off_, v_off_;
};

}  // namespace

std::unique_ptr<DeviceRows> DeviceRows::make(Backend& backend, const BlockAccess& blocks) {
  if (!blocks.device.host_side()) return std::make_unique<DeviceOnlyRows>(backend, blocks);
  if (blocks.device.mirrored()) return std::make_unique<MirroredRows>(backend, blocks);
  return std::make_unique<InPlaceRows>(blocks);
}

std::unique_ptr<DeviceRows> DeviceRows::make_scatter(Backend& backend, const BlockAccess& blocks) {
  return std::make_unique<DeviceOnlyRows>(backend, blocks);
}

}  // namespace tandem
