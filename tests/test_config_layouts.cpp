// RoPE settings in both config.json layouts: transformers 4's top-level "rope_theta" +
// "rope_scaling" and transformers 5's single "rope_parameters" object parse to the same tables
// and the same logits; unknown types and layouts that disagree are refused; YaRN's "truncate".
#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>

#include "tests/config_test_util.h"

using namespace tandem;
using namespace tandem::test;
namespace fs = std::filesystem;

namespace {

// One RoPE setting written both ways. old_scaling is null for no scaling.
struct RopeCase {
  const char* name;
  double theta;
  json old_scaling;
};

std::vector<RopeCase> rope_cases() {
  return {
      {"default", 500000.0, json()},
      {"linear (old \"type\" key)", 10000.0, {{"type", "linear"}, {"factor", 2.0}}},
      {"dynamic", 10000.0, {{"type", "dynamic"}, {"factor", 4.0}}},
      {"llama3",
       500000.0,
       {{"rope_type", "llama3"},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 512}}},
      {"yarn",
       1000000.0,
       {{"rope_type", "yarn"},
        {"factor", 4.0},
        {"original_max_position_embeddings", 1024},
        {"beta_fast", 32.0},
        {"beta_slow", 1.0}}},
      {"yarn, truncate false, attention_factor",
       1000000.0,
       {{"rope_type", "yarn"},
        {"factor", 4.0},
        {"original_max_position_embeddings", 1024},
        {"attention_factor", 1.25},
        {"truncate", false}}},
  };
}

// transformers 4 layout: top-level rope_theta and rope_scaling.
json old_layout(json cfg, const RopeCase& c) {
  cfg.erase("rope_parameters");
  cfg["rope_theta"] = c.theta;
  cfg["rope_scaling"] = c.old_scaling;
  return cfg;
}

// transformers 5 layout: only rope_parameters (theta, type and the scaling fields together).
json new_layout(json cfg, const RopeCase& c) {
  cfg.erase("rope_theta");
  cfg.erase("rope_scaling");
  json p = c.old_scaling.is_object() ? c.old_scaling : json::object();
  if (p.contains("type")) {
    p["rope_type"] = p["type"];
    p.erase("type");
  }
  if (!p.contains("rope_type")) p["rope_type"] = "default";
  p["rope_theta"] = c.theta;
  cfg["rope_parameters"] = p;
  return cfg;
}

void check_same_table(const RopeTable& a, const RopeTable& b) {
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.rotary_dim == b.rotary_dim);
  CHECK(a.neox == b.neox);
  CHECK(std::memcmp(&a.mscale, &b.mscale, sizeof(float)) == 0);
  REQUIRE(a.inv_freq.size() == b.inv_freq.size());
  CHECK(std::memcmp(a.inv_freq.data(), b.inv_freq.data(), a.inv_freq.size() * sizeof(float)) == 0);
}

// A tiny random Llama (hidden 128, 4 heads of 32, 2 layers, vocab 512) in dir.
json make_tiny(const fs::path& dir) {
  make_random_model("tiny", DType::kF32, dir, 7);
  return read_json(dir / "config.json");
}

const std::vector<int32_t> kTokens = {1, 17, 300, 42, 511, 8, 99, 250, 3, 77, 460, 12};

void check_refused(const fs::path& dir, const json& cfg, const std::vector<std::string>& words) {
  write_json(dir / "config.json", cfg);
  const LoadResult r = config_error(dir);
  INFO(r.message);
  REQUIRE(!r.message.empty());
  CHECK(r.kind == ErrorKind::kInvalidArgument);
  CHECK(r.message.find('\n') == std::string::npos);
  CHECK_THAT(r.message, Catch::Contains("config.json"));
  for (const std::string& w : words) CHECK_THAT(r.message, Catch::Contains(w));
}

}  // namespace

