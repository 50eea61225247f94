// The options every command that loads a model shares (the "Model and device" and "KV cache"
// groups of server/option_table.cpp), read into a KvConfig and a Backend.
#pragma once

#include <memory>

#include "kernels/backend.h"
#include "kvstore/kv_config.h"
#include "server/options.h"

namespace tandem {

// The KV options (defaults as in DESIGN.md), validated together (KvConfig::validate).
KvConfig kv_config_of(const Options& o);
// Whether any option of the "KV cache" group was given (bench-decode then builds that store
// instead of the dense cache).
bool any_kv_option(const Options& o);
// The backend --device picks: cpu, cuda, or auto (the default): cuda when this build has CUDA and
// a device it can run on is visible, else cpu. --device cuda without one throws kUnsupported (one
// line).
std::unique_ptr<Backend> make_backend(const Options& o);

}  // namespace tandem
