"""safetensors I/O by hand (no `safetensors` package): write as the Rust serializer lays a file
out, read back as exact float64, load a HF checkpoint dir (single file or index + shards).
"""
import json
import os
import struct

import numpy as np
import torch

_ST_DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2)}


def _to_bytes(t, dtype):
    """torch tensor -> (safetensors dtype string, little-endian raw bytes)."""
    t = t.detach().contiguous().cpu()
    if dtype == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return t.to(torch.float16).numpy().astype("<f2").tobytes()
    if dtype == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    raise ValueError(dtype)


def _from_bytes(buf, dtype, shape):
    """raw little-endian bytes -> float64 torch tensor (exact upcast)."""
    if dtype == "F32":
        a = np.frombuffer(buf, dtype="<f4").astype(np.float64)
    elif dtype == "F16":
        a = np.frombuffer(buf, dtype="<f2").astype(np.float64)
    elif dtype == "BF16":
        u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
        a = u.view(np.float32).astype(np.float64)
    else:
        raise ValueError("unsupported dtype " + dtype)
    return torch.from_numpy(a.reshape(shape).copy())


def write_safetensors(path, tensors, dtype, metadata=None):
    """tensors: dict name -> torch tensor.  All stored as `dtype`.  Layout as the Rust
    safetensors serializer: __metadata__ first, tensors sorted by name, data in that order,
    header padded with spaces to a multiple of 8."""
    names = sorted(tensors)
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs = []
    off = 0
    for n in names:
        b = _to_bytes(tensors[n], dtype)
        header[n] = {"dtype": dtype, "shape": list(tensors[n].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    return off  # total tensor bytes


def read_safetensors(path):
    """-> (dict name -> (dtype, float64 tensor), metadata dict or None)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        s, e = info["data_offsets"]
        out[name] = (info["dtype"], _from_bytes(data[base + s:base + e], info["dtype"], info["shape"]))
    return out, meta


def load_checkpoint(model_dir):
    """Load every tensor of a HF checkpoint dir (single file or index + shards) as float64."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(idx):
        with open(idx) as f:
            index = json.load(f)
        files = sorted(set(index["weight_map"].values()))
        for fn in files:
            t, _ = read_safetensors(os.path.join(model_dir, fn))
            for k, (dt, v) in t.items():
                assert index["weight_map"][k] == fn, (k, fn)
                tensors[k] = v
        assert set(tensors) == set(index["weight_map"]), "index / shard mismatch"
    else:
        t, _ = read_safetensors(os.path.join(model_dir, "model.safetensors"))
        tensors = {k: v for k, (dt, v) in t.items()}
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    return cfg, tensors


def dump_json_hf(obj):
    """How transformers writes config.json / generation_config.json / the shard index."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"


def quantize(t, dtype):
    """Round-trip through the storage dtype (what the file will hold), as float64."""
    return _from_bytes(_to_bytes(t, dtype), dtype, list(t.shape))
