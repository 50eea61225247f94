"""Random fixture weights (fixed seeds, HF module order) at scales that make the logits vary
by several units.
"""
import numpy as np
import torch

from .fixtures import V

# init scales
STD_EMBED = 0.3      # also the (tied) lm_head scale
STD_MAT = 0.15       # attention / MLP matrices
STD_BIAS = 0.1
NORM_SPREAD = 0.2    # norm weights uniform in [1 - 0.2, 1 + 0.2]


class Init:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def normal(self, shape, std):
        return torch.from_numpy(self.rng.standard_normal(shape) * std)

    def norm_w(self, n):
        return torch.from_numpy(1.0 + self.rng.uniform(-NORM_SPREAD, NORM_SPREAD, n))


def make_weights(cfg, seed):
    """Random weights, returned in HF module (state_dict) order."""
    ini = Init(seed)
    w = {}
    mt = cfg["model_type"]
    hid = cfg["hidden_size"]
    if mt == "opt":
        pdim = cfg["word_embed_proj_dim"]
        ffn = cfg["ffn_dim"]
        w["model.decoder.embed_tokens.weight"] = ini.normal((V, pdim), STD_EMBED)
        w["model.decoder.embed_positions.weight"] = ini.normal((cfg["max_position_embeddings"] + 2, hid), STD_EMBED)
        if pdim != hid:
            w["model.decoder.project_out.weight"] = ini.normal((pdim, hid), STD_MAT)
            w["model.decoder.project_in.weight"] = ini.normal((hid, pdim), STD_MAT * 2)
        if cfg["do_layer_norm_before"] and not cfg["_remove_final_layer_norm"]:
            w["model.decoder.final_layer_norm.weight"] = ini.norm_w(hid)
            w["model.decoder.final_layer_norm.bias"] = ini.normal((hid,), STD_BIAS)
        for i in range(cfg["num_hidden_layers"]):
            p = "model.decoder.layers.%d." % i
            for n in ("k_proj", "v_proj", "q_proj", "out_proj"):
                w[p + "self_attn.%s.weight" % n] = ini.normal((hid, hid), STD_MAT)
                w[p + "self_attn.%s.bias" % n] = ini.normal((hid,), STD_BIAS)
            w[p + "self_attn_layer_norm.weight"] = ini.norm_w(hid)
            w[p + "self_attn_layer_norm.bias"] = ini.normal((hid,), STD_BIAS)
            w[p + "fc1.weight"] = ini.normal((ffn, hid), STD_MAT)
            w[p + "fc1.bias"] = ini.normal((ffn,), STD_BIAS)
            w[p + "fc2.weight"] = ini.normal((hid, ffn), STD_MAT)
            w[p + "fc2.bias"] = ini.normal((hid,), STD_BIAS)
            w[p + "final_layer_norm.weight"] = ini.norm_w(hid)
            w[p + "final_layer_norm.bias"] = ini.normal((hid,), STD_BIAS)
        return w
    H = cfg["num_attention_heads"]
    KV = cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or hid // H
    inter = cfg["intermediate_size"]
    qkv_bias = mt == "qwen2" or cfg.get("attention_bias", False)
    w["model.embed_tokens.weight"] = ini.normal((V, hid), STD_EMBED)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        w[p + "self_attn.q_proj.weight"] = ini.normal((H * D, hid), STD_MAT)
        if qkv_bias:
            w[p + "self_attn.q_proj.bias"] = ini.normal((H * D,), STD_BIAS)
        w[p + "self_attn.k_proj.weight"] = ini.normal((KV * D, hid), STD_MAT)
        if qkv_bias:
            w[p + "self_attn.k_proj.bias"] = ini.normal((KV * D,), STD_BIAS)
        w[p + "self_attn.v_proj.weight"] = ini.normal((KV * D, hid), STD_MAT)
        if qkv_bias:
            w[p + "self_attn.v_proj.bias"] = ini.normal((KV * D,), STD_BIAS)
        w[p + "self_attn.o_proj.weight"] = ini.normal((hid, H * D), STD_MAT)
        if mt == "qwen3":
            w[p + "self_attn.q_norm.weight"] = ini.norm_w(D)
            w[p + "self_attn.k_norm.weight"] = ini.norm_w(D)
        w[p + "mlp.gate_proj.weight"] = ini.normal((inter, hid), STD_MAT)
        w[p + "mlp.up_proj.weight"] = ini.normal((inter, hid), STD_MAT)
        w[p + "mlp.down_proj.weight"] = ini.normal((hid, inter), STD_MAT)
        w[p + "input_layernorm.weight"] = ini.norm_w(hid)
        w[p + "post_attention_layernorm.weight"] = ini.norm_w(hid)
    w["model.norm.weight"] = ini.norm_w(hid)
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = ini.normal((V, hid), STD_EMBED)
    return w
