"""Paths, special tokens, evaluation sizes and the model/training presets."""
import os

# scripts/train_model/settings.py -> the repository root
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS_ROOT = "/usr/lib/python3.11"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BOS = EOS = 0  # <|endoftext|> separates (and starts) documents
EVAL_SEGMENTS = 48  # 1024-token segments of held-out text scored for the demo
CLI_SEGMENTS = 16  # segments of the `tandem perplexity` cross-check

PRESETS = {
    # ~5.5M parameters (22 MB in F32).  Every step sees batch * seq tokens; the first
    # short_frac of the steps use windows of short_seq tokens (attention is the costly part
    # on a CPU), the rest full-length windows.
    "demo": dict(hidden=256, layers=6, heads=8, kv_heads=4, ffn=704, vocab=4096,
                 max_pos=1024, rope_theta=10000.0, seq=1024, batch=4, lr=3e-3,
                 warmup=30, min_lr_frac=0.1, short_seq=256, short_frac=0.75),
    # Same shape, continued on 4096-token windows.
    "long": dict(hidden=256, layers=6, heads=8, kv_heads=4, ffn=704, vocab=4096,
                 max_pos=4096, rope_theta=10000.0, seq=4096, batch=1, lr=5e-4,
                 warmup=3, min_lr_frac=0.1, short_seq=4096, short_frac=0.0),
    # Same shape, fine-tuned on passkey retrieval (train_model/recall.py).  curriculum:
    # (fraction of the steps at which a phase starts, context length, prompts per step), short
    # contexts first: a 4096-token prompt costs ~10x a 512 one on the CPU, and copying is found
    # first where the needle is near.  The loss is the LM loss of every token plus
    # answer_weight x the answer's loss.  Evaluation: eval_n held-out prompts per (context,
    # depth) cell from eval_seed, the first jsonl_n of each cell written for the C++ side
    # (recall-eval.jsonl).
    "recall": dict(hidden=256, layers=6, heads=8, kv_heads=4, ffn=704, vocab=4096,
                   max_pos=4096, rope_theta=10000.0, seq=4096, batch=1, lr=1.5e-3,
                   warmup=10, min_lr_frac=0.1, answer_weight=5.0, answer="digits",
                   curriculum=[(0.0, 128, 16), (0.3, 256, 8), (0.5, 512, 4), (0.7, 1024, 2),
                               (0.85, 2048, 1), (0.95, 4096, 1)],
                   eval_contexts=[512, 1024, 2048, 4096],
                   eval_depths=[0.0, 0.25, 0.5, 0.75, 1.0],
                   eval_n=50, eval_seed=20261126, jsonl_n=8),
    # Multi-query key-value recall (train_model/kv_recall.py), trained from scratch: a shallow
    # model (two layers form the induction circuit) with a large RoPE theta, so that more of
    # the rotary frequencies stay nearly constant over 4096 tokens for the key look-up.  The
    # loss is the copy targets' alone.  probe_n prompts per context of probe_contexts are
    # scored every --probe-every steps (the learning curve).
    "recall-kv": dict(hidden=256, layers=2, heads=8, kv_heads=4, ffn=704, vocab=4096,
                      max_pos=4096, rope_theta=500000.0, seq=4096, batch=1, lr=2e-3,
                      warmup=30, min_lr_frac=0.1, min_keys_frac=1 / 16, pool=None,
                      colon=True,
                      curriculum=[(0.0, 256, 16), (0.4, 512, 8), (0.6, 1024, 4),
                                  (0.75, 2048, 2), (0.9, 4096, 1)],
                      eval_contexts=[512, 1024, 2048, 4096],
                      eval_depths=[0.0, 0.25, 0.5, 0.75, 1.0],
                      eval_n=50, eval_seed=20261127, jsonl_n=16,
                      probe_contexts=[256, 512, 1024, 2048, 4096], probe_n=16),
}
