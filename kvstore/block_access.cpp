// BlockAccess's host K by channel and V by tiles: row reads and writes (strided by the block's
// tokens) and the conversion back to rows. Not on the host attention's path, which reads the
// blocks in place.
#include "kvstore/block_access.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/simd.h"

namespace tandem {
namespace {

// A 16-bit row goes through a stack buffer this many channels at a time, so its conversion is
// cpu::row_to_f32's / row_from_f32's, bit for bit.
constexpr int32_t kChunk = 64;

// Head after head: out [b, d] <- k [d, b], tokens in tiles so the reads of a tile stay in lines
// already fetched.
template <typename T>
void transpose_heads(const T* k, int32_t heads, int32_t d, int32_t b, T* out) {
  constexpr int32_t kTile = 16;
  for (int32_t g = 0; g < heads; ++g) {
    const T* src = k + int64_t{g} * d * b;
    T* dst = out + int64_t{g} * b * d;
    for (int32_t t0 = 0; t0 < b; t0 += kTile) {
      const int32_t t1 = std::min(b, t0 + kTile);
      for (int32_t c = 0; c < d; ++c)
        for (int32_t t = t0; t < t1; ++t) dst[int64_t{t} * d + c] = src[int64_t{c} * b + t];
    }
  }
}

}  // namespace

void BlockAccess::read_host_k_row(int32_t id, int32_t g, int32_t t, float* out) const {
  const int32_t d = layout.head_dim;
  const int64_t ld = layout.tokens;
  const uint8_t* k = host_k(id);
  const int64_t at = host_k_elem(g, t, 0);
  if (layout.dtype == DType::kF32) {
    const float* p = reinterpret_cast<const float*>(k) + at;
    for (int32_t c = 0; c < d; ++c) out[c] = p[c * ld];
    return;
  }
  const uint16_t* p = reinterpret_cast<const uint16_t*>(k) + at;
  uint16_t buf[kChunk];
  for (int32_t c0 = 0; c0 < d; c0 += kChunk) {
    const int32_t n = std::min(kChunk, d - c0);
    for (int32_t i = 0; i < n; ++i) buf[i] = p[(c0 + i) * ld];
    cpu::row_to_f32(buf, layout.dtype, out + c0, n);
  }
}

void BlockAccess::write_host_k_row(int32_t id, int32_t g, int32_t t, const float* in) const {
  const int32_t d = layout.head_dim;
  const int64_t ld = layout.tokens;
  uint8_t* k = host_k(id);
  const int64_t at = host_k_elem(g, t, 0);
  if (layout.dtype == DType::kF32) {
    float* p = reinterpret_cast<float*>(k) + at;
    for (int32_t c = 0; c < d; ++c) p[c * ld] = in[c];
    return;
  }
  uint16_t* p = reinterpret_cast<uint16_t*>(k) + at;
  uint16_t buf[kChunk];
  for (int32_t c0 = 0; c0 < d; c0 += kChunk) {
    const int32_t n = std::min(kChunk, d - c0);
    cpu::row_from_f32(in + c0, buf, layout.dtype, n);
    for (int32_t i = 0; i < n; ++i) p[(c0 + i) * ld] = buf[i];
  }
}

void BlockAccess::host_k_as_rows(int32_t id, uint8_t* out) const {
  const int32_t hkv = layout.n_head_kv, d = layout.head_dim, b = layout.tokens;
  switch (dtype_size(layout.dtype)) {
    case 4:
      transpose_heads(reinterpret_cast<const float*>(host_k(id)), hkv, d, b,
                      reinterpret_cast<float*>(out));
      return;
    case 2:
      transpose_heads(reinterpret_cast<const uint16_t*>(host_k(id)), hkv, d, b,
                      reinterpret_cast<uint16_t*>(out));
      return;
    default:
      break;
  }
  TANDEM_CHECK(false, "host K of ", dtype_name(layout.dtype));
}

void BlockAccess::read_host_v_row(int32_t id, int32_t g, int32_t t, float* out) const {
  const int32_t d = layout.head_dim, w = layout.host_v_tiled() ? kVTile : d;
  const int64_t es = dtype_size(layout.dtype);
  for (int32_t c0 = 0; c0 < d; c0 += w)
    cpu::row_to_f32(host_v(id) + host_v_elem(g, t, c0) * es, layout.dtype, out + c0, w);
}

void BlockAccess::write_host_v_row(int32_t id, int32_t g, int32_t t, const float* in) const {
  const int32_t d = layout.head_dim, w = layout.host_v_tiled() ? kVTile : d;
  const int64_t es = dtype_size(layout.dtype);
  for (int32_t c0 = 0; c0 < d; c0 += w)
    cpu::row_from_f32(in + c0, host_v(id) + host_v_elem(g, t, c0) * es, layout.dtype, w);
}

void BlockAccess::host_v_as_rows(int32_t id, uint8_t* out) const {
  const int32_t hkv = layout.n_head_kv, d = layout.head_dim, b = layout.tokens;
  const int64_t es = dtype_size(layout.dtype);
  if (!layout.host_v_tiled()) {
    std::memcpy(out, host_v(id), static_cast<size_t>(layout.dev_kv_bytes()));
    return;
  }
  // Each tile row (kVTile channels of one token) to its place in the token's row.
  const size_t run = static_cast<size_t>(kVTile * es);
  for (int32_t g = 0; g < hkv; ++g)
    for (int32_t c0 = 0; c0 < d; c0 += kVTile)
      for (int32_t t = 0; t < b; ++t)
        std::memcpy(out + ((int64_t{g} * b + t) * d + c0) * es,
                    host_v(id) + host_v_elem(g, t, c0) * es, run);
}

}  // namespace tandem
