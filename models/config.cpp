// Parsing of Hugging Face config.json / generation_config.json into ModelConfig, including the
// rotary tables (default, linear, dynamic, llama3 and yarn scaling).
#include "models/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>
#include <optional>
#include <sstream>

#include "kernels/json_depth.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// The text of a file; nullopt when it does not exist and is not required.
std::optional<std::string> read_text(const std::filesystem::path& path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!required) return std::nullopt;
    TANDEM_FAIL(kNotFound, path.string(), ": file not found");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json(std::string_view text, const std::string& name) {
  // The rope objects are copied, compared and printed below, recursively.
  check_json_depth(text, kMaxFileJsonDepth, name);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    TANDEM_FAIL(kInvalidArgument, name, ": invalid JSON: ", e.what());
  }
}

// Typed field access with errors that name the file and the key.
struct Fields {
  const json& j;
  std::string file;

  bool has(const char* key) const { return j.contains(key) && !j[key].is_null(); }

  int32_t int_or(const char* key, int32_t def) const {
    if (!has(key)) return def;
    const json& v = j[key];
    if (!v.is_number_integer())
      TANDEM_FAIL(kInvalidArgument, file, ": \"", key, "\" must be an integer");
    const int64_t x = v.get<int64_t>();
    if (x < 0 || x > (int64_t{1} << 30))
      TANDEM_FAIL(kInvalidArgument, file, ": \"", key, "\" out of range: ", x);
    return static_cast<int32_t>(x);
  }
  int32_t int_req(const char* key) const {
    if (!has(key)) TANDEM_FAIL(kInvalidArgument, file, ": missing \"", key, "\"");
    const int32_t x = int_or(key, 0);
    if (x <= 0) TANDEM_FAIL(kInvalidArgument, file, ": \"", key, "\" must be positive");
    return x;
  }
  double num_or(const char* key, double def) const {
    if (!has(key)) return def;
    if (!j[key].is_number())
      TANDEM_FAIL(kInvalidArgument, file, ": \"", key, "\" must be a number");
    return j[key].get<double>();
  }
  bool bool_or(const char* key, bool def) const {
    if (!has(key)) return def;
    if (!j[key].is_boolean())
      TANDEM_FAIL(kInvalidArgument, file, ": \"", key, "\" must be a boolean");
    return j[key].get<bool>();
  }
  std::string str_or(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    if (!j[key].is_string())
      TANDEM_FAIL(kInvalidArgument, file, ": \"", key, "\" must be a string");
    return j[key].get<std::string>();
  }
};

std::vector<int32_t> ids_of(const json& v) {
  std::vector<int32_t> out;
  if (v.is_number_integer()) out.push_back(v.get<int32_t>());
  if (v.is_array())
    for (const json& e : v)
      if (e.is_number_integer()) out.push_back(e.get<int32_t>());
  return out;
}

double yarn_mscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

constexpr const char* kRopeTypes = "default, linear, dynamic, llama3, yarn";

bool known_rope_type(const std::string& t) {
  return t == "default" || t == "linear" || t == "dynamic" || t == "llama3" || t == "yarn";
}

// The scaling object in one spelling: "type" (old) renamed to "rope_type", the type defaulted,
// and the keys that are not scaling (theta, partial rotary factor) dropped.
json normalized_scaling(const json& s) {
  json n = s.is_object() ? s : json::object();
  if (n.contains("type")) {
    if (!n.contains("rope_type")) n["rope_type"] = n["type"];
    n.erase("type");
  }
  if (!n.contains("rope_type") || n["rope_type"].is_null()) n["rope_type"] = "default";
  n.erase("rope_theta");
  n.erase("partial_rotary_factor");
  return n;
}

// RoPE settings of config.json in either layout: transformers 4 writes top-level "rope_theta"
// and "rope_scaling"; transformers 5 writes only "rope_parameters" (theta, type and scaling
// fields in one object). Both are read with the same defaults; when a config carries both and
// they disagree, no guess is safe, so the load is refused.
struct RopeSettings {
  double theta = 10000.0;
  double partial = 1.0;
  json scaling;  // normalized_scaling(): always has "rope_type"
};