TEST_CASE("old and new RoPE layouts give the same tables and logits", "[config][rope]") {
  ScratchDir old_dir, new_dir;
  const json base = make_tiny(old_dir.dir);
  make_random_model("tiny", DType::kF32, new_dir.dir, 7);
  // The plain table at theta 10000: what a layout read wrongly would silently fall back to.
  const RopeTable fallback = load_config(old_dir.dir).rope;
  for (const RopeCase& c : rope_cases()) {
    DYNAMIC_SECTION(c.name) {
      write_json(old_dir.dir / "config.json", old_layout(base, c));
      write_json(new_dir.dir / "config.json", new_layout(base, c));
      const ModelConfig a = load_config(old_dir.dir), b = load_config(new_dir.dir);
      check_same_table(a.rope, b.rope);
      CHECK(a.max_context == b.max_context);
      // dynamic equals the plain table within the served context; all others must differ.
      if (std::string(c.name) != "dynamic") CHECK(b.rope.inv_freq != fallback.inv_freq);
      CHECK(bit_identical(prefill_logits(old_dir.dir, kTokens),
                          prefill_logits(new_dir.dir, kTokens)));
    }
  }
}

TEST_CASE("partial_rotary_factor is read from rope_parameters too", "[config][rope]") {
  ScratchDir old_dir, new_dir;
  const json base = make_tiny(old_dir.dir);
  make_random_model("tiny", DType::kF32, new_dir.dir, 7);
  const RopeCase c{"default", 10000.0, json()};
  json o = old_layout(base, c), n = new_layout(base, c);
  o["partial_rotary_factor"] = 0.5;
  n["rope_parameters"]["partial_rotary_factor"] = 0.5;
  write_json(old_dir.dir / "config.json", o);
  write_json(new_dir.dir / "config.json", n);
  const ModelConfig a = load_config(old_dir.dir), b = load_config(new_dir.dir);
  CHECK(b.rope.rotary_dim == 16);
  check_same_table(a.rope, b.rope);
}

TEST_CASE("both layouts in one config: accepted when they agree", "[config][rope]") {
  ScratchDir d;
  const json base = make_tiny(d.dir);
  const RopeCase c = rope_cases()[3];  // llama3
  json both = new_layout(base, c);
  both["rope_theta"] = c.theta;
  both["rope_scaling"] = c.old_scaling;
  both["rope_scaling"]["factor"] = 8;  // an integer equal to the float 8.0 agrees
  write_json(d.dir / "config.json", both);
  const RopeTable t = load_config(d.dir).rope;
  write_json(d.dir / "config.json", old_layout(base, c));
  check_same_table(t, load_config(d.dir).rope);
}

TEST_CASE("both layouts in one config: refused when they disagree", "[config][rope][errors]") {
  ScratchDir d;
  const json base = make_tiny(d.dir);
  const RopeCase c = rope_cases()[3];  // llama3
  json theta = new_layout(base, c);
  theta["rope_theta"] = 10000.0;
  check_refused(d.dir, theta,
                {"\"rope_theta\" (10000)", "\"rope_parameters.rope_theta\" (500000)"});
  json factor = new_layout(base, c);
  factor["rope_scaling"] = c.old_scaling;
  factor["rope_scaling"]["factor"] = 32.0;
  check_refused(d.dir, factor, {"\"rope_scaling\"", "disagrees with \"rope_parameters\""});
  json type = new_layout(base, c);
  type["rope_scaling"] = {{"type", "linear"}, {"factor", 8.0}};
  check_refused(d.dir, type, {"\"rope_scaling\"", "\"rope_parameters\"", "linear"});
  json partial = new_layout(base, c);
  partial["partial_rotary_factor"] = 1.0;
  partial["rope_parameters"]["partial_rotary_factor"] = 0.5;
  check_refused(d.dir, partial, {"\"partial_rotary_factor\"", "rope_parameters"});
}

