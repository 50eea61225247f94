// HostAttention: runs batches of host attention work items (one per sequence and KV head) on its
// own oneTBB task_arena, asynchronously: submit() returns at once, wait() blocks until that batch
// is done. Several batches may be in flight (layer-ahead mode submits layer i + 1 while layer i
// is outstanding). A batch may wait for a start flag (its queries are still being written by a
// device) and signal its end through on_done (a flag the device waits for), so the thread that
// drives the device never has to block on it. Or it may run inside wait() (HostAttnStart::in_wait),
// where nothing is to be overlapped with it.
//
// Tasks are sized to the cores: each item is split into up to 4 parts per thread (none reading
// less than 256 KiB of K and V) whose partials are merged with merge_partial_row, so one long
// sequence still uses every core. The split depends only on the item and the thread count of
// this instance (not on the rest of the batch), and parts are merged in a fixed order, so an
// item's result is the same bits whatever it is batched with. Part p of consecutive items of one
// sequence (its KV heads) runs as one task, their blocks read in turn, in the host store's
// address order (HostAttnItem::seq), as long as that leaves 4 tasks per thread
// (TANDEM_HOST_GANG=N caps a gang at N items; 1 runs every item alone, for measurements).
#pragma once

#include <tbb/task_arena.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kernels/cpu/host_kernel.h"
#include "kernels/dtype.h"

namespace tandem {

// One unit of work: one query token of one sequence, the G query heads of one KV head, over that
// head's host blocks. All pointers (q, o, lse, the blocks array, the KV and idx it points to)
// must stay valid and unchanged until the batch is waited on.
struct HostAttnItem {
  const float* q = nullptr;  // f32 [G, head_dim]
  int32_t G = 1;             // query heads sharing the KV head
  float* o = nullptr;        // f32 [G, head_dim] out
  float* lse = nullptr;      // f32 [G] out, natural log; -inf when nothing is selected
  std::span<const HostBlockRef> blocks;
  // The sequence the item belongs to: consecutive items of one sequence (its KV heads, whose
  // blocks lie side by side in the host store) may run together, their blocks read in turn
  // (host_attend_groups). Any value; it never changes the result.
  int64_t seq = -1;
};

// When a batch may start: once *flag >= value (unsigned, read with acquire ordering), a host flag
// (kernels/backend.h) that a device raises after writing what the items read (their queries),
// and once the batch `after` (a ticket id of the same instance; 0: none) is done. A null flag
// and no `after`: at once. in_wait (no flag, no `after`): not on the workers at all, but inside
// wait(), by the waiting thread and its own arena's threads: for a caller whose other work runs
// on the same cores (the CPU backend, where the "device" part of a layer is host work too), so
// that the batch starts without a hand-over to another thread and every core reads for it.
// Such a batch is not ready() before wait() runs it; the bits are the same either way.
struct HostAttnStart {
  const uint32_t* flag = nullptr;
  uint32_t value = 0;
  uint64_t after = 0;
  bool in_wait = false;
};

// Host work of a batch that runs once it has started, on a worker, before its items are split:
// what the items read that exists only once the device delivered (the blocks a policy selects
// with the delivered queries), or host work of its own that must wait for the device (a batch
// of no items). It may set each item's blocks (the memory they point at must then stay valid
// until the batch is waited on). Runs inside the arena: it may use oneTBB parallel algorithms.
using HostAttnPrepare = std::function<void(std::span<HostAttnItem> items)>;

class HostAttention {
 public:
  // A submitted batch; valid until passed to wait().
  struct Ticket {
    uint64_t id = 0;
  };

  // threads: concurrency of the arena (0 or more than the cores = all cores): with threads >= 2,
  // threads - 1 workers plus the thread blocked in wait(), which helps; with 1, one worker.
  // kv_dtype: f32, f16 or bf16; head_dim a multiple of 8; scale multiplies q.k (usually 1 /
  // sqrt(head_dim)).
  HostAttention(int threads, int32_t head_dim, float scale, DType kv_dtype);
  // Waits for every batch still in flight (their errors are dropped).
  ~HostAttention();
  HostAttention(const HostAttention&) = delete;
  HostAttention& operator=(const HostAttention&) = delete;

