"""The trainer's registry and its checkpoint from Python (document 003's parameter_registry and
export_checkpoint under lockstep's names): parameter_registry(), and save_checkpoint(), whose
step directory is byte for byte the one `lockstep train` writes for the same state, and which
`train --resume`, from_checkpoint and `export` read."""

import json
import os
import struct
import subprocess

import numpy as np
import pytest

from conftest import BINARY, DIMENSIONS

pytestmark = pytest.mark.usefixtures("extension")

FILES = ("model.json", "params.safetensors", "optimizer.safetensors", "run.sx", "training.json")


def read_safetensors(path):
    """{name: array} of a safetensors file, read with NumPy alone."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    dtypes = {"F32": "<f4", "I8": "i1"}
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + begin:8 + n + end], dtypes[entry["dtype"]]).reshape(entry["shape"])
    return out


def run_file_text(data, **changes):
    keys = dict(length=DIMENSIONS["length"], d_model=DIMENSIONS["d_model"], n_layers=DIMENSIONS["n_layers"],
                n_heads=DIMENSIONS["n_heads"], n_kv_heads=DIMENSIONS["n_kv_heads"], d_ff=DIMENSIONS["d_ff"],
                batch=DIMENSIONS["batch"], steps=4, seed=3, warmup=1, checkpoint_every=2, eval_every=0)
    keys.update(changes)
    body = " ".join(f":{k.replace('_', '-')} {v}" for k, v in keys.items())
    return f'(defrun pyck :data "{data}" :held-out 0.1 {body})\n'


def lockstep(*args, cwd):
    done = subprocess.run([BINARY, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"lockstep {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run file over a small corpus, trained 4 steps by `lockstep train` (step-2 and step-4)."""
    root = tmp_path_factory.mktemp("pyck")
    rng = np.random.default_rng(11)
    (root / "data.txt").write_bytes(bytes(rng.integers(32, 127, 6000, dtype=np.uint8)))
    (root / "run.sx").write_text(run_file_text("data.txt"))
    lockstep("train", "run.sx", "--checkpoint-dir", "straight", "--device", "reference", cwd=root)
    return root


def trainer_from_step(extension, step_dir):
    """A Python trainer holding a checkpoint's state (weights, moments, step)."""
    Inference, Trainer = extension.LanguageModelInference, extension.LanguageModelHostTrainer
    model = Inference.from_checkpoint(step_dir, trained=True)
    moments = read_safetensors(os.path.join(step_dir, "optimizer.safetensors"))
    names = model.shape.parameter_names
    m = np.concatenate([moments["m." + n].ravel() for n in names])
    v = np.concatenate([moments["v." + n].ravel() for n in names])
    step = json.load(open(os.path.join(step_dir, "training.json")))["step"]
    return Trainer.from_state(model, m, v, completed_steps=step)


def test_parameter_registry(extension, lm):
    trainer = extension.LanguageModelHostTrainer(lm)
    registry = trainer.parameter_registry()
    shape = trainer.shape
    assert [e["name"] for e in registry] == shape.parameter_names
    assert [e["shape"] for e in registry] == shape.parameter_shapes
    assert [e["offset"] for e in registry] == shape.offsets[:-1]
    assert [e["count"] for e in registry] == [int(np.prod(s)) for s in shape.parameter_shapes]
    assert registry[-1]["offset"] + registry[-1]["count"] == shape.n_total
    # The registry slices the flat vectors into the named tensors the constructors take.
    flat = trainer.parameters_
    named = {e["name"]: flat[e["offset"]:e["offset"] + e["count"]].reshape(e["shape"]) for e in registry}
    assert extension.LanguageModelInference(named, shape=shape).parameters_sha256() == lm.parameters_sha256()


def test_save_checkpoint_writes_what_training_writes(extension, run):
    """The state of step 2, saved from Python, is byte for byte training's step-2 directory, and
    `train --resume` from it writes training's step-4 byte for byte."""
    trainer = trainer_from_step(extension, str(run / "straight" / "step-00000002"))
    cwd = os.getcwd()
    os.chdir(run)  # the run file names its data relative to the current directory
    try:
        path = trainer.save_checkpoint("from-python", "run.sx")
    finally:
        os.chdir(cwd)
    assert path == "from-python/step-00000002"
    for name in FILES:
        assert (run / path / name).read_bytes() == (run / "straight" / "step-00000002" / name).read_bytes(), name
    lockstep("train", "run.sx", "--checkpoint-dir", "from-python", "--resume", "--device", "reference", cwd=run)
    for name in FILES:
        assert ((run / "from-python" / "step-00000004" / name).read_bytes()
                == (run / "straight" / "step-00000004" / name).read_bytes()), name
    # Every reader takes it: from_checkpoint and `export` (packed too).
    model = extension.LanguageModelInference.from_checkpoint(str(run / path))
    assert model.parameters_sha256() == trainer.parameters_sha256()
    lockstep("export", "--checkpoint", path, "-o", "exported", cwd=run)
    assert (extension.LanguageModelInference.from_checkpoint(str(run / "exported")).parameters_sha256()
            == trainer.parameters_sha256())
    # `serve` answers from it with the model's bits.
    from lockstep import client
    from test_client import Served

    server = Served(str(run / path), str(run / "ck.sock"))
    try:
        assert server.banner.startswith(f"serving {run / path} on ")
        ids = np.frombuffer(b"a checkpoint from Python", np.uint8).astype(np.int32)[:DIMENSIONS["length"]]
        ids = np.resize(ids, (1, DIMENSIONS["length"]))
        with client.Client(server.sock) as c:
            assert c.step == 2 and c.slug == "pyck"
            assert c.call(ids)["logits"].tobytes() == model.logits(ids).tobytes()
    finally:
        assert server.stop()[0] == 128 + 15


def test_save_checkpoint_refusals(extension, run, tmp_path):
    trainer = trainer_from_step(extension, str(run / "straight" / "step-00000002"))
    data = str(run / "data.txt")
    cases = {
        "other.sx": (run_file_text(data, d_model=64, n_heads=4), r"model configuration \(.*d_model 64"),
        "ema.sx": (run_file_text(data, ema=0.9), ":ema"),
        "bf16.sx": (run_file_text(data, precision="bf16"), ":precision bf16"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=message):
            trainer.save_checkpoint(tmp_path / "ck", tmp_path / name)
        assert not (tmp_path / "ck" / "step-00000002").exists()
    with pytest.raises(FileNotFoundError):
        trainer.save_checkpoint(tmp_path / "ck", tmp_path / "missing.sx")
    (tmp_path / "nodata.sx").write_text(run_file_text(str(tmp_path / "absent.txt")))
    with pytest.raises(OSError, match="absent.txt"):
        trainer.save_checkpoint(tmp_path / "ck", tmp_path / "nodata.sx")
    (tmp_path / "good.sx").write_text(run_file_text(data))
    first = trainer.save_checkpoint(tmp_path / "ck", tmp_path / "good.sx")
    assert first == str(tmp_path / "ck" / "step-00000002")
    with pytest.raises(FileExistsError, match="step-00000002"):  # never overwritten
        trainer.save_checkpoint(tmp_path / "ck", tmp_path / "good.sx")
    with pytest.raises(TypeError):
        trainer.save_checkpoint(None, tmp_path / "good.sx")
