// HostAttention: batch planning (split items into parts sized to the cores, largest tasks first),
// execution on the arena (a root task per batch, enqueued through the batch's task_group, spawns
// runners that pull tasks from an atomic counter), merging of split parts, completion and error
// propagation.
//
// Synchronisation is written with std::atomic and std::mutex of this file (not left to oneTBB's
// internals) so it is explicit: submit publishes the batch with a release store that every
// runner acquires; the parts of a split item count down an acq_rel counter and the last one
// merges; every task counts down the batch's acq_rel counter and the last one runs on_done and
// sets `done` under the batch mutex, which wait() reads after the task_group wait. A batch with a
// start flag not yet raised sits in pending_ until the dispatcher thread sees the flag (polling
// with backoff: the flag is raised by a device, which cannot wake a thread) and enqueues it.
#include "cpu_attn/host_attention.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <tbb/info.h>
#include <tbb/partitioner.h>
#include <tbb/task_group.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <utility>

#include "kernels/attn_partial.h"
#include "kernels/common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"

namespace tandem {
namespace {

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> log = [] {
    auto l = spdlog::get("cpu_attn");
    return l ? l : spdlog::stderr_color_mt("cpu_attn");
  }();
  return log;
}

constexpr int64_t kTasksPerThread = 4;        // aim for this many tasks per worker
constexpr int64_t kMinPartBytes = 256 << 10;  // never split into parts reading less K+V than this
constexpr int kMaxGang = 16;  // items run together (HostAttention::Batch::Gang), at most

int gang_limit() {
  const char* e = std::getenv("TANDEM_HOST_GANG");
  return e != nullptr ? std::clamp(std::atoi(e), 1, kMaxGang) : kMaxGang;
}

}  // namespace

// A batch's plan: its items cut into tasks and gangs, and the parts' partials. A waited batch's
// plan is kept, emptied with its capacity (recycle), for the next batch to plan into: a steady
// stream of batches (a decode step's layers) then allocates none of it. Growing it anew every
// batch cost on the project's VMs, where a page fault is dear: at batch 8 and 32K context (64
// items in 8 parts, 2.3 MB of part blocks) the heap's top was trimmed and faulted back in on every
// call, ~1,000 faults that made a 50 ms call 25-35% slower whenever the allocator's state had it
// trim (docs/host-attention.md, 2026-12-07).
struct HostAttention::Plan {
  struct Task {
    int32_t item;
    int32_t part;    // index of the part, 0 when the item is not split
    int32_t b0, b1;  // blocks [b0, b1) of parts_blocks; b0 < 0: the item's own blocks
    int64_t rows;    // selected rows, to start the largest tasks first
  };
  struct Split {
    int32_t n_parts = 1;
    int64_t scratch = 0;  // first part's offset in part_lse (rows of G floats: part_o * d)
  };
  // What runners pull: runs of tasks taken together (host_attend_groups), largest first.
  struct Gang {
    int32_t u0, n;  // gang_units[u0, u0 + n)
    int64_t rows;
  };

  std::vector<Split> splits;               // per item
  std::vector<HostBlockRef> parts_blocks;  // blocks of the parts of split items
  std::vector<Task> tasks;  // one per item part, in item order (parts of an item consecutive)
  std::vector<Gang> gangs;
  std::vector<int32_t> gang_units;  // task indices
  std::vector<float> part_o;        // [sum over split items of n_parts * G, d]
  std::vector<float> part_lse;      // [sum over split items of n_parts * G]

  // Empties every buffer, keeping its capacity.
  void clear() {
    splits.clear();
    parts_blocks.clear();
    tasks.clear();
    gangs.clear();
    gang_units.clear();
    part_o.clear();
    part_lse.clear();
  }
};

struct HostAttention::Batch : HostAttention::Plan {
  std::vector<HostAttnItem> items;
  std::unique_ptr<std::atomic<int32_t>[]> parts_left;  // per item
  std::function<void()> on_done;
  HostAttnStart start;
  HostAttnPrepare prepare;     // run before the split (which then happens on the worker)
  bool in_wait = false;        // runs inside wait() (HostAttnStart::in_wait), not run yet
  bool waiting_start = false;  // in pending_ (guarded by HostAttention::pending_mu_)

