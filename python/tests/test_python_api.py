"""The Python surface itself: signatures that name real types, class methods that build the
caller's class, the OSError subclasses of a missing or denied path, and the type/value rule
(TypeError for a wrong type, ValueError for a wrong value) on every entry point."""

import errno
import inspect
import os
import pydoc
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from conftest import DIMENSIONS, REPO

pytestmark = pytest.mark.usefixtures("extension")

LENGTH = DIMENSIONS["length"]
BATCH = DIMENSIONS["batch"]


def methods(cls):
    for name, member in vars(cls).items():
        if callable(member) or isinstance(member, classmethod):
            yield name, getattr(cls, name)


def test_signatures_name_real_types(extension):
    """help() shows parameter names and types, never pybind11's `handle`."""
    classes = (extension.LanguageModelConfig, extension.LanguageModelInference,
               extension.LanguageModelHostTrainer, extension.Session)
    for cls in classes:
        for name, member in methods(cls):
            doc = getattr(member, "__doc__", None) or ""
            assert "handle" not in doc, f"{cls.__name__}.{name}: {doc[:300]}"
    logits = pydoc.render_doc(extension.LanguageModelInference.logits)
    assert "ids: numpy.ndarray" in logits
    assert "lengths: Sequence[int] | None = None" in logits
    assert "threads: int | None = None" in logits
    init = extension.LanguageModelInference.__init__.__doc__
    assert "shape: LanguageModelConfig | None = None" in init
    trainer = extension.LanguageModelHostTrainer.__init__.__doc__
    assert "lr: float = 0.001" in trainer and "betas: tuple[float, float]" in trainer
    assert "parameters: ArrayLike | dict[str, ArrayLike | PackedTensor] | LanguageModelInference" in trainer
    generate = pydoc.render_doc(extension.LanguageModelInference.generate)
    for text in ("prompt: bytes | str | Sequence[int]", "max_tokens: int = 64", "temperature: float = 0.0",
                 "top_k: int = 0", "seed: int = 0", "stop: bytes | str | None = None",
                 "on_token: Callable[[int], object] | None = None", "truncate: bool = True",
                 "threaded: bool | None = None", "threads: int | None = None"):
        assert text in generate, generate
    load = extension.LanguageModelInference.from_checkpoint.__doc__
    assert "path: str | os.PathLike" in load and "-> LanguageModelInference" in load
    assert "save_model(self: lockstep._lockstep.LanguageModelHostTrainer, path: str | os.PathLike)" \
        in extension.LanguageModelHostTrainer.save_model.__doc__


def test_from_checkpoint_and_from_state_are_class_methods(extension, lm, model_dir):
    Inference, Trainer = extension.LanguageModelInference, extension.LanguageModelHostTrainer
    assert isinstance(inspect.getattr_static(Inference, "from_checkpoint"), classmethod)
    assert isinstance(inspect.getattr_static(Trainer, "from_state"), classmethod)
    assert type(Inference.from_checkpoint(model_dir)) is Inference

    class Plain(Inference):
        pass

    class Counting(Inference):
        """A subclass with the document's constructor signature."""

        def __init__(self, parameters, *, shape=None, threaded=True, threads=None):
            super().__init__(parameters, shape=shape, threaded=threaded, threads=threads)
            self.made_by_init = (threaded, threads)

    plain = Plain.from_checkpoint(model_dir)
    assert type(plain) is Plain and plain.parameters_sha256() == lm.parameters_sha256()
    counted = Counting.from_checkpoint(model_dir, threaded=False, threads=2)
    assert type(counted) is Counting and counted.made_by_init == (False, 2)
    assert counted.threaded is False and counted.threads == 2
    ids = np.random.default_rng(0).integers(0, 256, (2, LENGTH), dtype=np.int32)
    assert counted.logits(ids).tobytes() == lm.logits(ids).tobytes()

    class MyTrainer(Trainer):
        pass

    flat = np.array(lm.parameters_)
    zeros = np.zeros_like(flat)
    t = MyTrainer.from_state(flat, zeros, zeros, completed_steps=3, shape=lm.shape)
    assert type(t) is MyTrainer and t.completed_steps == 3
    assert type(MyTrainer.from_state(lm, zeros, zeros)) is MyTrainer


def test_a_model_instance_shares_its_model(extension, lm):
    Inference = extension.LanguageModelInference
    other = Inference(lm, threaded=False, threads=3)
    assert other.parameters_sha256() == lm.parameters_sha256() and other.shape == lm.shape
    assert other.threaded is False and other.threads == 3
    assert Inference(lm, shape=lm.shape).shape == lm.shape
    with pytest.raises(ValueError, match="shape must be None or the model's own dimensions"):
        Inference(lm, shape=extension.LanguageModelConfig())


