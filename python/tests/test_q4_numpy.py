"""q4 packing (docs/FORMAT.md, "Packed weights (q4)") against an independent NumPy reading: a
model packed here, in NumPy, by the format's rule (groups of 32 rows, the last one partial, odd
column counts) loads in lockstep only if lockstep's expansion float(q) * scale has, bit for bit,
the SHA-256 NumPy computed; a file lockstep packs is checked the other way by
tests/train/q4_numpy.py. Needs only the lockstep command."""

import hashlib
import json
import struct
import subprocess

import numpy as np
import pytest

from conftest import BINARY, init_model

# K 40 and 17 (w_down: odd, one partial group), N 17 (gate, up: odd), 40, 256.
ODD = dict(length=8, d_model=40, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=17, batch=2)


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    data = raw[8 + n :]
    return meta, [(k, np.frombuffer(data[header[k]["data_offsets"][0] : header[k]["data_offsets"][1]], "<f4")
                   .reshape(header[k]["shape"])) for k in names]


def pack_q4(w):
    """The format's rule, in NumPy: (U8 [K, ceil(N/2)], F32 [ceil(K/32), N], expansion)."""
    K, N = w.shape
    G = (K + 31) // 32
    padded = np.zeros((G * 32, N), np.float32)
    padded[:K] = w
    scale = (np.abs(padded.reshape(G, 32, N)).max(axis=1) / np.float32(7)).astype(np.float32)
    s = scale[np.arange(K) // 32]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(s == 0, 0, np.clip(np.rint(w / s), -7, 7)).astype(np.int8)
    nibbles = np.zeros((K, N + N % 2), np.uint8)
    nibbles[:, :N] = (q.astype(np.int16) & 0xF).astype(np.uint8)
    packed = (nibbles[:, 0::2] | (nibbles[:, 1::2] << 4)).astype(np.uint8)
    return packed, scale, (q.astype(np.float32) * s).astype("<f4")


def write_q4_model(src, dst, tamper=False):
    meta, tensors = read_safetensors(src / "params.safetensors")
    out, expanded = [], []
    for name, a in tensors:
        if a.ndim == 2:
            packed, scale, values = pack_q4(a)
            out += [(name, "U8", packed), (name + ".scale", "F32", scale)]
            expanded.append(values)
        else:
            out.append((name, "F32", a))
            expanded.append(a)
    header, blobs, offset = {"__metadata__": dict(meta, weights="q4")}, [], 0
    for name, dtype, a in out:
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    dst.mkdir()
    with open(dst / "params.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    flat = np.concatenate([e.ravel() for e in expanded])
    if tamper:  # one expanded weight a bit off: lockstep must then refuse the SHA-256
        flat = flat.copy()
        flat.view("<u4")[len(flat) // 2] ^= 1
    model = json.load(open(src / "model.json"))
    model["weights"]["format"] = "q4"
    model["weights"]["parameters_sha256"] = hashlib.sha256(flat.tobytes()).hexdigest()
    json.dump(model, open(dst / "model.json", "w"))


def test_lockstep_expands_numpys_q4_packing_bit_for_bit(tmp_path):
    src = tmp_path / "f32"
    init_model(src, seed=11, **ODD)
    write_q4_model(src, tmp_path / "q4")
    done = subprocess.run([BINARY, "inspect", str(tmp_path / "q4")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    write_q4_model(src, tmp_path / "bad", tamper=True)
    done = subprocess.run([BINARY, "inspect", str(tmp_path / "bad")], capture_output=True, text=True)
    assert done.returncode != 0 and "SHA-256" in done.stderr, done.stderr


@pytest.mark.parametrize("K,N", [(1, 1), (17, 3), (33, 5), (64, 2), (70, 9)])
def test_numpy_rule_round_trips_its_own_nibbles(K, N):
    rng = np.random.default_rng(K * 100 + N)
    w = rng.standard_normal((K, N)).astype(np.float32)
    packed, scale, values = pack_q4(w)
    assert packed.shape == (K, (N + 1) // 2) and scale.shape == ((K + 31) // 32, N)
    low = (packed & 0xF).astype(np.int16)
    assert ((low != 8) & ((packed >> 4) != 8)).all()
    assert np.all(np.abs(values - w) <= 0.501 * scale[np.arange(K) // 32] + 1e-30)
