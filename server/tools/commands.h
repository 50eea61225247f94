// The subcommands of the tandem binary (one cmd_*.cpp each), called by server/main.cpp with their
// options already parsed and checked against the option table, and what they share.
#pragma once

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>

#include <cstdint>
#include <memory>

#include "server/options.h"

namespace tandem {

// Caps the oneTBB worker count for the process while alive (0 = all cores).
class ThreadLimit {
 public:
  explicit ThreadLimit(int64_t threads)
      : threads_(threads <= 0 ? tbb::info::default_concurrency() : static_cast<int>(threads)),
        control_(std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                       static_cast<size_t>(threads_))) {}
  int threads() const { return threads_; }

 private:
  int threads_ = 0;
  std::unique_ptr<tbb::global_control> control_;
};

int cmd_serve(const Options& o);
int cmd_run(const Options& o);
int cmd_perplexity(const Options& o);
int cmd_bench_decode(const Options& o);
int cmd_make_model(const Options& o);
int cmd_bench_sampler(const Options& o);
int cmd_bench(const Options& o);
int cmd_bench_cpu_attn(const Options& o);
int cmd_bench_kernels(const Options& o);
int cmd_bench_grammar(const Options& o);
int cmd_eval_recall(const Options& o);

}  // namespace tandem
