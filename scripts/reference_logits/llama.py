"""Reference forward pass of the llama / mistral / qwen2 / qwen3 family (float64), following
the Hugging Face modeling code.
"""
import torch

from .ops import apply_rope, attention, linear, rms_norm, rope_inv_freq


class LlamaFamily:
    """llama / mistral / qwen2 / qwen3 decoder-only models."""

    def __init__(self, cfg, w):
        self.cfg = cfg
        self.mt = cfg["model_type"]
        self.H = cfg["num_attention_heads"]
        self.KV = cfg.get("num_key_value_heads") or self.H
        self.hidden = cfg["hidden_size"]
        self.D = cfg.get("head_dim") or self.hidden // self.H
        self.L = cfg["num_hidden_layers"]
        self.eps = cfg["rms_norm_eps"]
        self.w = w
        self.embed = w["model.embed_tokens.weight"] if "model.embed_tokens.weight" in w else w["lm_head.weight"]
        if cfg.get("tie_word_embeddings", False) or "lm_head.weight" not in w:
            assert cfg.get("tie_word_embeddings", False), "untied model without lm_head.weight"
            self.lm_head = self.embed
        else:
            self.lm_head = w["lm_head.weight"]
        self.inv_freq = rope_inv_freq(cfg, self.D)
        self.qk_norm = self.mt == "qwen3"
        assert self.mt in ("llama", "mistral", "qwen2", "qwen3")
        if self.mt == "mistral":
            assert cfg.get("sliding_window") is None
        if self.mt in ("qwen2", "qwen3"):
            assert not cfg.get("use_sliding_window", False)
        self.vocab = cfg["vocab_size"]

    def new_cache(self):
        return [[None, None] for _ in range(self.L)]

    def forward(self, ids, start, cache):
        """ids: list of T token ids at positions start..start+T-1; cache is updated in place.
        Returns logits [T, V]."""
        w, H, KV, D = self.w, self.H, self.KV, self.D
        T = len(ids)
        pos = torch.arange(start, start + T)
        posf = pos.to(torch.float64)
        x = self.embed[torch.tensor(ids)]                  # [T, hidden]
        for i in range(self.L):
            p = "model.layers.%d." % i
            h = rms_norm(x, w[p + "input_layernorm.weight"], self.eps)
            q = linear(h, w[p + "self_attn.q_proj.weight"], w.get(p + "self_attn.q_proj.bias"))
            k = linear(h, w[p + "self_attn.k_proj.weight"], w.get(p + "self_attn.k_proj.bias"))
            v = linear(h, w[p + "self_attn.v_proj.weight"], w.get(p + "self_attn.v_proj.bias"))
            q = q.view(T, H, D)
            k = k.view(T, KV, D)
            v = v.view(T, KV, D)
            if self.qk_norm:  # Qwen3: per-head RMSNorm over head_dim, before RoPE
                q = rms_norm(q, w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms_norm(k, w[p + "self_attn.k_norm.weight"], self.eps)
            q = q.transpose(0, 1)                          # [H, T, D]
            k = k.transpose(0, 1)
            v = v.transpose(0, 1)
            q = apply_rope(q, posf, self.inv_freq)
            k = apply_rope(k, posf, self.inv_freq)
            ck, cv = cache[i]
            if ck is None:
                assert start == 0
                ck, cv = k, v
            else:
                assert ck.shape[1] == start
                ck = torch.cat((ck, k), dim=1)
                cv = torch.cat((cv, v), dim=1)
            cache[i] = [ck, cv]
            n_rep = H // KV
            kk = ck.repeat_interleave(n_rep, dim=0)        # == repeat_kv: head h -> kv head h // n_rep
            vv = cv.repeat_interleave(n_rep, dim=0)
            a = attention(q, kk, vv, pos, D ** -0.5)       # [H, T, D]
            a = a.transpose(0, 1).reshape(T, H * D)
            x = x + linear(a, w[p + "self_attn.o_proj.weight"], w.get(p + "self_attn.o_proj.bias"))
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], self.eps)
            g = linear(h, w[p + "mlp.gate_proj.weight"])
            u = linear(h, w[p + "mlp.up_proj.weight"])
            x = x + linear(torch.nn.functional.silu(g) * u, w[p + "mlp.down_proj.weight"])
        x = rms_norm(x, w["model.norm.weight"], self.eps)
        return linear(x, self.lm_head)
