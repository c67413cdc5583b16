"""Fixtures for the cluster tests (docs/SCALING.md): a tiny model, deploy/cluster.sh running
replicas of the real `lockstep serve` behind the real HAProxy on loopback, and one server alone
for the answers every request must equal. Every wait is bounded; everything started is stopped.

Skipped, saying so, only where `haproxy` is not installed (./run deps installs it)."""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BINARY = os.environ.get("LOCKSTEP_BINARY", os.path.join(REPO, "build", "src", "lockstep"))
CLUSTER = os.path.join(REPO, "deploy", "cluster.sh")
# Large enough that a long stream takes a good part of a second to generate (so a fault lands in
# its middle, not after the server has queued all of it), small enough for 1600 requests.
WINDOW = 128
# Flags every server of these tests takes: the frame protocol answers the logits at one position.
SERVE_FLAGS = ["--at", "--output", "logits", "--http-batch", "64"]

NO_HAPROXY = "haproxy is not installed (apt-get install haproxy, or ./run deps)"


def pytest_collection_modifyitems(config, items):
    if shutil.which("haproxy") is None:
        print(f"\ncluster tests SKIPPED: {NO_HAPROXY}")
        for item in items:
            item.add_marker(pytest.mark.skip(reason=NO_HAPROXY))


def run(*args, timeout=60, **kw):
    return subprocess.run([BINARY, *args], capture_output=True, timeout=timeout, **kw)


@pytest.fixture(scope="session")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("model") / "tiny")
    r = run("init", "--seed", "3", "--d-model", "128", "--n-layers", "4", "--n-heads", "4", "--d-ff", "512",
            "--length", str(WINDOW), "-o", path)
    assert r.returncode == 0, r.stderr
    return path


def http_get(host, port, path, timeout=5):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def host_port(address):
    host, port = address.rsplit(":", 1)
    return host, int(port)


class Alone:
    """One `lockstep serve --http --listen` with nothing else: the reference answers."""

    def __init__(self, model, tmp_path):
        self.log = tmp_path / "alone.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([BINARY, "serve", model, "--http", "127.0.0.1:0", "--listen", "127.0.0.1:0",
                                          "--name", "alone", "--cpu-cores", "1", *SERVE_FLAGS],
                                         stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        banner = ""
        while time.monotonic() < deadline and self.proc.poll() is None:
            # The start line; stderr (merged here) first says the port answers 503 while loading.
            lines = self.log.read_text(errors="replace").split("\n")
            banner = next((line for line in lines[:-1] if line.startswith("serving ")), "")
            if banner:
                break
            time.sleep(0.02)
        m = re.search(r"http://(127\.0\.0\.1:\d+)", banner)
        f = re.search(r"tcp:(127\.0\.0\.1:\d+)", banner)
        assert m and f, f"the reference server did not start: {self.log.read_text(errors='replace')}"
        self.http = host_port(m.group(1))
        self.frames = "tcp:" + f.group(1)

    def completion(self, body):
        """The answer's text for body (never streamed): alone, so nothing else is batched with it."""
        conn = http.client.HTTPConnection(*self.http, timeout=30)
        try:
            conn.request("POST", "/v1/completions", body=json.dumps({**body, "stream": False}))
            r = conn.getresponse()
            data = r.read()
            assert r.status == 200, data
            assert r.getheader("X-Lockstep-Replica") == "alone"
            return json.loads(data)["choices"][0]["text"]
        finally:
            conn.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="session")
def alone(model, tmp_path_factory):
    s = Alone(model, tmp_path_factory.mktemp("alone"))
    yield s
    s.stop()


