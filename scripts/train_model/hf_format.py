"""The Hugging Face files' contents: tokenizer.json, tokenizer_config.json (ChatML template),
config.json, and our parameter names as Hugging Face Llama tensor names.
"""
from .settings import BOS, EOS, SPECIALS


def tokenizer_json(vocab, merges):
    """The tokenizer in Hugging Face `tokenizers` JSON format."""
    added = [dict(id=vocab[s], content=s, single_word=False, lstrip=False, rstrip=False,
                  normalized=False, special=True) for s in SPECIALS]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                          "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {SPECIALS[BOS]: {"id": SPECIALS[BOS], "ids": [BOS],
                                               "tokens": [SPECIALS[BOS]]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tokenizer_config():
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[BOS],
        "eos_token": SPECIALS[EOS],
        "unk_token": None,
        "pad_token": SPECIALS[EOS],
        "additional_special_tokens": SPECIALS[1:],
        "model_max_length": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }


def hf_config(c):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": c["hidden"],
        "intermediate_size": c["ffn"],
        "num_hidden_layers": c["layers"],
        "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"],
        "head_dim": c["hidden"] // c["heads"],
        "vocab_size": c["vocab"],
        "max_position_embeddings": c["max_pos"],
        "rope_theta": c["rope_theta"],
        "rope_scaling": None,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "torch_dtype": "float32",
        "initializer_range": 0.02,
    }


def hf_name(name):
    """Our parameter name -> the Hugging Face Llama tensor name."""
    for part in ("q_proj", "k_proj", "v_proj", "o_proj"):
        name = name.replace("." + part, ".self_attn." + part)
    for part in ("gate_proj", "up_proj", "down_proj"):
        name = name.replace("." + part, ".mlp." + part)
    return "model." + name
