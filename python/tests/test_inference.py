"""lockstep.LanguageModelConfig and lockstep.LanguageModelInference against the C++ results.

The independent references are the `lockstep` command (`call` for logits and hidden states,
`inspect` for the SHA-256), the safetensors file read with NumPy, and float64 recomputations.
Bits are compared as bits: arrays with array_equal on their uint32 views."""

import hashlib
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

from conftest import DIMENSIONS, REPO, init_model, lockstep_cli

pytestmark = pytest.mark.usefixtures("extension")

LENGTH = DIMENSIONS["length"]
BATCH = DIMENSIONS["batch"]


def bits(a):
    """The raw bit patterns of a float32 array."""
    a = np.asarray(a)
    assert a.dtype == np.float32
    return a.view(np.uint32)


def same_bits(a, b):
    return a.shape == b.shape and np.array_equal(bits(a), bits(b))


def random_ids(seed, rows, cols):
    return np.random.default_rng(seed).integers(0, 256, size=(rows, cols), dtype=np.int32)


def read_safetensors(path):
    """{name: float32 array} from a safetensors file, read with NumPy alone."""
    raw = open(path, "rb").read()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    data = raw[8 + size:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32"
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(entry["shape"])
    return out


# --- LanguageModelConfig ---------------------------------------------------------------------


def test_config_defaults_and_layout(extension):
    c = extension.LanguageModelConfig()
    assert (c.vocab_size, c.length, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff,
            c.batch) == (256, 256, 128, 4, 4, 4, 384, 8)
    assert c.n_total == 918656  # `lockstep init`'s count for the defaults (README)
    names, shapes, offsets = c.parameter_names, c.parameter_shapes, c.offsets
    assert names[0] == "embed" and names[-2:] == ["final_norm", "head"]
    assert len(names) == len(shapes) == len(offsets) - 1 == 2 + 9 * c.n_layers + 1
    assert shapes[0] == (256, 128) and shapes[-1] == (128, 256)
    assert offsets[0] == 0 and offsets[-1] == c.n_total
    for j, shape in enumerate(shapes):
        assert offsets[j + 1] - offsets[j] == int(np.prod(shape))


def test_config_values_equality_and_pickle(extension):
    c = extension.LanguageModelConfig(**DIMENSIONS)
    for key, value in DIMENSIONS.items():
        assert getattr(c, key) == value
    assert c.head_dim == 8
    same = extension.LanguageModelConfig(**DIMENSIONS)
    assert c == same and hash(c) == hash(same) and c != extension.LanguageModelConfig()
    assert c != "a config"
    assert pickle.loads(pickle.dumps(c)) == c
    assert "d_model=32" in repr(c)
    with pytest.raises(AttributeError):
        c.d_model = 64  # immutable


def test_config_refusals(extension):
    with pytest.raises(ValueError, match="n_heads"):
        extension.LanguageModelConfig(d_model=32, n_heads=3)
    with pytest.raises(ValueError, match="n_kv_heads"):
        extension.LanguageModelConfig(n_kv_heads=3)
    with pytest.raises(ValueError, match="length"):
        extension.LanguageModelConfig(length=0)
    with pytest.raises(ValueError, match="out of range"):
        extension.LanguageModelConfig(d_model=2**40)
    with pytest.raises(ValueError, match="norm_eps"):
        extension.LanguageModelConfig(norm_eps=float("nan"))
    with pytest.raises(TypeError):
        extension.LanguageModelConfig(64)  # keyword-only
    with pytest.raises(TypeError, match="d_model must be an int; got str"):
        extension.LanguageModelConfig(d_model="64")
    with pytest.raises(TypeError, match="d_model must be an int; got float"):
        extension.LanguageModelConfig(d_model=64.0)
    with pytest.raises(TypeError, match="batch must be an int; got bool"):
        extension.LanguageModelConfig(batch=True)
    # A value no int32 holds is a wrong value, not a wrong type.
    with pytest.raises(ValueError, match="length = 1180591620717411303424 is out of range"):
        extension.LanguageModelConfig(length=2**70)
    assert extension.LanguageModelConfig(length=np.int64(16)).length == 16


# --- loading ---------------------------------------------------------------------------------


def test_from_checkpoint_matches_the_files(extension, lm, model_dir):
    assert lm.shape == extension.LanguageModelConfig(**DIMENSIONS)
    assert lm.profile == extension.PROFILE == "lockstep-f32-1"
    assert lm.weight_format == "float32" and lm.precision == "f32"
    assert lm.threaded is True and lm.threads is None
    # The SHA-256 `lockstep inspect` prints, and that of the parameters' bytes.
    inspected = [line.split()[1] for line in lockstep_cli("inspect", model_dir).splitlines()
                 if line.startswith("sha256")]
    assert inspected == [lm.parameters_sha256()]
    params = lm.parameters_
    assert params.dtype == np.float32 and params.shape == (lm.shape.n_total,)
    assert not params.flags.writeable
    assert hashlib.sha256(params.astype("<f4").tobytes()).hexdigest() == lm.parameters_sha256()
    # Each tensor of params.safetensors at its registry offset.
    tensors = read_safetensors(os.path.join(model_dir, "params.safetensors"))
    c = lm.shape
    assert sorted(tensors) == sorted(c.parameter_names)
    for j, name in enumerate(c.parameter_names):
        assert tensors[name].shape == c.parameter_shapes[j]
        assert same_bits(params[c.offsets[j]:c.offsets[j + 1]], tensors[name].reshape(-1))


def test_from_checkpoint_paths(extension, lm, model_dir, tmp_path):
    import pathlib

    Inference = extension.LanguageModelInference
    sha = lm.parameters_sha256()
    assert Inference.from_checkpoint(os.path.join(model_dir, "model.json")).parameters_sha256() == sha
    assert Inference.from_checkpoint(pathlib.Path(model_dir)).parameters_sha256() == sha
    assert Inference.from_checkpoint(os.fsencode(model_dir)).parameters_sha256() == sha
    # A checkpoint location: its newest complete step; a step directory by name.
    location = tmp_path / "run"
    location.mkdir()
    old = init_model(location / "step-00000003", seed=6)
    new = init_model(location / "step-00000010", seed=7)
    (location / "step-00000020").mkdir()  # incomplete: no model.json
    newest = Inference.from_checkpoint(str(location))
    assert newest.parameters_sha256() == Inference.from_checkpoint(new).parameters_sha256()
    assert Inference.from_checkpoint(old).parameters_sha256() != newest.parameters_sha256()
    assert newest.parameters_sha256() != sha


def test_from_checkpoint_refusals(extension, model_dir, tmp_path):
    Inference = extension.LanguageModelInference
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        Inference.from_checkpoint(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="no model.json"):
        Inference.from_checkpoint(str(tmp_path))
    with pytest.raises(ValueError, match="not a model.json"):
        Inference.from_checkpoint(os.path.join(model_dir, "params.safetensors"))
    with pytest.raises(RuntimeError, match="remote"):
        Inference.from_checkpoint("s3://bucket/run")
    with pytest.raises(ValueError, match="not a checkpoint"):
        Inference.from_checkpoint(model_dir, trained=True)
    with pytest.raises(TypeError):
        Inference.from_checkpoint(42)
    with pytest.raises(TypeError, match="threaded must be a bool"):
        Inference.from_checkpoint(model_dir, threaded=1)
    with pytest.raises(ValueError, match=r"threads must be in \[1, 1024\]"):
        Inference.from_checkpoint(model_dir, threads=0)
    # Damaged weights: a format error (ValueError), never a crash.
    broken = tmp_path / "broken"
    shutil.copytree(model_dir, broken)
    weights = broken / "params.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-5] ^= 0xFF
    weights.write_bytes(bytes(raw))
    with pytest.raises(ValueError):
        Inference.from_checkpoint(str(broken))
    weights.write_bytes(bytes(raw[:100]))
    with pytest.raises(ValueError):
        Inference.from_checkpoint(str(broken))


def test_constructor_from_flat_and_named_parameters(extension, lm):
    Inference = extension.LanguageModelInference
    c = lm.shape
    flat = np.array(lm.parameters_)
    a = Inference(flat, shape=c)
    assert a.parameters_sha256() == lm.parameters_sha256()
    assert a.weight_format == "float32"
    named = {name: flat[c.offsets[j]:c.offsets[j + 1]].reshape(c.parameter_shapes[j])
             for j, name in enumerate(c.parameter_names)}
    b = Inference(dict(reversed(list(named.items()))), shape=c, threaded=False, threads=2)
    assert b.parameters_sha256() == lm.parameters_sha256()
    assert b.threaded is False and b.threads == 2
    # The parameters are copied: changing the array afterwards changes nothing.
    flat[:] = 0
    assert a.parameters_sha256() == lm.parameters_sha256()
    ids = random_ids(1, 2, LENGTH)
    assert same_bits(a.logits(ids), lm.logits(ids))
    # The default shape: the default dimensions.
    d = extension.LanguageModelConfig()
    assert Inference(np.zeros(d.n_total, np.float32)).shape == d


def test_constructor_refusals(extension, lm):
    Inference = extension.LanguageModelInference
    c = lm.shape
    flat = np.array(lm.parameters_)
    with pytest.raises(TypeError, match="float32"):
        Inference(flat.astype(np.complex64), shape=c)
    with pytest.raises(TypeError, match="float32"):
        Inference(flat.astype(str), shape=c)
    with pytest.raises(ValueError, match="not exactly a float32"):
        Inference(flat.astype(np.float64) + 1e-12, shape=c)  # values float32 does not hold
    with pytest.raises(ValueError, match=rf"parameters must be float32 \[{c.n_total}\]"):
        Inference(flat[:-1], shape=c)
    with pytest.raises(ValueError):
        Inference(flat.reshape(2, -1), shape=c)
    bad = flat.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match="finite"):
        Inference(bad, shape=c)
    with pytest.raises(TypeError, match="shape must be a LanguageModelConfig"):
        Inference(flat, shape=dict(DIMENSIONS))
    with pytest.raises(TypeError, match="threaded must be a bool"):
        Inference(flat, shape=c, threaded=None)
    with pytest.raises(TypeError, match="threads must be an int or None"):
        Inference(flat, shape=c, threads=2.0)
    with pytest.raises(TypeError, match="threads must be an int or None"):
        Inference(flat, shape=c, threads=True)
    with pytest.raises(ValueError, match=r"threads must be in \[1, 1024\]"):
        Inference(flat, shape=c, threads=1025)
    named = {name: flat[c.offsets[j]:c.offsets[j + 1]].reshape(c.parameter_shapes[j])
             for j, name in enumerate(c.parameter_names)}
    missing = dict(named)
    del missing["head"]
    with pytest.raises(ValueError, match="head"):
        Inference(missing, shape=c)
    with pytest.raises(ValueError, match="extra"):
        Inference(dict(named, extra=np.zeros(3, np.float32)), shape=c)
    with pytest.raises(ValueError, match="final_norm"):
        Inference(dict(named, final_norm=np.zeros(5, np.float32)), shape=c)
    with pytest.raises(TypeError, match="float32"):
        Inference(dict(named, head=named["head"].astype(bool)), shape=c)
    with pytest.raises(ValueError, match=r"parameter 'head'\[0, 0\] = .* is not exactly a float32"):
        Inference(dict(named, head=named["head"].astype(np.float64) + 1e-12), shape=c)
    with pytest.raises(TypeError, match="names must be str"):
        Inference({**named, 3: np.zeros(1, np.float32)}, shape=c)


