// TensorView: a non-owning view (pointer, dtype, shape, row-major strides, memory kind) that
// every backend call takes. The owning allocation with a view is Buffer (kernels/buffer.h).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/common.h"
#include "kernels/dtype.h"

namespace tandem {

// Where the bytes live. On a CPU-only machine Device memory is ordinary memory.
enum class MemoryKind : uint8_t { kHost, kPinned, kDevice };

struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::kF32;
  MemoryKind memory = MemoryKind::kHost;
  int32_t ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements

  TensorView() = default;
  TensorView(void* p, DType t, std::initializer_list<int64_t> dims,
             MemoryKind mem = MemoryKind::kHost);

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i < 0 ? ndim + i : i)]; }
  int64_t numel() const;
  int64_t nbytes() const { return numel() * dtype_size(dtype); }
  bool contiguous() const;
  std::string describe() const;  // "f32[4,128]" for error messages

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // Byte pointer of element (i0, i1, ...) along the leading dims.
  void* at(int64_t i0) const;
  void* at(int64_t i0, int64_t i1) const;

  // Rows [begin, end) of the leading dimension.
  TensorView slice(int64_t begin, int64_t end) const;
  // Same bytes, new contiguous shape (the view must be contiguous, numel must agree).
  TensorView reshape(std::initializer_list<int64_t> dims) const;
};

}  // namespace tandem
