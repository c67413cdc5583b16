"""One text through every front end: `lockstep generate`, LanguageModelInference.generate() and
examples/sample.py through a real `lockstep serve` give the same bytes for the same options, past
the window too (docs/ARITHMETIC.md, "Generation past the window"); generate() follows the
policy as recomputed here step by step; a prompt longer than the window and bad options are
handled before anything is produced."""

import hashlib
import os
import signal
import subprocess
import sys
import warnings

import numpy as np
import pytest

from conftest import BINARY, REPO
from lockstep import sampling as twin

FORTUNES = os.path.join(REPO, "examples", "models", "fortunes")
SAMPLE = os.path.join(REPO, "examples", "sample.py")
# SHA-256 of `lockstep generate examples/models/fortunes --prompt "The " -n 200 --temperature 0.8
# --seed 1`'s standard output, as tests/cli/generate_test.cpp pins it.
FORTUNES_GOLDEN = "fd54d1f4d3c80cdf273c4d715f66e91c4cea5f50e13afefd9ad9120908530de4"


def stdlib_env():
    return dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))


class Served:
    """`lockstep serve MODEL --at --output logits` in the background, stopped with SIGTERM."""

    def __init__(self, model, sock):
        self.sock = sock
        self.proc = subprocess.Popen([BINARY, "serve", model, "--socket", sock, "--at", "--output", "logits"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        banner = self.proc.stdout.readline()
        if not banner.startswith("serving "):
            self.proc.kill()
            raise RuntimeError("serve did not start: " + self.proc.stderr.read())

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()


@pytest.fixture
def fortunes_server(tmp_path):
    s = Served(FORTUNES, str(tmp_path / "fortunes.sock"))
    yield s
    s.close()


def cli_generate(model, prompt, n, temperature, top_k, top_p, seed, *extra):
    return subprocess.run([BINARY, "generate", model, "--prompt", prompt, "-n", str(n), "--temperature", str(temperature),
                           "--top-k", str(top_k), "--top-p", str(top_p), "--seed", str(seed), *extra],
                          capture_output=True, timeout=300)


def sample_py(sock, prompt, n, temperature, top_k, top_p, seed, *extra):
    return subprocess.run([sys.executable, SAMPLE, "--socket", sock, "--prompt", prompt, "--tokens", str(n),
                           "--temperature", str(temperature), "--top-k", str(top_k), "--top-p", str(top_p),
                           "--seed", str(seed), *extra], capture_output=True, env=stdlib_env(), timeout=300)


@pytest.mark.parametrize("prompt, n, temperature, top_k, top_p, seed", [
    ("The ", 200, 0.8, 0, 1.0, 1),   # the README's example: 200 bytes past a 128-byte window
    ("Q: ", 190, 1.1, 40, 0.9, 3),   # with top-k and top-p
    ("The ", 140, 0.0, 0, 1.0, 0),   # greedy
])
def test_every_front_end_gives_one_text(extension, fortunes_server, prompt, n, temperature, top_k, top_p, seed):
    cli = cli_generate(FORTUNES, prompt, n, temperature, top_k, top_p, seed)
    assert cli.returncode == 0, cli.stderr
    assert len(cli.stdout) == len(prompt) + n + 1
    lm = extension.LanguageModelInference.from_checkpoint(FORTUNES)
    generated = lm.generate(prompt, n, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, output="bytes")
    assert cli.stdout == prompt.encode() + generated + b"\n"
    example = sample_py(fortunes_server.sock, prompt, n, temperature, top_k, top_p, seed)
    assert example.returncode == 0, example.stderr
    assert example.stdout.decode() == cli.stdout.decode("utf-8", errors="replace")
    if (prompt, n, temperature, top_k, top_p, seed) == ("The ", 200, 0.8, 0, 1.0, 1):
        assert hashlib.sha256(cli.stdout).hexdigest() == FORTUNES_GOLDEN


def test_options_given_as_text_round_once_to_f32(extension, fortunes_server):
    """Both the command and sample.py round a decimal's text once to f32. This --top-p sits just
    above the midpoint between 1 and 1 + 2^-23: rounded once it is 1 + 2^-23, out of range, while
    parsing to binary64 (or long double) first and rounding that would give 1 and accept it."""
    above = "1.0000000596046447753914720329472543003390683225006796419620513916015625"
    midpoint = "1.000000059604644775390625"  # ties to even: 1
    assert twin.f32_from_text(above) == 1 + 2 ** -23 and twin.round_f32(float(above)) == 1.0
    assert twin.f32_from_text(midpoint) == 1.0
    for run in (lambda p: cli_generate(FORTUNES, "The ", 40, 0.9, 0, p, 4),
                lambda p: sample_py(fortunes_server.sock, "The ", 40, 0.9, 0, p, 4)):
        refused = run(above)
        assert refused.returncode != 0 and refused.stdout == b""
        assert b"top-p must be in (0, 1]" in refused.stderr
        accepted = run(midpoint)
        assert accepted.returncode == 0, accepted.stderr
        assert accepted.stdout == cli_generate(FORTUNES, "The ", 40, 0.9, 0, 1.0, 4).stdout


def test_generate_past_the_window_is_the_policy(lm):
    """generate() against the policy recomputed here: the twin's context bookkeeping, one full
    logits() pass over the context per step, the twin's sampler."""
    window = lm.shape.length  # 24
    prompt = b"past the window we go:"
    for temperature, top_k, top_p, seed in ((0.0, 0, 1.0, 0), (1.2, 30, 0.95, 9)):
        context = twin.GenerationContext(window, prompt)
        restarts = []
        want = []
        for step in range(70):
            if want:
                restarts.append(context.push(want[-1]))
            logits = lm.logits(np.array([context.tokens], dtype=np.int32), threaded=False)[0, -1]
            want.append(twin.sample_token([float(v) for v in logits], step, temperature, top_k, top_p, seed))
        assert sum(restarts) == 6  # at steps 3 + 13 k: the prompt fills 22 of 24, then 12 are kept
        got = lm.generate(prompt, 70, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, output="ids")
        assert got == want


def test_generate_truncates_a_long_prompt_or_refuses_it(lm):
    prompt = bytes(range(65, 65 + 30))  # 30 bytes, window 24
    with pytest.warns(UserWarning, match="the prompt holds 30 tokens, more than the 24-token window"):
        got = lm.generate(prompt, 10, temperature=0.7, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert got == lm.generate(prompt[6:], 10, temperature=0.7, seed=2)
    seen = []
    with pytest.raises(ValueError, match="the window is 24"):
        lm.generate(prompt, 10, truncate=False, on_token=seen.append)
    with pytest.raises(ValueError, match="the token count must be >= 0"):
        lm.generate(b"hi", -5, on_token=seen.append)
    assert seen == []


def test_sample_py_applies_the_policy_to_long_prompts_and_checks_first(extension, fortunes_server):
    prompt = "A fortune begins here and runs on for longer than the window of the model holds, " * 2  # 166 bytes
    cli = cli_generate(FORTUNES, prompt, 30, 0.9, 20, 1.0, 5)
    assert cli.returncode == 0 and b"more than the 128-byte window" in cli.stderr
    example = sample_py(fortunes_server.sock, prompt, 30, 0.9, 20, 1.0, 5)
    assert example.returncode == 0, example.stderr
    assert example.stdout == cli.stdout
    assert b"more than the 128-byte window; generating from its last 128" in example.stderr
    refused = sample_py(fortunes_server.sock, prompt, 30, 0.9, 20, 1.0, 5, "--no-truncate")
    assert refused.returncode == 1 and refused.stdout == b""
    assert b"the window is 128" in refused.stderr
    negative = sample_py(fortunes_server.sock, "The ", -5, 0.9, 20, 1.0, 5)
    assert negative.returncode == 1 and negative.stdout == b""
    assert b"the token count must be >= 0" in negative.stderr


def test_sample_py_runs_without_numpy(fortunes_server):
    code = ("import runpy, sys; sys.modules['numpy'] = None; "
            f"sys.argv = ['sample.py', '--socket', {fortunes_server.sock!r}, '--prompt', 'The ', '--tokens', '20', "
            "'--temperature', '0.8', '--top-k', '0', '--seed', '1']; "
            f"runpy.run_path({SAMPLE!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=stdlib_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    cli = cli_generate(FORTUNES, "The ", 20, 0.8, 0, 1.0, 1)
    assert done.stdout == cli.stdout


def test_generate_returns_one_type_chosen_by_output(lm):
    """generate() returns str by default for every model with text (a byte model's bytes as
    UTF-8, invalid sequences as U+FFFD), bytes with output='bytes' and the ids with output='ids';
    before issue 42 a byte model returned bytes and a tokenizer's model str."""
    ids = lm.generate(b"hi", 30, temperature=1.3, seed=3, output="ids")
    raw = lm.generate(b"hi", 30, temperature=1.3, seed=3, output="bytes")
    text = lm.generate(b"hi", 30, temperature=1.3, seed=3)
    assert isinstance(text, str) and isinstance(raw, bytes) and isinstance(ids, list)
    assert raw == bytes(ids) and text == raw.decode("utf-8", errors="replace")
    with pytest.raises(ValueError, match="output must be 'text', 'bytes' or 'ids'; got 'str'"):
        lm.generate(b"hi", 3, output="str")
    with pytest.raises(TypeError, match="output must be a str"):
        lm.generate(b"hi", 3, output=None)


def test_a_seed_out_of_range_is_a_value_error_naming_it(lm):
    """The README promises ValueError naming the argument; seed=-1 raised pybind11's
    'incompatible function arguments' TypeError with the whole signature (issue 42)."""
    for seed in (-1, 2 ** 64, -(2 ** 70)):
        with pytest.raises(ValueError, match=r"seed must be an int in \[0, 18446744073709551615\]"):
            lm.generate("The ", 4, temperature=0.8, seed=seed)
    with pytest.raises(TypeError, match="seed must be an int; got a str"):
        lm.generate("The ", 4, temperature=0.8, seed="7")
    top = lm.generate("The ", 4, temperature=0.8, seed=2 ** 64 - 1, output="ids")
    assert top == lm.generate("The ", 4, temperature=0.8, seed=np.uint64(2 ** 64 - 1), output="ids")