  std::atomic<bool> published{false};
  std::atomic<size_t> next_task{0};   // the next task a runner takes
  std::atomic<size_t> tasks_left{0};  // tasks not finished; the one that ends at 0 completes

  tbb::task_group tg;     // the batch's runners; wait() helps run the arena's tasks through it
  mutable std::mutex mu;  // guards done and error
  bool done = false;
  std::exception_ptr error;

  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = std::move(e);
  }
};

namespace {

// Every output of the batch NaN (a failed or cancelled batch).
void poison_outputs(std::span<const HostAttnItem> items, int32_t head_dim) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  for (const HostAttnItem& it : items) {
    std::fill_n(it.o, int64_t{it.G} * head_dim, kNaN);
    std::fill_n(it.lse, it.G, kNaN);
  }
}

// Rows [r0, r1) of the selected-row sequence of `blocks`, as block refs appended to out (given
// scores, G per selected row, follow their rows).
void slice_rows(std::span<const HostBlockRef> blocks, int64_t r0, int64_t r1, int64_t row_bytes,
                int64_t elem_bytes, int32_t G, std::vector<HostBlockRef>* out) {
  int64_t pos = 0;
  for (const HostBlockRef& b : blocks) {
    const int64_t n = b.rows();
    const int64_t a = std::max<int64_t>(r0 - pos, 0), e = std::min<int64_t>(r1 - pos, n);
    pos += n;
    if (a >= e) {
      if (pos >= r1) break;
      continue;
    }
    HostBlockRef s = b;
    if (b.s != nullptr) s.s = b.s + a * G;
    if (b.idx != nullptr) {
      s.idx = b.idx + a;
      s.n_idx = static_cast<int32_t>(e - a);
    } else {
      // Rows a.. of a block: a rows further (a row stride apart), or a elements into each
      // channel of a column-stored K, a tile rows into each tile of a V by tiles.
      const int64_t k_row = b.stride != 0 ? b.stride * elem_bytes : row_bytes;
      const int64_t v_row = b.v_tile != 0 ? kVTile * elem_bytes : k_row;
      if (b.k != nullptr)
        s.k = static_cast<const char*>(b.k) + a * (b.k_ld != 0 ? elem_bytes : k_row);
      s.v = static_cast<const char*>(b.v) + a * v_row;
      s.n = static_cast<int32_t>(e - a);
    }
    out->push_back(s);
    if (pos >= r1) break;
  }
}

}  // namespace

HostAttention::HostAttention(int threads, int32_t head_dim, float scale, DType kv_dtype)
    // More workers than cores would only time-slice (and oneTBB caps workers at cores - 1).
    : threads_(threads > 0 ? std::min(threads, tbb::info::default_concurrency())
                           : tbb::info::default_concurrency()),
      head_dim_(head_dim),
      scale_(scale),
      kv_dtype_(kv_dtype),
      gang_max_(gang_limit()),
      // oneTBB runs at most (cores - 1) workers per process, so with threads >= 2 one slot is kept
      // for the thread that calls wait(), which joins and helps; with 1 thread the one slot is a
      // worker's, so the work runs while the caller does something else.
      arena_(threads_, threads_ > 1 ? 1 : 0) {
  TANDEM_CHECK(head_dim >= 8 && head_dim % 8 == 0, "host attention head_dim ", head_dim);
  TANDEM_CHECK(kv_dtype == DType::kF32 || kv_dtype == DType::kF16 || kv_dtype == DType::kBF16,
               "host attention KV dtype ", dtype_name(kv_dtype));
  logger()->debug(
      "host attention: {} threads, head_dim {}, KV {}, CPU kernels {} on {}, prefetch {}", threads_,
      head_dim_, dtype_name(kv_dtype_), cpu::isa_name(cpu::active_isa()), cpu::describe_cpu_id(),
      cpu::describe_host_prefetch_rule());
}

