// Backend::scatter_rows. On every backend at hand (CPU always; CUDA on a GPU or the emulator):
// the scatter equals one copy() per row bit for bit (rows elsewhere in the pool untouched), CUDA
// equals CPU exactly (both round to nearest even), bad offsets are rejected, and on the emulator
// one call is one upload and one launch whatever the rows.
//
// Like test_cuda_attention_batch, it runs its CPU checks in every build, the CUDA ones where
// there is a device.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/emulator.h"
#include "kernels/tensor.h"
#include "tests/batch_ops.h"

using namespace tandem;
using namespace tandem::test;

namespace {

// n rows of `row` f32 for a pool of dtype t (random contents), at shuffled, unaligned,
// non-overlapping offsets.
struct ScatterCase {
  Buffer src, pool;
  std::vector<int64_t> offsets;
  int64_t n = 0, row = 0;
};

ScatterCase scatter_case(DType t, int64_t n, int64_t row, uint32_t seed) {
  ScatterCase c;
  c.n = n;
  c.row = row;
  const int64_t stride = row + 5, slots = n + 3;
  c.src = random_buffer(DType::kF32, {n, row}, seed);
  c.pool = random_buffer(t, {slots * stride + 2}, seed + 1);
  std::vector<int64_t> slot(static_cast<size_t>(slots));
  for (size_t i = 0; i < slot.size(); ++i) slot[i] = static_cast<int64_t>(i);
  std::shuffle(slot.begin(), slot.end(), std::mt19937(seed + 2));
  for (int64_t i = 0; i < n; ++i) c.offsets.push_back(slot[static_cast<size_t>(i)] * stride + 2);
  return c;
}

// The pool's bytes after scatter_rows (batch) or after one copy() per row.
std::vector<uint8_t> run_scatter(Backend& be, const ScatterCase& c, bool batch) {
  const Buffer src = Buffer::upload(be, c.src.view());
  const Buffer pool = Buffer::upload(be, c.pool.view());
  if (batch) {
    std::vector<int64_t> offsets = c.offsets;
    be.scatter_rows(src.view(), pool.view(), offsets.data(), c.n);
    std::fill(offsets.begin(), offsets.end(), int64_t{-1});  // reusable once the call returns
  } else {
    const int64_t es = dtype_size(pool.view().dtype);
    for (int64_t i = 0; i < c.n; ++i) {
      const TensorView to(
          static_cast<char*>(pool.view().data) + c.offsets[static_cast<size_t>(i)] * es,
          pool.view().dtype, {1, c.row}, pool.view().memory);
      be.copy(src.view().slice(i, i + 1), to);
    }
  }
  return bytes_of(be, pool.view());
}

}  // namespace

TEST_CASE("scatter_rows equals one copy per row, f32/f16/bf16 pools", "[scatter_rows]") {
  uint32_t seed = 500;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t n : {1, 7, 33}) {
      INFO("pool " << dtype_name(t) << " n=" << n);
      const ScatterCase c = scatter_case(t, n, 2 * 64, seed += 10);
      const std::vector<uint8_t> ref = run_scatter(cpu(), c, true);
      CHECK(first_diff(ref, run_scatter(cpu(), c, false)) == -1);
      if (Backend* g = gpu()) {
        const std::vector<uint8_t> got = run_scatter(*g, c, true);
        CHECK(first_diff(got, run_scatter(*g, c, false)) == -1);
        CHECK(first_diff(got, ref) == -1);  // both round to nearest even
      }
    }
}

TEST_CASE("scatter_rows: nothing for no row; overlapping or outside rows are rejected",
          "[scatter_rows]") {
  for (Backend* be : {&cpu(), gpu()}) {
    if (be == nullptr) continue;
    INFO("backend " << be->name());
    const ScatterCase c = scatter_case(DType::kBF16, 3, 16, 31);
    const Buffer src = Buffer::upload(*be, c.src.view());
    const Buffer pool = Buffer::upload(*be, c.pool.view());
    const std::vector<uint8_t> before = bytes_of(*be, pool.view());
    be->scatter_rows(src.view().slice(0, 0), pool.view(), nullptr, 0);
    CHECK(first_diff(bytes_of(*be, pool.view()), before) == -1);
    const std::vector<int64_t> overlap = {0, 40, 15};  // rows 0 and 2 share element 15
    CHECK_THROWS(be->scatter_rows(src.view(), pool.view(), overlap.data(), 3));
    const std::vector<int64_t> outside = {0, 40, pool.view().numel() - 15};
    CHECK_THROWS(be->scatter_rows(src.view(), pool.view(), outside.data(), 3));
  }
}