# --- the calls against the lockstep command --------------------------------------------------


@pytest.mark.parametrize("device", ["cpu", "reference"])
def test_logits_and_hidden_equal_lockstep_call(lm, model_dir, device):
    ids = random_ids(2, 1, LENGTH)
    c = lm.shape
    raw = lockstep_cli("call", model_dir, "--output", "logits", "--device", device,
                       stdin=ids.astype("<i4").tobytes())
    want = np.frombuffer(raw, dtype="<f4").reshape(1, LENGTH, c.vocab_size)
    threaded = device == "cpu"
    assert same_bits(lm.logits(ids, threaded=threaded), want)
    raw = lockstep_cli("call", model_dir, "--output", "hidden", "--device", device,
                       stdin=ids.astype("<i4").tobytes())
    want = np.frombuffer(raw, dtype="<f4").reshape(1, LENGTH, c.d_model)
    assert same_bits(lm.hidden(ids, threaded=threaded), want)


def test_shorter_rows_are_prefixes(lm):
    # Causality: the logits of a row's first T positions do not depend on what follows.
    ids = random_ids(3, 2, LENGTH)
    full = lm.logits(ids)
    for t in (1, 5, LENGTH - 1):
        assert same_bits(lm.logits(ids[:, :t]), full[:, :t])


