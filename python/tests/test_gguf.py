"""`lockstep export-gguf`: the file is read back by a GGUF reader written here from the format's
specification (header, key-value pairs, tensor infos, alignment, data), and every key and every
tensor is checked: equal to the model's parameters (f32), to NumPy's float16 rounding (f16), or
to ggml's Q8_0 block format recomputed in NumPy (q8_0). docs/FORMAT.md, "GGUF export"."""

import hashlib
import json
import os
import struct
import subprocess

import numpy as np
import pytest

from conftest import BINARY, init_model

# GGUF value types (the specification's gguf_metadata_value_type).
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALARS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
           U64: "<Q", I64: "<q", F64: "<d"}
# ggml tensor types: (name, values per block, bytes per block)
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 8: ("Q8_0", 32, 34)}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self):
        n = self.take("<Q")
        raw = self.data[self.pos:self.pos + n]
        assert len(raw) == n, "string runs past the end of the file"
        self.pos += n
        return raw.decode("utf-8")

    def value(self, vtype):
        if vtype in SCALARS:
            return self.take(SCALARS[vtype])
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            etype, n = self.take("<I"), self.take("<Q")
            return ("array", etype, [self.value(etype) for _ in range(n)])
        raise AssertionError(f"unknown GGUF value type {vtype}")