TEST_CASE("scatter_rows: one upload and one launch per call, whatever the rows",
          "[scatter_rows][emulated]") {
  Backend* g = gpu();
  if (g == nullptr || !cuda_is_emulated()) {
    WARN("not on the emulator: launch counts are not checked");
    return;
  }
  for (int64_t n : {1, 8, 32}) {
    const ScatterCase c = scatter_case(DType::kF16, n, 128, 900);
    const Buffer src = Buffer::upload(*g, c.src.view());
    const Buffer pool = Buffer::upload(*g, c.pool.view());
    g->synchronize();
    const CudaEmulatorCounters before = cuda_emulator_counters();
    g->scatter_rows(src.view(), pool.view(), c.offsets.data(), n);
    g->synchronize();
    const CudaEmulatorCounters d = cuda_emulator_counters() - before;
    std::printf("scatter_rows, %lld rows: %lld launches + %lld copies\n", static_cast<long long>(n),
                static_cast<long long>(d.launches), static_cast<long long>(d.copies));
    CHECK(d.launches == 1);
    CHECK(d.copies == 1);
  }
}

// gather_rows: the inverse, without conversion. Rows of a pool (any order, some repeated) into a
// contiguous destination, also pinned host memory as the hybrid store's evictions use it.
TEST_CASE("gather_rows equals one copy per row, bits unchanged, into device or pinned memory",
          "[gather_rows]") {
  uint32_t seed = 700;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t n : {1, 5, 32}) {
      INFO("pool " << dtype_name(t) << " n=" << n);
      const int64_t row = 96;
      const Buffer pool = random_buffer(t, {(n + 4) * row + 3}, seed += 10);
      std::vector<int64_t> offsets;
      std::mt19937 rng(seed);
      for (int64_t i = 0; i < n; ++i)
        offsets.push_back(static_cast<int64_t>(rng() % static_cast<uint32_t>(n + 4)) * row + 3);
      // The reference: the pool's bytes of each row, read on the host.
      const std::vector<uint8_t> all = bytes_of(cpu(), pool.view());
      const int64_t es = dtype_size(t);
      std::vector<uint8_t> want;
      for (int64_t o : offsets)
        want.insert(want.end(), all.begin() + o * es, all.begin() + (o + row) * es);
      for (Backend* be : {&cpu(), gpu()}) {
        if (be == nullptr) continue;
        INFO("backend " << be->name());
        const Buffer src = Buffer::upload(*be, pool.view());
        const Buffer dev(*be, t, {n, row});
        std::vector<int64_t> offs = offsets;
        be->gather_rows(src.view(), offs.data(), n, dev.view());
        std::fill(offs.begin(), offs.end(), int64_t{-1});  // reusable once the call returns
        CHECK(first_diff(bytes_of(*be, dev.view()), want) == -1);
        const Buffer pinned = Buffer::host(*be, t, {n, row});
        be->gather_rows(src.view(), offsets.data(), n, pinned.view());
        be->synchronize();
        const auto* p = static_cast<const uint8_t*>(pinned.view().data);
        CHECK(first_diff(std::vector<uint8_t>(p, p + n * row * es), want) == -1);
      }
    }
}

TEST_CASE("gather_rows: rows outside the source or mixed dtypes are rejected; one launch",
          "[gather_rows]") {
  for (Backend* be : {&cpu(), gpu()}) {
    if (be == nullptr) continue;
    INFO("backend " << be->name());
    const Buffer src = Buffer::upload(*be, random_buffer(DType::kBF16, {100}, 3).view());
    const Buffer dst(*be, DType::kBF16, {2, 16});
    const std::vector<int64_t> outside = {0, 85};
    CHECK_THROWS(be->gather_rows(src.view(), outside.data(), 2, dst.view()));
    const Buffer f32(*be, DType::kF32, {2, 16});
    const std::vector<int64_t> ok = {0, 84};
    CHECK_THROWS(be->gather_rows(src.view(), ok.data(), 2, f32.view()));
    be->gather_rows(src.view(), nullptr, 0, dst.view().slice(0, 0));  // nothing, no error
  }
  Backend* g = gpu();
  if (g == nullptr || !cuda_is_emulated()) return;
  for (int64_t n : {1, 8, 32}) {
    const Buffer src = Buffer::upload(*g, random_buffer(DType::kBF16, {40 * 64}, 9).view());
    const Buffer dst(*g, DType::kBF16, {n, 64});
    std::vector<int64_t> offsets(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) offsets[static_cast<size_t>(i)] = (i * 7 % 40) * 64;
    g->synchronize();
    const CudaEmulatorCounters before = cuda_emulator_counters();
    g->gather_rows(src.view(), offsets.data(), n, dst.view());
    g->synchronize();
    const CudaEmulatorCounters d = cuda_emulator_counters() - before;
    CHECK(d.launches == 1);
    CHECK(d.copies == 1);  // the offsets' upload
  }
}