def test_a_missing_path_is_file_not_found(extension, model_dir, tmp_path):
    Inference = extension.LanguageModelInference
    for missing in (tmp_path / "missing", tmp_path / "missing" / "model.json",
                    os.path.join(model_dir, "model.json", "x")):
        with pytest.raises(FileNotFoundError, match="no such file or directory") as caught:
            Inference.from_checkpoint(missing)
        assert caught.value.errno == errno.ENOENT and isinstance(caught.value, OSError)
    # A model directory whose weights file is gone.
    broken = tmp_path / "no-weights"
    shutil.copytree(model_dir, broken)
    os.remove(broken / "params.safetensors")
    with pytest.raises(FileNotFoundError, match="params.safetensors"):
        Inference.from_checkpoint(broken)


DENIED_CHILD = """
import sys, lockstep
try:
    lockstep.LanguageModelInference.from_checkpoint(sys.argv[1])
except PermissionError as e:
    print("PermissionError", e.errno, isinstance(e, OSError), e)
except Exception as e:
    print("other", type(e).__name__, e)
"""


def test_a_denied_path_is_permission_error(extension, model_dir):
    """A model directory that cannot be entered, and one whose weights cannot be read. Root reads
    anything, so as root the loads run in a child as `nobody`."""
    root = os.geteuid() == 0
    top = tempfile.mkdtemp(prefix="lockstep-denied-")
    try:
        os.chmod(top, 0o755)
        closed = os.path.join(top, "closed")
        os.mkdir(closed)
        shutil.copytree(model_dir, os.path.join(closed, "model"))
        os.chmod(closed, 0o700 if root else 0o000)  # root owns it: nobody cannot enter
        unreadable = os.path.join(top, "unreadable")
        shutil.copytree(model_dir, unreadable)
        os.chmod(unreadable, 0o755)
        os.chmod(os.path.join(unreadable, "model.json"), 0o644)
        os.chmod(os.path.join(unreadable, "params.safetensors"), 0o000)
        for path in (os.path.join(closed, "model"), unreadable):
            if root:
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                    os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p))
                try:
                    done = subprocess.run([sys.executable, "-c", DENIED_CHILD, path], user=65534,
                                          cwd="/", env=env, capture_output=True, text=True, timeout=60)
                except (PermissionError, OSError) as e:
                    pytest.skip(f"cannot run a child as nobody: {e}")
                if "No module named" in done.stderr or "Permission denied" in done.stderr:
                    pytest.skip("the build tree is not readable by nobody: " + done.stderr[-300:])
                assert done.stdout.startswith(f"PermissionError {errno.EACCES} True"), \
                    done.stdout + done.stderr
            else:
                with pytest.raises(PermissionError) as caught:
                    extension.LanguageModelInference.from_checkpoint(path)
                assert caught.value.errno == errno.EACCES
    finally:
        for dirpath, dirnames, filenames in os.walk(top):
            os.chmod(dirpath, 0o755)
            for name in filenames:
                os.chmod(os.path.join(dirpath, name), 0o644)
        if not root:
            os.chmod(os.path.join(top, "closed"), 0o755)
        shutil.rmtree(top)


def test_session_lengths(extension, lm):
    s = lm.session()
    s.append(b"hello")
    assert s.fork().length == 5 and s.fork(None).length == 5 and s.fork(np.int64(2)).length == 2
    assert s.fork(0).length == 0
    with pytest.raises(ValueError, match="fork: length must not be negative; got -1"):
        s.fork(-1)
    with pytest.raises(ValueError, match="cannot fork 6 positions from a session of 5"):
        s.fork(6)
    with pytest.raises(ValueError, match="more than a session holds"):
        s.fork(2**40)
    with pytest.raises(TypeError, match="fork: length must be an int; got str"):
        s.fork("2")
    with pytest.raises(TypeError, match="fork: length must be an int; got float"):
        s.fork(2.0)
    with pytest.raises(ValueError, match="truncate: length must not be negative; got -1"):
        s.truncate(-1)
    with pytest.raises(TypeError, match="truncate: length must be an int"):
        s.truncate(None)
    with pytest.raises(ValueError, match="int32 range"):
        s.append([1, 2**40])
    with pytest.raises(TypeError, match="tokens must hold ints; got a float"):
        s.append([1, 2.0])
    assert s.length == 5
    s.truncate(np.int32(3))
    assert s.length == 3


def test_wrong_types_are_type_errors_everywhere(extension, lm, model_dir):
    """One wrong-typed argument per entry point: TypeError, never ValueError or RuntimeError."""
    Inference, Trainer, Config = (extension.LanguageModelInference,
                                  extension.LanguageModelHostTrainer, extension.LanguageModelConfig)
    flat = np.array(lm.parameters_)
    ids = np.zeros((1, 4), np.int32)
    batch = np.zeros((BATCH, LENGTH + 1), np.int32)
    cases = [
        lambda: Config(length="8"),
        lambda: Inference(flat, shape=lm.shape, threaded="yes"),
        lambda: Inference(flat, shape=lm.shape, threads=2.0),
        lambda: Inference(flat, shape="small"),
        lambda: Inference(flat.astype(np.complex128), shape=lm.shape),
        lambda: Inference.from_checkpoint(42),
        lambda: Inference.from_checkpoint(model_dir, trained="no"),
        lambda: lm.logits(ids.astype(np.float32)),
        lambda: lm.logits(ids, lengths="4"),
        lambda: lm.logits(ids, threaded=1),
        lambda: lm.hidden(ids, threads="2"),
        lambda: lm.loss_bits(batch, threads=np.int64(2)),
        lambda: lm.next_bytes(ids, lengths=[1.5]),
        lambda: lm.session(threaded="x"),
        lambda: lm.session().append(1.5),
        lambda: Trainer(flat, shape=lm.shape, lr="1e-3"),
        lambda: Trainer(flat, shape=lm.shape, m=flat.astype(bool)),
        lambda: Trainer(flat, shape=lm.shape, completed_steps="1"),
        lambda: Trainer(lm).train_step(batch.astype(np.float64)),
        lambda: Trainer(lm).save_model(None),
    ]
    for i, case in enumerate(cases):
        with pytest.raises(TypeError):
            case()
            pytest.fail(f"case {i} raised nothing")


