// Config defaults that change which weights a checkpoint has: Qwen3's head_dim default (128,
// not hidden / heads) and OPT's _remove_final_layer_norm (no LayerNorm before lm_head).
#include <catch2/catch.hpp>
#include <cmath>

#include "tests/config_test_util.h"
#include "tests/test_helpers.h"

using namespace tandem;
using namespace tandem::test;
namespace fs = std::filesystem;

namespace {

// Deterministic noise in [-scale, scale).
void fill_noise(std::vector<float>& v, uint64_t seed, float scale) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& e : v) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    e = (static_cast<float>((x * 0x2545F4914F6CDD1Dull) >> 40) * 0x1.0p-24f * 2 - 1) * scale;
  }
}

// A one-layer random Qwen3 whose heads are 128 wide while hidden / heads is 32.
void make_wide_head_qwen3(const fs::path& dir, bool write_head_dim) {
  const int64_t h = 64, heads = 2, kv = 1, hd = 128, f = 96, v = 64;
  json cfg = {{"architectures", {"Qwen3ForCausalLM"}},
              {"model_type", "qwen3"},
              {"hidden_size", h},
              {"num_hidden_layers", 1},
              {"num_attention_heads", heads},
              {"num_key_value_heads", kv},
              {"intermediate_size", f},
              {"vocab_size", v},
              {"max_position_embeddings", 256},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 1000000.0},
              {"tie_word_embeddings", false},
              {"hidden_act", "silu"}};
  if (write_head_dim) cfg["head_dim"] = hd;
  write_json(dir / "config.json", cfg);
  const std::string p = "model.layers.0.";
  std::map<std::string, RawTensor> t = {{"model.embed_tokens.weight", {{v, h}, {}}},
                                        {"lm_head.weight", {{v, h}, {}}},
                                        {"model.norm.weight", {{h}, {}}},
                                        {p + "input_layernorm.weight", {{h}, {}}},
                                        {p + "post_attention_layernorm.weight", {{h}, {}}},
                                        {p + "self_attn.q_proj.weight", {{heads * hd, h}, {}}},
                                        {p + "self_attn.k_proj.weight", {{kv * hd, h}, {}}},
                                        {p + "self_attn.v_proj.weight", {{kv * hd, h}, {}}},
                                        {p + "self_attn.o_proj.weight", {{h, heads * hd}, {}}},
                                        {p + "self_attn.q_norm.weight", {{hd}, {}}},
                                        {p + "self_attn.k_norm.weight", {{hd}, {}}},
                                        {p + "mlp.gate_proj.weight", {{f, h}, {}}},
                                        {p + "mlp.up_proj.weight", {{f, h}, {}}},
                                        {p + "mlp.down_proj.weight", {{h, f}, {}}}};
  uint64_t seed = 1;
  for (auto& [name, r] : t) {
    int64_t n = 1;
    for (int64_t d : r.shape) n *= d;
    r.values.resize(static_cast<size_t>(n));
    fill_noise(r.values, seed++, 1.0f / std::sqrt(static_cast<float>(r.shape.back())));
    if (r.shape.size() == 1)
      for (float& e : r.values) e += 1.0f;  // norm weights near 1
  }
  write_f32_tensors(dir / "model.safetensors", t);
}

// The opt-tiny fixture rewritten: lm_head stored apart from the embeddings (so the residual
// stream can be scaled without scaling lm_head), every residual contribution (embeddings,
// positions, out_proj, fc2) times `scale`, optionally without the final LayerNorm.
void make_opt_variant(const fs::path& dir, float scale, bool remove_final_ln) {
  const fs::path src = repo_path("tests/fixtures/models/opt-tiny");
  json cfg = read_json(src / "config.json");
  cfg["tie_word_embeddings"] = false;
  cfg["_remove_final_layer_norm"] = remove_final_ln;
  write_json(dir / "config.json", cfg);
  std::map<std::string, RawTensor> t = read_f32_tensors(src / "model.safetensors");
  REQUIRE(t.count("lm_head.weight") == 0);
  t["lm_head.weight"] = t.at("model.decoder.embed_tokens.weight");
  if (remove_final_ln) {
    REQUIRE(t.erase("model.decoder.final_layer_norm.weight") == 1);
    REQUIRE(t.erase("model.decoder.final_layer_norm.bias") == 1);
  }
  for (auto& [name, r] : t) {
    const bool residual = name.find("embed_tokens") != std::string::npos ||
                          name.find("embed_positions") != std::string::npos ||
                          name.find("out_proj") != std::string::npos ||
                          name.find("fc2") != std::string::npos;
    if (residual)
      for (float& e : r.values) e *= scale;
  }
  write_f32_tensors(dir / "model.safetensors", t);
}

