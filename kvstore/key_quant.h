// Key quantisation of value offload (HCAttention §3.1-3.2, --value-offload): per host block, KV
// head and channel, asymmetric uniform codes over the block's Quest digest [kmin_c, kmax_c]:
//   step_c = (kmax_c - kmin_c) / (2^bits - 1),  code = round((k_c - kmin_c) / step_c)  (step 0: 0)
// so that |k_c - (kmin_c + code * step_c)| <= step_c / 2. 8 bits: one byte per channel; 4 bits:
// two channels per byte (channel 2i in the low nibble). The approximate scores
//   z~_j = scale * sum_c q_c (kmin_c + code_jc * step_c) = scale * (q.kmin + sum_c (q_c step_c)
//   code_jc)
// cost O(d) per block (q.kmin and q_c * step_c) and O(d) per row.
#pragma once

#include <cstdint>

namespace tandem {

// The share of the scored (sequence, layer, KV head) items whose quantisation error is measured
// against the exact scores (HostStats::quant_*): one in this many.
inline constexpr uint64_t kQuantSampleEvery = 16;

// The error of approximate scores against exact ones, over n logits.
struct QuantError {
  int64_t n = 0;
  double sum = 0, max = 0;  // sum and largest of |z~ - z|
  void add(double e) {
    ++n;
    sum += e;
    if (e > max) max = e;
  }
};

// Bytes of one row's codes (d channels; d even for 4 bits).
inline int64_t code_row_bytes(int32_t d, int32_t bits) { return int64_t{d} * bits / 8; }

// The step of one channel with range [kmin, kmax] (0 for a constant channel).
float quant_step(float kmin, float kmax, int32_t bits);

// One key row k [d], each channel within [kmin_c, kmax_c], into its codes (code_row_bytes).
void quantize_row(const float* k, const float* kmin, const float* kmax, int32_t d, int32_t bits,
                  uint8_t* code);

// The code of channel c of a row of codes.
inline uint32_t code_of(const uint8_t* row, int32_t c, int32_t bits) {
  if (bits == 8) return row[c];
  return (row[c >> 1] >> ((c & 1) * 4)) & 0xFu;
}

// The keys the codes stand for: out[c] = kmin_c + code_c * step_c.
void dequantize_row(const uint8_t* code, const float* kmin, const float* kmax, int32_t d,
                    int32_t bits, float* out);

// Approximate scores of n rows of one block's KV head for the G query heads q [G, d] (not
// scaled): z[i * G + g] = scale * q_g . dequantize(codes row i). codes u8 [n, code_row_bytes].
void approx_scores(const uint8_t* codes, int32_t n, const float* kmin, const float* kmax, int32_t d,
                   int32_t bits, const float* q, int32_t G, float scale, float* z);

}  // namespace tandem
