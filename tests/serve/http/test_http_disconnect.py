"""A client that leaves while its completion runs ends its generations at the next step, however
it leaves (docs/HTTP.md, "Limits and timeouts"); pipelined requests are still answered in turn."""
import json
import signal
import socket
import time

import pytest

from conftest import generate


def metric(server, name):
    return int(next(l for l in server.metrics().splitlines() if l.startswith(name + " ")).split()[1])


def wait_metric(server, name, value, seconds):
    deadline = time.monotonic() + seconds
    while metric(server, name) != value:
        if time.monotonic() > deadline:
            pytest.fail(f"{name} did not become {value} within {seconds} s")
        time.sleep(0.05)


def post(body):
    data = json.dumps(body).encode()
    return b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data)


# One byte of a next request (the probe's), or more of it than the server reads ahead.
MORE = {"byte": b"G", "100 KB": b"POST /v1/completions HTTP/1.1\r\nContent-Length: 200000\r\n\r\n" + b"x" * 100_000}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("more", MORE)
def test_a_client_that_sends_more_and_closes_ends_its_generation(serve, stream, more):
    """Issue 35: bytes of a next request arrived after the completion's, then the end of the
    connection; the disconnect watch must see the end behind them."""
    s = serve("--http", "127.0.0.1:0", "--drain-seconds", "30")
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    conn.sendall(post({"prompt": "The ", "max_tokens": 1 << 20, "seed": 1, "stream": stream}))
    wait_metric(s, "lockstep_num_requests_running", 1, 10)
    conn.sendall(MORE[more])
    time.sleep(0.1)  # the bytes alone first, as the probe's client sent them
    conn.close()
    wait_metric(s, "lockstep_num_requests_running", 0, 2)
    before = metric(s, "lockstep_generation_tokens_total")
    time.sleep(1)
    assert metric(s, "lockstep_generation_tokens_total") == before, "the generation still runs"
    began = time.monotonic()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(10) == 128 + signal.SIGTERM
    assert time.monotonic() - began < 3, "SIGTERM waited for a generation nobody reads"


def recv_response(conn, buffered):
    """One Content-Length response from the connection: (head, body, the bytes after it)."""
    while b"\r\n\r\n" not in buffered:
        chunk = conn.recv(65536)
        assert chunk, "closed before a response"
        buffered += chunk
    head, rest = buffered.split(b"\r\n\r\n", 1)
    length = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")))
    while len(rest) < length:
        chunk = conn.recv(65536)
        assert chunk, "closed inside a response"
        rest += chunk
    return head, rest[:length], rest[length:]


LONG = 60000


def test_a_request_pipelined_behind_a_running_completion_is_answered_next(serve, model):
    s = serve("--http", "127.0.0.1:0")
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    # Long enough (about half a second on a fast core) that the next request arrives while it
    # runs. Waiting for its first token, not for it to be seen running: a poll can miss a short
    # generation altogether (CI did, on a 3000-token one), and either way the answers must come
    # in order.
    conn.sendall(post({"prompt": "Hello", "max_tokens": LONG, "temperature": 0.6, "seed": 2}))
    deadline = time.monotonic() + 10
    while metric(s, "lockstep_generation_tokens_total") == 0:
        assert time.monotonic() < deadline, "the first completion did not start within 10 s"
        time.sleep(0.01)
    conn.sendall(post({"prompt": "abc", "max_tokens": 20, "temperature": 0.9, "seed": 4})[:7])
    time.sleep(0.2)
    conn.sendall(post({"prompt": "abc", "max_tokens": 20, "temperature": 0.9, "seed": 4})[7:])
    head, body, rest = recv_response(conn, b"")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["choices"][0]["text"] == generate(model, "Hello", LONG, "0.6", 2).decode(
        "utf-8", errors="replace")
    head, body, rest = recv_response(conn, rest)
    assert head.startswith(b"HTTP/1.1 200") and rest == b""
    assert json.loads(body)["choices"][0]["text"] == generate(model, "abc", 20, "0.9", 4).decode(
        "utf-8", errors="replace")
    conn.close()
