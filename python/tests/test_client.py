"""The socket client against a real `lockstep serve`, and examples/sample.py over it.

LOCKSTEP_BINARY names the lockstep executable (ctest sets it)."""

import os
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from lockstep import client as lsc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("LOCKSTEP_BINARY", os.path.join(REPO, "build", "src", "lockstep"))
LENGTH = 32


def run(*args):
    return subprocess.run([BINARY, *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("models") / "tiny")
    run("init", "--seed", "5", "--d-model", "16", "--n-layers", "2", "--n-heads", "2", "--d-ff", "32",
        "--length", str(LENGTH), "-o", path)
    return path


class Served:
    """`lockstep serve` in the background, stopped with SIGTERM."""

    def __init__(self, model, sock, *flags):
        self.sock = sock
        self.proc = subprocess.Popen([BINARY, "serve", model, "--socket", sock, *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.banner = self.proc.stdout.readline()
        if not self.banner.startswith("serving "):
            self.proc.kill()
            raise RuntimeError("serve did not start: " + self.proc.stderr.read())

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=20)
        return self.proc.returncode, out, err


@pytest.fixture
def served(model_dir, tmp_path):
    started = []

    def start(*flags):
        s = Served(model_dir, str(tmp_path / f"s{len(started)}.sock"), *flags)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def reference_call(model_dir, payload, *flags):
    """The same call through `lockstep call`: no server, the bits a call gets alone."""
    return subprocess.run([BINARY, "call", model_dir, *flags], input=payload, check=True,
                          capture_output=True).stdout


def test_handshake(served, model_dir):
    s = served("--at", "--output", "logits")
    with lsc.Client(s.sock) as c:
        assert c.handshake["protocol"] == 1
        assert c.checkpoint == model_dir
        assert c.step is None and c.slug is None
        assert c.precision == "f32"
        assert c.inputs == [lsc.TensorSpec("inputs", (1, LENGTH), "i32"), lsc.TensorSpec("at", (1,), "i32")]
        assert c.outputs == [lsc.TensorSpec("logits", (1, 1, 256), "f32")]
        assert c.input_bytes == LENGTH * 4 + 4
        assert "inputs [1, 32] i32" in repr(c)


def test_calls_in_every_form_give_the_bits_of_a_call_alone(served, model_dir):
    s = served("--at", "--output", "logits", "--output", "hidden")
    ids = [(7 * i + 3) % 256 for i in range(LENGTH)]
    payload = struct.pack(f"<{LENGTH}i", *ids) + struct.pack("<i", 9)
    want = reference_call(model_dir, payload, "--at", "--output", "logits", "--output", "hidden")
    with lsc.Client(s.sock) as c:
        assert c.call_raw(payload) == want
        # Lists, bytes and keywords
        for answer in (c.call(ids, [9]), c.call(struct.pack(f"<{LENGTH}i", *ids), at=[9]),
                       c.call(inputs=[ids], at=9)):
            raw = b"".join(bytes(v) if isinstance(v, bytes) else v.tobytes() for v in answer.values())
            assert raw == want
            assert list(answer) == ["logits", "hidden"]
        logits = lsc.decode(c.outputs[0], want[:256 * 4])
        assert len(logits) == 256 and all(isinstance(v, float) for v in logits)


def test_numpy_in_and_out(served, model_dir):
    np = pytest.importorskip("numpy")
    s = served("--at", "--output", "logits")
    ids = np.arange(LENGTH, dtype=np.int64).reshape(1, LENGTH) % 256
    payload = ids.astype("<i4").tobytes() + struct.pack("<i", 31)
    want = np.frombuffer(reference_call(model_dir, payload, "--at", "--output", "logits"), "<f4")
    with lsc.Client(s.sock) as c:
        out = c.call(ids, np.array([31]))
        assert out["logits"].shape == (1, 1, 256) and out["logits"].dtype == np.float32
        assert out["logits"].tobytes() == want.tobytes()
        with pytest.raises(ValueError, match="input inputs is i32; got a float64 array"):
            c.call(ids.astype(np.float64), np.array([31]))
        with pytest.raises(ValueError, match="values outside i32"):
            c.call(ids + 2**40, np.array([31]))


def test_errors_raise_with_the_servers_message_and_keep_the_connection(served):
    s = served("--at")
    with lsc.Client(s.sock) as c:
        good = [1] * LENGTH
        with pytest.raises(lsc.ServerError, match=r"got 300 at position 2"):
            c.call([1, 1, 300] + [1] * (LENGTH - 3), [5])
        with pytest.raises(lsc.ServerError, match=r"at = 32 is outside the window \[0, 32\)"):
            c.call(good, [LENGTH])
        assert set(c.call(good, [0])) == {"logits", "hidden"}
        with pytest.raises(ValueError, match="input inputs takes 32 values"):
            c.call(good[:-1], [0])  # refused here, before sending
        with pytest.raises(TypeError, match="input at is missing"):
            c.call(good)
        assert set(c.call(good, [0])) == {"logits", "hidden"}
        # A frame of the wrong length: answered, then the server closes the connection.
        with pytest.raises(lsc.ServerError, match=r"a call frame holds 132 bytes"):
            c.call_raw(b"\0" * 10)
        with pytest.raises(lsc.ProtocolError, match="the connection closed"):
            c.call(good, [0])
    code, out, _ = s.stop()
    assert code == 128 + signal.SIGTERM
    assert "lockstep serve: stopped by SIGTERM, 5 calls in 2 runs" in out


def test_a_refused_oversized_frame_still_reads_the_answer(served):
    s = served()
    with lsc.Client(s.sock) as c:
        with pytest.raises(lsc.ServerError, match=r"this one announced 33554432"):
            c.call_raw(b"\0" * (32 << 20))


def test_a_server_that_speaks_another_version_is_refused(tmp_path):
    path = str(tmp_path / "fake.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)
    body = b'{"protocol": 2}'
    import threading

    def serve_one():
        conn, _ = listener.accept()
        conn.sendall(struct.pack("<Q", len(body)) + body)
        conn.close()

    t = threading.Thread(target=serve_one)
    t.start()
    with pytest.raises(lsc.ProtocolError, match="speaks protocol 2; this client speaks 1"):
        lsc.Client(path)
    t.join()
    listener.close()


def test_a_handshake_with_an_error_raises_it(tmp_path):
    # What `lockstep serve` sends at its connection limit (docs/PROTOCOL.md), then it closes.
    path = str(tmp_path / "full.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(1)
    body = b'{"protocol":1,"error":"the server has 1024 connections open, its limit; try again later"}'
    import threading

    def serve_one():
        conn, _ = listener.accept()
        conn.sendall(struct.pack("<Q", len(body)) + body)
        conn.close()

    t = threading.Thread(target=serve_one)
    t.start()
    with pytest.raises(lsc.ServerRefused, match="has 1024 connections open, its limit; try again later") as e:
        lsc.Client(path)
    assert isinstance(e.value, lsc.ServerError)
    t.join()
    listener.close()


def test_the_client_imports_with_the_standard_library_alone():
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import lockstep, lockstep.client as c\n"
            "assert c._np is None\n"
            "spec = c.TensorSpec('x', (2,), 'bf16')\n"
            "raw = c.encode(spec, [1.0, -2.5])\n"
            "assert raw == bytes.fromhex('803f20c0'), raw.hex()\n"
            "assert c.decode(spec, raw) == [1.0, -2.5]\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.stdout == "ok\n", r.stderr


def test_sample_prints_text_as_it_comes(served):
    s = served("--at", "--output", "logits")
    sample = os.path.join(REPO, "examples", "sample.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    outs = []
    for _ in range(2):
        r = subprocess.run([sys.executable, sample, "--socket", s.sock, "--prompt", "Hi", "--tokens", "40",
                            "--temperature", "0.9", "--top-k", "20", "--seed", "7"],
                           capture_output=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1]  # a fixed seed gives the same text
    assert outs[0].startswith(b"Hi") and outs[0].endswith(b"\n")
    greedy = subprocess.run([sys.executable, sample, "--socket", s.sock, "--prompt", "Hi", "--tokens", "40",
                             "--temperature", "0"], capture_output=True, env=env, timeout=60)
    assert greedy.returncode == 0, greedy.stderr
    # Three loops of 40 bytes, a call each, every call alone (one client at a time).
    code, out, _ = s.stop()
    assert code == 128 + signal.SIGTERM
    assert "stopped by SIGTERM, 120 calls in 120 runs" in out


def test_sample_refuses_a_model_served_without_at(served):
    s = served()
    sample = os.path.join(REPO, "examples", "sample.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    r = subprocess.run([sys.executable, sample, "--socket", s.sock, "--tokens", "3"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0
    assert "serve the model with --at" in r.stderr
