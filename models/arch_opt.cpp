// OPT: learned positions (offset 2), LayerNorm (pre-norm, or post-norm as in OPT-350m), ReLU MLP
// (fc1/fc2), biases everywhere, optional project_in/project_out when word_embed_proj_dim differs.
#include "models/model.h"

namespace tandem {

void map_opt_weights(const ModelConfig& c, const TensorStore& s, ModelWeights& w) {
  const int64_t h = c.hidden, e = c.embed_dim, f = c.ffn, v = c.vocab_size;
  const int64_t qd = int64_t{c.n_head_q} * c.head_dim;
  const std::string d = "model.decoder.";
  w.embed = s.get(d + "embed_tokens.weight", {v, e});
  w.lm_head =
      c.tie_embeddings || !s.has("lm_head.weight") ? w.embed : s.get("lm_head.weight", {v, e});
  w.pos_embed = s.get(d + "embed_positions.weight", {int64_t{c.max_context} + c.pos_offset, h});
  if (e != h) {
    w.project_in = s.get(d + "project_in.weight", {h, e});
    w.project_out = s.get(d + "project_out.weight", {e, h});
  }
  if (c.final_norm) {
    w.final_norm = w.small_f32(s, d + "final_layer_norm.weight", h);
    w.final_norm_b = w.small_f32(s, d + "final_layer_norm.bias", h);
  }
  for (int32_t i = 0; i < c.n_layer; ++i) {
    const std::string p = d + "layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers.emplace_back();
    l.attn_norm = w.small_f32(s, p + "self_attn_layer_norm.weight", h);
    l.attn_norm_b = w.small_f32(s, p + "self_attn_layer_norm.bias", h);
    l.ffn_norm = w.small_f32(s, p + "final_layer_norm.weight", h);
    l.ffn_norm_b = w.small_f32(s, p + "final_layer_norm.bias", h);
    l.wq = s.get(p + "self_attn.q_proj.weight", {qd, h});
    l.wk = s.get(p + "self_attn.k_proj.weight", {qd, h});
    l.wv = s.get(p + "self_attn.v_proj.weight", {qd, h});
    l.wo = s.get(p + "self_attn.out_proj.weight", {h, qd});
    l.w_up = s.get(p + "fc1.weight", {f, h});
    l.w_down = s.get(p + "fc2.weight", {h, f});
    if (c.qkv_bias) {
      l.bq = w.small_f32(s, p + "self_attn.q_proj.bias", qd);
      l.bk = w.small_f32(s, p + "self_attn.k_proj.bias", qd);
      l.bv = w.small_f32(s, p + "self_attn.v_proj.bias", qd);
      l.bo = w.small_f32(s, p + "self_attn.out_proj.bias", h);
      l.b_up = w.small_f32(s, p + "fc1.bias", f);
      l.b_down = w.small_f32(s, p + "fc2.bias", h);
    }
  }
}

}  // namespace tandem