def test_threaded_and_reference_give_the_same_bits(extension, lm):
    ids = random_ids(4, 4, LENGTH)
    batch = random_ids(5, BATCH, LENGTH + 1)
    reference = extension.LanguageModelInference(lm.parameters_, shape=lm.shape, threaded=False)
    want_logits = reference.logits(ids)
    want_hidden = reference.hidden(ids)
    want_next = reference.next_bytes(ids)
    want_loss = reference.loss_bits(batch)
    assert same_bits(lm.logits(ids, threaded=False), want_logits)
    for threads in (None, 1, 2, 3, 7):
        assert same_bits(lm.logits(ids, threads=threads), want_logits)
        assert same_bits(lm.hidden(ids, threads=threads), want_hidden)
        assert lm.next_bytes(ids, threads=threads) == want_next
        assert lm.loss_bits(batch, threads=threads) == want_loss
        # The reference instance, told per call to take the threaded path.
        assert same_bits(reference.logits(ids, threaded=True, threads=threads), want_logits)
    pinned = extension.LanguageModelInference(lm.parameters_, shape=lm.shape, threads=2)
    assert same_bits(pinned.logits(ids), want_logits)
    assert same_bits(pinned.logits(ids, threaded=False), want_logits)


def test_batch_composition_does_not_change_a_row(lm):
    ids = random_ids(6, 5, LENGTH)
    together = lm.logits(ids)
    for r in range(5):
        assert same_bits(lm.logits(ids[r:r + 1]), together[r:r + 1])


