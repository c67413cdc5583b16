"""A trainer built from a model, and its trained parameters written as a model directory
(LanguageModelHostTrainer.save_model) that from_checkpoint, `lockstep inspect` and `lockstep serve`
read with the same parameters' SHA-256 and the same bits."""

import os
import signal
import subprocess

import numpy as np
import pytest

from conftest import BINARY, DIMENSIONS, init_model, lockstep_cli

pytestmark = pytest.mark.usefixtures("extension")

LENGTH = DIMENSIONS["length"]
BATCH = DIMENSIONS["batch"]


def batch_ids(seed, rows=BATCH):
    return np.random.default_rng(seed).integers(0, 256, size=(rows, LENGTH + 1), dtype=np.int32)


def trained(extension, lm, steps=2, **options):
    trainer = extension.LanguageModelHostTrainer(lm, **options)
    for seed in range(steps):
        trainer.train_step(batch_ids(seed, trainer.shape.batch))
    return trainer


def test_a_trainer_takes_parameters_shape_and_precision_from_a_model(extension, lm, tmp_path):
    Trainer = extension.LanguageModelHostTrainer
    a = Trainer(lm, lr=2e-3)
    assert a.shape == lm.shape and a.precision == "f32"
    assert a.parameters_sha256() == lm.parameters_sha256()
    b = Trainer(np.array(lm.parameters_), shape=lm.shape, lr=2e-3)
    batch = batch_ids(1)
    assert a.train_step(batch) == b.train_step(batch) == lm.loss_bits(batch)
    assert a.parameters_sha256() == b.parameters_sha256()
    # Another batch: the one field shape may change.
    wide = Trainer(lm, shape=extension.LanguageModelConfig(**dict(DIMENSIONS, batch=5)))
    assert wide.shape.batch == 5
    wide.train_step(batch_ids(2, rows=5))
    with pytest.raises(ValueError, match="shape must be the model's own dimensions"):
        Trainer(lm, shape=extension.LanguageModelConfig(**dict(DIMENSIONS, rope_theta=500.0)))
    # A bf16 model trains in bf16: its first loss is the model's.
    bf16 = extension.LanguageModelInference.from_checkpoint(
        init_model(tmp_path / "bf16", seed=8, precision="bf16"))
    t = Trainer(bf16)
    assert t.precision == "bf16"
    assert t.train_step(batch) == bf16.loss_bits(batch)


def test_flat_or_named_parameters_need_a_shape(extension, lm):
    Trainer = extension.LanguageModelHostTrainer
    flat = np.array(lm.parameters_)
    with pytest.raises(TypeError, match="needs shape="):
        Trainer(flat)
    named = {name: flat[lm.shape.offsets[j]:lm.shape.offsets[j + 1]].reshape(s)
             for j, (name, s) in enumerate(zip(lm.shape.parameter_names, lm.shape.parameter_shapes))}
    with pytest.raises(TypeError, match="needs shape="):
        Trainer(named)
    with pytest.raises(TypeError, match="needs shape="):
        Trainer.from_state(flat, np.zeros_like(flat), np.zeros_like(flat))


def test_save_model_round_trip(extension, lm, tmp_path):
    trainer = trained(extension, lm, lr=5e-3)
    sha = trainer.parameters_sha256()
    assert sha != lm.parameters_sha256()
    out = tmp_path / "trained"
    assert trainer.save_model(out) is None  # path-like accepted
    assert sorted(os.listdir(out)) == ["model.json", "params.safetensors"]
    loaded = extension.LanguageModelInference.from_checkpoint(str(out))
    assert loaded.parameters_sha256() == sha and loaded.shape == trainer.shape
    assert loaded.precision == "f32"
    assert np.array_equal(np.array(loaded.parameters_).view(np.uint32),
                          trainer.parameters_.view(np.uint32))
    # The next step's loss is the saved model's loss.
    batch = batch_ids(9)
    assert loaded.loss_bits(batch) == trainer.train_step(batch)
    # lockstep inspect: every check of a load, and the same SHA-256.
    inspected = [line.split()[1] for line in lockstep_cli("inspect", str(out)).splitlines()
                 if line.startswith("sha256")]
    assert inspected == [sha]
    # A model directory is never overwritten; a missing parent is named.
    with pytest.raises(FileExistsError, match="already exists"):
        trainer.save_model(str(out))
    with pytest.raises(FileNotFoundError):
        trainer.save_model(str(tmp_path / "no" / "such" / "parent"))
    with pytest.raises(TypeError):
        trainer.save_model(3.5)
    assert sorted(os.listdir(out)) == ["model.json", "params.safetensors"]


def test_saved_bf16_model_keeps_its_precision(extension, tmp_path):
    bf16 = extension.LanguageModelInference.from_checkpoint(
        init_model(tmp_path / "bf16", seed=9, precision="bf16"))
    trainer = trained(extension, bf16, steps=1)
    trainer.save_model(str(tmp_path / "out"))
    loaded = extension.LanguageModelInference.from_checkpoint(str(tmp_path / "out"))
    assert loaded.precision == "bf16" and loaded.parameters_sha256() == trainer.parameters_sha256()


def test_saved_model_serves_the_same_bits(extension, lm, tmp_path):
    from lockstep import client as lsc

    trainer = trained(extension, lm, steps=1)
    out = str(tmp_path / "served-model")
    trainer.save_model(out)
    model = extension.LanguageModelInference(trainer.parameters_, shape=trainer.shape)
    sock = str(tmp_path / "s.sock")
    proc = subprocess.Popen([BINARY, "serve", out, "--socket", sock, "--output", "logits"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = proc.stdout.readline()
        assert banner.startswith("serving "), proc.stderr.read()
        ids = batch_ids(4, rows=1)[:, :LENGTH]
        with lsc.Client(sock, timeout=30) as c:
            got = c.call(ids)["logits"]
        assert got.tobytes() == model.logits(ids).tobytes()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
