// Backend: every device operation of the forward pass. CpuBackend (kernels/cpu) is the
// reference and always built; CudaBackend (kernels/cuda) is the fast path. Activations are f32
// on the CPU backend; weights may be f32, f16 or bf16 and are read in place.
//
// Shapes are written (rows, cols) row-major; "n" is the number of token rows in the step.
//
// Memory: every TensorView an op takes lives in the backend's own memory (allocate(), or a Buffer
// of it), except where an op says otherwise. The host moves data in and out with upload
// and download; on the CPU backend that memory is ordinary host memory and the host may read it
// in place (host_accessible()).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels/attn_partial.h"
#include "kernels/buffer.h"
#include "kernels/sample_row.h"
#include "kernels/tensor.h"

namespace tandem {

// Rotary embedding parameters, precomputed once from the model config (models/config.cpp).
struct RopeTable {
  int32_t head_dim = 0;
  int32_t rotary_dim = 0;       // leading dims of each head that rotate (== head_dim for Llama)
  std::vector<float> inv_freq;  // [rotary_dim / 2], scaling (linear, llama3, yarn) applied
  float mscale = 1.0f;          // multiplies cos and sin (yarn attention factor)
  bool neox = true;  // rotate-half pairs (i, i + rotary_dim/2) as in HF; false: (2i, 2i+1)
};

// Bytes free and in all of one kind of memory.
struct MemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// The host's memory: MemAvailable and MemTotal of /proc/meminfo (both 0 where unreadable).
MemoryInfo host_memory_info();

// Where the keys of a paged span live (Backend::attention_paged): key j of the span is row
// j % rows of page j / rows, and page i starts offsets[i] elements after k.data (and v.data):
// the device window's blocks of one pool, or host blocks wherever they are. Every page but the
// last holds `rows` keys.
struct KvPages {
  const int64_t* offsets = nullptr;  // host memory, `count` element offsets (may be negative)
  int64_t count = 0;
  int32_t rows = 0;  // keys per page
};

// One segment of Backend::attention_batch: query rows [q_row0, q_row0 + q_rows) of q attend T
// keys held as attention() takes them (pages.count == 0: k, v are the contiguous span
// [T, Hkv, d]) or as attention_paged() does (k, v give the dtype, the shape and the strides
// within a page, and their data is the origin of pages.offsets). Key j is at position
// k_pos0 + j and visible to query i iff k_pos0 + j <= q_pos[i].
struct AttnSegment {
  int64_t q_row0 = 0, q_rows = 0;
  TensorView k, v;
  KvPages pages;  // count 0: contiguous
  int64_t k_pos0 = 0;
};

// The [rows, Hkv, d] view of page i of a paged span of T keys, where kv views the span as if
// it were contiguous from page 0 (the layout attention_paged takes).
TensorView kv_page(const TensorView& kv, const KvPages& pages, size_t i);

// Host flags: a host flag is a 32-bit counter (an i32 [1] view, compared as unsigned) in
// allocate_host memory that orders a backend's queue with host threads without blocking either
// side. Its values only grow. A host thread raises it with publish_host_flag after writing what
// the backend will read, and the backend's queue waits for it (Backend::wait_host_flag); or the
// backend's queue raises it (Backend::raise_host_flag) after writing what a host thread will
// read, and the host thread polls host_flag_reached before reading.

// flag <- value with release ordering: whatever this thread wrote before is visible to whoever
// sees the new value (a host thread, or a device reading the flag over the bus).
inline void publish_host_flag(const TensorView& flag, uint32_t value) {
  __atomic_store_n(static_cast<uint32_t*>(flag.data), value, __ATOMIC_RELEASE);
}
// Whether flag >= target, with acquire ordering (what was written before the flag was raised is
// visible after a true answer).
inline bool host_flag_reached(const TensorView& flag, uint32_t target) {
  return __atomic_load_n(static_cast<const uint32_t*>(flag.data), __ATOMIC_ACQUIRE) >= target;
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // y[n, m] = x[n, k] · w[m, k]^T (+ bias[m]). x, y f32 contiguous; w f32/f16/bf16 contiguous;
  // bias f32 [m] or an empty view. Every byte of w is read once per call.
  virtual void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                      const TensorView& y) = 0;
  // out[i, :] = table[ids[i], :] as f32. ids i32 [n], table f32/f16/bf16 [vocab, d], out f32 [n,
  // d].
  virtual void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) = 0;
  // Row-wise over the last dim of x [rows, d]: out = x / sqrt(mean(x^2) + eps) * w. w f32 [d].
  // out may alias x.
  virtual void rms_norm(const TensorView& x, const TensorView& w, float eps,
                        const TensorView& out) = 0;
  // Row-wise: out = (x - mean) / sqrt(var + eps) * w + b. w, b f32 [d]. out may alias x.
  virtual void layer_norm(const TensorView& x, const TensorView& w, const TensorView& b, float eps,
                          const TensorView& out) = 0;
  // In place on x [n, heads, head_dim] (f32): token i rotated by position pos[i] (i32 [n]).
  virtual void rope(const TensorView& x, const TensorView& pos, const RopeTable& rope) = 0;
  // out[n, f] = silu(gate) * up, all f32 [n, f]; out may alias gate or up.
  virtual void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) = 0;
  // x = max(x, 0) in place, f32.
  virtual void relu(const TensorView& x) = 0;
  // out = a + b elementwise, f32 of one shape; out may alias a or b.
  virtual void add(const TensorView& a, const TensorView& b, const TensorView& out) = 0;
  // Row-wise softmax in place over the last dim of x [rows, d], f32.
  virtual void softmax(const TensorView& x) = 0;
  // Attention of n queries over one contiguous span of T keys.
  //   q f32 [n, n_head_q, d]; k, v f32/f16/bf16 [T, n_head_kv, d], any row and head strides
  //   (the last dim contiguous: the dense cache passes [n_head_kv, T, d] memory); q_pos i32 [n].
  //   Key j has position k_pos0 + j and is visible to query i iff k_pos0 + j <= q_pos[i].
  //   GQA: query head h reads kv head h / (n_head_q / n_head_kv).
  //   out.o f32 [n, n_head_q, d], out.lse f32 [n, n_head_q] (natural log of the sum of
  //   exp(scale * q·k)); a query that sees no key gets lse = -inf and o = 0.
  virtual void attention(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& q_pos, int64_t k_pos0, float scale,
                         const AttnPartial& out) = 0;
  // attention() over T keys held in pages (the device window of the hybrid store, its host
  // blocks): k, v [T, Hkv, d] give the dtype, the shape and the strides within a page, and
  // their data is the origin of pages.offsets (not necessarily a page of the span); the pages
  // hold the keys in order. One call for the whole span instead of one per page; the
  // result equals attention() over the keys gathered into one contiguous span (up to the
  // rounding of a different chunking of the online softmax).
  virtual void attention_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                               const KvPages& pages, const TensorView& q_pos, int64_t k_pos0,
                               float scale, const AttnPartial& out) = 0;
  // a <- merge(a, b) row by row with merge_partial_row (kernels/attn_partial.h).
  virtual void merge(const AttnPartial& a, const AttnPartial& b) = 0;
  // Every segment's attention (q f32 [n, Hq, d], q_pos i32 [n], out [n, Hq, d] / [n, Hq] as in
  // attention()). Consecutive segments with the same query rows form a group: the group's first
  // segment writes out's rows, each later one is computed into scratch and merged into them with
  // merge(), in order. Bit-identical to that sequence of attention / attention_paged / merge
  // calls on the same backend: this default is exactly that loop (attention_batch_loop below,
  // with scratch allocated for the call; the CPU backend keeps its scratch), a device backend
  // overrides it with a fixed number of launches whatever `count` is. Groups' rows must not
  // overlap; rows of q no segment covers are left untouched. segs (host memory) may be reused
  // as soon as the call returns.
  virtual void attention_batch(const TensorView& q, const TensorView& q_pos,
                               const AttnSegment* segs, int64_t count, float scale,
                               const AttnPartial& out);
  // dst <- src, same shape, converting between f32/f16/bf16. dst may also be allocate_host
  // memory (host_memory_kind()): the backend writes it in place, for a host thread to read once
  // a raise_host_flag queued after the copy is seen.
  virtual void copy(const TensorView& src, const TensorView& dst) = 0;
  // dst rows <- src rows, converted to dst's dtype: src f32 [n, ...] contiguous (row i: its
  // numel / n elements), row i written at element offset offsets[i] from dst.data. dst: a
  // contiguous f32/f16/bf16 view of backend memory that holds every row (e.g. a whole block
  // pool). offsets: host memory, n entries, any order, rows must not overlap; reusable as soon
  // as the call returns. Equal to one copy() per row (this default); a device backend does it in
  // one upload and one launch.
  virtual void scatter_rows(const TensorView& src, const TensorView& dst, const int64_t* offsets,
                            int64_t n);
  // dst rows <- src rows, the inverse of scatter_rows without conversion: row i of dst (dst
  // [n, ...] contiguous, row i its numel / n elements) is the run at element offset offsets[i]
  // from src.data, same dtype. src: a contiguous f32/f16/bf16 view of backend memory holding
  // every row (e.g. a block pool); dst: backend memory, or allocate_host memory written in place
  // for a host thread to read once a raise_host_flag queued after the call is seen. offsets:
  // host memory, any order; reusable once the call returns. Equal to one copy() per row (this
  // default); a device backend does it in one upload and one launch.
  virtual void gather_rows(const TensorView& src, const int64_t* offsets, int64_t n,
                           const TensorView& dst);
  // Waits until every queued operation has finished (no-op on the CPU backend).
  virtual void synchronize() {}

  // ---- Ordering with host threads (host flags, above) ----
  // The ops queued after this call start once flag >= target, the flag being raised by a host
  // thread with publish_host_flag. A backend that queues its ops on a device (CUDA) queues the
  // wait and returns at once: the calling thread never blocks on the thread that raises the
  // flag. A backend whose ops run on the calling thread (this default: CPU) has to see the flag
  // raised before it returns: it runs `help` first when given (the caller's way of waiting
  // productively, e.g. HostAttention::wait, which lends this thread to the workers that will
  // raise the flag), then blocks until the flag is reached.
  virtual void wait_host_flag(const TensorView& flag, uint32_t target,
                              const std::function<void()>& help = {});
  // Queued like an op: once every op queued before it has finished, flag <- value (release, so
  // a host thread that sees the value sees their results). At once on this default, whose ops
  // have finished when they return.
  virtual void raise_host_flag(const TensorView& flag, uint32_t value);
  // ids[i] <- the token that rows[i] draws from row i of logits (f32 [n, vocab], backend memory;
  // rows and ids: n entries of host memory); waits for the result, like download. Returns false,
  // having done nothing, where the backend has no sampler of its own (this default: the caller
  // samples the logits on the host, with the same rule). (Pointers, not spans: the .cu files that
  // include this header are C++17.)
  virtual bool sample(const TensorView& logits, const SampleRow* rows, int32_t* ids);

  // ---- Memory ----
  // Where allocate() puts its bytes: kHost on the CPU backend, kDevice on a GPU. Views of
  // backend memory carry this kind.
  virtual MemoryKind memory_kind() const { return MemoryKind::kHost; }
  // Whether the host may read and write backend memory in place (after synchronize()); then
  // callers may skip upload and download.
  bool host_accessible() const { return memory_kind() != MemoryKind::kDevice; }
  // `bytes` of uninitialised backend memory, 64-byte aligned; throws kOutOfMemory. Freed with
  // deallocate once no queued op uses it.
  virtual void* allocate(int64_t bytes);
  virtual void deallocate(void* p);
  // `bytes` of host memory that the host reads and writes in place and that this backend's merge
  // may read in place too, without an upload: pinned and mapped into the device's address space
  // on a GPU (host_memory_kind() kPinned), ordinary host memory elsewhere (kHost). 64-byte
  // aligned; freed with deallocate_host once no queued op reads it.
  virtual void* allocate_host(int64_t bytes);
  virtual void deallocate_host(void* p);
  virtual MemoryKind host_memory_kind() const { return MemoryKind::kHost; }
  // Free and total bytes of the memory allocate() draws from (the host's on the CPU backend).
  virtual MemoryInfo memory_info() const { return host_memory_info(); }
  // dst (backend memory) <- src (host memory): same dtype and element count, both contiguous.
  // Ordered after the ops queued before it and before those queued after; src may be reused as
  // soon as the call returns.
  virtual void upload(const TensorView& src, const TensorView& dst);
  // dst (host memory) <- src (backend memory), same requirements: waits for the queued ops, so
  // dst holds the result when the call returns.
  virtual void download(const TensorView& src, const TensorView& dst);
};

