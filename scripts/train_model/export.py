"""The export: the Hugging Face checkpoint folder (weights, config, tokenizer files) and the C++
test fixture tests/fixtures/trained/<name>.json (float64 logits of the saved weights).
"""
import json
import os

import torch

from .corpus import is_heldout, read_text
from .data import file_ids
from .hf_format import hf_config, hf_name, tokenizer_config
from .model import Llama
from .safetensors_io import read_safetensors, write_safetensors
from .settings import BOS, CORPUS_ROOT, EOS, REPO


def export_checkpoint(args, c, model, tj):
    """The Hugging Face checkpoint in args.out (model.safetensors in F32)."""
    write_safetensors(os.path.join(args.out, "model.safetensors"),
                      {hf_name(n): p for n, p in model.named_parameters()})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=2)
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": [EOS, tj["model"]["vocab"]["<|im_end|>"]]},
                  f, indent=2)


def write_fixture(args, c, name, bpe, files, all_ids, offsets):
    """tests/fixtures/trained/<name>.json: float64 logits of the saved weights for a held-out
    snippet at a few positions, and the ids of a few held-out strings."""
    tensors = read_safetensors(os.path.join(args.out, "model.safetensors"))
    ref = Llama(c).double()
    ours = {hf_name(n): n for n, _ in ref.named_parameters()}
    ref.load_state_dict({ours[k]: v.double() for k, v in tensors.items()})
    ref.eval()
    held = [i for i, f in enumerate(files) if is_heldout(f)]
    # The long model's snippet reaches past the demo's 1024 positions.
    n_prompt = 1536 if c["max_pos"] >= 4096 else 40
    src = next(i for i in held if offsets[i + 1] - offsets[i] >= n_prompt)
    first = files[src]
    prompt = [BOS] + [int(t) for t in file_ids(all_ids, offsets, src)[:n_prompt - 1]]
    with torch.no_grad():
        logits = ref(torch.tensor(prompt)[None])[0]
    rows = sorted({0, 1, len(prompt) // 2, len(prompt) - 2, len(prompt) - 1})
    strings = []
    for i in held[:4]:
        text = read_text(files[i])
        strings.append(text[:400])
    strings.append("def fibonacci(n):\n    if n < 2:\n        return n\n")
    fixture = {
        "model": os.path.relpath(args.out, REPO),
        "source": f"{CORPUS_ROOT}/{first} (held out)",
        "prompt_ids": prompt,
        "positions": rows,
        "vocab": c["vocab"],
        "logits": [[float(f"{v:.9g}") for v in logits[r].tolist()] for r in rows],
        "strings": [{"text": s, "ids": bpe.encode(s)} for s in strings],
    }
    d = os.path.join(REPO, "tests", "fixtures", "trained")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{name}.json"), "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
