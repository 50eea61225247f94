// DenseKv: the plain contiguous KV cache, used by --dense and as the exactness reference.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/simd.h"
#include "kvstore/sequence_kv.h"

namespace tandem {

void SequenceKv::attend(Backend&, int32_t, const TensorView&, const TensorView&, const TensorView&,
                        const TensorView&, const AttnPartial&) {
  TANDEM_CHECK(false, "this sequence attends through its store's step runner");
}

DenseKv::DenseKv(Backend& backend, const KvShape& shape, int32_t capacity, DType dtype)
    : shape_(shape), capacity_(capacity), dtype_(dtype) {
  TANDEM_CHECK(capacity > 0, "capacity ", capacity);
  TANDEM_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
               "dense KV dtype ", dtype_name(dtype));
  for (int32_t l = 0; l < shape.n_layer; ++l) {
    k_.emplace_back(backend, dtype,
                    std::initializer_list<int64_t>{shape.n_head_kv, capacity, shape.head_dim});
    v_.emplace_back(backend, dtype,
                    std::initializer_list<int64_t>{shape.n_head_kv, capacity, shape.head_dim});
  }
}

TensorView DenseKv::rows(const std::vector<Buffer>& kv, int32_t layer) const {
  TensorView t = kv[static_cast<size_t>(layer)].view();  // [n_head_kv, capacity, head_dim]
  std::swap(t.shape[0], t.shape[1]);
  std::swap(t.stride[0], t.stride[1]);
  return t;
}

void DenseKv::attend(Backend& backend, int32_t layer, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView& q_pos, const AttnPartial& out) {
  const int64_t n = q.dim(0);
  TANDEM_REQUIRE(length_ + n <= capacity_, kInvalidArgument, "sequence of ", length_ + n,
                 " tokens exceeds its KV capacity of ", capacity_);
  const TensorView kl = rows(k_, layer), vl = rows(v_, layer);
  backend.copy(k, kl.slice(length_, length_ + n));
  backend.copy(v, vl.slice(length_, length_ + n));
  backend.attention(q, kl.slice(0, length_ + n), vl.slice(0, length_ + n), q_pos, 0, shape_.scale,
                    out);
}

void DenseKv::import_kv(Backend& backend, int32_t layer, const float* k, const float* v,
                        int32_t n) {
  TANDEM_REQUIRE(n >= 0 && length_ + n <= capacity_, kInvalidArgument, "importing ", n,
                 " tokens into a sequence of ", length_, " exceeds its KV capacity of ", capacity_);
  TANDEM_CHECK(layer >= 0 && layer < shape_.n_layer, "layer ", layer);
  if (n == 0) return;
  // upload() moves contiguous bytes of one type: each head's n rows are one run of the cache,
  // gathered (and rounded, as attend()'s copy rounds) on the host first.
  const int64_t d = shape_.head_dim, hkv = shape_.n_head_kv;
  std::vector<float> run(static_cast<size_t>(n * d));
  std::vector<uint16_t> rounded(dtype_ == DType::kF32 ? 0 : run.size());
  for (const auto& [src, dst] : {std::pair{k, &k_}, std::pair{v, &v_}}) {
    const TensorView cache = rows(*dst, layer);
    for (int64_t h = 0; h < hkv; ++h) {
      for (int64_t i = 0; i < n; ++i) std::copy_n(src + (i * hkv + h) * d, d, run.data() + i * d);
      void* bytes = run.data();
      if (dtype_ != DType::kF32) {
        cpu::row_from_f32(run.data(), rounded.data(), dtype_, n * d);
        bytes = rounded.data();
      }
      // Head h's rows from length_ on: contiguous in the cache.
      backend.upload(TensorView(bytes, dtype_, {n, d}),
                     TensorView(cache.at(length_, h), dtype_, {n, d}, cache.memory));
    }
  }
}

void DenseKv::advance(int32_t n) {
  TANDEM_CHECK(length_ + n <= capacity_, "advance past capacity");
  length_ += n;
}

}  // namespace tandem