HostAttention::~HostAttention() {
  std::deque<std::shared_ptr<Batch>> never_started;
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    never_started.swap(pending_);
    for (auto& b : never_started) b->waiting_start = false;
    stop_ = true;
  }
  pending_cv_.notify_all();
  if (dispatcher_.joinable()) dispatcher_.join();
  for (auto& b : never_started) {  // their flags may never come: finished as cancelled
    poison_outputs(b->items, head_dim_);
    finish_batch(*b);
  }
  std::map<uint64_t, std::shared_ptr<Batch>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    left.swap(batches_);
  }
  for (auto& entry : left) {
    Batch& b = *entry.second;  // a named reference: clang 14 cannot capture structured bindings
    try {
      arena_.execute([&] { b.tg.wait(); });
    } catch (...) {  // a destructor must not throw; the batch's error has nowhere to go
    }
  }
}

HostAttention::Ticket HostAttention::submit(std::vector<HostAttnItem> items,
                                            std::function<void()> on_done, HostAttnStart start,
                                            HostAttnPrepare prepare) {
  auto b = std::make_shared<Batch>();
  {
    std::lock_guard<std::mutex> lock(spare_mu_);
    if (!spares_.empty()) {
      std::swap(static_cast<Plan&>(*b), *spares_.back());
      spares_.pop_back();
    }
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const HostAttnItem& it = items[i];
    TANDEM_CHECK(it.q != nullptr && it.o != nullptr && it.lse != nullptr && it.G >= 1,
                 "host attention item ", i, ": null q/o/lse or G=", it.G);
  }
  TANDEM_CHECK(!start.in_wait || (start.flag == nullptr && start.after == 0),
               "host attention: a batch run in wait() cannot wait for a flag or a batch");
  b->items = std::move(items);
  b->on_done = std::move(on_done);
  b->start = start;
  b->in_wait = start.in_wait;
  b->prepare = std::move(prepare);
  // Without a prepare the blocks are known now: a malformed one throws here, at once.
  if (!b->prepare) split_batch(*b);
  b->published.store(true, std::memory_order_release);

  Ticket t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    t.id = next_id_++;
    batches_.emplace(t.id, b);
  }
  if (start.in_wait) return t;
  if (start_reached(start)) {
    start_batch(*b);
    return t;
  }
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    b->waiting_start = true;
    pending_.push_back(b);
    if (!dispatcher_.joinable()) dispatcher_ = std::thread([this] { dispatch_loop(); });
  }
  pending_cv_.notify_all();
  return t;
}