def test_ragged_lengths(extension, lm):
    ids = random_ids(7, 4, LENGTH).astype(np.int64)
    lengths = [LENGTH, 1, 9, LENGTH - 1]
    # Padding ids are never read: even ids no model takes.
    ids[1, 1:] = 10**12
    ids[2, 9:] = -5
    ids[3, LENGTH - 1] = 300
    for threaded in (True, False):
        logits = lm.logits(ids, lengths=lengths, threaded=threaded)
        hidden = lm.hidden(ids, lengths=np.array(lengths), threaded=threaded)
        assert logits.shape == (4, LENGTH, lm.shape.vocab_size)
        nexts = lm.next_bytes(ids, lengths=tuple(lengths), threaded=threaded)
        for r, n in enumerate(lengths):
            alone = ids[r:r + 1, :n].astype(np.int32)
            assert same_bits(logits[r:r + 1, :n], lm.logits(alone))
            assert same_bits(hidden[r:r + 1, :n], lm.hidden(alone))
            # Padding positions are +0.0: every bit zero.
            assert not bits(logits[r, n:]).any() and not bits(hidden[r, n:]).any()
            assert nexts[r] == lm.next_bytes(alone)[0]


def test_ragged_refusals(lm):
    ids = random_ids(8, 2, 6)
    with pytest.raises(ValueError, match="one length per row"):
        lm.logits(ids, lengths=[6])
    with pytest.raises(ValueError, match=r"lengths\[1\] = 0 is outside \[1, 6\]"):
        lm.logits(ids, lengths=[6, 0])
    with pytest.raises(ValueError, match=r"lengths\[0\] = 7"):
        lm.next_bytes(ids, lengths=[7, 6])
    with pytest.raises(ValueError, match="out of range"):
        lm.logits(ids, lengths=[2**40, 1])
    with pytest.raises(TypeError, match="sequence of int"):
        lm.logits(ids, lengths=[6, 2.5])
    with pytest.raises(TypeError, match="sequence of int"):
        lm.logits(ids, lengths=[True, 1])
    with pytest.raises(TypeError, match="sequence of int"):
        lm.logits(ids, lengths="66")
    with pytest.raises(TypeError, match="sequence of int"):
        lm.logits(ids, lengths=6)
    # A real position still must hold a valid id.
    ids[1, 2] = 256
    with pytest.raises(ValueError, match="got 256 at row 1, position 2"):
        lm.logits(ids, lengths=[6, 3])
    assert lm.logits(ids, lengths=[6, 2]).shape == (2, 6, 256)


