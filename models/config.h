// ModelConfig: the architecture-independent description of a checkpoint, parsed from the
// Hugging Face config.json (+ generation_config.json for sampling defaults and EOS ids).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/backend.h"

namespace tandem {

enum class Arch : uint8_t { kLlama, kQwen2, kQwen3, kOpt };

struct GenerationDefaults {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float repetition_penalty = 1.0f;
  bool do_sample = false;  // false: greedy unless the request asks otherwise
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string model_type;
  int32_t vocab_size = 0;
  int32_t hidden = 0;
  int32_t n_layer = 0;
  int32_t n_head_q = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t ffn = 0;          // intermediate size
  int32_t max_context = 0;  // max_position_embeddings (capped by a sliding window, see below)
  float norm_eps = 1e-5f;
  bool tie_embeddings = false;
  bool qkv_bias = false;  // Qwen2, attention_bias
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;  // Qwen3
  RopeTable rope;        // empty inv_freq for OPT (learned positions)
  // OPT only.
  bool pre_norm = true;    // do_layer_norm_before
  bool final_norm = true;  // LayerNorm before lm_head (pre_norm && !_remove_final_layer_norm)
  int32_t embed_dim = 0;   // word_embed_proj_dim (== hidden unless project_in/out exist)
  int32_t pos_offset = 0;  // learned position table row = position + offset (2 for OPT)
  // Tokens.
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
  GenerationDefaults gen;

  int64_t n_params() const;  // approximate, for logs
};

// Reads dir/config.json and dir/generation_config.json (optional). Throws tandem::Error with a
// one-line message naming the file on anything missing, malformed or unsupported.
ModelConfig load_config(const std::filesystem::path& dir);
// The same from the files' text (generation_text empty: no generation_config.json); the names
// are what errors call the files.
ModelConfig parse_config(std::string_view config_text, std::string_view generation_text,
                         const std::string& config_name = "config.json",
                         const std::string& generation_name = "generation_config.json");

// inv_freq for head_dim / theta / a rope scaling object (config.json's "rope_scaling" or
// transformers 5's "rope_parameters"; exposed for tests).
RopeTable make_rope_table(int32_t head_dim, double theta, double partial_rotary_factor,
                          const std::string& scaling_json, int32_t max_position);

std::string_view arch_name(Arch a);

}  // namespace tandem
