// Device placement without a GPU, on the fake device of tests/fake_device.h: a host operand
// reaching a device op throws, a host access to device memory faults, and the logits must equal
// the plain CPU backend's bit for bit (the ops are the same code on the same values, only where
// the bytes live differs): the forward pass dense and hybrid, imported KV, the engine sampling on
// the host for a device without a sampler, the startup device check, and --device cuda/auto
// without a GPU.
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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/cuda/cuda_backend.h"
#include "kvstore/kv_store.h"
#include "models/model.h"
#include "server/tools/device_check.h"
#include "tests/fake_device.h"
#include "tests/kv_test_step.h"
#include "tests/test_model_runs.h"

using namespace tandem;
using namespace tandem::test;

namespace {

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
  for (const char* name : kFixtureModels) {
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
      for (SparsePolicy p :
           {SparsePolicy::kFull, SparsePolicy::kHgca, SparsePolicy::kTopk, SparsePolicy::kTau})
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
          // Each of those merges waits for its partial's host flag. The device hands the workers
          // their queries in pinned memory (the host reads them only on a host-accessible
          // backend, or to select under window 0 with topk) and, in decode-only steps, what the
          // layer's host job reads (evicted blocks, hgca's rows): each hand-over is pinned copies
          // followed by one flag raise.
          CHECK(dev.flag_waits() - waits == dev.pinned_merges() - pinned);
          CHECK((dev.flag_raises() > raises) == host_part);
          CHECK(dev.pinned_copies() - qcopies >= dev.flag_raises() - raises);
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
