"""lockstep.LanguageModelHostTrainer: steps against the inference loss, an independent NumPy
float32 AdamW (docs/ARITHMETIC.md, "AdamW"), both paths, failed steps, resuming, and the argument
rules of document 004."""

import hashlib
import math
import struct

import numpy as np
import pytest

from conftest import DIMENSIONS

pytestmark = pytest.mark.usefixtures("extension")

LENGTH = DIMENSIONS["length"]
BATCH = DIMENSIONS["batch"]
f32 = np.float32


def batch_ids(seed):
    ids = np.random.default_rng(seed).integers(0, 256, size=(BATCH, LENGTH + 1), dtype=np.int32)
    ids[BATCH - 1, LENGTH] = -100  # ignored target, allowed in the last column
    return ids


def u32(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def power(b, t):
    """b^t by square-and-multiply from the lowest bit, in float64."""
    result = 1.0
    while t:
        if t & 1:
            result *= b
        b *= b
        t >>= 1
    return result


def adamw_numpy(p, m, v, g, t, lr, b1, b2, eps, wd):
    """One AdamW step in NumPy float32, element-wise and without fma, from the f32 options."""
    lr, b1, b2, eps, wd = (float(f32(x)) for x in (lr, b1, b2, eps, wd))
    step = f32(lr / (1.0 - power(b1, t)))
    inv = f32(1.0 / math.sqrt(1.0 - power(b2, t)))
    decay = f32(1.0 - lr * wd)
    m1 = f32(b1) * m + f32(1.0 - b1) * g
    v1 = f32(b2) * v + f32(1.0 - b2) * (g * g)
    den = np.sqrt(v1) * inv + f32(eps)
    p1 = p * decay - step * (m1 / den)
    return p1, m1, v1


@pytest.fixture(scope="module")
def start(lm):
    return np.array(lm.parameters_), lm.shape


def test_a_step_is_adamw_on_the_gradient(extension, lm, start):
    params, shape = start
    options = dict(lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    trainer = extension.LanguageModelHostTrainer(params, shape=shape, **options)
    assert trainer.completed_steps == 0 and trainer.gradient_ is None
    assert trainer.parameters_sha256() == lm.parameters_sha256()
    assert trainer.profile == lm.profile and trainer.shape == shape
    assert trainer.threaded is True and trainer.threads is None
    for t in (1, 2, 3):
        ids = batch_ids(t)
        p0, m0, v0 = trainer.parameters_, trainer.m_, trainer.v_
        # The step's loss is the loss of the parameters before it.
        before = extension.LanguageModelInference(p0, shape=shape)
        loss_bits = trainer.train_step(ids)
        assert loss_bits == before.loss_bits(ids)
        assert trainer.completed_steps == t
        g = trainer.gradient_
        assert g.dtype == np.float32 and g.shape == (shape.n_total,) and np.isfinite(g).all()
        p1, m1, v1 = adamw_numpy(p0, m0, v0, g, t, options["lr"], *options["betas"],
                                 options["eps"], options["weight_decay"])
        assert np.array_equal(u32(trainer.parameters_), u32(p1))
        assert np.array_equal(u32(trainer.m_), u32(m1))
        assert np.array_equal(u32(trainer.v_), u32(v1))
    assert trainer.parameters_sha256() == hashlib.sha256(trainer.parameters_.tobytes()).hexdigest()


def test_threaded_and_reference_steps_are_equal(extension, start):
    params, shape = start
    threaded = extension.LanguageModelHostTrainer(params, shape=shape, threads=3)
    reference = extension.LanguageModelHostTrainer(params, shape=shape, threaded=False)
    assert reference.threaded is False and threaded.threads == 3
    for seed in (4, 5):
        assert threaded.train_step(batch_ids(seed)) == reference.train_step(batch_ids(seed))
        for name in ("parameters_", "m_", "v_", "gradient_"):
            assert np.array_equal(u32(getattr(threaded, name)), u32(getattr(reference, name))), name


def test_loss_takes_a_step(extension, start):
    params, shape = start
    a = extension.LanguageModelHostTrainer(params, shape=shape)
    b = extension.LanguageModelHostTrainer(params, shape=shape)
    ids = batch_ids(6)
    value = a.loss(ids)
    assert isinstance(value, float)
    assert struct.pack("<f", value) == struct.pack("<I", b.train_step(ids))
    assert a.completed_steps == 1
    assert a.parameters_sha256() == b.parameters_sha256()


def test_a_failed_step_leaves_the_state_unchanged(extension, start):
    params, shape = start
    trainer = extension.LanguageModelHostTrainer(params, shape=shape)
    trainer.train_step(batch_ids(7))
    kept = (trainer.parameters_, trainer.m_, trainer.v_, trainer.completed_steps)
    assert trainer.gradient_ is not None

    def unchanged():
        assert trainer.completed_steps == kept[3]
        assert trainer.gradient_ is None
        for got, want in zip((trainer.parameters_, trainer.m_, trainer.v_), kept[:3]):
            assert np.array_equal(u32(got), u32(want))

    bad = batch_ids(8)
    bad[2, 5] = 256
    with pytest.raises(ValueError, match=r"ids must be byte values in \[0, 256\); got 256 at row 2, position 5"):
        trainer.train_step(bad)
    unchanged()
    trainer.train_step(batch_ids(8))  # a good step puts a gradient back
    kept = (trainer.parameters_, trainer.m_, trainer.v_, trainer.completed_steps)
    bad = batch_ids(8)
    bad[0, 0] = -100  # -100 only in the last column
    with pytest.raises(ValueError, match="got -100 at row 0, position 0"):
        trainer.train_step(bad)
    unchanged()
    with pytest.raises(ValueError, match=rf"ids must be \[{BATCH}, {LENGTH + 1}\]"):
        trainer.train_step(batch_ids(8)[:, :LENGTH])
    with pytest.raises(TypeError):
        trainer.train_step(batch_ids(8).astype(np.float64))
    unchanged()


def test_a_non_finite_loss_is_refused_and_changes_nothing(extension, start):
    params, shape = start
    # A head of huge weights: finite parameters whose logits overflow, so the loss is not finite.
    huge = params.copy()
    head = shape.parameter_names.index("head")
    huge[shape.offsets[head]:shape.offsets[head + 1]] = np.float32(3e38)
    for threaded in (True, False):
        trainer = extension.LanguageModelHostTrainer(huge, shape=shape, threaded=threaded)
        with pytest.raises(RuntimeError, match="not finite"):
            trainer.train_step(batch_ids(9))
        assert trainer.completed_steps == 0 and trainer.gradient_ is None
        assert np.array_equal(u32(trainer.parameters_), u32(huge))
        assert not u32(trainer.m_).any() and not u32(trainer.v_).any()


def test_from_state_resumes_with_the_same_bits(extension, start):
    params, shape = start
    options = dict(lr=2e-3, weight_decay=0.05)
    straight = extension.LanguageModelHostTrainer(params, shape=shape, **options)
    for seed in (10, 11):
        straight.train_step(batch_ids(seed))
    resumed = extension.LanguageModelHostTrainer.from_state(
        straight.parameters_, straight.m_, straight.v_, completed_steps=2, shape=shape, **options)
    assert resumed.completed_steps == 2 and resumed.gradient_ is None
    assert resumed.parameters_sha256() == straight.parameters_sha256()
    assert resumed.train_step(batch_ids(12)) == straight.train_step(batch_ids(12))
    for name in ("parameters_", "m_", "v_", "gradient_"):
        assert np.array_equal(u32(getattr(resumed, name)), u32(getattr(straight, name))), name
    # completed_steps matters: AdamW's bias correction counts from it.
    other = extension.LanguageModelHostTrainer.from_state(
        straight.parameters_, straight.m_, straight.v_, completed_steps=0, shape=shape, **options)
    assert other.train_step(batch_ids(13)) == straight.train_step(batch_ids(13))
    assert other.parameters_sha256() != straight.parameters_sha256()


def test_named_parameters(extension, start):
    params, shape = start
    named = {name: params[shape.offsets[j]:shape.offsets[j + 1]].reshape(shape.parameter_shapes[j])
             for j, name in enumerate(shape.parameter_names)}
    a = extension.LanguageModelHostTrainer(named, shape=shape)
    b = extension.LanguageModelHostTrainer(params, shape=shape)
    assert a.parameters_sha256() == b.parameters_sha256()


def test_argument_refusals(extension, start):
    params, shape = start
    Trainer = extension.LanguageModelHostTrainer
    n = shape.n_total
    with pytest.raises(TypeError, match="shape must be a LanguageModelConfig"):
        Trainer(params, shape="small")
    with pytest.raises(ValueError, match=rf"parameters must be float32 \[{n}\]"):
        Trainer(params[:-1], shape=shape)
    with pytest.raises(TypeError, match="float32"):
        Trainer(params.astype(np.complex64), shape=shape)
    with pytest.raises(ValueError, match=r"parameters\[0\] = .* is not exactly a float32"):
        Trainer(params.astype(np.float64) + 1e-12, shape=shape)
    bad = params.copy()
    bad[3] = np.inf
    with pytest.raises(ValueError, match="parameters must be finite"):
        Trainer(bad, shape=shape)
    with pytest.raises(ValueError, match=rf"m must be float32 \[{n}\]"):
        Trainer(params, shape=shape, m=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="v must be finite"):
        Trainer(params, shape=shape, v=np.full(n, np.nan, np.float32))
    with pytest.raises(ValueError, match="v must not be negative"):
        Trainer(params, shape=shape, v=np.full(n, -1.0, np.float32))
    # Wrong types are TypeErrors (README), wrong values ValueErrors.
    with pytest.raises(TypeError, match="completed_steps must be an int; got float"):
        Trainer(params, shape=shape, completed_steps=1.5)
    with pytest.raises(TypeError, match="completed_steps must be an int; got bool"):
        Trainer(params, shape=shape, completed_steps=True)
    with pytest.raises(ValueError, match="completed_steps must not be negative"):
        Trainer(params, shape=shape, completed_steps=-1)
    for name in ("lr", "eps", "weight_decay"):
        with pytest.raises(TypeError, match=f"{name} must be a real number"):
            Trainer(params, shape=shape, **{name: "1e-3"})
        with pytest.raises(TypeError, match=f"{name} must be a real number"):
            Trainer(params, shape=shape, **{name: True})
        with pytest.raises(TypeError, match=f"{name} must be a real number"):
            Trainer(params, shape=shape, **{name: None})
    with pytest.raises(ValueError, match="lr and eps must be positive"):
        Trainer(params, shape=shape, lr=0)
    with pytest.raises(ValueError, match="lr and eps must be positive"):
        Trainer(params, shape=shape, eps=-1e-8)
    with pytest.raises(ValueError, match="lr and eps must be positive"):
        Trainer(params, shape=shape, lr=float("nan"))
    with pytest.raises(ValueError, match=r"betas must be in \[0, 1\)"):
        Trainer(params, shape=shape, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match=r"betas must be in \[0, 1\)"):
        Trainer(params, shape=shape, betas=(-0.1, 0.9))
    with pytest.raises(TypeError, match="beta1 must be a real number"):
        Trainer(params, shape=shape, betas=("a", 0.9))
    with pytest.raises(ValueError, match="betas must be a pair.*got 1 values"):
        Trainer(params, shape=shape, betas=(0.9,))
    with pytest.raises(TypeError, match="betas must be a pair"):
        Trainer(params, shape=shape, betas=0.9)
    with pytest.raises(TypeError, match="betas must be a pair"):
        Trainer(params, shape=shape, betas="ab")
    with pytest.raises(ValueError, match="lr = 10+ is out of range"):
        Trainer(params, shape=shape, lr=10**400)
    with pytest.raises(ValueError, match="weight_decay must not be negative"):
        Trainer(params, shape=shape, weight_decay=-0.01)
    with pytest.raises(TypeError, match="threaded must be a bool"):
        Trainer(params, shape=shape, threaded="yes")
    with pytest.raises(ValueError, match=r"threads must be in \[1, 1024\]"):
        Trainer(params, shape=shape, threads=0)


def test_numbers_at_the_edges(extension, start):
    """Document 004's rules for numeric arguments, each case both ways: Python ints for threads
    and completed_steps (numpy integers refused), Python ints and floats for lr, betas, eps and
    weight_decay (numpy.float64 is a float and accepted; numpy.float32 refused), with a
    TypeError where the document raises ValueError. One documented stricter rule: lr and eps
    must stay positive in float32, so lr=1e-50, which the document accepts, is refused."""
    params, shape = start
    Trainer = extension.LanguageModelHostTrainer
    assert Trainer(params, shape=shape, threads=2).threads == 2
    with pytest.raises(TypeError, match="threads must be an int or None; got int64"):
        Trainer(params, shape=shape, threads=np.int64(2))
    assert Trainer(params, shape=shape, completed_steps=4).completed_steps == 4
    with pytest.raises(TypeError, match="completed_steps must be an int; got int64"):
        Trainer(params, shape=shape, completed_steps=np.int64(4))
    for name in ("lr", "eps", "weight_decay"):
        Trainer(params, shape=shape, **{name: np.float64(0.01)})  # a float subclass
        Trainer(params, shape=shape, **{name: 1})  # an int
        with pytest.raises(TypeError, match=f"{name} must be a real number.*got float32"):
            Trainer(params, shape=shape, **{name: np.float32(0.01)})
    Trainer(params, shape=shape, betas=(np.float64(0.5), 0))
    with pytest.raises(TypeError, match="beta2 must be a real number.*got float32"):
        Trainer(params, shape=shape, betas=(0.9, np.float32(0.99)))
    # The smallest positive float32 (a subnormal) is a learning rate; 1e-50 rounds to 0.
    a = Trainer(params, shape=shape, lr=1.5e-45)
    a.train_step(batch_ids(3))
    for name in ("lr", "eps"):
        with pytest.raises(ValueError, match=rf"{name} = 1e-50 rounds to 0 in float32"):
            Trainer(params, shape=shape, **{name: 1e-50})
    with pytest.raises(ValueError, match=r"lr = 1e\+300 overflows float32"):
        Trainer(params, shape=shape, lr=1e300)
