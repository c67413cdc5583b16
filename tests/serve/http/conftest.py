"""Fixtures for the HTTP tests: a tiny model, the real `lockstep serve` on loopback ports, and
`lockstep generate` for the answers the API must equal. Every wait is bounded."""
import http.client
import json
import os
import re
import signal
import struct
import socket
import subprocess
import threading
import time

import pytest

BINARY = os.environ.get("LOCKSTEP_BINARY", "lockstep")


def run(*args, timeout=60):
    return subprocess.run([BINARY, *args], capture_output=True, timeout=timeout)


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("model") / "tiny")
    r = run("init", "--seed", "3", "--d-model", "16", "--n-layers", "2", "--n-heads", "2", "--d-ff", "32",
            "--length", "32", "-o", path)
    assert r.returncode == 0, r.stderr
    return path


class Server:
    def __init__(self, model, args, tmp_path):
        self.model = model
        self.out_path = tmp_path / f"out-{time.monotonic_ns()}"
        self.err_path = tmp_path / f"err-{time.monotonic_ns()}"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen([BINARY, "serve", model, *args], stdout=out, stderr=err)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.out_path.read_text(errors="replace")
            if "serving " in text and "\n" in text:
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.banner = self.out_path.read_text(errors="replace").split("\n")[0]
        m = re.search(r"http://127\.0\.0\.1:(\d+)", self.banner)
        self.port = int(m.group(1)) if m else None
        m = re.search(r"tcp:127\.0\.0\.1:(\d+)", self.banner)
        self.tcp_port = int(m.group(1)) if m else None

    def err(self):
        return self.err_path.read_text(errors="replace")

    def out(self):
        return self.out_path.read_text(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def metrics(self, timeout=30):
        """/metrics' text without the replica label every sample carries."""
        _, _, body = self.request("GET", "/metrics", timeout=timeout)
        return re.sub(r'replica="[^"]*",', "", re.sub(r'\{replica="[^"]*"\}', "", body.decode()))

    def post(self, path, body, headers=None, timeout=30):
        status, headers, data = self.request("POST", path, body, headers, timeout)
        return status, json.loads(data) if data else None

    def stop(self, signo=signal.SIGTERM, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(signo)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


@pytest.fixture
def serve(model, tmp_path):
    servers = []

    def start(*args):
        s = Server(model, list(args), tmp_path)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop(signal.SIGKILL)


@pytest.fixture(scope="module")
def shared_server(model, tmp_path_factory):
    s = Server(model, ["--http", "127.0.0.1:0", "--max-body", "4096"], tmp_path_factory.mktemp("srv"))
    assert s.port, s.banner + s.err()
    yield s
    s.stop(signal.SIGKILL)


def read_frame(sock):
    """One frame of the frame protocol (docs/PROTOCOL.md): its 8-byte length, then its body."""
    def exact(n):
        buf = b""
        while len(buf) < n:
            got = sock.recv(n - len(buf))
            assert got, "closed"
            buf += got
        return buf
    (n,) = struct.unpack("<Q", exact(8))
    return exact(n)


def generate(model, prompt, tokens, temperature="0", seed=0, top_k=0, top_p="1", stop=None):
    """The bytes `lockstep generate` adds after the prompt."""
    args = ["generate", model, "--prompt", prompt, "-n", str(tokens), "--temperature", str(temperature),
            "--seed", str(seed), "--top-k", str(top_k), "--top-p", str(top_p)]
    if stop:
        args += ["--stop", stop]
    r = run(*args)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(prompt.encode()) and out.endswith(b"\n")
    return out[len(prompt.encode()):-1]


def read_in_background(conn):
    """Reads everything `conn` receives on a thread as fast as it comes, keeping nothing (a client
    that keeps up with a stream); returns a function that stops it and closes the connection."""
    stop = threading.Event()

    def drain():
        try:
            while not stop.is_set() and conn.recv(1 << 16):
                pass
        except OSError:
            pass

    reader = threading.Thread(target=drain)
    reader.start()

    def close():
        stop.set()
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()
        reader.join(10)

    return close
