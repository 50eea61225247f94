// begin_kv_step and the per-sequence step (sequences without a runner: dense caches).
#include "kvstore/kv_step.h"

#include <vector>

namespace tandem {

namespace {

class PerSequenceStep final : public KvStep {
 public:
  explicit PerSequenceStep(std::span<const StepRows> rows) : rows_(rows.begin(), rows.end()) {}
  void attend(Backend& be, int32_t layer, const TensorView& q, const TensorView& k,
              const TensorView& v, const TensorView& q_pos, const AttnPartial& out) override {
    for (const StepRows& s : rows_) {
      const int64_t r = s.row0, e = s.row0 + s.n;
      s.kv->attend(be, layer, q.slice(r, e), k.slice(r, e), v.slice(r, e), q_pos.slice(r, e),
                   AttnPartial{out.o.slice(r, e), out.lse.slice(r, e)});
    }
  }
  void finish() override {
    for (const StepRows& s : rows_) s.kv->advance(s.n);
  }

 private:
  std::vector<StepRows> rows_;
};

}  // namespace

std::unique_ptr<KvStep> begin_kv_step(std::span<const StepRows> rows) {
  TANDEM_CHECK(!rows.empty(), "empty step");
  KvStepRunner* runner = rows[0].kv->step_runner();
  for (const StepRows& s : rows)
    TANDEM_REQUIRE(s.kv->step_runner() == runner, kInvalidArgument,
                   "sequences of different KV stores in one step");
  if (runner != nullptr) return runner->begin(rows);
  return std::make_unique<PerSequenceStep>(rows);
}

}  // namespace tandem