void HostAttention::split_batch(Batch& b) const {
  const std::vector<HostAttnItem>& items = b.items;
  const int64_t row_bytes = head_dim_ * dtype_size(kv_dtype_);
  // Selected rows per item.
  std::vector<int64_t> rows(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    for (const HostBlockRef& blk : items[i].blocks) {
      TANDEM_CHECK(blk.n >= 0 && blk.n_idx >= 0, "host attention item ", i, ": block n=", blk.n,
                   " n_idx=", blk.n_idx);
      rows[i] += blk.rows();
    }
  // Each item alone is cut into up to kTasksPerThread parts per worker (none smaller than
  // kMinPartBytes): a long item uses every core even when it is the only one, and how an item
  // is split depends on the item and the thread count only, never on the rest of the batch, so
  // a sequence's partial is the same bits whatever it is batched with.
  const int64_t target_tasks = kTasksPerThread * threads_;
  const int64_t min_rows = std::max<int64_t>(1, kMinPartBytes / (2 * row_bytes));

  b.splits.assign(items.size(), Batch::Split{});
  b.parts_left = std::make_unique<std::atomic<int32_t>[]>(items.size());
  int64_t scratch = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const HostAttnItem& it = items[i];
    const int64_t part_rows = std::max(min_rows, (rows[i] + target_tasks - 1) / target_tasks);
    // Parts of about part_rows each (rounded, so an item slightly above part_rows stays whole).
    const int64_t n_parts = std::max<int64_t>(1, (rows[i] + part_rows / 2) / part_rows);
    Batch::Split& sp = b.splits[i];
    sp.n_parts = static_cast<int32_t>(n_parts);
    b.parts_left[i].store(sp.n_parts, std::memory_order_relaxed);
    if (n_parts == 1) {
      b.tasks.push_back({static_cast<int32_t>(i), 0, -1, -1, rows[i]});
      continue;
    }
    sp.scratch = scratch;
    scratch += n_parts * it.G;
    const int64_t per = (rows[i] + n_parts - 1) / n_parts;
    for (int64_t p = 0; p < n_parts; ++p) {
      const int32_t b0 = static_cast<int32_t>(b.parts_blocks.size());
      const int64_t r0 = p * per, r1 = std::min(rows[i], (p + 1) * per);
      slice_rows(it.blocks, r0, r1, row_bytes, dtype_size(kv_dtype_), it.G, &b.parts_blocks);
      b.tasks.push_back({static_cast<int32_t>(i), static_cast<int32_t>(p), b0,
                         static_cast<int32_t>(b.parts_blocks.size()), r1 - r0});
    }
  }
  // Gangs: part p of consecutive items of the same sequence with the same number of parts and
  // the same G (the KV heads of one sequence, whose blocks lie side by side in the host store),
  // run together so that K and V are read in address order (host_attend_groups). Which items
  // share a gang changes only the order of the reads, never an item's bits.
  std::vector<int32_t> first_task(items.size() + 1, 0);
  for (size_t i = 0; i < items.size(); ++i) first_task[i + 1] = first_task[i] + b.splits[i].n_parts;
  // A gang's size leaves kTasksPerThread gangs per worker where there are that many parts.
  const int64_t gang = std::clamp<int64_t>(first_task.back() / target_tasks, 1, gang_max_);
  for (size_t i = 0; i < items.size();) {
    size_t e = i + 1;
    while (e < items.size() && static_cast<int64_t>(e - i) < gang &&
           b.splits[e].n_parts == b.splits[i].n_parts && items[e].G == items[i].G &&
           items[e].seq == items[i].seq)
      ++e;
    for (int32_t p = 0; p < b.splits[i].n_parts; ++p) {
      Batch::Gang g{static_cast<int32_t>(b.gang_units.size()), static_cast<int32_t>(e - i), 0};
      for (size_t k = i; k < e; ++k) {
        const int32_t u = first_task[k] + p;
        b.gang_units.push_back(u);
        g.rows += b.tasks[static_cast<size_t>(u)].rows;
      }
      b.gangs.push_back(g);
    }
    i = e;
  }
  // Largest first, so the tail of the batch is made of small tasks (stable: reproducible order).
  std::stable_sort(b.gangs.begin(), b.gangs.end(),
                   [](const Batch::Gang& x, const Batch::Gang& y) { return x.rows > y.rows; });
  b.tasks_left.store(b.gangs.size(), std::memory_order_relaxed);
  b.part_lse.resize(static_cast<size_t>(scratch));
  b.part_o.resize(static_cast<size_t>(scratch * head_dim_));
}

bool HostAttention::start_reached(const HostAttnStart& s) const {
  if (s.flag != nullptr && __atomic_load_n(s.flag, __ATOMIC_ACQUIRE) < s.value) return false;
  if (s.after == 0) return true;
  std::shared_ptr<Batch> before;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = batches_.find(s.after);
    if (it == batches_.end()) return true;  // waited on already
    before = it->second;
  }
  std::lock_guard<std::mutex> lock(before->mu);
  return before->done;
}

// The root task holds a raw pointer: batches_ keeps the batch alive until wait() has seen the
// task_group finish.
void HostAttention::start_batch(Batch& b) {
  Batch* raw = &b;
  arena_.enqueue(raw->tg.defer([this, raw] { run_batch(*raw); }));
}

void HostAttention::dispatch_loop() {
  std::unique_lock<std::mutex> lock(pending_mu_);
  int idle = 0;
  while (!stop_) {
    if (pending_.empty()) {
      pending_cv_.wait(lock);
      idle = 0;
      continue;
    }
    bool started = false;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (start_reached((*it)->start)) {
        (*it)->waiting_start = false;
        start_batch(**it);
        it = pending_.erase(it);
        started = true;
      } else {
        ++it;
      }
    }
    if (started) {
      pending_cv_.notify_all();  // wait() may be waiting for the start
      idle = 0;
      continue;
    }
    // Nothing to start: the flags come from a device, which cannot wake this thread. Yield a
    // few times (the next flag is usually a kernel or two away), then sleep in steps growing
    // from 5 to 50 us: a short delay next to a layer of device work, and little CPU time taken
    // from the workers while the device is far behind.
    lock.unlock();
    if (idle < 32)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(50, 5 * (idle - 31))));
    idle = std::min(idle + 1, 64);
    lock.lock();
  }
}

