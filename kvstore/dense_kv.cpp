// DenseKv: the plain contiguous KV cache, used by --dense and as the exactness reference.
#include <cstdint>
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
                    std::initializer_list<int64_t>{capacity, shape.n_head_kv, shape.head_dim});
    v_.emplace_back(backend, dtype,
                    std::initializer_list<int64_t>{capacity, shape.n_head_kv, shape.head_dim});
  }
}

void DenseKv::attend(Backend& backend, int32_t layer, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView& q_pos, const AttnPartial& out) {
  const int64_t n = q.dim(0);
  TANDEM_REQUIRE(length_ + n <= capacity_, kInvalidArgument, "sequence of ", length_ + n,
                 " tokens exceeds its KV capacity of ", capacity_);
  const TensorView kl = k_[static_cast<size_t>(layer)].view();
  const TensorView vl = v_[static_cast<size_t>(layer)].view();
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
  const std::initializer_list<int64_t> dims = {n, shape_.n_head_kv, shape_.head_dim};
  const TensorView kd = k_[static_cast<size_t>(layer)].view().slice(length_, length_ + n);
  const TensorView vd = v_[static_cast<size_t>(layer)].view().slice(length_, length_ + n);
  if (dtype_ == DType::kF32) {
    backend.upload(TensorView(const_cast<float*>(k), DType::kF32, dims), kd);
    backend.upload(TensorView(const_cast<float*>(v), DType::kF32, dims), vd);
    return;
  }
  // upload() moves bytes of one type: round on the host first, as attend()'s copy rounds.
  const int64_t count = int64_t{n} * shape_.n_head_kv * shape_.head_dim;
  std::vector<uint16_t> rounded(static_cast<size_t>(count));
  cpu::row_from_f32(k, rounded.data(), dtype_, count);
  backend.upload(TensorView(rounded.data(), dtype_, dims), kd);
  cpu::row_from_f32(v, rounded.data(), dtype_, count);
  backend.upload(TensorView(rounded.data(), dtype_, dims), vd);
}

void DenseKv::advance(int32_t n) {
  TANDEM_CHECK(length_ + n <= capacity_, "advance past capacity");
  length_ += n;
}

}  // namespace tandem
