"""The examples run as written: document 003's example (examples/python_example.py, and the
same lines inline), the README's Python block, and the C and C++ embedding programs, whose
printed bytes equal a greedy loop over LanguageModelInference.next_bytes."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

pytestmark = pytest.mark.usefixtures("extension")


def python_env():
    """This process's environment with PYTHONPATH (the package and the build tree) made
    absolute, for a child that runs in another directory."""
    paths = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def test_document_003_example_inline(model_dir, monkeypatch):
    monkeypatch.chdir(model_dir)
    # -- as written, with lockstep's names --
    import numpy as np, lockstep
    lm = lockstep.LanguageModelInference.from_checkpoint("model.json")
    ids = np.frombuffer(b"Hello, wor", dtype=np.uint8).astype(np.int32).reshape(1, -1)
    next_ids = lm.next_bytes(ids)
    # --
    logits = lm.logits(ids)
    assert next_ids == [int(np.argmax(logits[0, -1]))]


def test_python_example_script(extension, lm, model_dir, tmp_path):
    """examples/python_example.py runs from the repository root (the README's command) and from
    any other directory: with no argument it loads the shipped fortunes model beside it; with one
    it loads that model."""
    script = os.path.join(REPO, "examples", "python_example.py")
    ids = np.frombuffer(b"Hello, wor", dtype=np.uint8).astype(np.int32).reshape(1, -1)
    shipped = extension.LanguageModelInference.from_checkpoint(
        os.path.join(REPO, "examples", "models", "fortunes"))
    for cwd in (REPO, str(tmp_path)):
        done = subprocess.run([sys.executable, script], cwd=cwd, env=python_env(),
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(shipped.next_bytes(ids))
    done = subprocess.run([sys.executable, script, model_dir], cwd=REPO, env=python_env(),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(lm.next_bytes(ids))
    missing = subprocess.run([sys.executable, script, str(tmp_path / "missing")], cwd=REPO,
                             env=python_env(), capture_output=True, text=True)
    assert missing.returncode != 0 and "FileNotFoundError" in missing.stderr


def readme_blocks(language):
    """The fenced blocks of README.md's library section in `language`."""
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    section = text.split("## The library", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```" + language + r"\n(.*?)```", section, flags=re.S)


def test_readme_python_block_runs(model_dir, tmp_path):
    blocks = readme_blocks("python")
    assert blocks, "README.md's library section has no python block"
    for block in blocks:
        # The README loads /tmp/model; here it is this test's model.
        code = block.replace('"/tmp/model"', repr(model_dir))
        done = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=python_env(),
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_readme_c_block_compiles_and_runs(lm, model_dir, build_dir, tmp_path):
    library = os.path.join(build_dir, "lib")
    if not os.path.exists(os.path.join(library, "liblockstep.so")):
        pytest.skip(f"{library}/liblockstep.so is not built")
    blocks = readme_blocks("c")
    assert len(blocks) == 1, "README.md's library section should hold one C program"
    source = tmp_path / "example.c"
    source.write_text(blocks[0])
    program = str(tmp_path / "example")
    compiler = os.environ.get("CC", "cc")
    subprocess.run([compiler, "-std=c11", "-Wall", "-Wextra", "-Wpedantic", "-Werror",
                    "-I" + os.path.join(REPO, "include"), str(source), "-L" + library, "-llockstep",
                    "-Wl,-rpath," + library, "-o", program], check=True)
    done = subprocess.run([program, model_dir], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"next byte {lm.next_bytes([list(b'Hello')])[0]}\n"


def greedy(lm, prompt, n):
    text = list(prompt)
    for _ in range(n):
        window = np.array([text[-lm.shape.length:]], dtype=np.int32)
        text += lm.next_bytes(window)
    return text[len(prompt):]


@pytest.mark.parametrize("program", ["embed_c", "embed_cpp"])
def test_embedding_programs_print_the_greedy_bytes(lm, model_dir, build_dir, program):
    path = os.path.join(build_dir, "examples", program)
    if not os.path.exists(path):
        pytest.skip(f"{path} is not built")
    prompt, n = b"Once upon a time", 40  # 56 bytes: the window of 24 slides
    done = subprocess.run([path, model_dir, prompt.decode(), str(n)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "parameters sha256 " + lm.parameters_sha256()
    assert lines[1] == 'prompt "Once upon a time"'
    assert [int(b) for b in lines[2].split()[1:]] == greedy(lm, prompt, n)
    missing = subprocess.run([path, model_dir + "-missing"], capture_output=True, text=True)
    assert missing.returncode == 1 and "no such file or directory" in missing.stderr


def test_the_demo_runs_and_says_where_lockstep_is():
    """`./run demo` as the README's first command: it samples text through the socket, and ends
    by saying where the `lockstep` command the README uses is and how to put it on PATH (issue
    42: after the demo, `lockstep` was not on PATH and nothing said so). Uses this build as it is
    (LOCKSTEP_DEMO_PREBUILT=1: a test must not rebuild what other tests run)."""
    from conftest import BINARY
    build = os.path.dirname(os.path.dirname(os.path.abspath(BINARY)))
    done = subprocess.run([os.path.join(REPO, "run"), "demo"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=dict(python_env(), LOCKSTEP_BUILD_DIR=build, DEMO_TOKENS="20",
                                   LOCKSTEP_DEMO_PREBUILT="1"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the lockstep command is {build}/src/lockstep; ./run install ~/.local" in done.stdout, done.stdout


def test_examples_do_not_open_with_internal_document_numbers():
    """examples/python_example.py opened with "Document 003's example", a number that means
    nothing to a reader of the repository (issue 42)."""
    for name in sorted(os.listdir(os.path.join(REPO, "examples"))):
        if name.endswith((".py", ".c", ".cpp", ".sx")):
            head = open(os.path.join(REPO, "examples", name), errors="replace").read(600)
            assert not re.search(r"[Dd]ocument 0\d\d", head), name