void HostAttention::prepare_batch(Batch& b) {
  if (!b.prepare) return;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    b.prepare(b.items);
    split_batch(b);
  } catch (...) {
    b.fail(std::current_exception());
    b.tasks.clear();
    b.gangs.clear();
  }
  busy_ns_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count(),
      std::memory_order_relaxed);
}

void HostAttention::run_batch(Batch& b) {
  b.published.load(std::memory_order_acquire);
  prepare_batch(b);
  const size_t n = b.gangs.size();
  if (n == 0) return finish_batch(b);
  // Runners pull tasks from a shared counter; one per worker that can help, this one included.
  // They join the batch's task_group, so wait() returns once the last one has finished.
  const size_t runners = std::min(n, static_cast<size_t>(threads_));
  try {
    for (size_t r = 1; r < runners; ++r) b.tg.run([this, &b] { run_tasks(b); });
  } catch (...) {  // could not spawn (out of memory): this runner does the rest
  }
  run_tasks(b);
}

void HostAttention::run_in_wait(Batch& b) {
  b.published.load(std::memory_order_acquire);
  prepare_batch(b);
  const size_t n = b.gangs.size();
  if (n == 0) return finish_batch(b);
  // Runners pulling gangs from the shared counter (largest first), as in run_batch, but as a loop
  // of the caller's arena: its threads are the ones the layer's other work has just run on. With
  // fewer threads asked for than that arena has (--cpu-threads), inside this instance's arena.
  const auto loop = [this, &b, n] {
    const size_t runners =
        std::min(n, static_cast<size_t>(tbb::this_task_arena::max_concurrency()));
    tandem::parallel_for(
        size_t{0}, runners, [this, &b](size_t) { run_tasks(b); }, tbb::simple_partitioner());
  };
  if (threads_ == 1)
    run_tasks(b);
  else if (threads_ >= tbb::this_task_arena::max_concurrency())
    loop();
  else
    arena_.execute(loop);
}

void HostAttention::run_tasks(Batch& b) {
  b.published.load(std::memory_order_acquire);
  const size_t n = b.gangs.size();
  for (size_t t = b.next_task.fetch_add(1, std::memory_order_relaxed); t < n;
       t = b.next_task.fetch_add(1, std::memory_order_relaxed))
    run_gang(b, t);
}

void HostAttention::finish_batch(Batch& b) {
  bool failed = false;
  {
    std::lock_guard<std::mutex> lock(b.mu);
    failed = b.error != nullptr;
  }
  if (failed) poison_outputs(b.items, head_dim_);
  if (b.on_done) {
    try {
      b.on_done();
    } catch (...) {
      b.fail(std::current_exception());
    }
  }
  std::lock_guard<std::mutex> lock(b.mu);
  b.done = true;
}

