// A fake "device" backend for tests of device placement without a GPU: it runs the CPU
// backend's ops on memory of its own that the host may not touch (memory_kind kDevice, so the
// model and the KV stores take every path a GPU backend takes: weight uploads, downloads of what
// the host reads, the mirrored device block pool, uploads of host partials and host blocks).
// Every operand of every op must lie inside one of its allocations, and every upload source and
// download target outside them, so a host pointer reaching a device op (a mapped weight, a host
// KV block, a host-side buffer) throws. Its memory is one arena that is PROT_NONE except while
// one of its own ops, uploads or downloads runs, so a host read or write of device memory (the
// host reading logits, k or lse in place) faults. Its allocations start as NaN bytes, so an
// element read before it is written shows in the results. "Pinned" host memory is ordinary host
// memory it accepts only where a GPU reads mapped memory in place (merge, copy, host flags).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/backend.h"

namespace tandem::test {

class FakeDevice final : public Backend {
 public:
  FakeDevice() : cpu_(make_cpu_backend()) {
    void* p =
        mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("fake device: mmap failed");
    arena_ = static_cast<char*>(p);
  }
  ~FakeDevice() override { munmap(arena_, kArenaBytes); }
  std::string_view name() const override { return "fake-device"; }

  // A bump allocator over the arena (freed bytes are not reused; a test needs little).
  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  void* allocate(int64_t bytes) override {
    const size_t at = (used_ + 63) / 64 * 64;
    const size_t size = std::max<size_t>(static_cast<size_t>(bytes), 1);
    if (at + size > kArenaBytes) throw std::runtime_error("fake device: arena exhausted");
    used_ = at + size;
    char* p = arena_ + at;
    const Open open(*this);
    std::memset(p, 0xff, size);  // NaN in every f32
    allocs_[p] = bytes;
    return p;
  }
  void deallocate(void* p) override {
    if (allocs_.erase(p) != 1) throw std::logic_error("fake device: free of a foreign pointer");
  }
  // "Pinned" host memory: ordinary host memory the merge may read in place, as on a GPU.
  MemoryKind host_memory_kind() const override { return MemoryKind::kPinned; }
  void* allocate_host(int64_t bytes) override {
    void* p = Backend::allocate_host(bytes);
    pinned_[p] = bytes;
    return p;
  }
  void deallocate_host(void* p) override {
    if (pinned_.erase(p) != 1)
      throw std::logic_error("fake device: free of a foreign host pointer");
    Backend::deallocate_host(p);
  }
  void upload(const TensorView& src, const TensorView& dst) override {
    on_host(src, "upload source");
    on_device(dst, "upload target");
    ++uploads_;
    const Open open(*this);
    Backend::upload(src, dst);
  }
  void download(const TensorView& src, const TensorView& dst) override {
    on_device(src, "download source");
    on_host(dst, "download target");
    ++downloads_;
    const Open open(*this);
    Backend::download(src, dst);
  }

  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
              const TensorView& y) override {
    on_device({&x, &w, &bias, &y}, "matmul");
    const Open open(*this);
    cpu_->matmul(x, w, bias, y);
  }
  void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) override {
    on_device({&ids, &table, &out}, "embedding");
    const Open open(*this);
    cpu_->embedding(ids, table, out);
  }
  void rms_norm(const TensorView& x, const TensorView& w, float eps,
                const TensorView& out) override {
    on_device({&x, &w, &out}, "rms_norm");
    const Open open(*this);
    cpu_->rms_norm(x, w, corrupt ? eps + 1.0f : eps, out);
  }
  void layer_norm(const TensorView& x, const TensorView& w, const TensorView& b, float eps,
                  const TensorView& out) override {
    on_device({&x, &w, &b, &out}, "layer_norm");
    const Open open(*this);
    cpu_->layer_norm(x, w, b, eps, out);
  }
  void rope(const TensorView& x, const TensorView& pos, const RopeTable& rope) override {
    on_device({&x, &pos}, "rope");
    const Open open(*this);
    cpu_->rope(x, pos, rope);
  }
  void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) override {
    on_device({&gate, &up, &out}, "silu_mul");
    const Open open(*this);
    cpu_->silu_mul(gate, up, out);
  }
  void relu(const TensorView& x) override {
    on_device({&x}, "relu");
    const Open open(*this);
    cpu_->relu(x);
  }
  void add(const TensorView& a, const TensorView& b, const TensorView& out) override {
    on_device({&a, &b, &out}, "add");
    const Open open(*this);
    cpu_->add(a, b, out);
  }
  void softmax(const TensorView& x) override {
    on_device({&x}, "softmax");
    const Open open(*this);
    cpu_->softmax(x);
  }
  void attention(const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& q_pos, int64_t k_pos0, float scale,
                 const AttnPartial& out) override {
    on_device({&q, &k, &v, &q_pos, &out.o, &out.lse}, "attention");
    const Open open(*this);
    cpu_->attention(q, k, v, q_pos, k_pos0, scale, out);
  }
  void attention_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                       const KvPages& pages, const TensorView& q_pos, int64_t k_pos0, float scale,
                       const AttnPartial& out) override {
    on_device({&q, &q_pos, &out.o, &out.lse}, "attention_paged");
    for (size_t i = 0; i < static_cast<size_t>(pages.count); ++i) {
      on_device(kv_page(k, pages, i), "attention_paged K page");
      on_device(kv_page(v, pages, i), "attention_paged V page");
    }
    ++paged_calls_;
    const Open open(*this);
    cpu_->attention_paged(q, k, v, pages, q_pos, k_pos0, scale, out);
  }
  void merge(const AttnPartial& a, const AttnPartial& b) override {
    on_device({&a.o, &a.lse}, "merge");
    for (const TensorView* t : {&b.o, &b.lse}) {  // b may be pinned host memory, read in place
      if (t->memory == MemoryKind::kPinned)
        in_pinned(*t);
      else
        on_device(*t, "merge");
    }
    if (b.o.memory == MemoryKind::kPinned) ++pinned_merges_;
    const Open open(*this);
    cpu_->merge(a, b);
  }
  void copy(const TensorView& src, const TensorView& dst) override {
    on_device(src, "copy");
    if (dst.memory == MemoryKind::kPinned) {  // the query of host attention, written in place
      in_pinned(dst);
      ++pinned_copies_;
    } else {
      on_device(dst, "copy");
    }
    const Open open(*this);
    cpu_->copy(src, dst);
  }
  // Host flags live in "pinned" memory; the ops run synchronously, so the default (wait on the
  // host, raise at once) is the right behaviour, checked and counted here.
  void wait_host_flag(const TensorView& flag, uint32_t target,
                      const std::function<void()>& help) override {
    in_pinned(flag);
    ++flag_waits_;
    Backend::wait_host_flag(flag, target, help);
  }
  void raise_host_flag(const TensorView& flag, uint32_t value) override {
    in_pinned(flag);
    ++flag_raises_;
    Backend::raise_host_flag(flag, value);
  }

  size_t live_allocations() const { return allocs_.size() + pinned_.size(); }
  bool corrupt = false;  // a wrong rms_norm (eps + 1), for the device check
  int64_t pinned_merges() const { return pinned_merges_; }
  int64_t pinned_copies() const { return pinned_copies_; }
  int64_t flag_waits() const { return flag_waits_; }
  int64_t flag_raises() const { return flag_raises_; }
  // Reads one f32 of device memory (for the test of the fault itself).
  float peek(const TensorView& t) const { return *t.as<const float>(); }
  int64_t uploads() const { return uploads_; }
  int64_t downloads() const { return downloads_; }
  int64_t paged_calls() const { return paged_calls_; }

 private:
  static constexpr size_t kArenaBytes = size_t{1} << 30;  // reserved address space

  // The arena readable and writable for the lifetime of this object (ops run synchronously on
  // the calling thread; host attention threads never touch device memory).
  struct Open {
    explicit Open(const FakeDevice& d) : dev(d) { protect(PROT_READ | PROT_WRITE); }
    ~Open() { protect(PROT_NONE); }
    void protect(int prot) const {
      const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
      const size_t bytes = (dev.used_ + page - 1) / page * page;
      if (bytes > 0 && mprotect(dev.arena_, bytes, prot) != 0) std::abort();
    }
    const FakeDevice& dev;
  };

  // [first, last] byte addresses a view spans (empty views span nothing).
  static std::pair<const char*, const char*> extent(const TensorView& t) {
    const char* lo = static_cast<const char*>(t.data);
    int64_t last = 0;
    for (int i = 0; i < t.ndim; ++i)
      last += (t.shape[static_cast<size_t>(i)] - 1) * t.stride[static_cast<size_t>(i)];
    return {lo, lo + last * dtype_size(t.dtype) + dtype_size(t.dtype) - 1};
  }
  // The allocation holding address p, or allocs_.end().
  std::map<void*, int64_t>::const_iterator owner(const char* p) const {
    auto it = allocs_.upper_bound(const_cast<char*>(p));
    if (it == allocs_.begin()) return allocs_.end();
    --it;
    const char* base = static_cast<const char*>(it->first);
    return p < base + it->second ? it : allocs_.end();
  }
  void on_device(const TensorView& t, const std::string& what) const {
    if (t.empty() || t.numel() == 0) return;
    if (t.memory != MemoryKind::kDevice)
      throw std::logic_error("fake device: " + what + " operand " + t.describe() +
                             " is not tagged as device memory");
    const auto [lo, hi] = extent(t);
    const auto it = owner(lo);
    if (it == allocs_.end() || owner(hi) != it)
      throw std::logic_error("fake device: " + what + " operand " + t.describe() +
                             " is not inside one device allocation");
  }
  void on_device(std::initializer_list<const TensorView*> ts, const char* what) const {
    for (const TensorView* t : ts) on_device(*t, what);
  }
  void in_pinned(const TensorView& t) const {
    const auto [lo, hi] = extent(t);
    auto it = pinned_.upper_bound(const_cast<char*>(lo));
    const bool inside =
        it != pinned_.begin() && (--it, hi < static_cast<const char*>(it->first) + it->second);
    if (!inside)
      throw std::logic_error("fake device: pinned operand " + t.describe() +
                             " is not inside one pinned allocation");
  }
  void on_host(const TensorView& t, const std::string& what) const {
    if (t.empty() || t.numel() == 0) return;
    const auto [lo, hi] = extent(t);
    if (owner(lo) != allocs_.end() || owner(hi) != allocs_.end())
      throw std::logic_error("fake device: " + what + " " + t.describe() + " is device memory");
  }

  std::unique_ptr<Backend> cpu_;
  char* arena_ = nullptr;
  size_t used_ = 0;
  std::map<void*, int64_t> allocs_;
  std::map<void*, int64_t> pinned_;
  int64_t uploads_ = 0, downloads_ = 0, paged_calls_ = 0, pinned_merges_ = 0;
  int64_t pinned_copies_ = 0, flag_waits_ = 0, flag_raises_ = 0;
};

}  // namespace tandem::test