// The allocators of a backend's two memories, for Buffer and for anything that allocates through
// an Allocator: allocate/deallocate (memory_kind()) and allocate_host/deallocate_host
// (host_memory_kind()). The backend must outlive every allocation made through them.
Allocator backend_memory(Backend& backend);
Allocator backend_host_memory(Backend& backend);

// Grow-only backend memory for one attention partial of up to `rows` query rows: what
// attention_batch_loop computes a group's later segments into. Freed with its buffers (the
// backend must outlive it and have finished the ops that used it).
class PartialScratch {
 public:
  // o [rows, heads, d], lse [rows, heads], contiguous; valid until the next get().
  AttnPartial get(Backend& backend, int64_t rows, int64_t heads, int64_t d);
  bool empty() const { return o_.empty(); }

 private:
  Buffer o_, lse_;
};

// Throws unless the segments fit q [n, Hq, d], q_pos [n] and out (every segment's rows inside
// [0, n), groups' rows not overlapping); the per-segment operand checks are attention()'s.
void check_attention_batch(const TensorView& q, const TensorView& q_pos, const AttnSegment* segs,
                           int64_t count, const AttnPartial& out);

// Throws unless scatter_rows(src, dst, offsets, n) keeps its contract (shapes, every row
// inside dst, no two rows overlapping); returns the row length in elements.
int64_t check_scatter_rows(const TensorView& src, const TensorView& dst, const int64_t* offsets,
                           int64_t n);
// Throws unless gather_rows(src, offsets, n, dst) keeps its contract (same dtype, every row
// inside src); returns the row length in elements.
int64_t check_gather_rows(const TensorView& src, const int64_t* offsets, int64_t n,
                          const TensorView& dst);

// Backend::attention_batch as the loop of attention / attention_paged / merge calls on
// `backend`, later segments of a group computed into `scratch`.
void attention_batch_loop(Backend& backend, const TensorView& q, const TensorView& q_pos,
                          const AttnSegment* segs, int64_t count, float scale,
                          const AttnPartial& out, PartialScratch& scratch);

// Where the host can read src (contiguous f32 backend memory): src's own bytes when the backend
// is host-accessible (after synchronize()), else `staging`, filled by a download.
const float* host_readable(Backend& backend, const TensorView& src, std::vector<float>& staging);

// The CPU reference backend (kernels/cpu). Threads come from the oneTBB arena in force.
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace tandem