class Cluster:
    """deploy/cluster.sh: replicas r1..rN behind HAProxy, each restarted on its ports when it exits."""

    def __init__(self, model, folder, replicas=3, restart_delay="0.5", drain="30", serve_flags=SERVE_FLAGS):
        self.dir = folder
        self.model = model
        self.names = [f"r{i + 1}" for i in range(replicas)]
        self.out = open(folder / "cluster.out", "wb")
        self.proc = subprocess.Popen(
            [CLUSTER, "--replicas", str(replicas), "--model", model, "--binary", BINARY, "--dir", str(folder),
             "--restart-delay", restart_delay, "--drain-seconds", drain, "--", *serve_flags],
            stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)
        env = folder / "cluster.env"
        deadline = time.monotonic() + 60
        while not env.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"deploy/cluster.sh did not come up:\n{self.output()}")
            time.sleep(0.05)
        values = dict(line.split("=", 1) for line in env.read_text().splitlines() if "=" in line)
        self.url = values["HTTP_URL"]
        self.frames = values["FRAMES"]
        self.http = host_port(self.url[len("http://"):])

    def output(self):
        return (self.dir / "cluster.out").read_text(errors="replace")

    def pid(self, name):
        return int((self.dir / f"{name}.pid").read_text())

    def ports(self, name):
        http_address, frames = (self.dir / f"{name}.ports").read_text().split()
        return host_port(http_address), frames

    def signal(self, name, signo):
        """Sends signo to a replica's process; returns that pid."""
        pid = self.pid(name)
        os.kill(pid, signo)
        return pid

    def generations_over(self, name, tokens):
        """How many generations the replica has ended with more than `tokens` tokens (a bound of
        lockstep_request_generation_tokens), asked directly (None if it does not answer)."""
        try:
            status, _, body = http_get(*self.ports(name)[0], "/metrics", timeout=2)
        except OSError:
            return None
        text = body.decode()
        over = re.search(r'^lockstep_request_generation_tokens_bucket\{[^}]*le="%d"\} (\d+)' % tokens, text, re.M)
        count = re.search(r"^lockstep_request_generation_tokens_count\{[^}]*\} (\d+)", text, re.M)
        return int(count.group(1)) - int(over.group(1)) if status == 200 and over and count else None

    def wait_exited(self, name, pid, timeout=30):
        """Waits until deploy/cluster.sh has seen the process exit."""
        deadline = time.monotonic() + timeout
        while f"{name} (pid {pid}) exited" not in self.output():
            assert time.monotonic() < deadline, f"{name} (pid {pid}) did not exit:\n{self.output()}"
            time.sleep(0.02)

    def haproxy_stat(self):
        """{(proxy, server): {column: value}} from HAProxy's runtime API (show stat): status,
        wretr (retries), wredis (redispatches), hrsp_5xx, ..."""
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        try:
            s.connect(str(self.dir / "haproxy.sock"))
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        finally:
            s.close()
        lines = data.decode().splitlines()
        columns = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(columns, line.split(","))) for line in lines[1:] if line]
        return {(r["pxname"], r["svname"]): r for r in rows}

    def haproxy_states(self):
        """{(backend, server): status}, such as UP or DOWN."""
        return {k: r["status"] for k, r in self.haproxy_stat().items()}

    def wait_up(self, name, old_pid=None, timeout=30):
        """Waits until the replica runs again (a pid other than old_pid), answers /health and
        HAProxy has it UP in every backend."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pid = self.pid(name)
                if pid != old_pid and http_get(*self.ports(name)[0], "/health", timeout=2)[0] == 200:
                    states = [v for (b, s), v in self.haproxy_states().items() if s == name]
                    if states and all(v == "UP" for v in states):
                        return pid
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"replica {name} did not come back within {timeout} s:\n{self.output()}")

    def left_running(self, kill=False):
        """Pids of the cluster's processes (from its pid files) still running: a replica of this
        model or HAProxy with this folder's config; kill=True SIGKILLs them."""
        left = []
        for pid_file in self.dir.glob("*.pid"):
            try:
                pid = int(pid_file.read_text())
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except (OSError, ValueError):
                continue
            if self.model.encode() in cmdline or str(self.dir).encode() in cmdline:
                left.append((pid, cmdline.replace(b"\0", b" ").decode(errors="replace")))
                if kill:
                    os.kill(pid, signal.SIGKILL)
        return left

    def wait_draining(self, name, timeout=30):
        """Waits until the replica's own /health says it drains (503)."""
        deadline = time.monotonic() + timeout
        while http_get(*self.ports(name)[0], "/health")[0] != 503:
            assert time.monotonic() < deadline, f"{name} does not drain"
            time.sleep(0.01)

    def wait_down(self, name, timeout=30):
        """Waits until HAProxy's checks have taken the replica out of every backend."""
        deadline = time.monotonic() + timeout
        # "UP 1/2": a failed check of the 2 that take it down; "DOWN" (or "MAINT") once out.
        while any(s == name and v.startswith(("UP", "NOLB")) for (b, s), v in self.haproxy_states().items()):
            assert time.monotonic() < deadline, f"HAProxy did not mark {name} down:\n{self.haproxy_states()}"
            time.sleep(0.05)

    def stop(self):
        """SIGTERM, as Ctrl-C's trap would; then nothing of the cluster may be left running."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.out.close()
        return self.proc.returncode


@pytest.fixture
def cluster(model, tmp_path):
    started = []

    def start(**kw):
        c = Cluster(model, tmp_path, **kw)
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()
        left = c.left_running(kill=True)
        assert not left, f"deploy/cluster.sh left processes running: {left}\n{c.output()}"
