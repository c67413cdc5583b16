#!/usr/bin/env python3
"""An independent NumPy reading of a q8 params.safetensors: every matrix is int8 with a float32
scale per output column, expanded as float32(q) * scale (one float32 multiply). Checks the
expansion's SHA-256 against the model's, and that it stays close to the f32 export it came from.

usage: q8_numpy.py Q8_FILE F32_FILE EXPECTED_SHA256
"""
import hashlib
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "I8": "i1"}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    # In data order: lockstep writes the f32 file's tensors in registry order.
    entries = sorted(((n, e) for n, e in header.items() if n != "__metadata__"), key=lambda item: item[1]["data_offsets"][0])
    for name, e in entries:
        b, en = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b : 8 + n + en], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
    return out


def main():
    packed, reference = read(sys.argv[1]), read(sys.argv[2])
    flat = []
    worst = 0.0
    for name, ref in reference.items():  # registry order
        if packed[name].dtype == np.int8:
            scale = packed[name + ".scale"]
            values = packed[name].astype(np.float32) * scale[None, :].astype(np.float32)
            step = float(scale.max())
            worst = max(worst, float(np.abs(values - ref).max()) / max(step, 1e-30))
        else:
            values = packed[name]
        flat.append(values.astype("<f4").ravel())
    digest = hashlib.sha256(np.concatenate(flat).tobytes()).hexdigest()
    print(f"sha256 {digest}; largest error {worst:.3f} of a quantisation step")
    if digest != sys.argv[3]:
        print("the expansion differs from the model's parameters")
        return 1
    # Half a step from rounding to the nearest level, plus the f32 roundings of w / scale and q * scale.
    return 0 if worst <= 0.501 else 1


if __name__ == "__main__":
    sys.exit(main())
