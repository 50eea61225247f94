// Device placement without a GPU: a fake "device" backend runs the CPU backend's ops on memory of
// its own that the host may not touch (memory_kind kDevice, so the model and the KV stores take
// every path a GPU backend takes: weight uploads, downloads of what the host reads, the mirrored
// device block pool, uploads of host partials and host blocks). Every operand of every op must
// lie inside one of its allocations, and every upload source and download target outside them,
// so a host pointer reaching a device op (a mapped weight, a host KV block, a host-side buffer)
// fails the test. Its memory is one arena that is PROT_NONE except while one of its own ops,
// uploads or downloads runs, so a host read or write of device memory (the host reading logits,
// k or lse in place) faults. Its allocations start as NaN bytes, so an element read before it is
// written shows in the logits. Logits must equal the plain CPU backend's bit for bit: the ops are
// the same code on the same values, only where the bytes live differs.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/cuda/cuda_backend.h"
#include "kvstore/kv_store.h"
#include "models/model.h"
#include "server/tools/device_check.h"
#include "tests/kv_test_step.h"
#include "tests/test_model_runs.h"

using namespace tandem;
using namespace tandem::test;

namespace {

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

using Rows = LogitRows;

// Two sequences in every step (different lengths, last-token logits only): the whole prompt of
// one and half the prompt of the other, then decode steps of both together.
Rows run_batch(Model& model, const KvConfig& cfg, const ReferenceLogits& ref) {
  KvStore store(model.backend(), model.kv_shape(), cfg, 2, 64);
  auto a = store.new_sequence(64), b = store.new_sequence(64);
  const std::span<const int32_t> prompt(ref.prompt);
  Rows rows;
  const int64_t v = model.config().vocab_size;
  auto step = [&](const std::vector<StepSequence>& batch) {
    const TensorView l = model.forward(batch);
    for (int64_t r = 0; r < l.dim(0); ++r)
      rows.emplace_back(l.as<float>() + r * v, l.as<float>() + (r + 1) * v);
  };
  step({StepSequence{a.get(), prompt, false, false, true},
        StepSequence{b.get(), prompt.first(prompt.size() / 2), false, false, true}});
  for (size_t i = 0; i < ref.decode.size(); ++i) {
    const std::span<const int32_t> t(&ref.decode[i], 1);
    step({StepSequence{a.get(), t, false, true, false},
          StepSequence{b.get(), t, false, true, false}});
  }
  return rows;
}

bool bit_equal(const Rows& a, const Rows& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

KvConfig dense() {
  KvConfig c;
  c.dense = true;
  return c;
}

}  // namespace

TEST_CASE("the fake device rejects host operands", "[placement]") {
  FakeDevice dev;
  Buffer a(dev, DType::kF32, {4}), b(dev, DType::kF32, {4});
  std::vector<float> host(4, 1.0f);
  const TensorView hv(host.data(), DType::kF32, {4});
  dev.upload(hv, a.view());
  dev.add(a.view(), a.view(), b.view());
  dev.download(b.view(), hv);
  CHECK(host[0] == 2.0f);
  TensorView tagged = hv;
  tagged.memory = MemoryKind::kDevice;
  CHECK_THROWS(dev.add(a.view(), tagged, b.view()));  // host bytes tagged as device
  CHECK_THROWS(dev.add(a.view(), hv, b.view()));
  TensorView past = a.view();
  past.shape[0] = 5;  // one element beyond the allocation
  CHECK_THROWS(dev.add(past, past, past));
  CHECK_THROWS(dev.upload(a.view(), b.view()));  // device -> device is not an upload
  // A host read of device memory outside the backend's calls faults (checked in a child).
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // die of the fault, not Catch's report of it
    volatile float x = dev.peek(b.view());
    (void)x;
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  if (WIFSIGNALED(status)) CHECK(WTERMSIG(status) == SIGSEGV);
}

TEST_CASE("forward on the fake device equals the CPU backend bit for bit", "[placement]") {
  auto cpu = make_cpu_backend();
  for (const char* name : kReferenceModels) {
    const ReferenceLogits ref = ReferenceLogits::load(name);
    FakeDevice dev;
    {
      auto on_cpu = Model::load(ref.model, *cpu);
      auto on_dev = Model::load(ref.model, dev);
      CHECK(dev.uploads() > 0);  // the weights
      struct Case {
        std::string label;
        KvConfig cfg;
        int32_t chunk;
      };
      std::vector<Case> cases = {
          {"dense", dense(), 5},
          {"full window 0", small_hybrid(0, SparsePolicy::kFull, CpuAttnMode::kParallel), 5},
          {"full window 6", small_hybrid(6, SparsePolicy::kFull, CpuAttnMode::kParallel), 5},
          {"full window 64", small_hybrid(64, SparsePolicy::kFull, CpuAttnMode::kParallel), 12},
      };
      for (SparsePolicy p : {SparsePolicy::kFull, SparsePolicy::kHgca, SparsePolicy::kTopk})
        for (CpuAttnMode m : {CpuAttnMode::kParallel, CpuAttnMode::kAhead})
          cases.push_back({std::string(policy_name(p)) + " " + std::string(mode_name(m)),
                           small_hybrid(8, p, m), 12});
      cases.push_back({"hgca ahead bf16 kv",
                       small_hybrid(8, SparsePolicy::kHgca, CpuAttnMode::kAhead, DType::kBF16),
                       12});
      for (const Case& c : cases) {
        DYNAMIC_SECTION(name << " " << c.label) {
          const int64_t downloads = dev.downloads(), paged = dev.paged_calls(),
                        pinned = dev.pinned_merges(), waits = dev.flag_waits(),
                        raises = dev.flag_raises(), qcopies = dev.pinned_copies();
          const Rows want = run_sequence(*on_cpu, c.cfg, ref.prompt, ref.decode, c.chunk);
          const Rows got = run_sequence(*on_dev, c.cfg, ref.prompt, ref.decode, c.chunk);
          CHECK(dev.downloads() > downloads);  // at least the logits
          // The device window, and the host blocks of a prefill, are attended by paged calls.
          CHECK((dev.paged_calls() > paged) == !c.cfg.dense);
          // Decode steps with host tokens (windows under the reference sequences' length) merge
          // their host partials in place from pinned memory.
          const bool host_part = !c.cfg.dense && c.cfg.window < 64;
          CHECK((dev.pinned_merges() > pinned) == host_part);
          // Each of those merges waits for its partial's host flag; where the host does not read
          // the query itself (full; hgca's predicted queries), the device hands it over in
          // pinned memory and raises the query's flag.
          CHECK(dev.flag_waits() - waits == dev.pinned_merges() - pinned);
          const bool handed_over =
              host_part &&
              (c.cfg.sparse == SparsePolicy::kFull ||
               (c.cfg.sparse == SparsePolicy::kHgca && c.cfg.cpu_attn == CpuAttnMode::kAhead));
          CHECK((dev.flag_raises() > raises) == handed_over);
          CHECK(dev.flag_raises() - raises == dev.pinned_copies() - qcopies);
          CHECK(bit_equal(got, want));
        }
      }
      DYNAMIC_SECTION(name << " two sequences per step") {
        for (const KvConfig& cfg :
             {dense(), small_hybrid(8, SparsePolicy::kHgca, CpuAttnMode::kAhead),
              small_hybrid(8, SparsePolicy::kTopk, CpuAttnMode::kParallel)})
          CHECK(bit_equal(run_batch(*on_dev, cfg, ref), run_batch(*on_cpu, cfg, ref)));
      }
    }
    CHECK(dev.live_allocations() == 0);  // the model and the stores gave back all they took
  }
}

TEST_CASE("imported KV on the fake device decodes like the CPU backend, bit for bit",
          "[placement][import]") {
  const KvShape shape{2, 4, 2, 8, 1.0f / std::sqrt(8.0f)};
  const int32_t n = 37;
  std::vector<float> k(n * 16), v(n * 16), q(32), kd(16), vd(16);
  uint32_t x = 5;
  for (auto* buf : {&k, &v, &q, &kd, &vd})
    for (float& e : *buf) {
      x = x * 1664525u + 1013904223u;
      e = static_cast<float>(x >> 8) / 8388608.0f - 1.0f;
    }
  int32_t pos = n;
  auto decode = [&](Backend& be, const KvConfig& cfg) {
    KvStore store(be, shape, cfg, 1, 64);
    auto seq = store.new_sequence(64);
    for (int32_t l = 0; l < 2; ++l) seq->import_kv(be, l, k.data(), v.data(), n);
    seq->advance(n);
    const Buffer dq = Buffer::upload(be, TensorView(q.data(), DType::kF32, {1, 4, 8}));
    const Buffer dk = Buffer::upload(be, TensorView(kd.data(), DType::kF32, {1, 2, 8}));
    const Buffer dv = Buffer::upload(be, TensorView(vd.data(), DType::kF32, {1, 2, 8}));
    const Buffer dp = Buffer::upload(be, TensorView(&pos, DType::kI32, {1}));
    const Buffer o(be, DType::kF32, {1, 4, 8}), lse(be, DType::kF32, {1, 4});
    std::vector<float> out;
    test::run_kv_step(*seq, 1, true, false, [&](KvStep& step) {
      for (int32_t l = 0; l < 2; ++l) {
        step.attend(be, l, dq.view(), dk.view(), dv.view(), dp.view(), {o.view(), lse.view()});
        std::vector<float> h(32);
        be.download(o.view(), TensorView(h.data(), DType::kF32, {1, 4, 8}));
        out.insert(out.end(), h.begin(), h.end());
      }
    });
    return out;
  };
  auto cpu = make_cpu_backend();
  FakeDevice dev;
  for (SparsePolicy p : {SparsePolicy::kFull, SparsePolicy::kTopk, SparsePolicy::kHgca})
    for (DType kv : {DType::kF32, DType::kBF16}) {
      CAPTURE(policy_name(p), dtype_name(kv));
      const KvConfig cfg = small_hybrid(8, p, CpuAttnMode::kParallel, kv);
      const std::vector<float> want = decode(*cpu, cfg), got = decode(dev, cfg);
      CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
    }
  CHECK(dev.live_allocations() == 0);
}

TEST_CASE("the engine on a device without a sampler of its own samples on the host, same tokens",
          "[placement][engine]") {
  // Backend::sample says no (the default): the rows meant for it come down and are drawn on the
  // host with the uniforms already taken from each sequence's generator.
  const Tokenizer tok = Tokenizer::load(tandem::test::repo_path("models/tandem-demo"));
  auto generate_all = [&](Backend& be) {
    auto model = Model::load(tandem::test::repo_path("models/tandem-demo"), be);
    KvStore store(be, model->kv_shape(), small_hybrid(16, SparsePolicy::kFull, CpuAttnMode::kAhead),
                  4, 128);
    EngineOptions opt;
    opt.max_batch = 4;
    opt.max_model_len = 128;
    Engine engine(*model, tok, store, opt);
    std::vector<std::shared_ptr<TokenStream>> streams;
    for (int i = 0; i < 3; ++i) {
      GenerationRequest r;
      r.prompt = tok.encode("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    ");
      r.max_tokens = 8;
      r.ignore_eos = true;
      r.sampling.temperature = i == 0 ? 0.0f : 0.9f;
      r.sampling.top_p = 0.9f;
      r.sampling.repetition_penalty = i == 2 ? 1.3f : 1.0f;  // the host's own path
      r.sampling.seed = 17 + i;
      streams.push_back(engine.submit(std::move(r)));
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& st : streams) {
      std::vector<int32_t> tokens;
      for (TokenEvent ev; ev.finish == FinishReason::kNone;) {
        REQUIRE(st->next(ev, std::chrono::seconds(120)));
        CHECK(ev.error.empty());
        tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
      }
      out.push_back(tokens);
    }
    return out;
  };
  auto cpu = make_cpu_backend();
  FakeDevice dev;
  const auto want = generate_all(*cpu);
  CHECK(generate_all(dev) == want);
  CHECK(want[1] != want[0]);  // sampled, not greedy
  CHECK(dev.live_allocations() == 0);
}

TEST_CASE("the device check passes a correct device, falls back from a wrong one",
          "[placement][check]") {
  const std::string dir = ReferenceLogits::load("llama-tiny").model.string();
  std::vector<std::string> warnings;
  auto warn = [&](const std::string& w) { warnings.push_back(w); };
  {
    auto dev = std::make_unique<FakeDevice>();
    LoadedModel m = load_checked(std::move(dev), dir, true, true, warn);
    CHECK(m.backend->name() == "fake-device");
    CHECK(compare_with_cpu(*m.model) == 0.0);  // the same CPU ops: the same bits
    CHECK(warnings.empty());
  }
  {
    auto dev = std::make_unique<FakeDevice>();
    dev->corrupt = true;
    LoadedModel m = load_checked(std::move(dev), dir, true, true, warn);
    CHECK(m.backend->name() == "cpu");  // fell back
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains("forward pass is wrong") &&
                                Catch::Contains("falling back to the CPU"));
  }
  {
    auto dev = std::make_unique<FakeDevice>();
    dev->corrupt = true;
    CHECK_THROWS_WITH(load_checked(std::move(dev), dir, true, false, warn),
                      Catch::Contains("--device-check"));
    auto unchecked = std::make_unique<FakeDevice>();
    unchecked->corrupt = true;
    LoadedModel m = load_checked(std::move(unchecked), dir, false, true, warn);
    CHECK(m.backend->name() == "fake-device");  // --device-check off: kept as it is
  }
}

