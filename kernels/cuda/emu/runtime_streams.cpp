// The emulator's streams and events. A stream is an in-order queue of tasks (kernels, copies,
// event records and waits) run by a worker thread of its own, so a launch or an asynchronous copy
// returns before it runs, the host really overlaps the device and two streams really run at once.
// Under TANDEM_EMU_DEFER a stream runs only what the host (or another stream through an event)
// waits for. A kernel fault in a task makes the context's error sticky; later tasks are dropped.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/cuda/emu/runtime_internal.h"

namespace tandem_emu {

using Clock = std::chrono::steady_clock;

// ---- streams -----------------------------------------------------------------------------------

struct Stream {
  int id = 0;
  std::mutex m;
  std::condition_variable cv_task, cv_done;
  std::deque<Task> q;
  uint64_t enq = 0, done = 0;
  uint64_t released = settings().defer ? 0 : UINT64_MAX;  // tasks up to this one may run
  bool stop = false;
  std::thread worker;
};

namespace {

struct StreamTable {
  std::mutex m;
  std::vector<Stream*> all;
  int next = 1;
};
StreamTable& streams() {
  static StreamTable* t = new StreamTable;
  return *t;
}

void worker_loop(Stream* s) {
  alt_signal_stack();
  std::unique_ptr<ArenaAccess> open;
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> l(s->m);
      s->cv_task.wait(
          l, [&] { return (s->stop && s->q.empty()) || (!s->q.empty() && s->done < s->released); });
      if (s->q.empty()) return;
      t = std::move(s->q.front());
      s->q.pop_front();
    }
    if (!open) open = std::make_unique<ArenaAccess>();
    if (sticky_error() == cudaSuccess) {
      try {
        t();
      } catch (const KernelFault& f) {
        set_sticky_error(f.code);
        report(f.what + " [" + cudaGetErrorString(f.code) + "; the context is now unusable]");
      } catch (const std::exception& e) {
        set_sticky_error(cudaErrorUnknown);
        report(std::string("task failed: ") + e.what());
      }
    }
    std::lock_guard<std::mutex> l(s->m);
    if (s->q.empty()) open.reset();  // closed before anyone sees the work done
    ++s->done;
    s->cv_done.notify_all();
  }
}

Stream* new_stream() {
  reserve_memory();
  install_fault_handler();
  auto* s = new Stream;
  {
    std::lock_guard<std::mutex> l(streams().m);
    s->id = streams().next++;
    streams().all.push_back(s);
  }
  s->worker = std::thread(worker_loop, s);
  return s;
}

Stream* default_stream() {
  static Stream* s = [] {
    Stream* d = new_stream();
    d->worker.detach();  // lives as long as the process
    return d;
  }();
  return s;
}

std::vector<Stream*> all_streams() {
  default_stream();
  std::lock_guard<std::mutex> l(streams().m);
  return streams().all;
}

// Waits for everything queued on s so far; its pinned copies become readable.
void drain(Stream* s) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(s->m);
    seq = s->enq;
  }
  wait_done(s, seq);
  release_pending(s, seq);
}

}  // namespace

uint64_t enqueue_seq(Stream* s, Task t) {
  std::lock_guard<std::mutex> l(s->m);
  s->q.push_back(std::move(t));
  s->cv_task.notify_one();
  return ++s->enq;
}

// Waiting for a stream lets it run (under TANDEM_EMU_DEFER, nothing else does).
void wait_done(Stream* s, uint64_t seq) {
  std::unique_lock<std::mutex> l(s->m);
  if (s->released < seq) {
    s->released = seq;
    s->cv_task.notify_one();
  }
  s->cv_done.wait(l, [&] { return s->done >= seq; });
}

bool stream_done(Stream* s, uint64_t seq) {
  std::lock_guard<std::mutex> l(s->m);
  return s->done >= seq;
}

// A host wait on the device, counted with its time.
void host_wait(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  counters().host_syncs.fetch_add(1);
  counters().host_sync_ns.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

cudaError_t sync_all() {
  host_wait([] {
    for (Stream* s : all_streams()) drain(s);
  });
  return sticky_error();
}

Stream* resolve(cudaStream_t s) { return s != nullptr ? s : default_stream(); }
void enqueue(Stream* s, Task t) { enqueue_seq(s, std::move(t)); }

cudaError_t sync_stream(Stream* s) {
  host_wait([s] { drain(s); });
  return sticky_error();
}

// ---- events ------------------------------------------------------------------------------------

struct Event {
  Stream* stream = nullptr;  // of the last record
  uint64_t seq = 0;
  std::shared_ptr<Clock::time_point> when = std::make_shared<Clock::time_point>();
};

}  // namespace tandem_emu

using namespace tandem_emu;

// ---- the runtime API ---------------------------------------------------------------------------

cudaError_t cudaDeviceSynchronize() { return ret(sync_all()); }

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new_stream();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> l(s->m);
    s->stop = true;
    s->released = UINT64_MAX;
    s->cv_task.notify_one();
  }
  s->worker.join();  // runs what was queued first, as CUDA does
  {
    std::lock_guard<std::mutex> l(streams().m);
    streams().all.erase(std::remove(streams().all.begin(), streams().all.end(), s),
                        streams().all.end());
  }
  release_pending(s, UINT64_MAX);
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) { return ret(sync_stream(resolve(s))); }

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Stream* s = resolve(stream);
  std::lock_guard<std::mutex> l(s->m);
  if (s->released < s->enq) {  // a host that polls is waiting: the stream may run
    s->released = s->enq;
    s->cv_task.notify_one();
  }
  if (s->done < s->enq) return cudaErrorNotReady;
  return sticky_error();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned) {
  if (e == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (e->stream == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
  Stream* on = e->stream;
  const uint64_t seq = e->seq;
  enqueue(resolve(stream), [on, seq] { wait_done(on, seq); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new Event;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  if (e == nullptr) return ret(cudaErrorInvalidResourceHandle);
  Stream* s = resolve(stream);
  auto when = std::make_shared<Clock::time_point>();
  e->when = when;
  e->stream = s;
  e->seq = enqueue_seq(s, [when] { *when = Clock::now(); });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (e == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (e->stream == nullptr) return cudaSuccess;
  host_wait([e] { wait_done(e->stream, e->seq); });
  release_pending(e->stream, e->seq);
  return ret(sticky_error());
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (e == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (e->stream == nullptr) return cudaSuccess;
  bool done;
  {
    Stream* s = e->stream;
    std::lock_guard<std::mutex> l(s->m);
    done = s->done >= e->seq;
    if (s->released < e->seq) {
      s->released = e->seq;
      s->cv_task.notify_one();
    }
  }
  if (!done) return cudaErrorNotReady;
  release_pending(e->stream, e->seq);
  return sticky_error();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr || start->stream == nullptr || end->stream == nullptr)
    return ret(cudaErrorInvalidResourceHandle);
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess)
    return ret(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(*end->when - *start->when).count();
  return cudaSuccess;
}
