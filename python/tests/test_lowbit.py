"""lockstep.lowbit: q8 packing from Python, bit for bit `lockstep export --pack q8`'s, the packed
tensors of a model directory, exact expansion, and packed tensors in the named-parameter dicts
of LanguageModelInference and LanguageModelHostTrainer (weight_format "q8"; mixed refused)."""

import os
import subprocess

import numpy as np
import pytest

from conftest import BINARY
from test_checkpoint import run_file_text

pytestmark = pytest.mark.usefixtures("extension")


@pytest.fixture(scope="module")
def packed_dir(extension, lm, tmp_path_factory):
    """lm's parameters as a checkpoint (save_checkpoint), exported with --pack q8."""
    root = tmp_path_factory.mktemp("lowbit")
    (root / "data.txt").write_bytes(bytes(range(32, 127)) * 40)
    (root / "run.sx").write_text(run_file_text(str(root / "data.txt")))
    trainer = extension.LanguageModelHostTrainer(lm)
    step = trainer.save_checkpoint(root / "ck", root / "run.sx")
    done = subprocess.run([BINARY, "export", "--checkpoint", step, "--pack", "q8", "-o", str(root / "q8")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return str(root / "q8")


def matrices(shape, flat):
    for j, (name, s) in enumerate(zip(shape.parameter_names, shape.parameter_shapes)):
        if len(s) == 2:
            yield name, np.asarray(flat[shape.offsets[j]:shape.offsets[j + 1]]).reshape(s)


def numpy_q8(w):
    """The packing formula of docs/FORMAT.md in NumPy float32 (an independent twin)."""
    scale = (np.abs(w).max(axis=0) / np.float32(127)).astype(np.float32)
    safe = np.where(scale == 0, np.float32(1), scale)
    q = np.clip(np.rint(w / safe), -127, 127).astype(np.int8)
    q[:, scale == 0] = 0
    return q, scale


def test_pack_is_exports_packing(extension, lm, packed_dir):
    from lockstep import lowbit

    read = lowbit.read_packed(packed_dir)
    assert list(read) == lm.shape.parameter_names
    exported = extension.LanguageModelInference.from_checkpoint(packed_dir)
    assert exported.weight_format == "q8"
    for name, w in matrices(lm.shape, lm.parameters_):
        mine = lowbit.pack(w)
        theirs = read[name]
        assert isinstance(theirs, lowbit.PackedTensor) and theirs.format == "q8" and theirs.shape == w.shape
        assert mine.q.tobytes() == theirs.q.tobytes(), name
        assert mine.scale.tobytes() == theirs.scale.tobytes(), name
        q, scale = numpy_q8(w)
        assert mine.q.tobytes() == q.tobytes() and mine.scale.tobytes() == scale.tobytes(), name
        # Expansion: one f32 multiply, exactly what loading the packed file computes.
        expanded = lowbit.expand(mine)
        assert expanded.dtype == np.float32 and expanded.shape == w.shape
        assert expanded.tobytes() == (q.astype(np.float32) * scale).tobytes()
        assert mine.expand().tobytes() == expanded.tobytes()
        j = lm.shape.parameter_names.index(name)
        assert expanded.tobytes() == exported.parameters_[lm.shape.offsets[j]:lm.shape.offsets[j + 1]].tobytes()
    for name, s in zip(lm.shape.parameter_names, lm.shape.parameter_shapes):
        if len(s) == 1:  # vectors stay float32
            assert read[name].dtype == np.float32 and read[name].shape == s


def test_packed_dict_is_expanded_exactly(extension, lm, packed_dir):
    from lockstep import lowbit

    Inference, Trainer = extension.LanguageModelInference, extension.LanguageModelHostTrainer
    exported = Inference.from_checkpoint(packed_dir)
    read = lowbit.read_packed(packed_dir)
    assert lowbit.format_of(read) == "q8"
    model = Inference(read, shape=lm.shape)
    assert model.weight_format == "q8"
    assert model.parameters_sha256() == exported.parameters_sha256()
    assert Inference(model).weight_format == "q8"  # a shared model keeps it
    ids = np.frombuffer(b"packed weights!", np.uint8).astype(np.int32).reshape(1, -1)
    assert model.logits(ids).tobytes() == exported.logits(ids).tobytes()
    # Packing in Python gives the same model as the exported file.
    flat = lm.parameters_
    named = {n: np.asarray(flat[lm.shape.offsets[j]:lm.shape.offsets[j + 1]]).reshape(s)
             for j, (n, s) in enumerate(zip(lm.shape.parameter_names, lm.shape.parameter_shapes))}
    packed = {n: lowbit.pack(a) if a.ndim == 2 else a for n, a in named.items()}
    assert Inference(packed, shape=lm.shape).parameters_sha256() == exported.parameters_sha256()
    trainer = Trainer(packed, shape=lm.shape)
    assert trainer.weight_format == "q8" and trainer.parameters_sha256() == exported.parameters_sha256()
    assert Trainer(exported).weight_format == "q8"
    assert Trainer(named, shape=lm.shape).weight_format == "float32"
    assert Inference(named, shape=lm.shape).weight_format == "float32"
    assert lm.weight_format == "float32" and lowbit.format_of(named) == "float32"
    # Mixed: refused, naming both sides.
    mixed = dict(packed, head=named["head"])
    for make in (lambda: Inference(mixed, shape=lm.shape), lambda: Trainer(mixed, shape=lm.shape),
                 lambda: lowbit.format_of(mixed)):
        with pytest.raises(ValueError, match=r"mix formats: packed embed.*; float32 head"):
            make()


def test_lowbit_refusals(extension, model_dir):
    from lockstep import lowbit

    w = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    with pytest.raises(ValueError, match="'q4' is not defined yet"):
        lowbit.pack(w, format="q4")
    with pytest.raises(ValueError, match="'int4' is not a packed format"):
        lowbit.pack(w, format="int4")
    with pytest.raises(ValueError, match="matrix"):
        lowbit.pack(w.ravel())
    bad = w.copy()
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match=r"w\[1, 2\] is not finite"):
        lowbit.pack(bad)
    with pytest.raises(ValueError, match=r"w\[0, 0\] = 0\.1"):
        lowbit.pack([[0.1, 0.0]])  # the array-like rule: no silent rounding before packing
    with pytest.raises(ValueError, match="holds float32 weights, not packed"):
        lowbit.read_packed(model_dir)
    with pytest.raises(FileNotFoundError):
        lowbit.read_packed(os.path.join(model_dir, "absent"))
    # Built from q and scale; an all-zero column packs to scale 0.
    zero = w.copy()
    zero[:, 1] = 0
    p = lowbit.pack(zero)
    assert p.scale[1] == 0 and not p.q[:, 1].any()
    same = lowbit.PackedTensor(p.q, p.scale)
    assert same.expand().tobytes() == p.expand().tobytes() and "q8 [3, 4]" in repr(same)
    with pytest.raises(TypeError, match="int8"):
        lowbit.PackedTensor(p.q.astype(np.int16), p.scale)
    with pytest.raises(ValueError, match=r"scale must be float32 \[4\]"):
        lowbit.PackedTensor(p.q, p.scale[:3])
    with pytest.raises(ValueError, match=r"scale\[2\] = -1\.0"):
        lowbit.PackedTensor(p.q, np.array([1, 1, -1, 1], np.float32))
    with pytest.raises(ValueError, match="'q4' is not defined yet"):
        lowbit.PackedTensor(p.q, p.scale, format="q4")
    assert lowbit.FORMATS == ("q8",)
