"""Paths (resolved from the repository root), the prompt and decode lengths, and torch's
global mode: float64 by default and one thread, so that a re-run rewrites byte-identical files.
"""
import os

import torch

# scripts/reference_logits/settings.py -> the repository root
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX_MODELS = os.path.join(REPO, "tests", "fixtures", "models")
FIX_LOGITS = os.path.join(REPO, "tests", "fixtures", "logits")
TINYSTORIES = os.path.normpath(os.path.join(REPO, "..", "shared", "models", "tinystories-656k"))

PROMPT_LEN = 12
DECODE_STEPS = 16
MIN_MARGIN = 0.05  # minimum top-1 minus top-2 logit gap for every greedy choice (random models)

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
