// `tandem make-model`: a checkpoint of a named shape with random weights (models/random_model.h),
// for benchmarks at sizes no downloaded model has.
#include "kernels/dtype.h"
#include "models/random_model.h"
#include "server/tools/commands.h"

namespace tandem {

int cmd_make_model(const Options& f) {
  make_random_model(
      f.str("shape"),
      f.pick<DType>("dtype", {{"f32", DType::kF32}, {"bf16", DType::kBF16}, {"f16", DType::kF16}}),
      f.str("out"), static_cast<uint64_t>(f.integer("seed")));
  return 0;
}

}  // namespace tandem
