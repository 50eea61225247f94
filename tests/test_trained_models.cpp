// The project's own trained models (models/tandem-demo, models/tandem-long, written by
// scripts/train_model.py): the loader and forward pass reproduce the float64 PyTorch logits of
// the saved weights for a held-out snippet, and the C++ tokenizer encodes held-out strings to
// the ids of the script's Python BPE (fixtures in tests/fixtures/trained/).
#include <catch2/catch.hpp>
#include <fstream>

#include "engine/tokenizer/tokenizer.h"
#include "models/model.h"
#include "tests/test_helpers.h"

using namespace tandem;
using tandem::test::rel_error;
using tandem::test::repo_path;

namespace {

nlohmann::json load_fixture(const std::string& name) {
  std::ifstream in(repo_path("tests/fixtures/trained/" + name + ".json"));
  REQUIRE(in);
  return nlohmann::json::parse(in);
}

constexpr double kTol = 1e-4;  // f32 forward against a float64 reference

}  // namespace

TEST_CASE("trained models match the PyTorch logits of their saved weights", "[model][trained]") {
  auto backend = make_cpu_backend();
  for (const char* name : {"tandem-demo", "tandem-long"}) {
    DYNAMIC_SECTION(name) {
      const nlohmann::json fx = load_fixture(name);
      auto model = Model::load(repo_path(fx["model"].get<std::string>()), *backend);
      const int64_t vocab = fx["vocab"].get<int64_t>();
      REQUIRE(model->config().vocab_size == vocab);
      const auto prompt = fx["prompt_ids"].get<std::vector<int32_t>>();
      const auto positions = fx["positions"].get<std::vector<int64_t>>();
      const auto rows = fx["logits"].get<std::vector<std::vector<float>>>();
      REQUIRE(rows.size() == positions.size());
      auto kv = model->new_dense_kv(static_cast<int32_t>(prompt.size()));
      const StepSequence pre{kv.get(), prompt, true};
      const TensorView logits = model->forward(std::span<const StepSequence>(&pre, 1));
      REQUIRE(logits.dim(0) == static_cast<int64_t>(prompt.size()));
      for (size_t i = 0; i < positions.size(); ++i) {
        REQUIRE(static_cast<int64_t>(rows[i].size()) == vocab);
        const double err =
            rel_error(logits.as<float>() + positions[i] * vocab, rows[i].data(), vocab);
        INFO("position " << positions[i] << " relative error " << err);
        CHECK(err < kTol);
      }
    }
  }
}

TEST_CASE("trained tokenizers encode held-out text like the Python BPE", "[tokenizer][trained]") {
  for (const char* name : {"tandem-demo", "tandem-long"}) {
    DYNAMIC_SECTION(name) {
      const nlohmann::json fx = load_fixture(name);
      const Tokenizer tok = Tokenizer::load(repo_path(fx["model"].get<std::string>()));
      REQUIRE(tok.bos_id() == 0);
      REQUIRE(tok.eos_id() == 0);
      for (const auto& s : fx["strings"]) {
        const std::string text = s["text"].get<std::string>();
        const auto ids = s["ids"].get<std::vector<int32_t>>();
        INFO(text.substr(0, 60));
        CHECK(tok.encode(text, false, false) == ids);
        // The post-processor prepends <|endoftext|>; decoding gives the text back.
        std::vector<int32_t> with_bos = {0};
        with_bos.insert(with_bos.end(), ids.begin(), ids.end());
        CHECK(tok.encode(text) == with_bos);
        CHECK(tok.decode(ids) == text);
      }
    }
  }
}