RopeSettings read_rope_settings(const json& j, const std::string& file) {
  const Fields f{j, file};
  RopeSettings r;
  r.theta = f.num_or("rope_theta", 10000.0);
  r.partial = f.num_or("partial_rotary_factor", 1.0);
  if (f.has("rope_scaling") && !j["rope_scaling"].is_object())
    TANDEM_FAIL(kInvalidArgument, file, ": \"rope_scaling\" must be an object");
  const json old_scaling = f.has("rope_scaling") ? normalized_scaling(j["rope_scaling"]) : json();
  const char* type_key = "rope_scaling.rope_type";
  if (!f.has("rope_parameters")) {
    r.scaling = normalized_scaling(old_scaling);
  } else {
    const json& p = j["rope_parameters"];
    if (!p.is_object())
      TANDEM_FAIL(kInvalidArgument, file, ": \"rope_parameters\" must be an object");
    for (const auto& [key, value] : p.items())
      if (value.is_object())  // per-layer-type tables (hybrid attention models)
        TANDEM_FAIL(kUnsupported, file, ": \"rope_parameters.", key,
                    "\" (per-layer RoPE parameters) is not supported");
    const Fields pf{p, file + " rope_parameters"};
    if (f.has("rope_theta") && pf.has("rope_theta") && pf.num_or("rope_theta", 0) != r.theta)
      TANDEM_FAIL(kInvalidArgument, file, ": \"rope_theta\" (", r.theta,
                  ") disagrees with \"rope_parameters.rope_theta\" (", pf.num_or("rope_theta", 0),
                  ")");
    if (f.has("partial_rotary_factor") && pf.has("partial_rotary_factor") &&
        pf.num_or("partial_rotary_factor", 0) != r.partial)
      TANDEM_FAIL(kInvalidArgument, file, ": \"partial_rotary_factor\" (", r.partial,
                  ") disagrees with \"rope_parameters.partial_rotary_factor\" (",
                  pf.num_or("partial_rotary_factor", 0), ")");
    r.theta = pf.num_or("rope_theta", r.theta);
    r.partial = pf.num_or("partial_rotary_factor", r.partial);
    r.scaling = normalized_scaling(p);
    if (old_scaling.is_object() && old_scaling != r.scaling)
      TANDEM_FAIL(kInvalidArgument, file, ": \"rope_scaling\" ", old_scaling.dump(),
                  " disagrees with \"rope_parameters\" ", r.scaling.dump());
    type_key = "rope_parameters.rope_type";
  }
  const json& type = r.scaling["rope_type"];
  if (!type.is_string() || !known_rope_type(type.get<std::string>()))
    TANDEM_FAIL(kInvalidArgument, file, ": unknown \"", type_key, "\" ", type.dump(),
                " (supported: ", kRopeTypes, ")");
  return r;
}

}  // namespace

std::string_view arch_name(Arch a) {
  switch (a) {
    case Arch::kLlama:
      return "llama";
    case Arch::kQwen2:
      return "qwen2";
    case Arch::kQwen3:
      return "qwen3";
    case Arch::kOpt:
      return "opt";
  }
  return "?";
}

