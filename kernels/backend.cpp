// Backend memory on the host (the CPU backend's, and the default of every backend), the
// allocators of a backend's memories, and Buffer's Backend& members.
#include "kernels/backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tandem {
namespace {

void check_copy(const TensorView& src, const TensorView& dst, const char* what) {
  TANDEM_CHECK(
      src.dtype == dst.dtype && src.numel() == dst.numel() && src.contiguous() && dst.contiguous(),
      what, " ", src.describe(), " -> ", dst.describe());
}

}  // namespace

MemoryInfo host_memory_info() {
  MemoryInfo m;
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
    if (key == "MemAvailable:") m.free_bytes = kib * 1024;
  }
  return m;
}

TensorView kv_page(const TensorView& kv, const KvPages& pages, size_t i) {
  TANDEM_CHECK(kv.ndim == 3 && pages.rows > 0 && static_cast<int64_t>(i) < pages.count, "kv page ",
               i, " of ", kv.describe());
  const int64_t t = kv.dim(0), first = static_cast<int64_t>(i) * pages.rows;
  TANDEM_CHECK(first < t, "kv page ", i, " past the span of ", t, " keys");
  TensorView page = kv;
  page.data = static_cast<char*>(kv.data) + pages.offsets[i] * dtype_size(kv.dtype);
  page.shape[0] = std::min<int64_t>(pages.rows, t - first);
  return page;
}

// Both memories of this default are the host heap, buffers from 2 MiB up in 2 MiB pages
// (host_heap_huge): the dense cache's attention read its K and V 5-9% faster there than in 4 KiB
// pages (scripts/probe_dense_kv_pages.cpp, docs/decode-cpu.md, 2026-12-07).
void* Backend::allocate(int64_t bytes) {
  const Allocator heap = host_heap_huge();
  return heap.allocate(heap.context, bytes);
}

void Backend::deallocate(void* p) {
  const Allocator heap = host_heap_huge();
  heap.deallocate(heap.context, p);
}

void* Backend::allocate_host(int64_t bytes) { return Backend::allocate(bytes); }

void Backend::deallocate_host(void* p) { Backend::deallocate(p); }

void Backend::upload(const TensorView& src, const TensorView& dst) {
  check_copy(src, dst, "upload");
  if (src.data != dst.data && src.nbytes() > 0)
    std::memcpy(dst.data, src.data, static_cast<size_t>(src.nbytes()));
}

void Backend::download(const TensorView& src, const TensorView& dst) {
  check_copy(src, dst, "download");
  synchronize();
  if (src.data != dst.data && src.nbytes() > 0)
    std::memcpy(dst.data, src.data, static_cast<size_t>(src.nbytes()));
}

