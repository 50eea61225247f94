"""The reference-logits generator of scripts/gen_reference_logits.py (the entry), one job per
module:

- settings: repository paths, prompt and decode lengths, torch's float64 single-thread mode;
- safetensors_io: the safetensors format read and written by hand, HF checkpoint loading;
- ops, llama, opt, reference: the float64 forward passes and the greedy reference run;
- fixtures, weights, write_model: the fixture configs, their random weights, the checkpoints;
- tinystories: the TinyStories BPE re-implemented from tokenizer.json;
- output: the logits files and the printed summary.

Importing the package applies settings (torch in float64 on one thread) before any tensor is
made, as the single script did at its top.
"""
from . import settings  # noqa: F401  (torch's global mode, see settings)
