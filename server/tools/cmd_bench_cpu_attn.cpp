// `tandem bench-cpu-attn`: bytes of host KV scanned per second by HostAttention under the `full`
// policy (every row of every host block), for one thread and for all cores, at several contexts,
// batch sizes and KV dtypes, next to the machine's read bandwidth measured by the same run.
// Prints one JSON object per line. Not a test: the result is validated against a float64
// reference once per configuration before anything is timed.
//
// The KV is laid out as the host store does (per block: K [n_head_kv, head_dim, block], by
// channel, and V [n_head_kv, block, head_dim])
// and is replicated over enough "layers" that one timed round (one call per layer) reads at least
// --footprint-mb, so the figures are memory bandwidth, not last-level-cache bandwidth. Each
// figure also comes against its roofline: the lower of the paired read bandwidth and the measured
// FMA throughput divided by the FMAs the kernel needs per KV byte.
#include <immintrin.h>
#include <sys/mman.h>
#include <tbb/info.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cpu_attn/host_attention.h"
#include "kernels/buffer.h"
#include "kernels/common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/membw.h"
#include "kernels/cpu/parallel.h"
#include "kernels/dtype.h"
#include "server/tools/commands.h"

namespace tandem {
namespace {

constexpr int64_t kMinCalls = 9;  // timed calls per figure, at least

DType kv_dtype_of(const std::string& s) {  // one of the table's --dtypes words
  return s == "f32" ? DType::kF32 : s == "f16" ? DType::kF16 : DType::kBF16;
}

// The 1-minute load average: on a shared machine, what else was running during a figure.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  in >> l;
  return l;
}

float value_at(DType t, const char* base, int64_t i) {
  if (t == DType::kF32) return reinterpret_cast<const float*>(base)[i];
  const uint16_t h = reinterpret_cast<const uint16_t*>(base)[i];
  return t == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
}

struct Shape {
  int32_t n_head_kv, G, d, block;
  DType t;
  int64_t batch, context;

  int64_t blocks_per_seq() const { return (context + block - 1) / block; }
  int64_t block_bytes() const { return 2 * int64_t{n_head_kv} * block * d * dtype_size(t); }
  int64_t layer_bytes() const { return batch * blocks_per_seq() * block_bytes(); }
};

// One layer of host KV for a batch: blocks of each sequence, filled with random values in
// [-1, 1], and per (sequence, KV head) the block refs of the `full` policy.
struct HostLayer {
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> mem;
  int64_t bytes = 0;                            // allocated: the layer rounded up to 2 MiB
  std::vector<std::vector<HostBlockRef>> refs;  // [batch * n_head_kv]

  // huge_pages: 2 MiB aligned and madvise(MADV_HUGEPAGE), as the host store allocates its pool
  // (host_heap_huge, kernels/buffer.h); otherwise 4 KiB pages (what a plain aligned_alloc gives).
  HostLayer(const Shape& s, uint64_t seed, bool huge_pages) {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t size = (static_cast<size_t>(s.layer_bytes()) + kHuge - 1) / kHuge * kHuge;
    bytes = static_cast<int64_t>(size);
    mem.reset(static_cast<char*>(std::aligned_alloc(kHuge, size)));
    TANDEM_REQUIRE(mem != nullptr, kOutOfMemory, "bench-cpu-attn: cannot allocate ", size);
    madvise(mem.get(), size, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    char* base = mem.get();
    const int64_t bb = s.block_bytes(), es = dtype_size(s.t);
    const int64_t n_blocks = s.batch * s.blocks_per_seq();
    // Fill in parallel (first touch by the workers), one generator per block.
    tandem::parallel_for(int64_t{0}, n_blocks, [&](int64_t b) {
      uint64_t x =
          seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(b) * 0xbf58476d1ce4e5b9ull + 1;
      char* p = base + b * bb;
      const int64_t n = bb / es;
      for (int64_t i = 0; i < n; ++i) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const float v = static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) / (1 << 23);
        if (s.t == DType::kF32) {
          reinterpret_cast<float*>(p)[i] = v;
        } else {
          reinterpret_cast<uint16_t*>(p)[i] = s.t == DType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
        }
      }
    });
    const int64_t half = bb / 2, head_bytes = int64_t{s.block} * s.d * es;
    for (int64_t q = 0; q < s.batch; ++q)
      for (int32_t h = 0; h < s.n_head_kv; ++h) {
        std::vector<HostBlockRef> r;
        for (int64_t j = 0; j < s.blocks_per_seq(); ++j) {
          const char* blk = base + (q * s.blocks_per_seq() + j) * bb;
          const int32_t rows =
              static_cast<int32_t>(std::min<int64_t>(s.block, s.context - j * s.block));
          HostBlockRef ref{blk + h * head_bytes, blk + half + h * head_bytes, rows};
          ref.k_ld = s.block;  // K by columns and V by tiles, as the host store keeps them
          if (v_by_tiles(s.d)) ref.v_tile = int64_t{s.block} * kVTile;
          r.push_back(ref);
        }
        refs.push_back(std::move(r));
      }
  }
};

