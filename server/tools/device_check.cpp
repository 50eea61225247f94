// The GPU-against-CPU check of a loaded model, and the --device / --device-check loading rule.
#include "server/tools/device_check.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "kvstore/sequence_kv.h"
#include "server/tools/kv_options.h"

namespace tandem {
namespace {

// Every logit row of the fixed sequence: the prompt's 5 rows, then one per decode step.
std::vector<std::vector<float>> fixed_run(Model& model) {
  const int32_t vocab = model.config().vocab_size;
  std::vector<int32_t> prompt, decode;
  for (int32_t i = 0; i < 5; ++i) prompt.push_back((7 + 131 * i) % vocab);
  for (int32_t i = 0; i < 3; ++i) decode.push_back((11 + 257 * i) % vocab);
  DenseKv kv(model.backend(), model.kv_shape(), 16);
  std::vector<std::vector<float>> rows;
  auto keep = [&](const TensorView& l) {
    for (int64_t r = 0; r < l.dim(0); ++r)
      rows.emplace_back(l.as<const float>() + r * vocab, l.as<const float>() + (r + 1) * vocab);
  };
  const StepSequence first{&kv, prompt, true, false, true};
  keep(model.forward(std::span<const StepSequence>(&first, 1)));
  for (const int32_t& t : decode) {
    const StepSequence s{&kv, std::span<const int32_t>(&t, 1), false, true, false};
    keep(model.forward(std::span<const StepSequence>(&s, 1)));
  }
  return rows;
}

}  // namespace

double compare_with_cpu(Model& model) {
  auto cpu = make_cpu_backend();
  auto reference = Model::load(model.dir(), *cpu);
  const auto got = fixed_run(model);
  const auto want = fixed_run(*reference);
  TANDEM_CHECK(got.size() == want.size(), "device check: ", got.size(), " rows against ",
               want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double num = 0, den = 0;
    for (size_t j = 0; j < want[i].size(); ++j) {
      const double d = std::abs(static_cast<double>(got[i][j]) - want[i][j]);
      num = std::isnan(d) ? INFINITY : std::max(num, d);
      den = std::max(den, std::abs(static_cast<double>(want[i][j])));
    }
    worst = std::max(worst, den > 0 ? num / den : num);
  }
  return worst;
}

LoadedModel load_checked(std::unique_ptr<Backend> backend, const std::string& dir, bool check,
                         bool fallback, const std::function<void(const std::string&)>& warn,
                         WeightMemory memory) {
  LoadedModel m;
  m.model = Model::load(dir, *backend, memory);
  m.backend = std::move(backend);
  if (!check || m.backend->name() == "cpu") return m;
  std::string why;
  try {
    const double err = compare_with_cpu(*m.model);
    if (err <= kDeviceCheckTolerance) return m;
    why = cat("its logits differ from the CPU backend's by ", err, " (relative; at most ",
              kDeviceCheckTolerance, " expected)");
  } catch (const std::exception& e) {
    why = cat("its check run failed: ", e.what());
  }
  const std::string name(m.backend->name());
  TANDEM_REQUIRE(fallback, kInternal, "--device-check: the ", name,
                 " forward pass is wrong: ", why);
  warn(cat("the ", name, " forward pass is wrong (", why,
           "); falling back to the CPU backend (--device cuda uses it anyway, --device-check off "
           "skips this check)"));
  m.model.reset();
  m.backend = make_cpu_backend();
  m.model = Model::load(dir, *m.backend, memory);
  return m;
}

LoadedModel load_model(const Options& o, const std::string& dir,
                       const std::function<void(const std::string&)>& warn) {
  const std::string device = o.str("device");
  const std::string check = o.str("device-check");
  auto backend = make_backend(o);
  const WeightMemory memory = o.pick<WeightMemory>(
      "weight-memory",
      {{"auto", WeightMemory::kAuto}, {"huge", WeightMemory::kHuge}, {"map", WeightMemory::kMap}});
  return load_checked(std::move(backend), dir,
                      check == "on" || (check == "auto" && device == "auto"), device == "auto",
                      warn, memory);
}

}  // namespace tandem
