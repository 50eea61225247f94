// Llama (1/2/3/3.x) and Mistral: tensor names of LlamaForCausalLM / MistralForCausalLM.
// RMSNorm pre-norm blocks, rotary positions, SwiGLU MLP, optional attention and MLP biases.
#include "models/model.h"

namespace tandem {

void map_llama_weights(const ModelConfig& c, const TensorStore& s, ModelWeights& w) {
  const int64_t h = c.hidden, qd = int64_t{c.n_head_q} * c.head_dim,
                kvd = int64_t{c.n_head_kv} * c.head_dim, f = c.ffn, v = c.vocab_size;
  // Tied checkpoints may store the table under either name (tinystories-656k keeps only lm_head).
  const bool has_embed = s.has("model.embed_tokens.weight");
  w.embed = s.get(has_embed || !c.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight",
                  {v, h});
  w.lm_head = c.tie_embeddings ? w.embed : s.get("lm_head.weight", {v, h});
  w.final_norm = w.small_f32(s, "model.norm.weight", h);

  for (int32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers.emplace_back();
    l.attn_norm = w.small_f32(s, p + "input_layernorm.weight", h);
    l.ffn_norm = w.small_f32(s, p + "post_attention_layernorm.weight", h);
    l.wq = s.get(p + "self_attn.q_proj.weight", {qd, h});
    l.wk = s.get(p + "self_attn.k_proj.weight", {kvd, h});
    l.wv = s.get(p + "self_attn.v_proj.weight", {kvd, h});
    l.wo = s.get(p + "self_attn.o_proj.weight", {h, qd});
    if (c.qkv_bias) {
      l.bq = w.small_f32(s, p + "self_attn.q_proj.bias", qd);
      l.bk = w.small_f32(s, p + "self_attn.k_proj.bias", kvd);
      l.bv = w.small_f32(s, p + "self_attn.v_proj.bias", kvd);
    }
    if (c.o_bias) l.bo = w.small_f32(s, p + "self_attn.o_proj.bias", h);
    l.w_gate = s.get(p + "mlp.gate_proj.weight", {f, h});
    l.w_up = s.get(p + "mlp.up_proj.weight", {f, h});
    l.w_down = s.get(p + "mlp.down_proj.weight", {h, f});
    if (c.mlp_bias) {
      l.b_gate = w.small_f32(s, p + "mlp.gate_proj.bias", f);
      l.b_up = w.small_f32(s, p + "mlp.up_proj.bias", f);
      l.b_down = w.small_f32(s, p + "mlp.down_proj.bias", h);
    }
  }
}

}  // namespace tandem