// Streams [p, p + bytes) with `threads` threads, each one slice (AVX2 loads into four
// accumulators): the plain read bandwidth of the very memory the kernel reads, for a paired
// comparison that sees the same kind of pages and the same machine load. Plain std::threads, not
// a second oneTBB arena, which would compete with HostAttention's for the process's workers.
// Returns a sum of what it read (kept live by the caller).
float stream_read(int threads, const char* p, size_t bytes) {
  const size_t slice = bytes / static_cast<size_t>(threads) / 128 * 128;
  std::vector<float> sums(static_cast<size_t>(threads));
  auto read = [&](int t) {
    const float* f = reinterpret_cast<const float*>(p + static_cast<size_t>(t) * slice);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < slice / 4; i += 32) {
      a0 = _mm256_add_ps(a0, _mm256_loadu_ps(f + i));
      a1 = _mm256_add_ps(a1, _mm256_loadu_ps(f + i + 8));
      a2 = _mm256_add_ps(a2, _mm256_loadu_ps(f + i + 16));
      a3 = _mm256_add_ps(a3, _mm256_loadu_ps(f + i + 24));
    }
    alignas(32) float v[8];
    _mm256_store_ps(v, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    sums[static_cast<size_t>(t)] = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(read, t);
  read(0);
  for (auto& th : pool) th.join();
  float total = 0;
  for (float x : sums) total += x;
  return total;
}

// Largest relative error (o rows and lse) of items [0, n) against float64 attention.
double validate(const Shape& s, const HostLayer& layer, const std::vector<float>& q,
                const std::vector<float>& o, const std::vector<float>& lse, float scale,
                const std::vector<size_t>& items) {
  double worst = 0;
  const int32_t G = s.G, d = s.d;
  for (size_t it : items) {
    const auto& refs = layer.refs[it];
    for (int32_t g = 0; g < G; ++g) {
      const float* qg = q.data() + (it * G + static_cast<size_t>(g)) * static_cast<size_t>(d);
      std::vector<double> sc;
      double m = -std::numeric_limits<double>::infinity();
      for (const HostBlockRef& r : refs)
        for (int32_t j = 0; j < r.n; ++j) {
          double a = 0;
          for (int32_t c = 0; c < d; ++c)
            a += double{qg[c]} * value_at(s.t, static_cast<const char*>(r.k), c * r.k_ld + j);
          sc.push_back(a * scale);
          m = std::max(m, sc.back());
        }
      std::vector<double> acc(static_cast<size_t>(d), 0.0);
      double sum = 0;
      size_t k = 0;
      for (const HostBlockRef& r : refs)
        for (int32_t j = 0; j < r.n; ++j, ++k) {
          const double p = std::exp(sc[k] - m);
          sum += p;
          for (int32_t c = 0; c < d; ++c)
            acc[static_cast<size_t>(c)] +=
                p * value_at(s.t, static_cast<const char*>(r.v),
                             r.v_tile != 0
                                 ? (c / kVTile) * r.v_tile + int64_t{j} * kVTile + c % kVTile
                                 : int64_t{j} * d + c);
        }
      const float* og = o.data() + (it * G + static_cast<size_t>(g)) * static_cast<size_t>(d);
      double diff = 0, mag = 0;
      for (int32_t c = 0; c < d; ++c) {
        const double ref = acc[static_cast<size_t>(c)] / sum;
        diff = std::max(diff, std::abs(og[c] - ref));
        mag = std::max(mag, std::abs(ref));
      }
      const double ref_lse = m + std::log(sum);
      worst = std::max(worst, diff / std::max(mag, 1e-30));
      worst = std::max(worst, std::abs(lse[it * G + static_cast<size_t>(g)] - ref_lse) /
                                  std::max(1.0, std::abs(ref_lse)));
    }
  }
  return worst;
}

}  // namespace

