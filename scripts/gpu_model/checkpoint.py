"""Random-weight checkpoints of the 8B shape for the emulated runs (`make-model` has no flag
for the layer count, the vocabulary or the FFN width the fit varies).
"""
import json
import math
import os

from .params import SHAPE


def write_bf16_pattern(f, n, scale, seed):
    """n bf16 values, uniform in [-scale, scale], as a repeated 64 KiB pattern (fast)."""
    x = seed * 0x9E3779B97F4A7C15 + 1 & (2**64 - 1)
    vals = bytearray()
    for _ in range(32768):
        x ^= (x >> 12)
        x ^= (x << 25) & (2**64 - 1)
        x ^= (x >> 27)
        r = (x * 0x2545F4914F6CDD1D & (2**64 - 1)) >> 40
        v = (r / 2.0**24 * 2.0 - 1.0) * scale
        bits = int.from_bytes(__import__("struct").pack("<f", v), "little") >> 16
        vals += bits.to_bytes(2, "little")
    pat = bytes(vals)
    full, rest = divmod(n * 2, len(pat))
    for _ in range(full):
        f.write(pat)
    f.write(pat[:rest])


def make_model(out, layers, vocab, s=SHAPE):
    """A random-weight Llama-3.1-8B-shaped checkpoint with `layers` layers and `vocab` tokens
    (what `tandem make-model --shape llama-3.1-8b` writes, with those two changed)."""
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return
    os.makedirs(out, exist_ok=True)
    h, hq, hkv, d, ffn = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["ffn"]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
           "num_hidden_layers": layers, "num_attention_heads": hq, "num_key_value_heads": hkv,
           "intermediate_size": ffn, "vocab_size": vocab, "max_position_embeddings": 131072,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192},
           "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1,
           "eos_token_id": 2, "torch_dtype": "bfloat16"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    tensors = [("model.embed_tokens.weight", [vocab, h])]
    for li in range(layers):
        p = "model.layers.%d." % li
        tensors += [(p + "input_layernorm.weight", [h]),
                    (p + "post_attention_layernorm.weight", [h]),
                    (p + "self_attn.q_proj.weight", [hq * d, h]),
                    (p + "self_attn.k_proj.weight", [hkv * d, h]),
                    (p + "self_attn.v_proj.weight", [hkv * d, h]),
                    (p + "self_attn.o_proj.weight", [h, hq * d]),
                    (p + "mlp.gate_proj.weight", [ffn, h]),
                    (p + "mlp.up_proj.weight", [ffn, h]),
                    (p + "mlp.down_proj.weight", [h, ffn])]
    tensors += [("model.norm.weight", [h]), ("lm_head.weight", [vocab, h])]
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        nb = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    hs = json.dumps(header).encode()
    hs += b" " * (-len(hs) % 8)
    tmp = os.path.join(out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(len(hs).to_bytes(8, "little"))
        f.write(hs)
        for i, (name, shape) in enumerate(tensors):
            n = math.prod(shape)
            if len(shape) == 1:
                f.write(b"\x80\x3f" * n)  # bf16 1.0
            else:
                write_bf16_pattern(f, n, 1.7320508 / math.sqrt(shape[-1]), i + 1)
    os.replace(tmp, os.path.join(out, "model.safetensors"))
