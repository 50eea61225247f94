// Parity of the CUDA backend's merge of attention partials with the CPU reference backend
// (tests/cuda_parity.h): -inf and +inf partials, a partial in mapped pinned memory read in
// place, partials with strides of their own; and the host flags the hybrid store synchronises
// with: the stream waiting on a flag a CPU thread publishes, a CPU thread reading a copy in
// mapped memory behind a flag the stream raises.
//
// Without a CUDA device (or in a build without CUDA) the executable prints
// "no CUDA device: N GPU tests skipped" and exits 4, ctest's SKIP_RETURN_CODE (label "gpu").
// The listener base classes of Catch2 v2 (used below to skip the whole run without a GPU).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "tests/cuda_parity.h"
#include "tests/gpu_skip.h"

using namespace tandem;
using namespace tandem::test;

CATCH_REGISTER_LISTENER(SkipWithoutGpu)

namespace {

// lse values covering every merge case: finite, -inf on either side or both, +inf.
struct MergeInputs {
  Buffer ao, al, bo, bl;
};

MergeInputs merge_inputs(int64_t n, int64_t h, int64_t d, uint32_t seed) {
  MergeInputs in{random_buffer(DType::kF32, {n, h, d}, seed),
                 random_buffer(DType::kF32, {n, h}, seed + 1, 5.0f),
                 random_buffer(DType::kF32, {n, h, d}, seed + 2),
                 random_buffer(DType::kF32, {n, h}, seed + 3, 5.0f)};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float* al = in.al.as<float>();
  float* bl = in.bl.as<float>();
  for (int64_t r = 0; r < n * h; ++r) {
    switch (r % 6) {
      case 1:  // b empty: its o must not be read
        bl[r] = -kInf;
        for (int64_t c = 0; c < d; ++c) in.bo.as<float>()[r * d + c] = nan;
        break;
      case 2:  // a empty: b is taken as is
        al[r] = -kInf;
        for (int64_t c = 0; c < d; ++c) in.ao.as<float>()[r * d + c] = 0.0f;
        break;
      case 3:  // both empty
        al[r] = -kInf;
        bl[r] = -kInf;
        for (int64_t c = 0; c < d; ++c) in.ao.as<float>()[r * d + c] = 0.0f;
        break;
      case 4:  // +inf on one side
        al[r] = kInf;
        break;
      default:
        break;
    }
  }
  return in;
}

}  // namespace

TEST_CASE("cuda: merge with -inf and +inf partials, device and mapped pinned", "[gpu][merge]") {
  for (bool mapped : {false, true}) {
    const int64_t n = 9, h = 12, d = 128;
    INFO("b in " << (mapped ? "mapped pinned" : "device") << " memory");
    MergeInputs in = merge_inputs(n, h, d, mapped ? 300 : 310);
    Buffer ro = clone(in.ao), rl = clone(in.al);
    cpu().merge({ro.view(), rl.view()}, {in.bo.view(), in.bl.view()});
    const Buffer dao = up(in.ao), dal = up(in.al);
    if (mapped) {
      // Rows 1..n of a larger mapped allocation: the partial is a slice, as in a host pool.
      Buffer bo(cuda_mapped_memory(), DType::kF32, {n + 1, h, d}),
          bl(cuda_mapped_memory(), DType::kF32, {n + 1, h});
      std::memcpy(bo.as<float>() + h * d, in.bo.as<float>(),
                  static_cast<size_t>(in.bo.view().nbytes()));
      std::memcpy(bl.as<float>() + h, in.bl.as<float>(),
                  static_cast<size_t>(in.bl.view().nbytes()));
      gpu().merge({dao.view(), dal.view()},
                  {bo.view().slice(1, n + 1), bl.view().slice(1, n + 1)});  // read in place
      gpu().synchronize();  // before the mapped buffers go
    } else {
      const Buffer dbo = up(in.bo), dbl = up(in.bl);
      gpu().merge({dao.view(), dal.view()}, {dbo.view(), dbl.view()});
      gpu().synchronize();
    }
    CHECK(rel_err(down(dao.view()), values(ro)) < kTol32);
    check_lse(down(dal.view()), values(rl), kTol32);
  }
}

