// Qwen2 / Qwen2.5 (q/k/v biases) and Qwen3 (per-head RMSNorm on q and k before RoPE). The block
// layout and names are Llama's; only the attention extras differ.
#include "models/model.h"

namespace tandem {

void map_qwen_weights(const ModelConfig& c, const TensorStore& s, ModelWeights& w) {
  map_llama_weights(c, s, w);  // qkv biases follow ModelConfig::qkv_bias (always on for Qwen2)
  if (!c.qk_norm) return;
  for (int32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    l.q_norm = w.small_f32(s, p + "q_norm.weight", c.head_dim);
    l.k_norm = w.small_f32(s, p + "k_norm.weight", c.head_dim);
  }
}

}  // namespace tandem
