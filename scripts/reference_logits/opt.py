"""Reference forward pass of OPTForCausalLM (float64): pre-LN 125m style and post-LN 350m
style with project_in / project_out.
"""
import torch

from .ops import attention, layer_norm, linear


class OPT:
    """OPTForCausalLM (pre-LN 125m style and post-LN 350m style)."""

    OFFSET = 2

    def __init__(self, cfg, w):
        assert cfg["model_type"] == "opt"
        assert cfg.get("activation_function", "relu") == "relu"
        assert cfg.get("layer_norm_elementwise_affine", True)
        self.cfg = cfg
        self.w = w
        self.H = cfg["num_attention_heads"]
        self.hidden = cfg["hidden_size"]
        self.D = self.hidden // self.H
        self.L = cfg["num_hidden_layers"]
        self.eps = 1e-5  # nn.LayerNorm default, as in modeling_opt
        self.pre_ln = cfg.get("do_layer_norm_before", True)
        self.final_ln = self.pre_ln and not cfg.get("_remove_final_layer_norm", False)
        self.bias = cfg.get("enable_bias", True)
        proj = cfg.get("word_embed_proj_dim") or self.hidden
        self.has_proj = proj != self.hidden
        self.embed = w["model.decoder.embed_tokens.weight"]
        if cfg.get("tie_word_embeddings", True):
            self.lm_head = self.embed
        else:
            self.lm_head = w["lm_head.weight"]
        self.vocab = cfg["vocab_size"]
        assert w["model.decoder.embed_positions.weight"].shape[0] == cfg["max_position_embeddings"] + self.OFFSET

    def new_cache(self):
        return [[None, None] for _ in range(self.L)]

    def _b(self, name):
        return self.w[name] if self.bias else None

    def forward(self, ids, start, cache):
        w, H, D = self.w, self.H, self.D
        T = len(ids)
        pos = torch.arange(start, start + T)
        x = self.embed[torch.tensor(ids)]
        if self.has_proj:
            x = linear(x, w["model.decoder.project_in.weight"])
        # positions = cumsum(attention_mask) - 1 (+ offset 2): no padding -> position + 2
        x = x + w["model.decoder.embed_positions.weight"][pos + self.OFFSET]
        for i in range(self.L):
            p = "model.decoder.layers.%d." % i
            res = x
            h = x
            if self.pre_ln:
                h = layer_norm(h, w[p + "self_attn_layer_norm.weight"], w[p + "self_attn_layer_norm.bias"], self.eps)
            q = linear(h, w[p + "self_attn.q_proj.weight"], self._b(p + "self_attn.q_proj.bias")) * (D ** -0.5)
            k = linear(h, w[p + "self_attn.k_proj.weight"], self._b(p + "self_attn.k_proj.bias"))
            v = linear(h, w[p + "self_attn.v_proj.weight"], self._b(p + "self_attn.v_proj.bias"))
            q = q.view(T, H, D).transpose(0, 1)
            k = k.view(T, H, D).transpose(0, 1)
            v = v.view(T, H, D).transpose(0, 1)
            ck, cv = cache[i]
            if ck is None:
                assert start == 0
                ck, cv = k, v
            else:
                assert ck.shape[1] == start
                ck = torch.cat((ck, k), dim=1)
                cv = torch.cat((cv, v), dim=1)
            cache[i] = [ck, cv]
            a = attention(q, ck, cv, pos, 1.0)  # q already scaled
            a = a.transpose(0, 1).reshape(T, H * D)
            x = res + linear(a, w[p + "self_attn.out_proj.weight"], self._b(p + "self_attn.out_proj.bias"))
            if not self.pre_ln:
                x = layer_norm(x, w[p + "self_attn_layer_norm.weight"], w[p + "self_attn_layer_norm.bias"], self.eps)
            res = x
            h = x
            if self.pre_ln:
                h = layer_norm(h, w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"], self.eps)
            h = torch.relu(linear(h, w[p + "fc1.weight"], self._b(p + "fc1.bias")))
            x = res + linear(h, w[p + "fc2.weight"], self._b(p + "fc2.bias"))
            if not self.pre_ln:
                x = layer_norm(x, w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"], self.eps)
        if self.final_ln:
            x = layer_norm(x, w["model.decoder.final_layer_norm.weight"], w["model.decoder.final_layer_norm.bias"], self.eps)
        if self.has_proj:
            x = linear(x, w["model.decoder.project_out.weight"])
        return linear(x, self.lm_head)
