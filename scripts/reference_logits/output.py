"""The output files (tests/fixtures/logits/<name>.json and .bin) and the printed summary."""
import json
import os

import numpy as np
import torch

from .settings import DECODE_STEPS, FIX_LOGITS



def write_logits(name, model_rel, prompt, decode_ids, logits):
    os.makedirs(FIX_LOGITS, exist_ok=True)
    P = len(prompt)
    V_ = logits.shape[1]
    assert logits.shape[0] == P + DECODE_STEPS
    meta = [
        ("model", model_rel),
        ("prompt_ids", [int(i) for i in prompt]),
        ("decode_ids", [int(i) for i in decode_ids]),
        ("vocab", int(V_)),
        ("rows", int(P + DECODE_STEPS)),
        ("file", name + ".bin"),
    ]
    text = "{\n" + ",\n".join("  %s: %s" % (json.dumps(k), json.dumps(v)) for k, v in meta) + "\n}\n"
    assert json.loads(text) == dict(meta)
    with open(os.path.join(FIX_LOGITS, name + ".json"), "w") as f:
        f.write(text)
    arr = logits.to(torch.float32).numpy().astype("<f4")
    with open(os.path.join(FIX_LOGITS, name + ".bin"), "wb") as f:
        f.write(arr.tobytes())
    back = np.fromfile(os.path.join(FIX_LOGITS, name + ".bin"), dtype="<f4").reshape(P + DECODE_STEPS, V_)
    assert np.array_equal(back, arr)


def summarize(name, logits, decode_ids, margin):
    l32 = logits.to(torch.float32)
    print("  %-26s rows %d  max|logit| %.3f  per-row max|logit| [%.3f, %.3f]  row std [%.3f, %.3f]  "
          "min greedy margin %.4f" % (
              name, logits.shape[0], float(l32.abs().max()), float(l32.abs().max(1).values.min()),
              float(l32.abs().max(1).values.max()), float(logits.std(1).min()), float(logits.std(1).max()), margin))
    print("    decode_ids %s" % decode_ids)
