"""Writes one fixture checkpoint (config, generation config, safetensors file or shards plus
index) and checks that it reloads to exactly the stored tensors.
"""
import json
import os

import torch

from .safetensors_io import dump_json_hf, load_checkpoint, quantize, read_safetensors, write_safetensors
from .settings import FIX_MODELS
from .weights import make_weights


def write_fixture_model(fx):
    cfg = fx["config"]
    name, dtype = fx["name"], fx["dtype"]
    d = os.path.join(FIX_MODELS, name)
    os.makedirs(d, exist_ok=True)
    w = make_weights(cfg, fx["seed"])
    for fn in os.listdir(d):  # drop stale outputs of an earlier layout (e.g. shard count changed)
        if fn.endswith(".safetensors") or fn == "model.safetensors.index.json":
            os.remove(os.path.join(d, fn))
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(dump_json_hf(cfg))
    gen = {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
           "transformers_version": cfg["transformers_version"]}
    if cfg.get("pad_token_id") is not None:
        gen["pad_token_id"] = cfg["pad_token_id"]
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        f.write(dump_json_hf(gen))
    meta = {"format": "pt"}
    nshards = fx.get("shards", 1)
    if nshards == 1:
        groups = [("model.safetensors", list(w))]
    else:
        # split in module order, like save_pretrained's size-based sharding
        names = list(w)
        sizes = [w[n].numel() for n in names]
        total = sum(sizes)
        groups, cur, acc = [], [], 0
        for n, s in zip(names, sizes):
            if cur and acc + s > total / nshards and len(groups) < nshards - 1:
                groups.append(cur)
                cur, acc = [], 0
            cur.append(n)
            acc += s
        groups.append(cur)
        assert len(groups) == nshards
        groups = [("model-%05d-of-%05d.safetensors" % (i + 1, nshards), g) for i, g in enumerate(groups)]
    weight_map, total_size = {}, 0
    for fn, names in groups:
        total_size += write_safetensors(os.path.join(d, fn), {n: w[n] for n in names}, dtype, meta)
        for n in names:
            weight_map[n] = fn
    if nshards > 1:
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            f.write(dump_json_hf({"metadata": {"total_size": total_size}, "weight_map": weight_map}))
    # self-check: reloading gives exactly the stored (dtype-rounded) tensors
    cfg2, w2 = load_checkpoint(d)
    assert cfg2 == json.loads(json.dumps(cfg))
    assert set(w2) == set(w), (sorted(set(w2) ^ set(w)))
    for n in w:
        assert w2[n].shape == w[n].shape, n
        assert torch.equal(w2[n], quantize(w[n], dtype)), "reload mismatch " + n
    for fn, names in groups:
        t, m = read_safetensors(os.path.join(d, fn))
        assert m == meta and all(dt == dtype for dt, _ in t.values())
    return d