RopeTable make_rope_table(int32_t head_dim, double theta, double partial_rotary_factor,
                          const std::string& scaling_json, int32_t max_position) {
  // Out-of-range settings gave NaN or infinite frequencies (theta <= 0), or undefined behaviour
  // (a factor of 1e300 cast to int); they are refused instead of loading a wrong model.
  TANDEM_REQUIRE(std::isfinite(theta) && theta > 0, kInvalidArgument,
                 "rope_theta must be > 0, got ", theta);
  TANDEM_REQUIRE(partial_rotary_factor > 0 && partial_rotary_factor <= 1, kInvalidArgument,
                 "partial_rotary_factor must be in (0, 1], got ", partial_rotary_factor);
  RopeTable t;
  t.head_dim = head_dim;
  t.rotary_dim = static_cast<int32_t>(head_dim * partial_rotary_factor);
  t.rotary_dim -= t.rotary_dim % 2;
  const int32_t half = t.rotary_dim / 2;
  const double dim = t.rotary_dim;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] = 1.0 / std::pow(theta, 2.0 * i / dim);

  const json s = scaling_json.empty() ? json() : json::parse(scaling_json);
  if (s.is_object()) {
    const Fields f{s, "config.json rope_scaling"};
    std::string type = f.str_or("rope_type", f.str_or("type", "default"));
    const double factor = f.num_or("factor", 1.0);
    if (type == "default") {
    } else if (type == "linear") {
      for (double& x : inv) x /= factor;
    } else if (type == "dynamic") {
      // Dynamic NTK only changes the frequencies past max_position_embeddings, and Tandem caps
      // the context there, so within the served context it is the default table.
    } else if (type == "llama3") {
      const double lo = f.num_or("low_freq_factor", 1.0), hi = f.num_or("high_freq_factor", 4.0);
      const double old_ctx = f.num_or("original_max_position_embeddings", 8192);
      const double lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
      for (double& x : inv) {
        const double wavelen = 2.0 * std::numbers::pi / x;
        if (wavelen > lo_wavelen) {
          x /= factor;
        } else if (wavelen >= hi_wavelen) {
          const double smooth = (old_ctx / wavelen - lo) / (hi - lo);
          x = (1.0 - smooth) * x / factor + smooth * x;
        }
      }
    } else if (type == "yarn") {
      const double orig = f.num_or("original_max_position_embeddings", max_position);
      const double beta_fast = f.num_or("beta_fast", 32), beta_slow = f.num_or("beta_slow", 1);
      double attn = f.num_or("attention_factor", 0.0);
      if (attn == 0.0) {
        const double ms = f.num_or("mscale", 0.0), ms_all = f.num_or("mscale_all_dim", 0.0);
        attn = (ms != 0.0 && ms_all != 0.0) ? yarn_mscale(factor, ms) / yarn_mscale(factor, ms_all)
                                            : yarn_mscale(factor, 1.0);
      }
      auto corr = [&](double rot) {
        return dim * std::log(orig / (rot * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
      };
      // transformers rounds the correction range outwards to whole dimensions only when
      // "truncate" is true (its default); without it the ramp starts and ends mid-dimension.
      const bool truncate = f.bool_or("truncate", true);
      double low = corr(beta_fast), high = corr(beta_slow);
      if (truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1);
      if (low == high) high += 0.001;  // avoid a zero-width ramp
      for (int32_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
        const double extra = 1.0 - ramp;  // weight of the unscaled frequency
        double& x = inv[static_cast<size_t>(i)];
        x = (x / factor) * (1.0 - extra) + x * extra;
      }
      t.mscale = static_cast<float>(attn);
    } else {
      TANDEM_FAIL(kUnsupported, "config.json: unsupported rope_scaling type \"", type, "\"");
    }
  }
  // Whatever the scaling parameters (a factor of 0, equal low/high frequency factors, ...), the
  // table must be usable: positive, finite frequencies and attention scale.
  for (double x : inv)
    TANDEM_REQUIRE(std::isfinite(x) && x > 0, kInvalidArgument,
                   "the RoPE settings give a non-finite or non-positive frequency (", x,
                   "): check rope_theta and the scaling parameters");
  TANDEM_REQUIRE(std::isfinite(t.mscale) && t.mscale > 0, kInvalidArgument,
                 "the RoPE scaling gives an attention factor of ", t.mscale);
  t.inv_freq.assign(inv.begin(), inv.end());
  return t;
}

int64_t ModelConfig::n_params() const {
  // In double: every size may be up to 2^30, and the products overflow int64.
  const double attn = double{1} * hidden * head_dim * (2.0 * n_head_q + 2.0 * n_head_kv);
  const double mlp = double{1} * hidden * ffn * (arch == Arch::kOpt ? 2 : 3);
  const double emb = double{1} * vocab_size * (arch == Arch::kOpt ? embed_dim : hidden);
  const double n = n_layer * (attn + mlp) + emb * (tie_embeddings ? 1 : 2);
  return n >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(n);
}

ModelConfig load_config(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir))
    TANDEM_FAIL(kNotFound, dir.string(), ": model folder not found");
  const std::filesystem::path path = dir / "config.json";
  const std::filesystem::path gpath = dir / "generation_config.json";
  const std::optional<std::string> gen = read_text(gpath, false);
  if (gen && gen->empty()) TANDEM_FAIL(kInvalidArgument, gpath.string(), ": invalid JSON: empty");
  return parse_config(*read_text(path, true), gen ? *gen : std::string_view(), path.string(),
                      gpath.string());
}

