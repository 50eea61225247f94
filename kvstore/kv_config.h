// KvConfig: the kv flags shared by every subcommand (--dense, --sinks, --window, --block,
// --sparse, --hgca-beta, --topk-blocks, --similarity-reuse, --device-budget, --cpu-attn, ...), as
// plain data.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace tandem {

enum class SparsePolicy : uint8_t { kFull, kHgca, kTopk, kTau };
enum class CpuAttnMode : uint8_t {
  kParallel,     // host part starts when the layer's q is known (HGCA)
  kAhead,        // host part of layer i+1 starts during layer i with a predicted q (ScoutAttention)
  kAheadOracle,  // the ahead code path fed the true q (a test and diagnosis mode)
  kAuto,         // ahead on a device backend, parallel on the CPU backend (KvConfig::resolved)
};

struct KvConfig {
  bool dense = false;     // no host tier: one contiguous cache per sequence (the reference)
  int32_t sinks = 4;      // first tokens kept on the device
  int32_t window = 1024;  // recent tokens kept on the device (0 = everything on the host)
  int32_t block = 64;     // tokens per block
  SparsePolicy sparse = SparsePolicy::kHgca;
  float hgca_beta = 1.0f;    // select host entries with MAW > beta / N_device
  int32_t topk_blocks = 16;  // host blocks per KV head under --sparse topk
  float tau = 0.9f;          // --sparse tau: attention mass of the host entries to keep
  // --similarity-reuse (topk, tau): a KV head reuses its last selection while the query stays
  // similar to the one it was made for (CLO §3.1-3.2; kvstore/similarity_reuse.h).
  bool similarity_reuse = false;
  float reuse_eta = 0.95f;   // the threshold of the most important heads (Eq. 7)
  float reuse_power = 2.0f;  // lambda = importance^power (Eq. 8)
  // --value-offload (tau, full): HCAttention §3.1-3.2. Each host block also keeps its keys
  // quantised to key_bits (8 or 4) per channel over the block's digest range; decode scores every
  // host entry from those codes, selects by them (tau: Eq. 4; full: all) and the host sums the
  // selected values with the approximate weights (Eq. 5), never reading the keys.
  bool value_offload = false;
  int32_t key_bits = 8;
  // auto: ahead where a device runs the model, which hides the host attention behind a whole
  // layer of device work; parallel on the CPU backend, where the device part runs on the same
  // cores (nothing to hide behind) and the predicted query would cost a second W_q product per
  // layer and the prediction's error.
  CpuAttnMode cpu_attn = CpuAttnMode::kAuto;
  int32_t cpu_threads = 0;  // host attention workers (0 = all cores)
  float maw_alpha = 0.1f;   // MAW moving-average factor
  int32_t observe = 32;     // prompt queries whose attention seeds the MAW of prompt tokens
  DType kv_dtype = DType::kF32;
  int64_t device_blocks = 0;  // device pool capacity in blocks (0 = sized for max_batch sequences)
  double device_gib = 0;      // device pool in GiB (--kv-device-gib; 0: device_blocks)
  // Bound of the host tier in GiB (--kv-host-gib); 0: kDefaultHostShare of MemAvailable when the
  // store is built.
  double host_gib = 0;
  bool prefix_cache = true;  // the host tier's automatic prefix cache (--no-prefix-cache)
  // --device-budget (ScoutAttention §3.4; kvstore/resident.h): tokens of important host blocks
  // each sequence keeps copies of on the device per layer, beside sinks and window (whole blocks:
  // device_budget / block of them; 0: off). Needs --sparse topk.
  int32_t device_budget = 0;
  // Decode steps between recalls of a layer's resident set (0: never, the post-prefill set
  // stays; kRecallAuto: per layer, when its mean CPU compute ratio since its last recall would
  // pass recall_threshold at the next step; kvstore/resident.h recall_due).
  int32_t recall_interval = kRecallAuto;
  float recall_threshold = 0.12f;
  static constexpr int32_t kRecallAuto = -1;
  static constexpr double kDefaultHostShare = 0.5;

  // Throws kInvalidArgument on inconsistent values (window < block, block 0, ...).
  void validate() const;
  std::string describe() const;  // "window=1024 block=64 sparse=hgca(1) cpu-attn=ahead"
  // This config with cpu_attn auto made concrete for a backend whose memory is host memory
  // (host_backend: the CPU backend) or not (a device).
  KvConfig resolved(bool host_backend) const;
};

std::string_view policy_name(SparsePolicy p);
std::string_view mode_name(CpuAttnMode m);

}  // namespace tandem