// The two partials in different layouts: b head-major ([h][n][d] in memory, lse [h][n]), as a
// strided view [n, h, d]; a row-major. Every stride of b differs from a's, so a merge that reads
// one partial with the other's strides fails here.
TEST_CASE("cuda: merge reads each partial with its own strides", "[gpu][merge]") {
  const int64_t n = 5, h = 6, d = 64;
  MergeInputs in = merge_inputs(n, h, d, 320);
  Buffer ro = clone(in.ao), rl = clone(in.al);
  cpu().merge({ro.view(), rl.view()}, {in.bo.view(), in.bl.view()});
  Buffer bt(DType::kF32, {h, n, d}), blt(DType::kF32, {h, n});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < h; ++j) {
      blt.as<float>()[j * n + i] = in.bl.as<float>()[i * h + j];
      for (int64_t c = 0; c < d; ++c)
        bt.as<float>()[(j * n + i) * d + c] = in.bo.as<float>()[(i * h + j) * d + c];
    }
  const Buffer dao = up(in.ao), dal = up(in.al), dbo = up(bt), dbl = up(blt);
  TensorView bo = dbo.view(), bl = dbl.view();
  bo.shape = {n, h, d, 1};
  bo.stride = {d, n * d, 1, 1};
  bl.shape = {n, h, 1, 1};
  bl.stride = {1, n, 1, 1};
  gpu().merge({dao.view(), dal.view()}, {bo, bl});
  CHECK(rel_err(down(dao.view()), values(ro)) < kTol32);
  check_lse(down(dal.view()), values(rl), kTol32);
}

TEST_CASE("cuda: the stream waits on a flag in mapped memory published by a CPU thread",
          "[gpu][merge][flag]") {
  const int64_t n = 4, h = 8, d = 64;
  MergeInputs in = merge_inputs(n, h, d, 320);
  Buffer ro = clone(in.ao), rl = clone(in.al);
  cpu().merge({ro.view(), rl.view()}, {in.bo.view(), in.bl.view()});
  const Buffer dao = up(in.ao), dal = up(in.al);
  Buffer flag(cuda_mapped_memory(), DType::kI32, {1}),
      bo(cuda_mapped_memory(), DType::kF32, {n, h, d}),
      bl(cuda_mapped_memory(), DType::kF32, {n, h});
  publish_host_flag(flag.view(), 0);
  // The host partial is not there yet: NaN everywhere, which the merge must never see.
  std::fill_n(bo.as<float>(), n * h * d, std::numeric_limits<float>::quiet_NaN());
  std::fill_n(bl.as<float>(), n * h, std::numeric_limits<float>::quiet_NaN());
  // The "CPU worker" produces the partial later, on its own thread (also where a sanitizer
  // makes kernel launches block the launching thread).
  std::jthread worker([&] {  // joins on the way out even if a call below throws
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::memcpy(bo.as<float>(), in.bo.as<float>(), static_cast<size_t>(in.bo.view().nbytes()));
    std::memcpy(bl.as<float>(), in.bl.as<float>(), static_cast<size_t>(in.bl.view().nbytes()));
    publish_host_flag(flag.view(), 1);
  });
  bool helped = false;
  gpu().wait_host_flag(flag.view(), 1, [&] { helped = true; });   // queued: returns at once
  gpu().merge({dao.view(), dal.view()}, {bo.view(), bl.view()});  // queued behind the wait
  CHECK_FALSE(helped);  // a device backend never runs the host-side wait
  worker.join();
  gpu().synchronize();
  CHECK(rel_err(down(dao.view()), values(ro)) < kTol32);
  check_lse(down(dal.view()), values(rl), kTol32);
}

TEST_CASE("cuda: a copy into mapped memory is read by a CPU thread behind a raised flag",
          "[gpu][copy][flag]") {
  const Buffer h = random_buffer(DType::kF32, {1, 8, 64}, 330);
  const Buffer src = up(h);
  Buffer tmp(cuda_device_memory(), DType::kF32, {1, 8, 64});
  Buffer flag(cuda_mapped_memory(), DType::kI32, {1}),
      dst(cuda_mapped_memory(), DType::kF32, {1, 8, 64});
  publish_host_flag(flag.view(), 0);
  std::vector<float> seen;
  // The CPU thread polls the flag, then reads what the device wrote in place.
  std::jthread worker([&] {
    while (!host_flag_reached(flag.view(), 7)) std::this_thread::yield();
    seen.assign(dst.as<float>(), dst.as<float>() + 8 * 64);
  });
  gpu().add(src.view(), src.view(), tmp.view());  // work before the copy, as in a layer
  gpu().copy(tmp.view(), dst.view());             // kernel writes through the device alias
  gpu().raise_host_flag(flag.view(), 7);
  gpu().synchronize();  // lets the stream run under TANDEM_EMU_DEFER; the reader goes by the flag
  worker.join();
  std::vector<float> twice = values(h);
  for (float& x : twice) x *= 2.0f;
  CHECK(rel_err(seen, twice) == 0.0);
}
