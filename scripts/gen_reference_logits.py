#!/usr/bin/python3
"""Golden-reference logits generator for Tandem's forward-pass tests.

Usage (from anywhere; paths are resolved relative to the repository root):

    /usr/bin/python3 scripts/gen_reference_logits.py

Needs only PyTorch (CPU, >= 1.13) and NumPy -- no `transformers`, no `safetensors`
package: the safetensors format is read and written by hand (reference_logits/).  The run is
deterministic (fixed seeds, single-threaded float64 math), so re-running it rewrites
byte-identical files.

What it does
------------
1. Writes small random-weight Hugging Face checkpoints under tests/fixtures/models/<name>/
   (config.json as `save_pretrained` would write it, model.safetensors or two shards plus
   model.safetensors.index.json, generation_config.json):

     llama-tiny                 llama, fp32, GQA 4/2, 2 layers, untied, rope_theta 5e5 with
                                llama3 rope_scaling (original_max_position_embeddings 64)
     llama-tiny-f16-tied        llama, fp16, MHA 4/4, 3 layers, tied (only embed_tokens stored),
                                linear rope_scaling spelled with the old key "type", written as
                                transformers 4.40 would (no head_dim / mlp_bias keys)
     mistral-tiny-bf16-sharded  mistral, bf16, GQA 4/1, 2 shards + index, sliding_window null
     qwen2-tiny                 qwen2, fp32, GQA 4/2, q/k/v bias (no o_proj bias), tied
     qwen3-tiny                 qwen3, fp32, GQA 4/2, head_dim 32 != 64/4, q_norm/k_norm, untied
     opt-tiny                   opt (125m style), fp32, pre-LN, final LN, learned positions
                                (offset 2), ReLU FFN, all biases, tied
     opt-tiny-postln            opt (350m style), fp16, post-LN (no final LN), word_embed_proj_dim
                                32 != hidden 64 -> project_in / project_out, tied

2. Implements the forward pass of each architecture independently in float64 PyTorch,
   following the Hugging Face modeling code (modeling_llama / mistral / qwen2 / qwen3 / opt,
   transformers 4.4x-4.51): rotate-half RoPE with inv_freq from the default / linear / llama3
   rope-parameter functions, GQA by repeat_kv (query head h uses KV head h // n_rep),
   causal softmax attention, RMSNorm / LayerNorm, SiLU-gated or ReLU MLP.  Weights stored in
   fp16/bf16 are upcast exactly to float64.  Everything is loaded back from the files on disk
   (the loader resolves shards and tied embeddings), so the reference sees exactly what the
   C++ side will read.

3. For each of those 7 models, the real ../shared/models/tinystories-656k (read in place,
   never copied) and the bundled models/tandem-demo, takes a 12-token prompt, computes prefill logits for every prompt position,
   then 16 greedy decode steps with an incremental KV cache, and writes

     tests/fixtures/logits/<name>.json = {"model": <model dir relative to repo root>,
         "prompt_ids": [P ids], "decode_ids": [16 ids], "vocab": V, "rows": P+16,
         "file": "<name>.bin"}
     tests/fixtures/logits/<name>.bin  = float32 little-endian, row-major [P+16, V]

   Row i < P: logits at prompt position i (prefill).  Row P+j: logits after feeding
   decode_ids[j] at position P+j.  decode_ids[0] = argmax(row P-1), decode_ids[j] =
   argmax(row P+j-1).

   TinyStories prompt: BOS <|start_story|> (id 1) + the BPE of
   "Once upon a time, there was a little girl named Lily. She liked to" (12 ids in all;
   the shorter "Once upon a time, there was a" is only 9 tokens with this tokenizer).
   The BPE is re-implemented here from tokenizer.json (normalizer: prepend '▁', ' '->'▁';
   no pre-tokenizer; lowest-rank-first merges).  Random models: 12 ids drawn with a fixed
   seed from [3, V); further prompts are drawn from that stream until every greedy choice
   has a top-1/top-2 logit margin >= 0.05 (so an fp32 argmax agrees with the float64 one),
   the 16 decode ids are not all alike (>= 3 distinct) and none of them is the EOS id.

4. Self-checks (asserts): written safetensors reload to the identical tensors; shard index
   is consistent; incremental-KV-cache decode equals a full recompute of the whole sequence;
   logits are finite and vary by several units; the TinyStories greedy continuation is
   printed (naive vocab lookup, '▁' -> ' '); the prompt must decode back to its text and
   the continuation must contain common English words.

The code lives in the package scripts/reference_logits/ beside this entry (settings, safetensors
I/O, the forward passes, the fixture definitions and writers, the TinyStories BPE, the output).
"""