def test_array_like_parameters(extension, lm):
    """Document 003's "array-like": any real dtype (a list of Python floats, float64, float16,
    integers) is taken when float32 holds every value exactly, and gives the float32 model's
    bits; the first value it does not hold is a ValueError naming its position and value."""
    Inference, Trainer = extension.LanguageModelInference, extension.LanguageModelHostTrainer
    c = lm.shape
    flat = np.array(lm.parameters_)
    for given in (flat.tolist(), flat.astype(np.float64), flat.astype(np.longdouble), tuple(flat.tolist())):
        model = Inference(given, shape=c)
        assert model.parameters_sha256() == lm.parameters_sha256()
        assert model.weight_format == "float32"
    trainer = Trainer(flat.tolist(), shape=c, m=np.zeros(c.n_total, np.float64), v=[0] * c.n_total)
    assert trainer.parameters_sha256() == lm.parameters_sha256()
    # Integers and float16 that float32 holds exactly.
    small = extension.LanguageModelConfig(vocab_size=256, length=4, d_model=8, n_layers=1, n_heads=2,
                                          n_kv_heads=1, d_ff=8, batch=1)
    ints = np.arange(small.n_total, dtype=np.int64) % 7 - 3
    assert (Inference(ints, shape=small).parameters_sha256()
            == Inference(ints.astype(np.float32), shape=small).parameters_sha256())
    assert (Inference(ints.astype(np.float16) / 4, shape=small).parameters_sha256()
            == Inference((ints / 4).astype(np.float32), shape=small).parameters_sha256())
    named = {name: flat[c.offsets[j]:c.offsets[j + 1]].reshape(c.parameter_shapes[j]).tolist()
             for j, name in enumerate(c.parameter_names)}
    assert Inference(named, shape=c).parameters_sha256() == lm.parameters_sha256()
    # Refusals: the first inexact value, its position and the float32 nearest it.
    bad = flat.astype(np.float64)
    bad[5] = 0.1
    bad[9] = 0.2
    with pytest.raises(ValueError, match=r"parameters\[5\] = 0\.1 \(float64\) is not exactly a float32 "
                                         r"\(the nearest is 0\.10000000149011612\)"):
        Inference(bad, shape=c)
    with pytest.raises(ValueError, match=r"parameters\[5\] = 0\.1"):
        Trainer(bad.tolist(), shape=c)
    with pytest.raises(ValueError, match=r"m\[3\] = 1e-50"):
        Trainer(flat, shape=c, m=[0.0] * 3 + [1e-50] + [0.0] * (c.n_total - 4))
    huge = ints.copy()
    huge[2] = 2**24 + 1  # the first integer float32 does not hold
    with pytest.raises(ValueError, match=r"parameters\[2\] = 16777217 \(int64\)"):
        Inference(huge, shape=small)
    with pytest.raises(ValueError, match=r"parameters\[2\] = 16777217 \(int32\)"):
        Inference(huge.astype(np.int32), shape=small)
    wide = np.zeros(small.n_total, np.uint64)
    wide[1] = 2**63 + 1  # float32 holds 2**63, not this
    with pytest.raises(ValueError, match=r"parameters\[1\] = 9223372036854775809 \(uint64\)"):
        Inference(wide, shape=small)
    with pytest.raises(ValueError, match=r"parameters\[0\] = 1e\+300 \(float64\) is beyond float32's range"):
        Inference([1e300] + [0.0] * (small.n_total - 1), shape=small)
    matrix = dict(named, head=np.array(named["head"], np.float64))
    matrix["head"][1, 2] = 1 / 3
    with pytest.raises(ValueError, match=r"parameter 'head'\[1, 2\] = 0\.3333333333333333"):
        Inference(matrix, shape=c)
    # Not real numbers: TypeError, as before.
    for wrong in (flat.astype(np.complex64), flat.astype(bool), ["x"] * c.n_total, [object()] * c.n_total):
        with pytest.raises(TypeError, match="float32"):
            Inference(wrong, shape=c)
    # NaN converts as itself and is then refused by the finiteness check, not as inexact.
    nan = flat.astype(np.float64)
    nan[4] = np.nan
    with pytest.raises(ValueError, match="finite"):
        Inference(nan, shape=c)
