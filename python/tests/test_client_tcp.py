"""lockstep.client over TCP (serve --listen) and Resending, which resends a call whose connection
was lost (docs/SCALING.md), against the real `lockstep serve` on loopback.

LOCKSTEP_BINARY names the lockstep executable (ctest sets it)."""

import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

from lockstep import client as lsc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.environ.get("LOCKSTEP_BINARY", os.path.join(REPO, "build", "src", "lockstep"))
LENGTH = 32
FLAGS = ["--at", "--output", "logits"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("models") / "tiny")
    subprocess.run([BINARY, "init", "--seed", "5", "--d-model", "16", "--n-layers", "2", "--n-heads", "2",
                    "--d-ff", "32", "--length", str(LENGTH), "-o", path], check=True, capture_output=True)
    return path


def serve(model_dir, name, port=0):
    """`lockstep serve --listen 127.0.0.1:PORT --name NAME`; (process, port)."""
    proc = subprocess.Popen([BINARY, "serve", model_dir, "--listen", f"127.0.0.1:{port}", "--name", name, *FLAGS],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    banner = proc.stdout.readline()
    m = re.search(r"tcp:127\.0\.0\.1:(\d+)", banner)
    if not m:
        proc.kill()
        raise RuntimeError("serve did not start: " + banner + proc.stderr.read())
    return proc, int(m.group(1))


@pytest.fixture
def servers():
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def payload(seed):
    ids = [(seed * 13 + 5 * i) % 256 for i in range(LENGTH)]
    return struct.pack(f"<{LENGTH}i", *ids) + struct.pack("<i", seed % LENGTH)


def alone(model_dir, raw):
    return subprocess.run([BINARY, "call", model_dir, *FLAGS], input=raw, check=True, capture_output=True).stdout


def test_tcp_addresses_reach_the_server_and_name_the_replica(model_dir, servers):
    proc, port = serve(model_dir, "tcp-1")
    servers.append(proc)
    want = alone(model_dir, payload(3))
    for address in (f"tcp:127.0.0.1:{port}", ("127.0.0.1", port), f"tcp:localhost:{port}"):
        with lsc.connect(address, timeout=10) as c:
            assert c.replica == "tcp-1"
            assert c.inputs[0].shape == (1, LENGTH)
            assert c.call_raw(payload(3)) == want


@pytest.mark.parametrize("address", ["tcp:127.0.0.1", "tcp:127.0.0.1:0", "tcp:127.0.0.1:x", "tcp::80",
                                     "tcp:127.0.0.1:70000"])
def test_a_malformed_tcp_address_is_refused_by_name(address):
    with pytest.raises(ValueError, match="tcp:HOST:PORT"):
        lsc.connect(address)


def test_resending_resends_a_call_lost_with_its_connection(model_dir, servers):
    proc, port = serve(model_dir, "first")
    servers.append(proc)
    want = [alone(model_dir, payload(s)) for s in range(4)]
    model = lsc.Resending(f"tcp:127.0.0.1:{port}", timeout=10, retries=20, backoff=0.05)
    assert model.call_raw(payload(0)) == want[0]
    assert model.replicas == ["first"] and model.resent == 0

    # The server dies between calls; another comes up on the same port half a second later.
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)

    def restart():
        time.sleep(0.5)
        servers.append(serve(model_dir, "second", port)[0])

    t = threading.Thread(target=restart)
    t.start()
    assert model.call_raw(payload(1)) == want[1]  # the lost connection, then refusals, then an answer
    t.join()
    assert model.replicas == ["first", "second"] and model.resent >= 1
    logits = model.call(list(struct.unpack(f"<{LENGTH}i", payload(2)[:-4])), [2 % LENGTH])["logits"]
    assert (logits if isinstance(logits, bytes) else logits.tobytes()) == want[2]

    # An error answer is the call's own: raised, not resent.
    resent = model.resent
    with pytest.raises(lsc.ServerError, match="got 300 at position 0"):
        model.call([300] + [0] * (LENGTH - 1), [0])
    assert model.resent == resent
    model.close()


def test_resending_gives_up_after_its_retries():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    model = lsc.Resending(f"tcp:127.0.0.1:{port}", timeout=5, retries=2, backoff=0.01)
    with pytest.raises(ConnectionRefusedError):
        model.call_raw(b"\0" * 8)
    assert model.resent == 2