int cmd_bench_cpu_attn(const Options& f) {
  using Clock = std::chrono::steady_clock;
  // The host store's pool takes 2 MiB pages (host_heap_huge), so by default the layers do too,
  // and the paired read, which reads another layer, with them.
  const bool huge_pages = f.str("pages") == "huge";
  TANDEM_REQUIRE(huge_pages || !f.flag("huge-pages"), kInvalidArgument,
                 "--huge-pages and --pages small contradict each other");
  const auto contexts = f.int_list("contexts");
  const auto batches = f.int_list("batch");
  const auto thread_list = f.int_list("threads");
  const int32_t hkv = static_cast<int32_t>(f.integer("heads-kv"));
  const int32_t G = static_cast<int32_t>(f.integer("group"));
  const int32_t d = static_cast<int32_t>(f.integer("head-dim"));
  const int32_t block = static_cast<int32_t>(f.integer("block"));
  const double min_time = f.number("min-time");
  const int64_t footprint = f.integer("footprint-mb") << 20;
  const int64_t max_layer = f.integer("max-layer-mb") << 20;
  const size_t bw_bytes = static_cast<size_t>(f.integer("bw-bytes"));
  TANDEM_REQUIRE(d % 8 == 0, kInvalidArgument, "--head-dim must be a multiple of 8");
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int cores = tbb::info::default_concurrency();

  // Read bandwidth for each thread count of the run.
  nlohmann::json bw_json = nlohmann::json::object();
  // FMA throughput too: with G query heads per KV head the host kernel does 2·G·d FMAs per
  // K+V row pair of 2·d elements, so bf16 KV at G = 4 needs 2 FMAs per byte and can be bound by
  // the cores, not the memory. The roofline of a configuration is the lower of the two.
  nlohmann::json fma_json = nlohmann::json::object();
  std::vector<double> bw(thread_list.size()), fma(thread_list.size());
  for (size_t i = 0; i < thread_list.size(); ++i) {
    const int nt = thread_list[i] == 0 ? cores : static_cast<int>(thread_list[i]);
    bw[i] = measure_read_bandwidth_gbs(bw_bytes, nt, huge_pages);
    bw_json[std::to_string(nt)] = bw[i];
    fma[i] = measure_fma_gflops(nt);
    fma_json[std::to_string(nt)] = fma[i];
  }
  std::printf("%s\n", nlohmann::json({{"cores", cores},
                                      {"cpu", cpu::describe_cpu_id()},
                                      {"cpu_isa", std::string(cpu::isa_name(cpu::active_isa()))},
                                      {"host_prefetch", cpu::describe_host_prefetch_rule()},
                                      {"read_bw_gbs", bw_json},
                                      {"fma_gflops", fma_json},
                                      {"bw_buffer_bytes", bw_bytes}})
                          .dump()
                          .c_str());
  std::fflush(stdout);

  for (const std::string& dt : f.list("dtypes")) {
    const DType t = kv_dtype_of(dt);
    for (int64_t batch : batches)
      for (int64_t ctx : contexts) {
        const Shape s{hkv, G, d, block, t, batch, ctx};
        if (s.layer_bytes() > max_layer) {
          std::printf("%s\n", nlohmann::json({{"skipped", true},
                                              {"kv_dtype", dt},
                                              {"batch", batch},
                                              {"context", ctx},
                                              {"layer_bytes", s.layer_bytes()}})
                                  .dump()
                                  .c_str());
          continue;
        }
        const int64_t n_layers =
            std::max<int64_t>(1, (footprint + s.layer_bytes() - 1) / s.layer_bytes());
        std::vector<HostLayer> layers;
        for (int64_t l = 0; l < n_layers; ++l)
          layers.emplace_back(s, static_cast<uint64_t>(l + 1), huge_pages);
        const size_t n_items = static_cast<size_t>(batch * hkv);
        std::vector<float> q(n_items * G * d), o(q.size()), lse(n_items * G);
        uint64_t x = 42;
        for (float& v : q) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          v = static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) / (1 << 22);
        }
        auto items_of = [&](const HostLayer& layer) {
          std::vector<HostAttnItem> items;
          for (size_t i = 0; i < n_items; ++i)
            items.push_back({q.data() + i * G * d, G, o.data() + i * G * d, lse.data() + i * G,
                             layer.refs[i], static_cast<int64_t>(i / static_cast<size_t>(hkv))});
          return items;
        };
        const int64_t bytes = s.layer_bytes();
        // What the kernel gave the layers (advice may be refused), averaged over them.
        double huge_fraction = 0;
        for (const HostLayer& layer : layers)
          huge_fraction += huge_page_fraction(layer.mem.get(), layer.bytes) / n_layers;

        for (size_t ti = 0; ti < thread_list.size(); ++ti) {
          HostAttention ha(static_cast<int>(thread_list[ti]), d, scale, t);
          // Validate once (first and last item) before timing.
          ha.wait(ha.submit(items_of(layers[0])));
          const double err = validate(s, layers[0], q, o, lse, scale, {0, n_items - 1});
          TANDEM_REQUIRE(err < 1e-5, kInternal, "bench-cpu-attn: result off by ", err,
                         " against the float64 reference");
          // Bandwidth right before timing, with the same thread count: on a shared machine the
          // load changes over a run, so each figure is compared with what memory gave just then.
          const double bw_now = measure_read_bandwidth_gbs(bw_bytes, ha.threads(), huge_pages);
          // One untimed call per layer first: the call right after that measurement, which
          // allocates, touches and frees bw_bytes, ran at 55-65% of the later calls' pace on the
          // project's VMs (the freed pages' aftermath, not the kernel's); with the few calls a
          // 1-2 GB layer allows in min-time it moved the median by a fifth.
          for (const HostLayer& layer : layers) ha.wait(ha.submit(items_of(layer)));
          // Calls alternate with a plain streaming read of another layer by as many threads: both
          // see the same kind of pages and the same load. The probe reads the layer farthest from
          // the calls before and after it, so neither warms the cache for the other.
          float sink = 0;
          std::vector<double> secs, probe_secs;
          double total = 0;
          // At least kMinCalls calls, so that the median is not one or two calls' figure.
          for (int64_t r = 0; total < min_time || r < std::max<int64_t>(kMinCalls, n_layers); ++r) {
            const auto items = items_of(layers[static_cast<size_t>(r % n_layers)]);
            const auto t0 = Clock::now();
            ha.wait(ha.submit(items));
            const auto t1 = Clock::now();
            sink += stream_read(
                ha.threads(), layers[static_cast<size_t>((r + n_layers / 2) % n_layers)].mem.get(),
                static_cast<size_t>(bytes));
            const auto t2 = Clock::now();
            secs.push_back(std::chrono::duration<double>(t1 - t0).count());
            probe_secs.push_back(std::chrono::duration<double>(t2 - t1).count());
            total += secs.back() + probe_secs.back();
          }
          volatile float keep = sink;  // the probe's reads feed a visible side effect
          (void)keep;
          // Each call against the probe right after it (same minute, same neighbours): the
          // median of these ratios cancels the machine's drift, which the ratio of the two
          // medians does not when the memory's speed moves during the run.
          std::vector<double> ratios;
          for (size_t i = 0; i < secs.size(); ++i) ratios.push_back(probe_secs[i] / secs[i]);
          // Every call's GB/s in order, and its probe's: where a run's figures come from.
          nlohmann::json calls_gbs = nlohmann::json::array(), probes_gbs = nlohmann::json::array();
          for (size_t i = 0; i < secs.size(); ++i) {
            calls_gbs.push_back(std::round(static_cast<double>(bytes) / secs[i] / 1e8) / 10);
            probes_gbs.push_back(std::round(static_cast<double>(bytes) / probe_secs[i] / 1e8) / 10);
          }
          std::sort(ratios.begin(), ratios.end());
          std::sort(secs.begin(), secs.end());
          std::sort(probe_secs.begin(), probe_secs.end());
          const double med = secs[secs.size() / 2], best = secs.front();
          const double gbs = static_cast<double>(bytes) / med / 1e9;
          const double gbs_best = static_cast<double>(bytes) / best / 1e9;
          const double probe_med = static_cast<double>(bytes) / probe_secs[secs.size() / 2] / 1e9;
          const double probe_best = static_cast<double>(bytes) / probe_secs.front() / 1e9;
          const double fma_per_byte = static_cast<double>(G) / static_cast<double>(dtype_size(t));
          const double compute_roof = fma[ti] / fma_per_byte;
          std::printf(
              "%s\n",
              nlohmann::json(
                  {{"policy", "full"},
                   {"kv_dtype", dt},
                   {"batch", batch},
                   {"context", ctx},
                   {"n_head_kv", hkv},
                   {"group", G},
                   {"head_dim", d},
                   {"block", block},
                   {"threads", ha.threads()},
                   {"kv_bytes_per_call", bytes},
                   {"layers_rotated", n_layers},
                   {"calls", secs.size()},
                   {"kv_gbs_calls", calls_gbs},
                   {"read_gbs_calls", probes_gbs},
                   {"ms_per_call_median", med * 1e3},
                   {"ms_per_call_best", best * 1e3},
                   {"kv_gbs_median", gbs},
                   {"kv_gbs_best", gbs_best},
                   {"read_bw_gbs_start", bw[ti]},
                   {"read_bw_gbs_adjacent", bw_now},
                   {"fraction_of_bw_best", gbs_best / bw_now},
                   {"fraction_of_bw_median", gbs / bw_now},
                   {"paired_read_gbs_best", probe_best},
                   {"paired_read_gbs_median", probe_med},
                   {"paired_fraction_best", gbs_best / probe_best},
                   {"paired_fraction_median", gbs / probe_med},
                   {"pairwise_fraction_median", ratios[ratios.size() / 2]},
                   {"fma_per_byte", fma_per_byte},
                   {"fma_gflops", fma[ti]},
                   {"compute_roof_gbs", compute_roof},
                   {"fraction_of_roofline_best", gbs_best / std::min(probe_best, compute_roof)},
                   {"fraction_of_roofline_median", gbs / std::min(probe_med, compute_roof)},
                   {"huge_pages", huge_pages},
                   {"huge_page_fraction", huge_fraction},
                   {"load_avg_1m", load_average()},
                   {"max_rel_err", err}})
                  .dump()
                  .c_str());
          std::fflush(stdout);
        }
      }
  }
  return 0;
}

}  // namespace tandem