ModelConfig parse_config(std::string_view config_text, std::string_view generation_text,
                         const std::string& config_name, const std::string& generation_name) {
  const json j = parse_json(config_text, config_name);
  const std::string& path = config_name;
  if (!j.is_object()) TANDEM_FAIL(kInvalidArgument, path, ": not a JSON object");
  const Fields f{j, path};

  ModelConfig c;
  c.model_type = f.str_or("model_type", "");
  if (c.model_type == "llama" || c.model_type == "mistral") {
    c.arch = Arch::kLlama;
  } else if (c.model_type == "qwen2") {
    c.arch = Arch::kQwen2;
  } else if (c.model_type == "qwen3") {
    c.arch = Arch::kQwen3;
  } else if (c.model_type == "opt") {
    c.arch = Arch::kOpt;
  } else {
    TANDEM_FAIL(kUnsupported, path, ": unknown model_type \"", c.model_type,
                "\" (supported: llama, mistral, qwen2, qwen3, opt)");
  }

  c.vocab_size = f.int_req("vocab_size");
  c.hidden = f.int_req("hidden_size");
  c.n_layer = f.int_req("num_hidden_layers");
  c.n_head_q = f.int_req("num_attention_heads");
  c.max_context = f.int_req("max_position_embeddings");
  c.tie_embeddings = f.bool_or("tie_word_embeddings", c.arch == Arch::kOpt);

  if (c.arch == Arch::kOpt) {
    c.n_head_kv = c.n_head_q;
    c.ffn = f.int_req("ffn_dim");
    c.norm_eps = 1e-5f;
    c.pre_norm = f.bool_or("do_layer_norm_before", true);
    // As in transformers' OPTDecoder: the final LayerNorm exists only for pre-norm models, and
    // some (OPT-350m's conversions) drop it with _remove_final_layer_norm.
    c.final_norm = c.pre_norm && !f.bool_or("_remove_final_layer_norm", false);
    c.embed_dim = f.int_or("word_embed_proj_dim", c.hidden);
    c.pos_offset = 2;
    const bool bias = f.bool_or("enable_bias", true);
    c.qkv_bias = c.o_bias = c.mlp_bias = bias;
    if (f.str_or("activation_function", "relu") != "relu")
      TANDEM_FAIL(kUnsupported, path, ": OPT activation_function \"",
                  f.str_or("activation_function", ""), "\" is not supported (relu only)");
    if (!f.bool_or("layer_norm_elementwise_affine", true))
      TANDEM_FAIL(kUnsupported, path, ": layer_norm_elementwise_affine=false");
  } else {
    c.n_head_kv = f.int_or("num_key_value_heads", c.n_head_q);
    c.ffn = f.int_req("intermediate_size");
    c.norm_eps = static_cast<float>(f.num_or("rms_norm_eps", 1e-6));
    if (!(c.norm_eps >= 0 && c.norm_eps < 1))
      TANDEM_FAIL(kInvalidArgument, path, ": \"rms_norm_eps\" must be in [0, 1), got ",
                  f.num_or("rms_norm_eps", 0));
    const std::string act = f.str_or("hidden_act", "silu");
    if (act != "silu" && act != "swish")
      TANDEM_FAIL(kUnsupported, path, ": hidden_act \"", act, "\" is not supported (silu)");
    c.qkv_bias = c.arch == Arch::kQwen2 || f.bool_or("attention_bias", false);
    c.o_bias = c.arch != Arch::kQwen2 && f.bool_or("attention_bias", false);
    c.mlp_bias = f.bool_or("mlp_bias", false);
    c.qk_norm = c.arch == Arch::kQwen3;
    // A sliding window shorter than the context changes attention; serve only up to it, where
    // full attention is exact.
    if (f.has("sliding_window") && f.bool_or("use_sliding_window", c.arch == Arch::kLlama)) {
      const int32_t w = f.int_or("sliding_window", 0);
      if (w > 0 && w < c.max_context) c.max_context = w;
    }
  }
  if (c.n_head_kv <= 0 || c.n_head_q % c.n_head_kv != 0)
    TANDEM_FAIL(kInvalidArgument, path, ": num_attention_heads (", c.n_head_q,
                ") is not a multiple of num_key_value_heads (", c.n_head_kv, ")");
  c.head_dim = f.int_or("head_dim", 0);
  // transformers' Qwen3Config defaults head_dim to 128 whatever the width; Llama, Mistral and
  // Qwen2 derive it from hidden_size / num_attention_heads.
  if (c.head_dim == 0 && c.arch == Arch::kQwen3) c.head_dim = 128;
  if (c.head_dim == 0) {
    if (c.hidden % c.n_head_q != 0)
      TANDEM_FAIL(kInvalidArgument, path, ": hidden_size is not a multiple of heads");
    c.head_dim = c.hidden / c.n_head_q;
  }
  if (c.head_dim % 2 != 0) TANDEM_FAIL(kUnsupported, path, ": odd head_dim ", c.head_dim);

  if (c.arch != Arch::kOpt) {
    const RopeSettings rope = read_rope_settings(j, path);
    try {
      c.rope =
          make_rope_table(c.head_dim, rope.theta, rope.partial, rope.scaling.dump(), c.max_context);
    } catch (const Error& e) {
      throw Error(e.kind(), cat(path, ": ", e.what()));
    }
  }

  c.bos_id = f.has("bos_token_id") && j["bos_token_id"].is_number_integer()
                 ? j["bos_token_id"].get<int32_t>()
                 : -1;
  if (f.has("eos_token_id")) c.eos_ids = ids_of(j["eos_token_id"]);

  const json g = generation_text.empty() ? json() : parse_json(generation_text, generation_name);
  if (g.is_object()) {
    const Fields gf{g, generation_name};
    if (gf.has("eos_token_id")) c.eos_ids = ids_of(g["eos_token_id"]);
    if (gf.has("bos_token_id") && g["bos_token_id"].is_number_integer())
      c.bos_id = g["bos_token_id"].get<int32_t>();
    c.gen.do_sample = gf.bool_or("do_sample", false);
    c.gen.temperature = static_cast<float>(gf.num_or("temperature", 1.0));
    c.gen.top_p = static_cast<float>(gf.num_or("top_p", 1.0));
    c.gen.top_k = gf.int_or("top_k", 0);
    c.gen.repetition_penalty = static_cast<float>(gf.num_or("repetition_penalty", 1.0));
  }
  return c;
}

}  // namespace tandem
