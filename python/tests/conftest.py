"""Fixtures shared by the tests of the compiled module (test_inference.py, test_trainer.py,
test_examples.py).

LOCKSTEP_BINARY names the lockstep executable (ctest sets it); the model directories are made
with `lockstep init`. The compiled module is required wherever the build put it on the path:
`extension` skips only when no build tree is on PYTHONPATH at all (LOCKSTEP_BUILD_PYTHON=OFF),
and fails when one is but the module does not import.
"""

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("LOCKSTEP_BINARY", os.path.join(REPO, "build", "src", "lockstep"))

# A small model: two layers, grouped-query attention (4 heads over 2 kv heads), window 24, a
# training batch of 3 rows.
DIMENSIONS = dict(length=24, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, batch=3)


def lockstep_cli(*args, stdin=None):
    """Runs the lockstep command; its stdout (bytes when stdin is bytes, else text)."""
    done = subprocess.run([BINARY, *args], input=stdin, capture_output=True, check=False,
                          text=stdin is None)
    if done.returncode != 0:
        raise AssertionError(f"lockstep {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def init_model(path, seed, **overrides):
    dims = dict(DIMENSIONS, **overrides)
    flags = []
    for key, value in dims.items():
        flags += ["--" + key.replace("_", "-"), str(value)]
    lockstep_cli("init", "--seed", str(seed), *flags, "-o", str(path))
    return str(path)


@pytest.fixture(scope="session")
def extension():
    """The lockstep package with its compiled classes."""
    import lockstep

    if lockstep.extension_error is not None:
        if len(lockstep.__path__) > 1:
            pytest.fail(f"the build tree is on the path but lockstep._lockstep does not import: "
                        f"{lockstep.extension_error}")
        pytest.skip("lockstep._lockstep is not on the path (built with LOCKSTEP_BUILD_PYTHON=OFF?)")
    return lockstep


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    return init_model(tmp_path_factory.mktemp("models") / "small", seed=5)


@pytest.fixture(scope="session")
def lm(extension, model_dir):
    return extension.LanguageModelInference.from_checkpoint(model_dir)


@pytest.fixture(scope="session")
def build_dir():
    """The build tree LOCKSTEP_BINARY comes from (<build>/src/lockstep)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