def test_next_bytes_is_the_greedy_choice(lm):
    ids = random_ids(9, 6, 11)
    logits = lm.logits(ids)
    # np.argmax returns the first maximum: ties go to the lowest id.
    assert lm.next_bytes(ids) == [int(i) for i in np.argmax(logits[:, -1], axis=1)]
    assert all(isinstance(i, int) for i in lm.next_bytes(ids))


def test_next_bytes_ties_go_to_the_lowest_id(extension, lm):
    # A head of zeros makes every logit +0.0: the choice is id 0 on both paths.
    c = lm.shape
    flat = np.array(lm.parameters_)
    head = c.parameter_names.index("head")
    flat[c.offsets[head]:c.offsets[head + 1]] = 0
    tied = extension.LanguageModelInference(flat, shape=c)
    ids = random_ids(10, 3, 7)
    assert tied.next_bytes(ids) == [0, 0, 0]
    assert tied.next_bytes(ids, threaded=False) == [0, 0, 0]


def test_loss_bits_and_loss(lm):
    batch = random_ids(11, BATCH, LENGTH + 1)
    batch[1, LENGTH] = -100  # the last column is only a target: -100 is ignored there
    bits_value = lm.loss_bits(batch)
    assert isinstance(bits_value, int)
    loss = lm.loss(batch)
    assert isinstance(loss, float)
    assert struct.pack("<f", loss) == struct.pack("<I", bits_value)
    assert lm.loss_bits(batch, threaded=False) == bits_value
    # float64 recomputation from the logits: the mean over the counted targets.
    logits = lm.logits(batch[:, :LENGTH]).astype(np.float64)
    targets = batch[:, 1:]
    shifted = logits - logits.max(axis=2, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(axis=2, keepdims=True))
    counted = targets != -100
    picked = np.take_along_axis(log_softmax, np.where(counted, targets, 0)[..., None], axis=2)[..., 0]
    want = -picked[counted].mean()
    assert counted.sum() == BATCH * LENGTH - 1
    assert loss == pytest.approx(want, rel=1e-5)


def test_loss_refusals(lm):
    batch = random_ids(12, BATCH, LENGTH + 1)
    batch[0, 3] = -100
    with pytest.raises(ValueError, match="got -100 at row 0, position 3"):
        lm.loss_bits(batch)
    with pytest.raises(ValueError, match=rf"ids must be \[{BATCH}, {LENGTH + 1}\]"):
        lm.loss_bits(random_ids(12, BATCH, LENGTH))
    with pytest.raises(ValueError, match=rf"ids must be \[{BATCH}, {LENGTH + 1}\]"):
        lm.loss(random_ids(12, BATCH + 1, LENGTH + 1))
    with pytest.raises(TypeError):
        lm.loss(random_ids(12, BATCH, LENGTH + 1).astype(np.float32))