std::vector<float> times(std::vector<float> v, float s) {
  for (float& e : v) e *= s;
  return v;
}

const std::vector<int32_t> kTokens = {2, 17, 40, 63, 8, 33, 21, 5};

}  // namespace

TEST_CASE("qwen3 without head_dim uses transformers' default 128", "[config][qwen3]") {
  ScratchDir implicit, explicit_dir;
  make_wide_head_qwen3(implicit.dir, false);
  make_wide_head_qwen3(explicit_dir.dir, true);
  CHECK(load_config(implicit.dir).head_dim == 128);
  const std::vector<int32_t> tokens = {1, 5, 9, 33, 62, 7, 12};
  const std::vector<float> a = prefill_logits(implicit.dir, tokens);
  CHECK(bit_identical(a, prefill_logits(explicit_dir.dir, tokens)));
  CHECK(a.size() == tokens.size() * 64);
}

TEST_CASE("llama, mistral and qwen2 without head_dim use hidden / heads", "[config]") {
  ScratchDir d;
  make_random_model("tiny", DType::kF32, d.dir, 3);  // hidden 128, 4 heads
  json cfg = read_json(d.dir / "config.json");
  cfg.erase("head_dim");
  for (const char* type : {"llama", "mistral", "qwen2"}) {
    cfg["model_type"] = type;
    write_json(d.dir / "config.json", cfg);
    CHECK(load_config(d.dir).head_dim == 32);
  }
}

TEST_CASE("opt _remove_final_layer_norm: no final LayerNorm, tensors not needed", "[config][opt]") {
  // Pre-norm OPT: every layer normalises its input, so doubling every residual contribution
  // doubles the last hidden state (up to LayerNorm's eps). Without the final LayerNorm the
  // logits then double too; with it they stay put. Tolerances cover the eps (~1%); the two
  // outcomes are a factor 2 apart.
  ScratchDir base, scaled, base_ln, scaled_ln;
  make_opt_variant(base.dir, 1.0f, true);
  make_opt_variant(scaled.dir, 2.0f, true);
  make_opt_variant(base_ln.dir, 1.0f, false);
  make_opt_variant(scaled_ln.dir, 2.0f, false);
  CHECK_FALSE(load_config(base.dir).final_norm);
  CHECK(load_config(base_ln.dir).final_norm);

  const int64_t vocab = load_config(base.dir).vocab_size;
  const std::vector<float> b = prefill_logits(base.dir, kTokens);  // loads without the tensors
  const std::vector<float> s = prefill_logits(scaled.dir, kTokens);
  const std::vector<float> b_ln = prefill_logits(base_ln.dir, kTokens);
  const std::vector<float> s_ln = prefill_logits(scaled_ln.dir, kTokens);
  const std::vector<float> b2 = times(b, 2.0f);
  for (size_t r = 0; r < kTokens.size(); ++r) {
    const size_t at = r * static_cast<size_t>(vocab);
    INFO("row " << r);
    CHECK(rel_error(s.data() + at, b2.data() + at, vocab) < 0.05);
    CHECK(rel_error(s.data() + at, b.data() + at, vocab) > 0.3);
    CHECK(rel_error(s_ln.data() + at, b_ln.data() + at, vocab) < 0.05);
    CHECK(rel_error(b.data() + at, b_ln.data() + at, vocab) > 0.1);  // the LN did something
  }
}

TEST_CASE("opt keeps requiring the final LayerNorm unless removed", "[config][opt][errors]") {
  ScratchDir d;
  make_opt_variant(d.dir, 1.0f, true);
  json cfg = read_json(d.dir / "config.json");
  cfg["_remove_final_layer_norm"] = false;
  write_json(d.dir / "config.json", cfg);
  auto backend = make_cpu_backend();
  std::string msg;
  try {
    Model::load(d.dir, *backend);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK_THAT(msg, Catch::Contains("model.decoder.final_layer_norm.weight"));
}
