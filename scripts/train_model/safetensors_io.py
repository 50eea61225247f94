"""F32 safetensors written and read by hand (no `safetensors` package)."""
import json
import struct

import numpy as np
import torch


def write_safetensors(path, tensors):
    """tensors: dict name -> float32 torch tensor.  Header keys in sorted order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().to(torch.float32).contiguous().numpy().astype("<f4")
        raw = data.tobytes()
        header[name] = {"dtype": "F32", "shape": list(data.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32"
        a, b = t["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).copy())
    return out
