// The kv flags shared by every subcommand, parsed into a KvConfig, and --device.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "kernels/backend.h"
#include "kvstore/kv_config.h"
#include "server/cli.h"

namespace tandem {

// Names of the kv flags taking a value, and of the boolean ones, to add to a subcommand's sets.
const std::set<std::string>& kv_value_flags();
const std::set<std::string>& kv_bool_flags();
// Reads the kv flags (defaults as in DESIGN.md) and validates them.
KvConfig parse_kv_flags(const Flags& f);
// The backend --device picks: cpu, cuda, or auto (the default): cuda when this build has CUDA and
// a device it can run on is visible, else cpu. --device cuda without one throws kUnsupported (one
// line).
std::unique_ptr<Backend> make_backend(const Flags& f);

}  // namespace tandem
