// KvStore: pools, sequence creation and memory accounting.
#include "kvstore/kv_store.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "kvstore/hybrid_runner.h"

namespace tandem {

std::string_view policy_name(SparsePolicy p) {
  switch (p) {
    case SparsePolicy::kFull:
      return "full";
    case SparsePolicy::kHgca:
      return "hgca";
    case SparsePolicy::kTopk:
      return "topk";
    case SparsePolicy::kTau:
      return "tau";
  }
  return "?";
}

std::string_view mode_name(CpuAttnMode m) {
  switch (m) {
    case CpuAttnMode::kParallel:
      return "parallel";
    case CpuAttnMode::kAhead:
      return "ahead";
    case CpuAttnMode::kAheadOracle:
      return "ahead-oracle";
    case CpuAttnMode::kAuto:
      return "auto";
  }
  return "?";
}

KvConfig KvConfig::resolved(bool host_backend) const {
  KvConfig c = *this;
  if (c.cpu_attn == CpuAttnMode::kAuto)
    c.cpu_attn = host_backend ? CpuAttnMode::kParallel : CpuAttnMode::kAhead;
  return c;
}

void KvConfig::validate() const {
  TANDEM_REQUIRE(block >= 1 && block <= 4096, kInvalidArgument, "--block must be in [1, 4096]");
  TANDEM_REQUIRE(sinks >= 0 && sinks <= block, kInvalidArgument, "--sinks must be in [0, --block]");
  TANDEM_REQUIRE(window == 0 || window >= block, kInvalidArgument,
                 "--window must be 0 (all KV on the host) or at least --block (", block, ")");
  TANDEM_REQUIRE(hgca_beta > 0, kInvalidArgument, "--hgca-beta must be positive");
  TANDEM_REQUIRE(topk_blocks >= 0, kInvalidArgument, "--topk-blocks must be >= 0");
  TANDEM_REQUIRE(tau > 0 && tau <= 1, kInvalidArgument, "--tau must be in (0, 1]");
  // full reads every entry (nothing to reuse, and it must stay exact); hgca selects by MAW values
  // that move every step whatever the query: reuse keyed on the query fits topk and tau only.
  TANDEM_REQUIRE(
      !similarity_reuse || dense || sparse == SparsePolicy::kTopk || sparse == SparsePolicy::kTau,
      kInvalidArgument, "--similarity-reuse needs --sparse topk or tau, not ", policy_name(sparse));
  // Value offload scores every host entry from the key codes and weighs the values by those
  // scores: tau selects by them (Eq. 4), full weighs every entry (HCAttention's tau = 1). hgca and
  // topk select otherwise, similarity reuse would keep a selection but not its scores, and the
  // dense store has no host tier.
  TANDEM_REQUIRE(
      !value_offload || (!dense && (sparse == SparsePolicy::kTau || sparse == SparsePolicy::kFull)),
      kInvalidArgument, "--value-offload needs the hybrid store with --sparse tau or full",
      dense ? ", not --dense" : "", dense ? "" : ", not --sparse ",
      dense ? "" : policy_name(sparse));
  TANDEM_REQUIRE(!value_offload || !similarity_reuse, kInvalidArgument,
                 "--value-offload and --similarity-reuse do not combine (a reused selection has no "
                 "scores)");
  TANDEM_REQUIRE(key_bits == 8 || key_bits == 4, kInvalidArgument,
                 "--key-bits must be 8 or 4, not ", key_bits);
  TANDEM_REQUIRE(reuse_eta >= -1 && reuse_eta <= 1, kInvalidArgument,
                 "--reuse-eta must be in [-1, 1]");
  TANDEM_REQUIRE(reuse_power >= 0, kInvalidArgument, "--reuse-power must be >= 0");
  TANDEM_REQUIRE(maw_alpha > 0 && maw_alpha <= 1, kInvalidArgument, "MAW alpha must be in (0, 1]");
  // The resident set is chosen and recalled by Quest bounds, and the CPU skips its blocks among
  // topk's selection: other policies have no block selection to subtract it from; a reused
  // selection would skip a resident set that has moved since; with window 0 nothing is on the
  // device to attend beside it.
  TANDEM_REQUIRE(device_budget >= 0, kInvalidArgument, "--device-budget must be >= 0");
  TANDEM_REQUIRE(device_budget == 0 || (!dense && sparse == SparsePolicy::kTopk), kInvalidArgument,
                 "--device-budget needs --sparse topk (and no --dense), not ",
                 dense ? std::string_view("--dense") : policy_name(sparse));
  TANDEM_REQUIRE(device_budget == 0 || !similarity_reuse, kInvalidArgument,
                 "--device-budget and --similarity-reuse cannot be combined");
  TANDEM_REQUIRE(device_budget == 0 || window > 0, kInvalidArgument,
                 "--device-budget needs a device window (--window > 0)");
  TANDEM_REQUIRE(recall_interval >= 0 || recall_interval == kRecallAuto, kInvalidArgument,
                 "--recall-interval must be a step count >= 0 or auto");
  TANDEM_REQUIRE(recall_threshold > 0 && recall_threshold <= 1, kInvalidArgument,
                 "--recall-threshold must be in (0, 1]");
  TANDEM_REQUIRE(host_gib >= 0 && device_gib >= 0, kInvalidArgument,
                 "--kv-host-gib and --kv-device-gib must not be negative");
}

std::string KvConfig::describe() const {
  std::ostringstream os;
  if (dense)
    return kv_dtype == DType::kF32 ? "dense"
                                   : "dense kv-dtype=" + std::string(dtype_name(kv_dtype));
  os << "sinks=" << sinks << " window=" << window << " block=" << block
     << " sparse=" << policy_name(sparse);
  if (sparse == SparsePolicy::kHgca) os << "(beta=" << hgca_beta << ")";
  if (sparse == SparsePolicy::kTopk) os << "(k=" << topk_blocks << ")";
  if (sparse == SparsePolicy::kTau) os << "(tau=" << tau << ")";
  if (device_budget > 0) {
    os << " device-budget=" << device_budget << " recall=";
    if (recall_interval == kRecallAuto)
      os << "auto(" << recall_threshold << ")";
    else
      os << recall_interval;
  }
  if (similarity_reuse) os << " similarity-reuse(eta=" << reuse_eta << ",p=" << reuse_power << ")";
  if (value_offload) os << " value-offload(key-bits=" << key_bits << ")";
  os << " cpu-attn=" << mode_name(cpu_attn);
  if (kv_dtype != DType::kF32) os << " kv-dtype=" << dtype_name(kv_dtype);
  if (!prefix_cache) os << " no-prefix-cache";
  return os.str();
}

void KvPlanner::release(std::unique_ptr<SequenceKv> kv, std::span<const int32_t>) { kv.reset(); }

KvStore::KvStore(Backend& backend, const KvShape& shape, const KvConfig& cfg, int32_t max_sequences,
                 int32_t max_context)
    : backend_(backend), shape_(shape), cfg_(cfg.resolved(backend.host_accessible())) {
  cfg_.validate();
  if (cfg_.dense) return;
  const BlockLayout layout{cfg_.block, shape.n_head_kv, shape.head_dim, cfg_.kv_dtype,
                           cfg_.value_offload ? cfg_.key_bits : 0};
  // The codes live with the host blocks and the scoring runs on the host: on a device backend
  // nothing would leave the device's memory, and the device window's rows are not coded there.
  TANDEM_REQUIRE(!cfg_.value_offload || backend_.host_accessible(), kUnsupported,
                 "--value-offload runs on the CPU backend only (--device cpu): its key codes and "
                 "scoring live on the host, there is no device kernel for them");
  int64_t dev = cfg_.device_blocks;
  if (cfg_.device_gib > 0) {
    dev = static_cast<int64_t>(cfg_.device_gib * double(int64_t{1} << 30)) / layout.dev_bytes();
    TANDEM_REQUIRE(dev >= 1, kInvalidArgument, "--kv-device-gib ", cfg_.device_gib,
                   " holds no device KV block of ", layout.dev_bytes(), " bytes");
  }
  if (dev == 0) {
    // Enough for max_sequences sequences at their largest device footprint.
    const int64_t window_tokens = std::min<int64_t>(cfg_.window, max_context);
    const int64_t per_layer =
        1 + (window_tokens + cfg_.block - 1) / cfg_.block + 1 + resident_reserve(cfg_, max_context);
    dev = std::max<int64_t>(1, per_layer * shape.n_layer * max_sequences);
  }
  // Only hgca needs a host copy of the device blocks (its MAW update reads their K every step);
  // under full and topk a device backend's blocks are written by device copies and read back
  // only when evicted.
  device_ = std::make_unique<BlockPool>(layout.dev_bytes(), dev, false, MemoryKind::kDevice,
                                        &backend_, cfg_.sparse == SparsePolicy::kHgca);
  const int64_t chunk = std::max<int64_t>(4, (int64_t{32} << 20) / layout.host_bytes());
  // Ordinary host memory (the CPU attention reads it; a device backend gets it by upload): not
  // tagged pinned, which would let a CUDA op take it as device-readable.
  host_ = std::make_unique<BlockPool>(layout.host_bytes(), chunk, true, MemoryKind::kHost);
  // The host tier's bound: its blocks (cached ones included) never take more than this.
  const double host_bytes =
      cfg_.host_gib > 0 ? cfg_.host_gib * double(int64_t{1} << 30)
                        : KvConfig::kDefaultHostShare * double(host_memory_info().free_bytes);
  host_budget_bytes_ = static_cast<int64_t>(host_bytes);
  if (host_budget_bytes_ > 0) {
    const int64_t limit = host_budget_bytes_ / layout.host_bytes();
    TANDEM_REQUIRE(limit >= shape.n_layer, kInvalidArgument, "--kv-host-gib ", cfg_.host_gib,
                   " holds fewer host KV blocks than one per layer (", layout.host_bytes(),
                   " bytes each)");
    host_->set_limit(limit);
  }
  host_attn_ =
      std::make_unique<HostAttention>(cfg_.cpu_threads, shape.head_dim, shape.scale, cfg_.kv_dtype);
  const BlockAccess blocks{*device_, *host_, layout};
  rows_ = DeviceRows::make(backend_, blocks);
  // A device backend's decode steps put their rows by device copies (kvstore/hybrid_jobs.cpp):
  // the row strategy itself on a device-only pool, a second one beside a mirror.
  DeviceRows* scatter = nullptr;
  if (!backend_.host_accessible()) {
    if (!rows_->host_side()) {
      scatter = rows_.get();
    } else {
      scatter_ = DeviceRows::make_scatter(backend_, blocks);
      scatter = scatter_.get();
    }
  }
  shared_.reset(new HybridShared{backend_,
                                 shape_,
                                 cfg_,
                                 TableGeometry(cfg_),
                                 blocks,
                                 *rows_,
                                 scatter,
                                 *host_attn_,
                                 staging_,
                                 nullptr,
                                 nullptr,
                                 0,
                                 0,
                                 {}});
  if (cfg_.prefix_cache) {
    // Everything that changes the bytes of a cached block: its geometry and dtype (one store
    // serves one model, so the model needs no name here).
    const uint64_t salt = (uint64_t(cfg_.block) << 40) ^ (uint64_t(shared_->geo.sinks) << 24) ^
                          (uint64_t(cfg_.kv_dtype) << 16) ^ uint64_t(shape.head_dim) ^
                          (uint64_t(shape.n_head_kv) << 8) ^ (uint64_t(shape.n_layer) << 56) ^
                          (uint64_t(layout.key_bits) << 32);
    cache_ =
        std::make_unique<PrefixCache>(*host_, shape.n_layer, shared_->geo.sinks, cfg_.block, salt);
    shared_->cache = cache_.get();
  }
  runner_ = std::make_unique<HybridRunner>(*shared_);
  shared_->runner = runner_.get();
}

KvStore::~KvStore() {
  // Sequences are gone by now; the runner's host work is reaped before the cache frees blocks.
  if (runner_) runner_->reap();
  if (shared_) shared_->cache = nullptr;
  cache_.reset();
}

std::unique_ptr<SequenceKv> KvStore::new_sequence(int32_t capacity,
                                                  std::span<const int32_t> tokens) {
  if (cfg_.dense) return std::make_unique<DenseKv>(backend_, shape_, capacity, cfg_.kv_dtype);
  auto kv = std::make_unique<HybridKv>(*shared_, capacity);
  if (cache_ && !tokens.empty()) {
    // At least the last token is computed (its logits are the sequence's next step).
    const int64_t usable = std::min<int64_t>(std::ssize(tokens) - 1, capacity);
    const int32_t max_chunks = cache_->chunks_of(usable);
    runner_->reap();
    kv->adopt(cache_->match(tokens, max_chunks, std::ssize(tokens)));
  }
  return kv;
}

void KvStore::release(std::unique_ptr<SequenceKv> kv, std::span<const int32_t> tokens) {
  if (!kv) return;
  if (cache_ && kv->step_runner() == runner_.get())
    static_cast<HybridKv*>(kv.get())->release(tokens);
  kv.reset();
}

void KvStore::publish(SequenceKv& kv, std::span<const int32_t> tokens) {
  if (cache_ && kv.step_runner() == runner_.get()) static_cast<HybridKv&>(kv).publish(tokens);
}

int32_t KvStore::prefix_unit() const { return cache_ ? cache_->sinks() + cache_->block() : 0; }

int64_t KvStore::host_free() const {
  if (!host_) return std::numeric_limits<int64_t>::max() / 4;
  return host_->free_within_limit() + (cache_ ? cache_->evictable_blocks() : 0);
}

StepPlan KvStore::plan(std::span<const PlanRequest> batch) const {
  if (cfg_.dense) {  // no device tier: every plan fits
    StepPlan p;
    p.seqs.resize(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) p.seqs[i].request = batch[i];
    p.device_free = std::numeric_limits<int64_t>::max() / 2;
    p.host_free = p.device_free;
    return p;
  }
  StepPlan p = plan_hybrid(*shared_, device_->free_blocks(), batch);
  p.host_free = host_free();
  return p;
}

int64_t KvStore::host_blocks_for(int32_t tokens) const {
  if (cfg_.dense || tokens <= 0) return 0;
  return TableGeometry(cfg_).counts(tokens).host_blocks * shape_.n_layer;
}

int64_t KvStore::device_blocks_for(int32_t tokens) const {
  if (cfg_.dense || tokens <= 0) return 0;
  // As its prompt's last chunk: a resident set's reserve included (--device-budget).
  const PlanRequest r{nullptr, tokens, false, true};
  const StepPlan p = plan_hybrid(*shared_, 0, std::span<const PlanRequest>(&r, 1));
  return std::max<int64_t>(0, p.device.net());
}

}  // namespace tandem
