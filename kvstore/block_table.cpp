// Placement arithmetic of the hybrid store (mirrors HybridKv::store's order: sinks, then the
// window, whose oldest block moves to the host when one more token would not fit).
#include "kvstore/block_table.h"

#include <algorithm>

namespace tandem {

TableGeometry::Counts TableGeometry::counts(int64_t length) const {
  Counts c;
  if (length <= 0) return c;
  const int64_t b = block;
  c.sink_tokens = static_cast<int32_t>(std::min<int64_t>(length, sinks));
  const int64_t u = length - c.sink_tokens;
  int64_t host = 0;
  if (window == 0) {
    host = u;
  } else if (u > window) {
    host = (u - window + b - 1) / b * b;  // whole blocks move
  }
  c.host_tokens = static_cast<int32_t>(host);
  c.window_tokens = static_cast<int32_t>(u - host);
  c.device_blocks = (c.sink_tokens > 0 ? 1 : 0) + (c.window_tokens + b - 1) / b;
  c.host_blocks = (host + b - 1) / b;
  return c;
}

void TableGeometry::growth(int64_t length, int64_t n, TierDelta& device, TierDelta& host,
                           int32_t& evictions) const {
  const Counts a = counts(length), z = counts(length + n);
  evictions = window == 0 ? 0 : static_cast<int32_t>((z.host_tokens - a.host_tokens) / block);
  device.freed = evictions;
  device.alloc = z.device_blocks - a.device_blocks + evictions;
  host.alloc = z.host_blocks - a.host_blocks;
  host.freed = 0;
}

}  // namespace tandem
