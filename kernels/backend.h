// Backend: every device operation of the forward pass. CpuBackend (kernels/cpu) is the
// reference and always built; CudaBackend (kernels/cuda) is the fast path. Activations are f32
// on the CPU backend; weights may be f32, f16 or bf16 and are read in place.
//
// Shapes are written (rows, cols) row-major; "n" is the number of token rows in the step.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "kernels/attn_partial.h"
#include "kernels/tensor.h"

namespace tandem {

// Rotary embedding parameters, precomputed once from the model config (models/config.cpp).
struct RopeTable {
  int32_t head_dim = 0;
  int32_t rotary_dim = 0;       // leading dims of each head that rotate (== head_dim for Llama)
  std::vector<float> inv_freq;  // [rotary_dim / 2], scaling (linear, llama3, yarn) applied
  float mscale = 1.0f;          // multiplies cos and sin (yarn attention factor)
  bool neox = true;  // rotate-half pairs (i, i + rotary_dim/2) as in HF; false: (2i, 2i+1)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // y[n, m] = x[n, k] · w[m, k]^T (+ bias[m]). x, y f32 contiguous; w f32/f16/bf16 contiguous;
  // bias f32 [m] or an empty view. Every byte of w is read once per call.
  virtual void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                      const TensorView& y) = 0;
  // out[i, :] = table[ids[i], :] as f32. ids i32 [n], table f32/f16/bf16 [vocab, d], out f32 [n,
  // d].
  virtual void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) = 0;
  // Row-wise over the last dim of x [rows, d]: out = x / sqrt(mean(x^2) + eps) * w. w f32 [d].
  // out may alias x.
  virtual void rms_norm(const TensorView& x, const TensorView& w, float eps,
                        const TensorView& out) = 0;
  // Row-wise: out = (x - mean) / sqrt(var + eps) * w + b. w, b f32 [d]. out may alias x.
  virtual void layer_norm(const TensorView& x, const TensorView& w, const TensorView& b, float eps,
                          const TensorView& out) = 0;
  // In place on x [n, heads, head_dim] (f32): token i rotated by position pos[i] (i32 [n]).
  virtual void rope(const TensorView& x, const TensorView& pos, const RopeTable& rope) = 0;
  // out[n, f] = silu(gate) * up, all f32 [n, f]; out may alias gate or up.
  virtual void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) = 0;
  // x = max(x, 0) in place, f32.
  virtual void relu(const TensorView& x) = 0;
  // out = a + b elementwise, f32 of one shape; out may alias a or b.
  virtual void add(const TensorView& a, const TensorView& b, const TensorView& out) = 0;
  // Row-wise softmax in place over the last dim of x [rows, d], f32.
  virtual void softmax(const TensorView& x) = 0;
  // Attention of n queries over one contiguous span of T keys.
  //   q f32 [n, n_head_q, d]; k, v f32/f16/bf16 [T, n_head_kv, d]; q_pos i32 [n].
  //   Key j has position k_pos0 + j and is visible to query i iff k_pos0 + j <= q_pos[i].
  //   GQA: query head h reads kv head h / (n_head_q / n_head_kv).
  //   out.o f32 [n, n_head_q, d], out.lse f32 [n, n_head_q] (natural log of the sum of
  //   exp(scale * q·k)); a query that sees no key gets lse = -inf and o = 0.
  virtual void attention(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& q_pos, int64_t k_pos0, float scale,
                         const AttnPartial& out) = 0;
  // a <- merge(a, b) row by row with merge_partial_row (kernels/attn_partial.h).
  virtual void merge(const AttnPartial& a, const AttnPartial& b) = 0;
  // dst <- src, same shape, converting between f32/f16/bf16.
  virtual void copy(const TensorView& src, const TensorView& dst) = 0;
  // Waits until every queued operation has finished (no-op on the CPU backend).
  virtual void synchronize() {}
};

// The CPU reference backend (kernels/cpu). Threads come from the oneTBB arena in force.
std::unique_ptr<Backend> make_cpu_backend();

}  // namespace tandem