def test_ids_refusals(lm):
    with pytest.raises(ValueError, match=r"ids must be byte values in \[0, 256\); got 300 at row 0, position 3"):
        lm.logits(np.array([[1, 2, 3, 300]], dtype=np.int32))
    with pytest.raises(ValueError, match="got -1 at row 1, position 0"):
        lm.next_bytes([[1, 2], [-1, 2]])
    with pytest.raises(ValueError, match="got 4294967296 at row 0, position 1"):
        lm.logits(np.array([[1, 2**32]], dtype=np.int64))
    with pytest.raises(ValueError, match="got 18446744073709551615 at row 0, position 0"):
        lm.logits(np.array([[2**64 - 1]], dtype=np.uint64))
    with pytest.raises(TypeError, match="integers"):
        lm.logits(np.zeros((1, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="integers"):
        lm.logits(np.zeros((1, 3), dtype=bool))
    with pytest.raises(TypeError, match="integers"):
        lm.logits([["a", "b"]])
    with pytest.raises(ValueError, match=rf"ids must be \[batch, 1..{LENGTH}\]"):
        lm.logits(np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError, match=rf"ids must be \[batch, 1..{LENGTH}\]"):
        lm.logits(np.zeros((1, 2, 3), dtype=np.int32))
    with pytest.raises(ValueError, match=rf"\[batch, 1..{LENGTH}\]; got \[1, {LENGTH + 1}\]"):
        lm.logits(np.zeros((1, LENGTH + 1), dtype=np.int32))
    with pytest.raises(ValueError, match=r"got \[0, 3\]"):
        lm.logits(np.zeros((0, 3), dtype=np.int32))
    with pytest.raises(ValueError, match=r"got \[2, 0\]"):
        lm.hidden(np.zeros((2, 0), dtype=np.int32))
    with pytest.raises(ValueError):
        lm.logits([[1, 2], [3]])  # ragged nested lists are not an array


def test_call_option_refusals(lm):
    ids = random_ids(13, 1, 4)
    for method in (lm.logits, lm.hidden, lm.next_bytes):
        with pytest.raises(TypeError, match="threaded must be a bool or None"):
            method(ids, threaded=1)
        with pytest.raises(TypeError, match="threads must be an int or None"):
            method(ids, threads="2")
        with pytest.raises(ValueError, match=r"threads must be in \[1, 1024\]"):
            method(ids, threads=0)
        with pytest.raises(ValueError, match=r"threads must be in \[1, 1024\]"):
            method(ids, threads=2**70)
        with pytest.raises(TypeError):
            method(ids, 3)  # options are keyword-only
    batch = random_ids(13, BATCH, LENGTH + 1)
    with pytest.raises(ValueError, match=r"threads must be in \[1, 1024\]"):
        lm.loss_bits(batch, threads=-1)
    assert lm.loss_bits(batch, threads=1024) == lm.loss_bits(batch)
    # Document 004's rule: a Python int; a numpy integer is refused (test_numbers_at_the_edges).
    with pytest.raises(TypeError, match="threads must be an int or None; got int64"):
        lm.loss_bits(batch, threads=np.int64(1024))


def test_ids_of_any_integer_layout(lm):
    ids = random_ids(14, 3, 2 * 10)
    want = lm.logits(np.ascontiguousarray(ids[:, ::2]))
    assert same_bits(lm.logits(ids[:, ::2]), want)  # strided view
    assert same_bits(lm.logits(ids[:, ::2].astype(">i4")), want)  # big-endian
    for dtype in (np.int64, np.uint8, np.int16, np.uint32):
        assert same_bits(lm.logits(ids[:, ::2].astype(dtype)), want)
    assert same_bits(lm.logits(ids[:, ::2].tolist()), want)  # nested lists
    # A misaligned int32 view (numpy over raw bytes at an odd offset).
    raw = bytearray(1 + ids[:, ::2].size * 4)
    raw[1:] = np.ascontiguousarray(ids[:, ::2]).tobytes()
    odd = np.frombuffer(bytes(raw), dtype=np.int32, offset=1).reshape(3, 10)
    assert same_bits(lm.logits(odd), want)


def test_concurrent_calls_from_python_threads(lm):
    ids = random_ids(15, 4, LENGTH)
    want = lm.logits(ids, threaded=False)
    results = [None] * 8
    errors = []

    def work(i):
        try:
            results[i] = lm.logits(ids, threads=1 + i % 3)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(same_bits(r, want) for r in results)


def test_outputs_are_fresh_arrays(lm):
    ids = random_ids(16, 1, 5)
    a, b = lm.logits(ids), lm.logits(ids)
    assert a.flags.c_contiguous and a.flags.writeable and a.dtype == np.float32
    a[:] = 1
    assert not np.array_equal(a, b)


def test_package_imports_with_the_standard_library_alone(tmp_path):
    # Only the source tree on the path, and numpy made unimportable: the client is there, the
    # compiled classes are not, and the reason is kept.
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import lockstep\n"
            "assert lockstep.extension_error is not None\n"
            "assert not hasattr(lockstep, 'LanguageModelInference')\n"
            "assert lockstep.Client is lockstep.client.Client\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_package_exports(extension):
    from lockstep import client

    assert extension.Client is client.Client and extension.ServerError is client.ServerError
    for name in ("LanguageModelConfig", "LanguageModelInference", "LanguageModelHostTrainer",
                 "client", "Client"):
        assert name in extension.__all__
    assert extension.default_thread_count() >= 1