  // Queues the items and returns at once. on_done, if set, runs on a worker once the whole
  // batch is done (successfully or not), e.g. to raise a completion flag the GPU polls; it must
  // be cheap and must not throw. When a task fails, every output of the batch (o and lse of each
  // item) is NaN before on_done runs, so a reader that does not wait (a device polling the flag)
  // gets NaN rather than stale numbers; wait() rethrows the error. Throws tandem::Error at once
  // on a malformed item. With a start flag not reached yet, the batch waits in a queue that a
  // dispatcher thread of this instance polls (no arena thread blocks on it) and starts once the
  // flag is reached; the item pointers must be valid from submit on, the contents they read only
  // once the flag is raised. With a prepare, the items' blocks are read (checked and split) only
  // after it ran; an exception it throws fails the batch as a task's would.
  Ticket submit(std::vector<HostAttnItem> items, std::function<void()> on_done = {},
                HostAttnStart start = {}, HostAttnPrepare prepare = {});
  // Blocks until the batch is done, helping to run the arena's tasks meanwhile, then forgets
  // the ticket. Rethrows the first exception raised by one of its tasks. A batch still waiting
  // for its start flag is waited for too (cancel() first where the flag may never come).
  void wait(Ticket t);
  // True when the batch is done (wait() would not block; never before wait() for an in_wait
  // batch). Does not consume the ticket.
  bool ready(Ticket t) const;
  // A batch still waiting for its start flag (or an in_wait one not waited for yet) is finished
  // without running: its outputs are NaN, on_done runs (on this thread). A started batch is not
  // affected. The ticket is still waited on (wait returns at once after a cancel that took
  // effect).
  void cancel(Ticket t);

  // Total thread-seconds spent in attention tasks since construction (for metrics).
  double busy_seconds() const;
  // Total seconds callers spent inside wait() since construction: the time the thread that runs
  // the device part was held by the host part (on a GPU, in the synchronous pipeline, the time
  // the GPU idles waiting for the CPU). Includes the tasks that thread ran while helping.
  double wait_seconds() const;
  int threads() const { return threads_; }
  int32_t head_dim() const { return head_dim_; }
  DType kv_dtype() const { return kv_dtype_; }

 private:
  struct Plan;   // a batch's tasks, gangs and part buffers (host_attention.cpp)
  struct Batch;  // a Plan and the batch's state (host_attention.cpp)
  std::shared_ptr<Batch> find(Ticket t) const;
  bool start_reached(const HostAttnStart& s) const;
  void split_batch(Batch& b) const;  // checks the items and cuts them into tasks
  void prepare_batch(Batch& b);      // runs the batch's prepare (if any), then splits it
  void run_batch(Batch& b);
  void run_in_wait(Batch& b);  // an in_wait batch, on the thread that waits for it
  void run_tasks(Batch& b);
  void run_gang(Batch& b, size_t t);
  void finish_batch(Batch& b);
  void start_batch(Batch& b);  // enqueues the batch's root task into the arena
  void dispatch_loop();        // the dispatcher thread: starts queued batches whose flag is up
  void recycle(Batch& b);      // keeps a waited batch's plan buffers for a later batch

  int threads_;
  int32_t head_dim_;
  float scale_;
  DType kv_dtype_;
  int gang_max_;  // items run together at most
  tbb::task_arena arena_;
  std::atomic<int64_t> busy_ns_{0};
  std::atomic<int64_t> wait_ns_{0};
  mutable std::mutex mu_;  // guards batches_ and next_id_
  std::map<uint64_t, std::shared_ptr<Batch>> batches_;
  uint64_t next_id_ = 1;
  // Batches waiting for their start flag, oldest first, and the thread that starts them.
  std::mutex pending_mu_;               // guards pending_, stop_ and every Batch::waiting_start
  std::condition_variable pending_cv_;  // a batch queued or started, or stop_
  std::deque<std::shared_ptr<Batch>> pending_;
  bool stop_ = false;
  std::thread dispatcher_;  // started with the first batch that has to wait
  // Plan buffers of waited batches, for the next ones to reuse (as many as may be in flight in
  // layer-ahead mode, and a few more).
  static constexpr size_t kMaxSpares = 4;
  std::mutex spare_mu_;  // guards spares_
  std::vector<std::unique_ptr<Plan>> spares_;
};

}  // namespace tandem
