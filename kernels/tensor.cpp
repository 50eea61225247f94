// TensorView helpers.
#include "kernels/tensor.h"

#include <sstream>

namespace tandem {

TensorView::TensorView(void* p, DType t, std::initializer_list<int64_t> dims, MemoryKind mem)
    : data(p), dtype(t), memory(mem) {
  TANDEM_CHECK(dims.size() >= 1 && dims.size() <= kMaxDims, "rank ", dims.size());
  ndim = static_cast<int32_t>(dims.size());
  int i = 0;
  for (int64_t d : dims) shape[static_cast<size_t>(i++)] = d;
  int64_t s = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    stride[static_cast<size_t>(k)] = s;
    s *= shape[static_cast<size_t>(k)];
  }
}

int64_t TensorView::numel() const {
  if (ndim == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[static_cast<size_t>(i)];
  return n;
}

bool TensorView::contiguous() const {
  int64_t s = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    if (shape[static_cast<size_t>(k)] != 1 && stride[static_cast<size_t>(k)] != s) return false;
    s *= shape[static_cast<size_t>(k)];
  }
  return true;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (int i = 0; i < ndim; ++i) os << (i ? "," : "") << shape[static_cast<size_t>(i)];
  os << "]";
  return os.str();
}

void* TensorView::at(int64_t i0) const {
  return static_cast<char*>(data) + i0 * stride[0] * dtype_size(dtype);
}

void* TensorView::at(int64_t i0, int64_t i1) const {
  return static_cast<char*>(data) + (i0 * stride[0] + i1 * stride[1]) * dtype_size(dtype);
}

TensorView TensorView::slice(int64_t begin, int64_t end) const {
  TANDEM_CHECK(ndim >= 1 && begin >= 0 && begin <= end && end <= shape[0], "slice [", begin, ",",
               end, ") of ", describe());
  TensorView v = *this;
  v.data = at(begin);
  v.shape[0] = end - begin;
  return v;
}

TensorView TensorView::reshape(std::initializer_list<int64_t> dims) const {
  TANDEM_CHECK(contiguous(), "reshape of a strided view ", describe());
  TensorView v(data, dtype, dims, memory);
  TANDEM_CHECK(v.numel() == numel(), "reshape ", describe(), " to ", v.describe());
  return v;
}

}  // namespace tandem
