// tbb::parallel_for, with the happens-before edges of its fork and join made visible to the
// thread sanitizer. Every parallel loop of Tandem goes through these two functions.
//
// Debian's oneTBB is not instrumented: spawning a task and waiting for it synchronise inside the
// library, so under TSan every read of a task body of data its caller wrote (and every read by
// the caller of what the tasks wrote) looks like a race. Suppressing those reports is not enough:
// each is recorded and symbolised before the suppression drops it, and a model step makes
// millions (a first token took minutes). Under TSan these wrappers release a sync object before
// the loop, acquire it at the start of each task, release a second one at the end of each task
// and acquire it after the loop: exactly the edges the library provides, so no report is made
// and a real race (between two tasks, or with a thread outside the loop) is still reported.
// Without TSan they are tbb::parallel_for.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <memory>
#include <utility>

#if defined(__SANITIZE_THREAD__)
#define TANDEM_TSAN_EDGES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_TSAN_EDGES 1
#endif
#endif

#ifdef TANDEM_TSAN_EDGES
#include <sanitizer/tsan_interface.h>
#endif

namespace tandem {

namespace parallel_detail {
#ifdef TANDEM_TSAN_EDGES
// The two sync objects of one loop, on the heap: TSan forgets a sync object when its memory is
// freed, so a later loop never inherits this one's clocks (a stack slot would be reused).
struct Edges {
  std::unique_ptr<char[]> mem = std::make_unique<char[]>(2);
  void* fork() const { return mem.get(); }
  void* join() const { return mem.get() + 1; }
};
#endif

// loop(body) runs tbb::parallel_for with `body` calling f; under TSan with the fork/join edges.
template <class F, class Loop>
void with_edges(const F& f, const Loop& loop) {
#ifdef TANDEM_TSAN_EDGES
  const Edges e;
  __tsan_release(e.fork());
  loop([&](const auto& x) {
    __tsan_acquire(e.fork());
    f(x);
    __tsan_release(e.join());
  });
  __tsan_acquire(e.join());
#else
  loop(f);
#endif
}
}  // namespace parallel_detail

// f(i) for i in [first, last); extra arguments (a partitioner) go to tbb::parallel_for.
template <class Index, class F, class... Partitioner>
void parallel_for(Index first, Index last, const F& f, Partitioner&&... partitioner) {
  parallel_detail::with_edges(f, [&](const auto& body) {
    tbb::parallel_for(first, last, body, std::forward<Partitioner>(partitioner)...);
  });
}

// f(subrange) over the pieces of a tbb range (blocked_range with its grain).
template <class Range, class F, class... Partitioner>
void parallel_for_range(const Range& range, const F& f, Partitioner&&... partitioner) {
  parallel_detail::with_edges(f, [&](const auto& body) {
    tbb::parallel_for(range, body, std::forward<Partitioner>(partitioner)...);
  });
}

}  // namespace tandem
