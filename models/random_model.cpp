// Random-weight Llama-shaped checkpoints and the safetensors writer.
#include "models/random_model.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/common.h"

namespace tandem {
namespace {

using json = nlohmann::json;

struct Shape {
  int64_t hidden, layers, heads, kv_heads, ffn, vocab, max_pos;
  bool tied;
  json rope_scaling;
  double theta;
};

Shape shape_of(const std::string& name) {
  const json llama3 = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  if (name == "llama-3.2-1b") return {2048, 16, 32, 8, 8192, 128256, 131072, true, llama3, 500000};
  if (name == "llama-3-8b") return {4096, 32, 32, 8, 14336, 128256, 8192, false, json(), 500000};
  if (name == "llama-3.1-8b") {  // Llama-3-8B's shape with the 128K context of Llama 3.1
    json scaling = llama3;
    scaling["factor"] = 8.0;
    return {4096, 32, 32, 8, 14336, 128256, 131072, false, scaling, 500000};
  }
  if (name == "tiny") return {128, 2, 4, 2, 256, 512, 4096, true, json(), 10000};
  // head_dim 128 (the 8B models'), where the host store keeps V by tiles.
  if (name == "tiny-d128") return {256, 2, 2, 1, 256, 512, 4096, true, json(), 10000};
  TANDEM_FAIL(kInvalidArgument, "unknown model shape \"", name,
              "\" (known: llama-3.2-1b, llama-3-8b, llama-3.1-8b, tiny, tiny-d128)");
}

const char* st_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    default:
      TANDEM_FAIL(kInvalidArgument, "dtype ", dtype_name(t), " cannot be written");
  }
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, DType dtype,
                       const std::vector<TensorSpec>& tensors,
                       const std::function<void(size_t, std::vector<float>&)>& fill) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const uint64_t bytes = static_cast<uint64_t>(n * dtype_size(dtype));
    header[t.name] = {
        {"dtype", st_dtype(dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) TANDEM_FAIL(kIo, path.string(), ": cannot write");
  const uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  std::vector<float> vals;
  std::vector<uint16_t> half;
  for (size_t i = 0; i < tensors.size(); ++i) {
    fill(i, vals);
    if (dtype == DType::kF32) {
      out.write(reinterpret_cast<const char*>(vals.data()),
                static_cast<std::streamsize>(vals.size() * 4));
    } else {
      half.resize(vals.size());
      for (size_t j = 0; j < vals.size(); ++j)
        half[j] = dtype == DType::kBF16 ? f32_to_bf16(vals[j]) : f32_to_f16(vals[j]);
      out.write(reinterpret_cast<const char*>(half.data()),
                static_cast<std::streamsize>(half.size() * 2));
    }
  }
  if (!out) TANDEM_FAIL(kIo, path.string(), ": write failed (disk full?)");
}

void make_random_model(const std::string& name, DType dtype, const std::filesystem::path& out,
                       uint64_t seed) {
  const Shape s = shape_of(name);
  std::filesystem::create_directories(out);
  const int64_t hd = s.hidden / s.heads;
  json cfg = {{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"hidden_size", s.hidden},
              {"num_hidden_layers", s.layers},
              {"num_attention_heads", s.heads},
              {"num_key_value_heads", s.kv_heads},
              {"intermediate_size", s.ffn},
              {"vocab_size", s.vocab},
              {"max_position_embeddings", s.max_pos},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", s.theta},
              {"rope_scaling", s.rope_scaling},
              {"tie_word_embeddings", s.tied},
              {"hidden_act", "silu"},
              {"bos_token_id", 1},
              {"eos_token_id", 2},
              {"torch_dtype", dtype == DType::kF32    ? "float32"
                              : dtype == DType::kBF16 ? "bfloat16"
                                                      : "float16"}};
  std::ofstream(out / "config.json") << cfg.dump(2) << "\n";
  std::ofstream(out / "generation_config.json")
      << json{{"bos_token_id", 1}, {"eos_token_id", 2}}.dump(2) << "\n";

  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", {s.vocab, s.hidden}});
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {s.hidden}});
    t.push_back({p + "post_attention_layernorm.weight", {s.hidden}});
    t.push_back({p + "self_attn.q_proj.weight", {s.heads * hd, s.hidden}});
    t.push_back({p + "self_attn.k_proj.weight", {s.kv_heads * hd, s.hidden}});
    t.push_back({p + "self_attn.v_proj.weight", {s.kv_heads * hd, s.hidden}});
    t.push_back({p + "self_attn.o_proj.weight", {s.hidden, s.heads * hd}});
    t.push_back({p + "mlp.gate_proj.weight", {s.ffn, s.hidden}});
    t.push_back({p + "mlp.up_proj.weight", {s.ffn, s.hidden}});
    t.push_back({p + "mlp.down_proj.weight", {s.hidden, s.ffn}});
  }
  t.push_back({"model.norm.weight", {s.hidden}});
  if (!s.tied) t.push_back({"lm_head.weight", {s.vocab, s.hidden}});

  write_safetensors(out / "model.safetensors", dtype, t, [&](size_t i, std::vector<float>& v) {
    int64_t n = 1;
    for (int64_t d : t[i].shape) n *= d;
    v.resize(static_cast<size_t>(n));
    if (t[i].shape.size() == 1) {  // norm weights near 1
      std::fill(v.begin(), v.end(), 1.0f);
      return;
    }
    // xorshift64*: fast, deterministic uniform noise scaled like a trained init (std ~ 1/sqrt(k)).
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + i + 1;
    const float scale = 1.7320508f / std::sqrt(static_cast<float>(t[i].shape.back()));
    for (auto& e : v) {
      x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
      const uint64_t r = x * 0x2545F4914F6CDD1Dull;
      e = (static_cast<float>(r >> 40) * 0x1.0p-24f * 2.0f - 1.0f) * scale;
    }
  });
}

}  // namespace tandem
