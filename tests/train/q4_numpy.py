#!/usr/bin/env python3
"""An independent NumPy reading of a q4 params.safetensors: every matrix [K, N] is U8 [K, ceil(N/2)]
holding signed 4-bit values (column 2j in the low nibble of byte j, 2j+1 in the high one), with a
float32 scale [ceil(K/32), N] per group of 32 rows per column, expanded as float32(q) * scale (one
float32 multiply). Checks the expansion's SHA-256 against the model's, that no value is -8 and
padding nibbles are 0, and that the expansion stays within half a step of the f32 weights.

usage: q4_numpy.py Q4_FILE F32_FILE EXPECTED_SHA256
"""
import hashlib
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "U8": "u1"}


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    entries = sorted(((k, e) for k, e in header.items() if k != "__metadata__"), key=lambda item: item[1]["data_offsets"][0])
    for name, e in entries:
        b, en = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b : 8 + n + en], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
    return out


def expand(packed, scale, n_cols):
    low = (packed & 0x0F).astype(np.int8)
    high = (packed >> 4).astype(np.int8)
    nib = np.empty((packed.shape[0], packed.shape[1] * 2), dtype=np.int8)
    nib[:, 0::2] = low
    nib[:, 1::2] = high
    if n_cols % 2:
        assert not nib[:, n_cols:].any(), "padding nibble not 0"
    q = nib[:, :n_cols]
    q = np.where(q >= 8, q - 16, q).astype(np.int8)
    assert (q != -8).all(), "value -8"
    groups = np.arange(q.shape[0]) // 32
    return q.astype(np.float32) * scale[groups, :].astype(np.float32), scale


def main():
    packed, reference = read(sys.argv[1]), read(sys.argv[2])
    flat = []
    worst = 0.0
    for name, ref in reference.items():  # registry order
        if packed[name].dtype == np.uint8:
            values, scale = expand(packed[name], packed[name + ".scale"], ref.shape[1])
            step = scale[np.arange(ref.shape[0]) // 32, :]
            err = np.abs(values.astype(np.float64) - ref) / np.maximum(step, 1e-30)
            worst = max(worst, float(np.where(step > 0, err, 0).max()))
        else:
            values = packed[name]
        flat.append(values.astype("<f4").ravel())
    digest = hashlib.sha256(np.concatenate(flat).tobytes()).hexdigest()
    print(f"sha256 {digest}; largest error {worst:.3f} of a quantisation step")
    if digest != sys.argv[3]:
        print("the expansion differs from the model's parameters")
        return 1
    return 0 if worst <= 0.501 else 1


if __name__ == "__main__":
    sys.exit(main())
