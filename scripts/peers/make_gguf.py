#!/usr/bin/python3
# Converts a `tandem make-model` Llama checkpoint (one model.safetensors, bf16) to a BF16 GGUF
# for llama-bench. Usage: make_gguf.py MODEL_DIR OUT.gguf [LLAMA_CPP/gguf-py]
# (Debian's python3-numpy and llama.cpp's own gguf-py; nothing from PyPI).
import json, math, struct, sys
sys.path.insert(0, sys.argv[3] if len(sys.argv) > 3 else 'llama.cpp/gguf-py')
try:
    import numpy as np
    import gguf
except ImportError as e:  # e.g. a pyenv python3 first on PATH, without Debian's numpy
    sys.exit(f'make_gguf.py: {e}; run it with Debian\'s /usr/bin/python3 (apt-get install '
             'python3-numpy) and llama.cpp\'s gguf-py as the third argument')

src, out = sys.argv[1], sys.argv[2]
cfg = json.load(open(f'{src}/config.json'))
f = open(f'{src}/model.safetensors', 'rb')
n = struct.unpack('<Q', f.read(8))[0]
hdr = json.loads(f.read(n))
base = 8 + n
mm = np.memmap(f'{src}/model.safetensors', dtype=np.uint8, mode='r')


def tensor(name):
    t = hdr[name]
    assert t['dtype'] == 'BF16', t
    a, b = t['data_offsets']
    return mm[base + a:base + b].view(np.uint16).reshape(t['shape'])


def permute(w, n_head):  # HF's rotate-half rows -> GGML's interleaved rope layout
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def bf16_to_f32(w):
    return (w.astype(np.uint32) << 16).view(np.float32)


H, Hkv, L = cfg['num_attention_heads'], cfg['num_key_value_heads'], cfg['num_hidden_layers']
dim = cfg['hidden_size'] // H
w = gguf.GGUFWriter(out, 'llama')
w.add_name('tandem-random-llama-3.2-1b')
w.add_context_length(cfg['max_position_embeddings'])
w.add_embedding_length(cfg['hidden_size'])
w.add_block_count(L)
w.add_feed_forward_length(cfg['intermediate_size'])
w.add_rope_dimension_count(dim)
w.add_head_count(H)
w.add_head_count_kv(Hkv)
w.add_layer_norm_rms_eps(cfg['rms_norm_eps'])
w.add_rope_freq_base(cfg['rope_theta'])
w.add_vocab_size(cfg['vocab_size'])
w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
# No tokenizer.json: a synthetic SentencePiece vocabulary, only so that llama.cpp loads the model.
V = cfg['vocab_size']
toks = [b'<unk>', b'<s>', b'</s>'] + [f'<0x{i:02X}>'.encode() for i in range(256)]
toks += [f'tok{i}'.encode() for i in range(V - len(toks))]
types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \
    [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * (V - 259)
w.add_tokenizer_model('llama')
w.add_token_list(toks)
w.add_token_scores([0.0] * V)
w.add_token_types(types)
w.add_bos_token_id(cfg['bos_token_id'])
w.add_eos_token_id(cfg['eos_token_id'])
w.add_unk_token_id(0)

rs = cfg.get('rope_scaling') or {}
if rs.get('rope_type') == 'llama3':
    freqs = 1.0 / (cfg['rope_theta'] ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, lo, hi = rs['factor'], rs['low_freq_factor'], rs['high_freq_factor']
    old = rs['original_max_position_embeddings']
    lo_wl, hi_wl = old / lo, old / hi
    fac = []
    for fr in freqs:
        wl = 2 * math.pi / fr
        if wl < hi_wl:
            fac.append(1.0)
        elif wl > lo_wl:
            fac.append(factor)
        else:
            s = (old / wl - lo) / (hi - lo)
            fac.append(1 / ((1 - s) / factor + s))
    w.add_tensor('rope_freqs.weight', np.array(fac, dtype=np.float32))

BF16 = gguf.GGMLQuantizationType.BF16
w.add_tensor('token_embd.weight', tensor('model.embed_tokens.weight'), raw_dtype=BF16)
w.add_tensor('output_norm.weight', bf16_to_f32(tensor('model.norm.weight')))
if 'lm_head.weight' in hdr:
    w.add_tensor('output.weight', tensor('lm_head.weight'), raw_dtype=BF16)
m = {'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k', 'self_attn.v_proj': 'attn_v',
     'self_attn.o_proj': 'attn_output', 'mlp.gate_proj': 'ffn_gate', 'mlp.up_proj': 'ffn_up',
     'mlp.down_proj': 'ffn_down'}
for i in range(L):
    p = f'model.layers.{i}.'
    w.add_tensor(f'blk.{i}.attn_norm.weight', bf16_to_f32(tensor(p + 'input_layernorm.weight')))
    w.add_tensor(f'blk.{i}.ffn_norm.weight', bf16_to_f32(tensor(p + 'post_attention_layernorm.weight')))
    for hf, gg in m.items():
        t = tensor(p + hf + '.weight')
        if gg == 'attn_q':
            t = permute(t, H)
        elif gg == 'attn_k':
            t = permute(t, Hkv)
        w.add_tensor(f'blk.{i}.{gg}.weight', np.ascontiguousarray(t), raw_dtype=BF16)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print('wrote', out)