void Backend::wait_host_flag(const TensorView& flag, uint32_t target,
                             const std::function<void()>& help) {
  TANDEM_CHECK(flag.dtype == DType::kI32 && flag.numel() >= 1 && flag.memory != MemoryKind::kDevice,
               "host flag ", flag.describe());
  if (help) help();
  // Whatever raises the flag runs on other threads (help, if given, has normally waited for it).
  for (int spins = 0; !host_flag_reached(flag, target); ++spins)
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void Backend::raise_host_flag(const TensorView& flag, uint32_t value) {
  TANDEM_CHECK(flag.dtype == DType::kI32 && flag.numel() >= 1 && flag.memory != MemoryKind::kDevice,
               "host flag ", flag.describe());
  synchronize();  // a subclass that queues ops without overriding this: let them finish first
  publish_host_flag(flag, value);
}

bool Backend::sample(const TensorView&, const SampleRow*, int32_t*) { return false; }

void Backend::attention_batch(const TensorView& q, const TensorView& q_pos, const AttnSegment* segs,
                              int64_t count, float scale, const AttnPartial& out) {
  PartialScratch scratch;
  attention_batch_loop(*this, q, q_pos, segs, count, scale, out, scratch);
  if (!scratch.empty()) synchronize();  // the queued ops may still use it: freed next
}

void Backend::scatter_rows(const TensorView& src, const TensorView& dst, const int64_t* offsets,
                           int64_t n) {
  const int64_t row = check_scatter_rows(src, dst, offsets, n);
  if (n == 0) return;
  const int64_t es = dtype_size(dst.dtype);
  const TensorView rows = src.reshape({n, row});
  for (int64_t i = 0; i < n; ++i) {
    const TensorView to(static_cast<char*>(dst.data) + offsets[i] * es, dst.dtype, {1, row},
                        dst.memory);
    copy(rows.slice(i, i + 1), to);
  }
}

void Backend::gather_rows(const TensorView& src, const int64_t* offsets, int64_t n,
                          const TensorView& dst) {
  const int64_t row = check_gather_rows(src, offsets, n, dst);
  if (n == 0) return;
  const int64_t es = dtype_size(src.dtype);
  const TensorView rows = dst.reshape({n, row});
  for (int64_t i = 0; i < n; ++i) {
    const TensorView from(static_cast<char*>(src.data) + offsets[i] * es, src.dtype, {1, row},
                          src.memory);
    copy(from, rows.slice(i, i + 1));
  }
}

namespace {

void* memory_allocate(void* backend, int64_t bytes) {
  return static_cast<Backend*>(backend)->allocate(bytes);
}
void memory_deallocate(void* backend, void* p) noexcept {
  static_cast<Backend*>(backend)->deallocate(p);
}
void* host_memory_allocate(void* backend, int64_t bytes) {
  return static_cast<Backend*>(backend)->allocate_host(bytes);
}
void host_memory_deallocate(void* backend, void* p) noexcept {
  static_cast<Backend*>(backend)->deallocate_host(p);
}

}  // namespace

Allocator backend_memory(Backend& backend) {
  return {&memory_allocate, &memory_deallocate, &backend, backend.memory_kind()};
}

Allocator backend_host_memory(Backend& backend) {
  return {&host_memory_allocate, &host_memory_deallocate, &backend, backend.host_memory_kind()};
}

Buffer::Buffer(Backend& backend, DType t, std::initializer_list<int64_t> dims)
    : Buffer(backend_memory(backend), t, dims) {}

Buffer Buffer::host(Backend& backend, DType t, std::initializer_list<int64_t> dims) {
  return Buffer(backend_host_memory(backend), t, dims);
}

Buffer Buffer::upload(Backend& backend, const TensorView& src) {
  TANDEM_CHECK(src.contiguous(), "upload of a strided view ", src.describe());
  Buffer b = like(backend_memory(backend), src);
  backend.upload(src, b.view());  // throws: b gives its memory back
  return b;
}

AttnPartial PartialScratch::get(Backend& backend, int64_t rows, int64_t heads, int64_t d) {
  const bool fits =
      !o_.empty() && o_.view().dim(1) == heads && o_.view().dim(2) == d && o_.view().dim(0) >= rows;
  if (!fits) {
    const int64_t cap = std::max<int64_t>(rows, o_.empty() ? 0 : o_.view().dim(0));
    if (!o_.empty()) backend.synchronize();  // queued ops may still use the old pair
    lse_ = Buffer();                         // freed before the larger pair is allocated
    o_ = Buffer();
    o_ = Buffer(backend, DType::kF32, {cap, heads, d});
    lse_ = Buffer(backend, DType::kF32, {cap, heads});
  }
  return AttnPartial{o_.view().slice(0, rows), lse_.view().slice(0, rows)};
}

void check_attention_batch(const TensorView& q, const TensorView& q_pos, const AttnSegment* segs,
                           int64_t count, const AttnPartial& out) {
  TANDEM_CHECK(q.ndim == 3 && q_pos.ndim == 1 && q_pos.dim(0) == q.dim(0) && out.o.ndim == 3 &&
                   out.o.dim(0) == q.dim(0) && out.lse.ndim == 2 && out.lse.dim(0) == q.dim(0) &&
                   count >= 0 && (segs != nullptr || count == 0),
               "attention_batch q ", q.describe(), " q_pos ", q_pos.describe(), " out ",
               out.o.describe(), " / ", out.lse.describe());
  const int64_t n = q.dim(0);
  std::vector<std::pair<int64_t, int64_t>> groups;  // [row0, row1) of each non-empty group
  for (int64_t s = 0; s < count; ++s) {
    const AttnSegment& g = segs[s];
    TANDEM_CHECK(g.q_row0 >= 0 && g.q_rows >= 0 && g.q_row0 + g.q_rows <= n,
                 "attention_batch segment ", s, ": rows [", g.q_row0, ", ", g.q_row0 + g.q_rows,
                 ") of ", n);
    const bool first = s == 0 || segs[s - 1].q_row0 != g.q_row0 || segs[s - 1].q_rows != g.q_rows;
    if (first && g.q_rows > 0) groups.emplace_back(g.q_row0, g.q_row0 + g.q_rows);
  }
  std::sort(groups.begin(), groups.end());
  for (size_t i = 1; i < groups.size(); ++i)
    TANDEM_CHECK(groups[i].first >= groups[i - 1].second, "attention_batch: groups of rows [",
                 groups[i - 1].first, ", ", groups[i - 1].second, ") and [", groups[i].first, ", ",
                 groups[i].second, ") overlap");
}

int64_t check_scatter_rows(const TensorView& src, const TensorView& dst, const int64_t* offsets,
                           int64_t n) {
  TANDEM_CHECK(
      n >= 0 && src.dtype == DType::kF32 && src.contiguous() &&
          (n == 0 || (src.ndim >= 1 && src.dim(0) == n)) && dst.contiguous() &&
          (dst.dtype == DType::kF32 || dst.dtype == DType::kF16 || dst.dtype == DType::kBF16) &&
          (offsets != nullptr || n == 0),
      "scatter_rows ", src.describe(), " (", n, " rows) -> ", dst.describe());
  if (n == 0) return 0;
  const int64_t row = src.numel() / n;
  TANDEM_CHECK(row * n == src.numel(), "scatter_rows: ", src.describe(), " is not ", n, " rows");
  std::vector<int64_t> sorted(offsets, offsets + n);
  std::sort(sorted.begin(), sorted.end());
  TANDEM_CHECK(sorted.front() >= 0 && sorted.back() + row <= dst.numel(), "scatter_rows: rows at ",
               sorted.front(), "..", sorted.back(), " of ", row, " elements outside ",
               dst.describe());
  for (size_t i = 1; i < sorted.size(); ++i)
    TANDEM_CHECK(sorted[i] >= sorted[i - 1] + row, "scatter_rows: rows at ", sorted[i - 1], " and ",
                 sorted[i], " overlap (", row, " elements each)");
  return row;
}

int64_t check_gather_rows(const TensorView& src, const int64_t* offsets, int64_t n,
                          const TensorView& dst) {
  TANDEM_CHECK(
      n >= 0 && src.contiguous() && dst.contiguous() && src.dtype == dst.dtype &&
          (src.dtype == DType::kF32 || src.dtype == DType::kF16 || src.dtype == DType::kBF16) &&
          (n == 0 || (dst.ndim >= 1 && dst.dim(0) == n)) && (offsets != nullptr || n == 0),
      "gather_rows ", src.describe(), " (", n, " rows) -> ", dst.describe());
  if (n == 0) return 0;
  const int64_t row = dst.numel() / n;
  TANDEM_CHECK(row * n == dst.numel(), "gather_rows: ", dst.describe(), " is not ", n, " rows");
  const auto [lo, hi] = std::minmax_element(offsets, offsets + n);
  TANDEM_CHECK(*lo >= 0 && *hi + row <= src.numel(), "gather_rows: rows at ", *lo, "..", *hi,
               " of ", row, " elements outside ", src.describe());
  return row;
}

void attention_batch_loop(Backend& backend, const TensorView& q, const TensorView& q_pos,
                          const AttnSegment* segs, int64_t count, float scale,
                          const AttnPartial& out, PartialScratch& scratch) {
  check_attention_batch(q, q_pos, segs, count, out);
  for (int64_t s = 0; s < count; ++s) {
    const AttnSegment& g = segs[s];
    const bool first = s == 0 || segs[s - 1].q_row0 != g.q_row0 || segs[s - 1].q_rows != g.q_rows;
    if (g.q_rows == 0) continue;
    const int64_t r0 = g.q_row0, r1 = g.q_row0 + g.q_rows;
    const TensorView qs = q.slice(r0, r1), ps = q_pos.slice(r0, r1);
    const AttnPartial rows{out.o.slice(r0, r1), out.lse.slice(r0, r1)};
    const AttnPartial dst = first ? rows : scratch.get(backend, g.q_rows, q.dim(1), q.dim(2));
    if (g.pages.count == 0)
      backend.attention(qs, g.k, g.v, ps, g.k_pos0, scale, dst);
    else
      backend.attention_paged(qs, g.k, g.v, g.pages, ps, g.k_pos0, scale, dst);
    if (!first) backend.merge(rows, dst);
  }
}

const float* host_readable(Backend& backend, const TensorView& src, std::vector<float>& staging) {
  TANDEM_CHECK(src.dtype == DType::kF32 && src.contiguous(), "host read of ", src.describe());
  if (backend.host_accessible()) {
    backend.synchronize();
    return src.as<const float>();
  }
  staging.resize(static_cast<size_t>(src.numel()));
  backend.download(src, TensorView(staging.data(), DType::kF32, {src.numel()}));
  return staging.data();
}

}  // namespace tandem
