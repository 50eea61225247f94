// The subcommands of the tandem binary and what they share.
#pragma once

#include <oneapi/tbb/global_control.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

// Caps the oneTBB worker count for the process while alive (0 = all cores).
class ThreadLimit {
 public:
  explicit ThreadLimit(int64_t threads);
  int threads() const { return threads_; }

 private:
  std::unique_ptr<tbb::global_control> control_;
  int threads_ = 0;
};

int cmd_run(const std::vector<std::string>& args);
int cmd_serve(const std::vector<std::string>& args);
int cmd_bench_decode(const std::vector<std::string>& args);
int cmd_make_model(const std::vector<std::string>& args);
int cmd_bench_sampler(const std::vector<std::string>& args);
int cmd_perplexity(const std::vector<std::string>& args);
int cmd_bench_cpu_attn(const std::vector<std::string>& args);
int cmd_bench_kernels(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);

}  // namespace tandem
