// The options every command that loads a model shares (the "Model and device" and "KV cache"
// groups of server/option_table.cpp), read into a KvConfig and a Backend.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kernels/backend.h"
#include "kvstore/kv_config.h"
#include "kvstore/sequence_kv.h"
#include "server/options.h"

namespace tandem {

// The KV options (defaults as in DESIGN.md), validated together (KvConfig::validate).
KvConfig kv_config_of(const Options& o);
// --recall-interval: "auto" (KvConfig::kRecallAuto) or a step count >= 0; throws
// kInvalidArgument naming the option otherwise.
int32_t recall_interval_of(const std::string& s);
// A run's host-tier counters into a tool's JSON line (nothing with --dense): host_kv_bytes_read;
// the similarity-reuse lookups and hit ratio with --similarity-reuse; key_bits and the sampled
// key-quantisation error with --value-offload; cpu_compute_ratio under --sparse topk;
// device_budget, recall_interval ("auto" or steps), recall_threshold, recalls, recall_blocks,
// recall_bytes and mean_recall_interval with --device-budget.
void add_host_stats(nlohmann::json& j, const KvConfig& cfg, const HostStats& host);
// Whether any option of the "KV cache" group was given (bench-decode then builds that store
// instead of the dense cache).
bool any_kv_option(const Options& o);
// The backend --device picks: cpu, cuda, or auto (the default): cuda when this build has CUDA and
// a device it can run on is visible, else cpu. --device cuda without one throws kUnsupported (one
// line).
std::unique_ptr<Backend> make_backend(const Options& o);

}  // namespace tandem