TEST_CASE("--device cuda without a GPU is a one-line error, --device auto falls back to the CPU",
          "[placement][cli]") {
  if (cuda_device_info().count > 0) {
    SUCCEED("a CUDA device is visible: nothing to refuse");
    return;
  }
  const std::filesystem::path err = std::filesystem::temp_directory_path() /
                                    ("tandem-device-" + std::to_string(getpid()) + ".txt");
  auto run = [&](const std::string& device) {
    const std::string cmd = std::string(TANDEM_TANDEM_BIN) + " run --model " +
                            tandem::test::repo_path("models/tandem-demo").string() +
                            " --prompt Once --max-tokens 2 --device " + device + " >/dev/null 2>" +
                            err.string();
    const int rc = std::system(cmd.c_str());
    REQUIRE(WIFEXITED(rc));
    return WEXITSTATUS(rc);
  };
  auto lines = [&] {
    std::ifstream in(err);
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
  };
  CHECK(run("cuda") == 1);
  const std::vector<std::string> msg = lines();
  REQUIRE(msg.size() == 1);
  CHECK(msg[0].find("--device cuda") != std::string::npos);
  CHECK(run("auto") == 0);
  CHECK(run("cpu") == 0);
  CHECK(run("gpu") == 1);
  CHECK(run("auto --device-check off") == 0);
  CHECK(run("auto --device-check sometimes") == 1);
  REQUIRE(lines().size() == 1);
  CHECK(lines()[0].find("--device-check") != std::string::npos);
  std::filesystem::remove(err);
}
