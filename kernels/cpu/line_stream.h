// LineStream: the software prefetches of a host attention pass (kernels/cpu/host_kernel.cpp and
// its AVX-512 passes) as a stream of cache lines: rows[0, n) of `bytes` each, in address order,
// into L2 or L1 as this CPU's rule says (cpu::host_prefetch_rule), spread evenly over the pass's
// loop by an integer accumulator (tick() once per iteration; no division in the loop). With `every`
// > 1 only the first line of every `every` in each row is prefetched: for long ranges that the pass
// will read in address order, where the hardware prefetchers fetch the lines between (on the CPUs
// where they do: cpu::host_prefetch_rule, kernels/cpu/isa.h). Loops copy the stream into a local
// and back, so that its state stays in registers (through a reference GCC kept it in memory: the
// AVX2 cols pass 18% slower in L2).
//
// Plain inline code (no target attribute): the AVX2 and AVX-512 translation units share one
// definition.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace tandem::cpu {

class LineStream {
 public:
  LineStream(const void* const* rows, int32_t n, int32_t bytes, int32_t every = 1)
      : rows_(rows),
        left_(n),
        bytes_(bytes),
        step_(uintptr_t{64} * static_cast<uintptr_t>(every)),
        l1_(host_prefetch_rule().to_l1) {}
  // Prefetches the rows take: per row, its cache lines divided by `every`, rounded up.
  int64_t lines() const {
    const int64_t every = static_cast<int64_t>(step_ >> 6);
    int64_t n = 0;
    for (int32_t i = 0; i < left_; ++i) {
      const uintptr_t a = reinterpret_cast<uintptr_t>(rows_[i]);
      const auto spanned =
          static_cast<int64_t>(((a + static_cast<uintptr_t>(bytes_) + 63) >> 6) - (a >> 6));
      n += (spanned + every - 1) / every;
    }
    return n;
  }
  // Spreads lines() over `iterations` calls of tick() or tick_many(): one line every
  // iterations / lines() calls; tick_many() issues several per call where the lines outnumber
  // the calls, tick() at most one (a branch, not a loop, in the loops where it suffices).
  // What is left at the end, rest() issues.
  void pace(int64_t iterations) {
    num_ = static_cast<int32_t>(lines());
    den_ = static_cast<int32_t>(std::max<int64_t>(1, iterations));
    per_ = num_ / den_;
    rem_ = num_ % den_;
  }
  void tick() {
    acc_ += num_;
    if (acc_ >= den_) {
      acc_ -= den_;
      step();
    }
  }
  // The same lines as tick() repeated while the accumulator allows, counted with the quotient
  // and remainder pace() took, and issued a row's run at a time (in cache: the f32 passes 3%, the
  // bf16 ones 7% faster than one step() per line).
  void tick_many() {
    int32_t k = per_;
    acc_ += rem_;
    if (acc_ >= den_) {
      acc_ -= den_;
      ++k;
    }
    while (k > 0) {
      if (cur_ >= end_ && !next_row()) return;
      k = l1_ ? run<true>(k) : run<false>(k);  // the hint chosen once per run, not per line
    }
  }
  void rest() {
    while (cur_ < end_ || left_ > 0) step();
  }
  // The next line to prefetch (0 when none is left), advancing past it: what step() issues.
  uintptr_t next_line() {
    if (cur_ >= end_ && !next_row()) return 0;
    const uintptr_t line = cur_;
    cur_ += step_;
    return line;
  }

 private:
  // Moves to the next row's first line; false when no row is left.
  bool next_row() {
    if (left_ == 0) return false;
    const uintptr_t a = reinterpret_cast<uintptr_t>(*rows_++);
    --left_;
    cur_ = a & ~uintptr_t{63};
    end_ = a + static_cast<uintptr_t>(bytes_);
    return true;
  }
  template <bool kL1>
  static void prefetch(uintptr_t line) {
    if constexpr (kL1)
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
    else
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T2);
  }
  // Up to k lines of the current row (at least one is left in it); returns how many of k remain.
  template <bool kL1>
  int32_t run(int32_t k) {
    do {
      prefetch<kL1>(cur_);
      cur_ += step_;
    } while (--k > 0 && cur_ < end_);
    return k;
  }
  void step() {
    if (const uintptr_t line = next_line(); line != 0)
      l1_ ? prefetch<true>(line) : prefetch<false>(line);
  }

  const void* const* rows_;
  int32_t left_, bytes_;
  uintptr_t step_;  // bytes from one prefetched line to the next in a row
  uintptr_t cur_ = 0, end_ = 0;
  bool l1_;  // PREFETCHT0 rather than PREFETCHT2
  int32_t num_ = 0, den_ = 1, acc_ = 0;
  int32_t per_ = 0, rem_ = 0;  // num_ / den_ and num_ % den_
};

}  // namespace tandem::cpu