TEST_CASE("an unknown rope_type is refused in either layout", "[config][rope][errors]") {
  ScratchDir d;
  const json base = make_tiny(d.dir);
  json old_type = base;
  old_type["rope_scaling"] = {{"type", "longrope"}, {"factor", 2.0}};
  check_refused(d.dir, old_type, {"\"rope_scaling.rope_type\"", "\"longrope\""});
  json old_rope_type = base;
  old_rope_type["rope_scaling"] = {{"rope_type", "su"}, {"factor", 2.0}};
  check_refused(d.dir, old_rope_type, {"\"rope_scaling.rope_type\"", "\"su\""});
  json fresh = new_layout(base, {"x", 10000.0, json()});
  fresh["rope_parameters"]["rope_type"] = "mrope";
  check_refused(d.dir, fresh, {"\"rope_parameters.rope_type\"", "\"mrope\""});
  json not_string = new_layout(base, {"x", 10000.0, json()});
  not_string["rope_parameters"]["rope_type"] = 3;
  check_refused(d.dir, not_string, {"\"rope_parameters.rope_type\"", "3"});
}

TEST_CASE("per-layer rope_parameters are refused", "[config][rope][errors]") {
  ScratchDir d;
  json cfg = make_tiny(d.dir);
  cfg.erase("rope_theta");
  cfg.erase("rope_scaling");
  cfg["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  write_json(d.dir / "config.json", cfg);
  const LoadResult r = config_error(d.dir);
  CHECK_THAT(r.message, Catch::Contains("rope_parameters.full_attention"));
  CHECK(r.kind == ErrorKind::kUnsupported);
}

// YaRN correction range, transformers' formula, for rotary dim D = 16, theta = 10000, original
// context L = 4096, beta_fast = 32, beta_slow = 1:
//   corr(b) = D * ln(L / (2 pi b)) / (2 ln theta)
//   low = max(corr(32), 0) = 2.61807...,  high = min(corr(1), D - 1) = 5.62836...
// rounded outwards to low = 2, high = 6 only when truncate is true (the default). Then for
// i in [0, D/2): ramp_i = clamp((i - low) / (high - low), 0, 1), and
//   inv_freq_i = theta^(-2i/D) * (ramp_i / factor + (1 - ramp_i)).
TEST_CASE("yarn truncate=false keeps the correction range unrounded", "[config][rope]") {
  const double theta = 10000, d = 16, l = 4096, factor = 4;
  auto corr = [&](double b) {
    return d * std::log(l / (2 * std::numbers::pi * b)) / (2 * std::log(theta));
  };
  CHECK(corr(32) == Approx(2.61807).epsilon(1e-5));
  CHECK(corr(1) == Approx(5.62836).epsilon(1e-5));
  auto expected = [&](double low, double high) {
    std::vector<float> out;
    for (int i = 0; i < 8; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      out.push_back(
          static_cast<float>(std::pow(theta, -2.0 * i / d) * (ramp / factor + (1 - ramp))));
    }
    return out;
  };
  const std::string yarn =
      R"({"rope_type":"yarn","factor":4,"original_max_position_embeddings":4096,)"
      R"("beta_fast":32,"beta_slow":1)";
  const RopeTable exact = make_rope_table(16, theta, 1.0, yarn + R"(,"truncate":false})", 4096);
  const RopeTable rounded = make_rope_table(16, theta, 1.0, yarn + R"(,"truncate":true})", 4096);
  const RopeTable dflt = make_rope_table(16, theta, 1.0, yarn + "}", 4096);
  const std::vector<float> want_exact = expected(corr(32), corr(1)), want_rounded = expected(2, 6);
  REQUIRE(exact.inv_freq.size() == 8);
  for (size_t i = 0; i < 8; ++i) {
    INFO("i=" << i);
    CHECK(exact.inv_freq[i] == Approx(want_exact[i]).epsilon(1e-6));
    CHECK(rounded.inv_freq[i] == Approx(want_rounded[i]).epsilon(1e-6));
  }
  CHECK(dflt.inv_freq == rounded.inv_freq);  // truncate defaults to true
  CHECK(exact.inv_freq[3] != rounded.inv_freq[3]);
}