def read_gguf(path):
    """(kv: {key: (type, value)}, tensors: {name: (ne, ggml type, raw bytes)}, alignment)."""
    data = open(path, "rb").read()
    r = Reader(data)
    assert data[:4] == b"GGUF"
    r.pos = 4
    assert r.take("<I") == 3
    n_tensors, n_kv = r.take("<Q"), r.take("<Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        assert key not in kv, f"key {key} twice"
        vtype = r.take("<I")
        kv[key] = (vtype, r.value(vtype))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("<I")
        ne = [r.take("<Q") for _ in range(n_dims)]
        infos.append((name, ne, r.take("<I"), r.take("<Q")))
    alignment = kv["general.alignment"][1] if "general.alignment" in kv else 32
    data_start = (r.pos + alignment - 1) // alignment * alignment
    assert all(b == 0 for b in data[r.pos:data_start]), "padding before the data is not zero"
    tensors, end = {}, data_start
    for name, ne, ttype, offset in infos:
        assert name not in tensors
        assert offset % alignment == 0, f"{name} is not aligned"
        _, block, block_bytes = GGML_TYPES[ttype]
        assert ne[0] % block == 0
        size = int(np.prod(ne)) // block * block_bytes
        begin = data_start + offset
        assert begin >= end, f"{name} overlaps the tensor before it"
        assert begin + size <= len(data), f"{name} runs past the end of the file"
        tensors[name] = (ne, ttype, data[begin:begin + size])
        end = begin + size
    return kv, tensors, alignment


def read_params(model_dir):
    """The model's parameters by name, from params.safetensors (F32) and model.json."""
    meta = json.load(open(os.path.join(model_dir, "model.json")))
    raw = open(os.path.join(model_dir, "params.safetensors"), "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        b, e = entry["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(entry["shape"])
    return meta["config"], out


def gpt2_byte_strings():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 256
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(extra)
            extra += 1
    return [table[b] for b in range(256)]


def q8_0_numpy(rows):
    """ggml's Q8_0 blocks of each row, recomputed: d = amax / 127 in f32, id = 1 / d (0 when d is
    0), q = round half away from zero of the f32 product x * id; the block is f16(d), then q."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    blocks = rows.reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1).astype(np.float32)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    scaled = (blocks * inv[:, None]).astype(np.float32).astype(np.float64)
    q = (np.sign(scaled) * np.floor(np.abs(scaled) + 0.5)).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def expected_tensors(cfg, p):
    """GGUF name -> the values in ggml's order (rows of ne[0] values) and ne."""
    out = {"token_embd.weight": p["embed"]}
    for i in range(cfg["n_layers"]):
        b, l = f"blk.{i}.", f"layers.{i}."
        out[b + "attn_norm.weight"] = p[l + "attn_norm"]
        out[b + "ffn_norm.weight"] = p[l + "mlp_norm"]
        # lockstep's [in, out] matrices are ggml's ne = {in, out}: the transpose, row-major.
        for g, s in [("attn_q", "wq"), ("attn_k", "wk"), ("attn_v", "wv"), ("attn_output", "wo"),
                     ("ffn_gate", "w_gate"), ("ffn_up", "w_up"), ("ffn_down", "w_down")]:
            out[b + g + ".weight"] = p[l + s].T
    out["output_norm.weight"] = p["final_norm"]
    out["output.weight"] = p["head"].T
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def export(model, out, *extra):
    done = subprocess.run([BINARY, "export-gguf", model, "-o", out, *extra], capture_output=True, text=True)
    return done


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    # GQA (4 heads over 2), d_ff 48: ffn_down's rows of 48 are no whole Q8_0 blocks (F16 instead).
    return init_model(tmp_path_factory.mktemp("gguf") / "m", seed=11)


@pytest.mark.parametrize("kind", ["f32", "f16", "q8_0"])
def test_every_key_and_tensor(model, tmp_path, kind):
    out = str(tmp_path / "m.gguf")
    done = export(model, out, "--type", kind)
    assert done.returncode == 0, done.stderr
    kv, tensors, alignment = read_gguf(out)
    cfg, params = read_params(model)
    assert alignment == 32
    file_type = {"f32": 0, "f16": 1, "q8_0": 7}[kind]
    tokens = gpt2_byte_strings()[:cfg["vocab_size"]]
    f32 = lambda v: float(np.float32(v))
    assert kv == {
        "general.architecture": (STRING, "llama"),
        "general.name": (STRING, "m"),
        "general.file_type": (U32, file_type),
        "general.alignment": (U32, 32),
        "llama.vocab_size": (U32, cfg["vocab_size"]),
        "llama.context_length": (U32, cfg["length"]),
        "llama.embedding_length": (U32, cfg["d_model"]),
        "llama.block_count": (U32, cfg["n_layers"]),
        "llama.feed_forward_length": (U32, cfg["d_ff"]),
        "llama.attention.head_count": (U32, cfg["n_heads"]),
        "llama.attention.head_count_kv": (U32, cfg["n_kv_heads"]),
        "llama.rope.dimension_count": (U32, cfg["d_model"] // cfg["n_heads"]),
        "llama.rope.freq_base": (F32, f32(cfg["rope_theta"])),
        "llama.attention.layer_norm_rms_epsilon": (F32, f32(cfg["norm_eps"])),
        "tokenizer.ggml.model": (STRING, "gpt2"),
        "tokenizer.ggml.pre": (STRING, "default"),
        "tokenizer.ggml.tokens": (ARRAY, ("array", STRING, tokens)),
        "tokenizer.ggml.token_type": (ARRAY, ("array", I32, [1] * len(tokens))),
        "tokenizer.ggml.merges": (ARRAY, ("array", STRING, [])),
        "tokenizer.ggml.add_bos_token": (BOOL, False),
        "tokenizer.ggml.add_eos_token": (BOOL, False),
    }
    # Every byte's string is distinct and one character (llama.cpp's BPE maps text to them).
    assert len(set(tokens)) == 256 and all(len(t) == 1 for t in tokens)

    expected = expected_tensors(cfg, params)
    assert sorted(tensors) == sorted(expected)
    for name, values in expected.items():
        ne, ttype, raw = tensors[name]
        assert ne == list(values.shape[::-1]), name  # ggml's ne: the contiguous dimension first
        if values.ndim == 1 or kind == "f32":
            assert GGML_TYPES[ttype][0] == "F32", name
            assert raw == values.astype("<f4").tobytes(), name
        elif kind == "f16" or values.shape[-1] % 32 != 0:
            # f16: round to nearest even, as NumPy's float16; q8_0 falls back to it for rows that
            # are not whole blocks.
            assert GGML_TYPES[ttype][0] == "F16", name
            assert raw == values.astype("<f2").tobytes(), name
        else:
            assert GGML_TYPES[ttype][0] == "Q8_0", name
            assert raw == q8_0_numpy(values), name
    if kind == "q8_0":
        assert GGML_TYPES[tensors["blk.0.ffn_down.weight"][1]][0] == "F16"
        assert GGML_TYPES[tensors["blk.0.ffn_up.weight"][1]][0] == "Q8_0"


def test_q8_0_reference_cases():
    """The NumPy twin itself on hand-made blocks: zeros, ties away from zero, the block max."""
    row = np.zeros(32, dtype=np.float32)
    assert q8_0_numpy(row) == bytes(34)
    row[0], row[1] = 127.0, -0.5  # d = 1: -0.5 rounds away from zero to -1
    block = q8_0_numpy(row)
    assert np.frombuffer(block[:2], "<f2")[0] == 1.0
    assert np.frombuffer(block[2:], np.int8)[:2].tolist() == [127, -1]


def rewrite_param(model_dir, name, index, value):
    """Sets one parameter value in place, with model.json's SHA-256 updated to match."""
    path = os.path.join(model_dir, "params.safetensors")
    raw = bytearray(open(path, "rb").read())
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    begin = 8 + n + header[name]["data_offsets"][0] + 4 * index
    raw[begin:begin + 4] = struct.pack("<f", value)
    open(path, "wb").write(raw)
    meta_path = os.path.join(model_dir, "model.json")
    meta = json.load(open(meta_path))
    meta["weights"]["parameters_sha256"] = hashlib.sha256(bytes(raw[8 + n:])).hexdigest()
    open(meta_path, "w").write(json.dumps(meta, indent=2))


def test_refusals_leave_nothing(tmp_path):
    big = init_model(tmp_path / "big", seed=3)
    rewrite_param(big, "layers.0.wq", 5, 1.0e7)  # past f16 (65504), and 1e7 / 127 too
    out = tmp_path / "out"
    out.mkdir()
    target = str(out / "m.gguf")
    done = export(big, target, "--type", "f16")
    assert done.returncode != 0
    assert "blk.0.attn_q.weight" in done.stderr and "f16" in done.stderr, done.stderr
    done = export(big, target, "--type", "q8_0")
    assert done.returncode != 0 and "q8_0 scale" in done.stderr, done.stderr
    assert os.listdir(out) == []  # no file and no temporary left
    assert export(big, target, "--type", "f32").returncode == 0  # f32 carries it exactly

    done = export(big, target, "--type", "q4_0")
    assert done.returncode != 0 and "--type must be f32, f16 or q8_0" in done.stderr

    wide = init_model(tmp_path / "wide", seed=3, vocab_size=300)
    done = export(wide, str(out / "w.gguf"))
    assert done.returncode != 0 and "300 ids" in done.stderr and "tokenizer" in done.stderr
    assert sorted(os.listdir(out)) == ["m.gguf"]

    done = export(str(tmp_path / "missing"), str(out / "x.gguf"))
    assert done.returncode != 0 and "missing" in done.stderr


def test_python_binding_writes_the_same_file(extension, model, tmp_path):
    cli = str(tmp_path / "cli.gguf")
    assert export(model, cli, "--type", "q8_0").returncode == 0
    py = str(tmp_path / "py.gguf")
    info = extension.export_gguf(model, py, type="q8_0", name="m")
    assert info["tensors"] == 21 and info["type"] == "q8_0" and info["bytes"] == os.path.getsize(py)
    assert open(py, "rb").read() == open(cli, "rb").read()
    with pytest.raises(ValueError, match="--type must be"):
        extension.export_gguf(model, py, type="q4_0")


def test_import_gguf_binding_writes_what_the_command_writes(extension, model, tmp_path):
    """lockstep.import_gguf is `lockstep import gguf`: the same files, and what it kept in blocks."""
    gguf = str(tmp_path / "q8.gguf")
    assert export(model, gguf, "--type", "q8_0").returncode == 0
    info = extension.import_gguf(gguf, str(tmp_path / "py"), ids_only=True, widen_k_quants=True)
    assert info["profile"] == "lockstep-int8dot-1" and info["widened_k_quants"] == 0
    assert info["block_matrices"] > 0 and "Q8_0" in info["types"] and info["vocabulary"] == "gpt2"
    done = subprocess.run([BINARY, "import", "gguf", gguf, "-o", str(tmp_path / "cli"), "--ids-only"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("model.json", "model.gguf"):
        assert open(tmp_path / "py" / name, "rb").read() == open(tmp_path / "cli" / name, "rb").read()
    with pytest.raises(ValueError, match="not a GGUF file"):
        extension.import_gguf(str(model) + "/model.json", str(tmp_path / "bad"))
    assert not os.path.exists(tmp_path / "bad")