void HostAttention::run_gang(Batch& b, size_t t) {
  b.published.load(std::memory_order_acquire);
  const auto t0 = std::chrono::steady_clock::now();
  const Batch::Gang& gang = b.gangs[t];
  HostGroupCall calls[kMaxGang];
  for (int32_t k = 0; k < gang.n; ++k) {
    const Batch::Task& task = b.tasks[static_cast<size_t>(b.gang_units[gang.u0 + k])];
    const HostAttnItem& it = b.items[static_cast<size_t>(task.item)];
    const Batch::Split& sp = b.splits[static_cast<size_t>(task.item)];
    HostGroupCall& c = calls[k];
    c.q = it.q;
    c.G = it.G;
    if (sp.n_parts == 1) {
      c.blocks = it.blocks;
      c.o = it.o;
      c.lse = it.lse;
    } else {
      const int64_t row = sp.scratch + int64_t{task.part} * it.G;
      c.blocks = std::span<const HostBlockRef>(b.parts_blocks.data() + task.b0,
                                               static_cast<size_t>(task.b1 - task.b0));
      c.o = b.part_o.data() + row * head_dim_;
      c.lse = b.part_lse.data() + row;
    }
  }
  try {
    host_attend_groups(head_dim_, scale_, kv_dtype_,
                       std::span<const HostGroupCall>(calls, static_cast<size_t>(gang.n)));
  } catch (...) {
    b.fail(std::current_exception());
  }
  for (int32_t k = 0; k < gang.n; ++k) {
    const Batch::Task& task = b.tasks[static_cast<size_t>(b.gang_units[gang.u0 + k])];
    const HostAttnItem& it = b.items[static_cast<size_t>(task.item)];
    const Batch::Split& sp = b.splits[static_cast<size_t>(task.item)];
    // The last part of a split item merges the parts in order 0, 1, ... into the item's output.
    if (sp.n_parts > 1 &&
        b.parts_left[static_cast<size_t>(task.item)].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      const size_t gd = static_cast<size_t>(it.G) * static_cast<size_t>(head_dim_);
      const float* po = b.part_o.data() + sp.scratch * head_dim_;
      const float* pl = b.part_lse.data() + sp.scratch;
      std::memcpy(it.o, po, gd * sizeof(float));
      std::memcpy(it.lse, pl, static_cast<size_t>(it.G) * sizeof(float));
      for (int32_t p = 1; p < sp.n_parts; ++p)
        for (int32_t g = 0; g < it.G; ++g) {
          const int64_t r = int64_t{p} * it.G + g;
          merge_partial_row(it.o + int64_t{g} * head_dim_, it.lse + g, po + r * head_dim_, pl[r],
                            head_dim_);
        }
    }
  }
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
  busy_ns_.fetch_add(ns.count(), std::memory_order_relaxed);
  // The gang that finishes last sees every other gang's writes (acq_rel) and completes the batch.
  if (b.tasks_left.fetch_sub(1, std::memory_order_acq_rel) == 1) finish_batch(b);
}

std::shared_ptr<HostAttention::Batch> HostAttention::find(Ticket t) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = batches_.find(t.id);
  TANDEM_CHECK(it != batches_.end(), "host attention: unknown or already waited ticket ", t.id);
  return it->second;
}

void HostAttention::wait(Ticket t) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::shared_ptr<Batch> b = find(t);
  bool run_here = false;
  {
    std::unique_lock<std::mutex> lock(pending_mu_);
    pending_cv_.wait(lock, [&] { return !b->waiting_start; });
    run_here = std::exchange(b->in_wait, false);
  }
  if (run_here)
    run_in_wait(*b);
  else
    // Joins the arena (a slot is reserved for this) and runs tasks until the batch is done; when
    // it cannot join (threads == 1) the wait runs as a task of the arena and this thread blocks.
    arena_.execute([&] { b->tg.wait(); });
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(b->mu);
    TANDEM_CHECK(b->done, "host attention: task_group finished before its batch");
    error = b->error;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    batches_.erase(t.id);
  }
  recycle(*b);
  wait_ns_.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count(),
      std::memory_order_relaxed);
  if (error) std::rethrow_exception(error);
}

void HostAttention::recycle(Batch& b) {
  auto spare = std::make_unique<Plan>();
  std::swap(*spare, static_cast<Plan&>(b));
  spare->clear();
  std::lock_guard<std::mutex> lock(spare_mu_);
  if (spares_.size() < kMaxSpares) spares_.push_back(std::move(spare));
}

void HostAttention::cancel(Ticket t) {
  const std::shared_ptr<Batch> b = find(t);
  {
    std::lock_guard<std::mutex> lock(pending_mu_);
    // An in_wait batch not waited for yet has not run: finished below without running.
    if (!std::exchange(b->in_wait, false)) {
      if (!b->waiting_start) return;  // started (or finished) already
      b->waiting_start = false;
      pending_.erase(std::find(pending_.begin(), pending_.end(), b));
    }
  }
  pending_cv_.notify_all();
  poison_outputs(b->items, head_dim_);
  finish_batch(*b);
}

bool HostAttention::ready(Ticket t) const {
  const std::shared_ptr<Batch> b = find(t);
  std::lock_guard<std::mutex> lock(b->mu);
  return b->done;
}

double HostAttention::busy_seconds() const {
  return static_cast<double>(busy_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

double HostAttention::wait_seconds() const {
  return static_cast<double>(wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
}

}  // namespace tandem