import os
import sys

import numpy as np

from reference_logits.fixtures import FIXTURES, V
from reference_logits.output import summarize, write_logits
from reference_logits.reference import build_model, run_reference
from reference_logits.safetensors_io import load_checkpoint
from reference_logits.settings import FIX_LOGITS, MIN_MARGIN, PROMPT_LEN, REPO, TINYSTORIES
from reference_logits.tinystories import TINY_TEXT, tinystories_tokenizer
from reference_logits.write_model import write_fixture_model


def main():
    results = []
    for fx in FIXTURES:
        name = fx["name"]
        d = write_fixture_model(fx)
        cfg, w = load_checkpoint(d)
        model = build_model(cfg, w)
        rng = np.random.default_rng(fx["seed"] + 7777)
        for attempt in range(100):
            prompt = [int(x) for x in rng.integers(3, V, PROMPT_LEN)]
            logits, decode_ids, margin = run_reference(model, prompt)
            eos = cfg["eos_token_id"]
            eos = set(eos) if isinstance(eos, list) else {eos}
            if margin >= MIN_MARGIN and len(set(decode_ids)) >= 3 and not (eos & set(decode_ids)):
                break
        else:
            raise RuntimeError("no prompt with a clear greedy path for " + name)
        # logits must vary by several units (non-degenerate model)
        assert float(logits.std(1).min()) > 0.5 and float(logits.abs().max()) < 100, name
        write_logits(name, os.path.relpath(d, REPO), prompt, decode_ids, logits)
        results.append((name, logits, decode_ids, margin))

    # real model: TinyStories-656K, read in place
    encode, decode = tinystories_tokenizer()
    prompt = encode(TINY_TEXT)
    assert len(prompt) == PROMPT_LEN, prompt
    cfg, w = load_checkpoint(TINYSTORIES)
    assert "model.embed_tokens.weight" not in w and cfg["tie_word_embeddings"]
    model = build_model(cfg, w)
    logits, decode_ids, margin = run_reference(model, prompt)
    write_logits("tinystories-656k", os.path.relpath(TINYSTORIES, REPO), prompt, decode_ids, logits)
    results.append(("tinystories-656k", logits, decode_ids, margin))

    # The bundled demo model, read in place: the tests that need a trained checkpoint run on a
    # clone of the repository alone. Prompt: BOS + the first 11 ids of
    # "def add(self, key, value):\n    self." as the Hugging Face tokenizers library (npm
    # `tokenizers`) encodes it with models/tandem-demo/tokenizer.json.
    demo = os.path.join(REPO, "models", "tandem-demo")
    demo_prompt = [0, 471, 803, 43, 283, 47, 708, 47, 452, 314, 270, 306]
    cfg, w = load_checkpoint(demo)
    demo_model = build_model(cfg, w)
    demo_logits, demo_decode, demo_margin = run_reference(demo_model, demo_prompt)
    write_logits("tandem-demo", "models/tandem-demo", demo_prompt, demo_decode, demo_logits)
    results.append(("tandem-demo", demo_logits, demo_decode, demo_margin))

    print("Reference logits written to %s" % os.path.relpath(FIX_LOGITS, REPO))
    for r in results:
        summarize(*r)
    text = decode(prompt[1:]).lstrip(" ")
    cont = decode(decode_ids)
    print("TinyStories prompt ids: %s" % prompt)
    print("TinyStories greedy: %r + %r" % (text, cont))
    assert decode(prompt[1:]).strip() == TINY_TEXT
    words = [t.strip(".,!\"") for t in cont.split()]
    common = {"the", "a", "and", "to", "was", "she", "her", "he", "with", "play", "in", "of", "it", "they", "day"}
    assert any(x.lower() in common for x in words), "TinyStories continuation does not look like English"
    return 0


if __name__ == "__main__":
    sys.exit(main())
