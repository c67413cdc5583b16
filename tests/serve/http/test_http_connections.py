"""Connection slots (docs/LIMITS.md, issue 35 item 6): idle connections never deny service. At
--max-connections the least recently active idle connection is closed to make room; only when
every open one is busy is a newcomer refused: the frame protocol's error handshake, HTTP's 503
(Retry-After, Connection: close), and /health is still answered. Loopback; every wait bounded."""
import json
import resource
import socket
import struct
import time

import pytest

from conftest import read_frame

FILES_NEEDED = 2 * 1100 + 200  # both ends of the default-limit test's connections, here and in the server


def frame_client(address):
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    c = socket.socket(family, socket.SOCK_STREAM)
    c.settimeout(10)
    c.connect(address)
    return c, json.loads(read_frame(c))


def closed_within(sock, seconds):
    """Whether the server ends the connection (end of stream or reset) within `seconds`."""
    sock.settimeout(seconds)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except socket.timeout:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def still_open(sock):
    return not closed_within(sock, 0.2)


def http_get(port, path="/health", headers=b""):
    """A whole GET on a new connection: (status, headers and body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + content_length(data):
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
    return int(data.split(b" ", 2)[1]), data


def content_length(data):
    for line in data.split(b"\r\n\r\n")[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def keep_alive_client(port):
    """A connection that has had one answer and now waits, idle."""
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + content_length(data):
        data += c.recv(65536)
    assert data.startswith(b"HTTP/1.1 200 "), data
    return c


def busy_client(port):
    """A connection in the middle of sending a request head."""
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
    return c


def test_frame_connections_at_the_limit_close_the_least_recently_active_idle_one(serve, tmp_path):
    path = str(tmp_path / "s.sock")
    s = serve("--socket", path, "--max-connections", "4")
    assert path in s.banner, s.banner + s.err()
    clients = [frame_client(path)[0] for _ in range(4)]
    # A call on the first makes it the most recently active: the second is the oldest idle one.
    payload = struct.pack("<32i", *range(65, 97))
    clients[0].sendall(struct.pack("<Q", len(payload)) + payload)
    assert read_frame(clients[0])[0] == 0
    newcomer, handshake = frame_client(path)
    assert "error" not in handshake and "inputs" in handshake, handshake
    assert closed_within(clients[1], 5), "the least recently active idle connection was not closed"
    assert all(still_open(c) for c in [clients[0], clients[2], clients[3]])
    newcomer.sendall(struct.pack("<Q", len(payload)) + payload)
    assert read_frame(newcomer)[0] == 0
    for c in clients + [newcomer]:
        c.close()


def test_frame_connections_all_busy_refuse_with_the_error_handshake(serve, tmp_path):
    path = str(tmp_path / "s.sock")
    s = serve("--socket", path, "--max-connections", "3")
    assert path in s.banner, s.banner + s.err()
    clients = [frame_client(path)[0] for _ in range(3)]
    for c in clients:
        c.sendall(struct.pack("<Q", 128) + b"\0" * 10)  # half a call: busy
    time.sleep(0.5)  # the server has read what they sent (microseconds; slack for a busy machine)
    refused, handshake = frame_client(path)
    assert "connections open, its limit, each with a call under way" in handshake.get("error", ""), handshake
    assert closed_within(refused, 5)
    clients[0].close()  # a place freed is taken
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        c, handshake = frame_client(path)
        c.close()
        if "error" not in handshake:
            break
        time.sleep(0.02)
    assert "error" not in handshake


def test_http_connections_at_the_limit_close_the_least_recently_active_idle_one(serve):
    s = serve("--http", "127.0.0.1:0", "--max-connections", "4")
    clients = [keep_alive_client(s.port) for _ in range(4)]
    # Used again: the first is now the most recently active.
    clients[0].sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    time.sleep(0.1)
    assert clients[0].recv(65536).startswith(b"HTTP/1.1 200 ")
    status, _ = http_get(s.port, "/v1/models")
    assert status == 200
    assert closed_within(clients[1], 5), "the least recently active idle connection was not closed"
    assert all(still_open(c) for c in [clients[0], clients[2], clients[3]])
    for c in clients:
        c.close()


def test_http_connections_all_busy_get_503_and_health_still_answers(serve):
    s = serve("--http", "127.0.0.1:0", "--max-connections", "2")
    busy = [busy_client(s.port) for _ in range(2)]
    time.sleep(0.5)  # the server has read what they sent (microseconds; slack for a busy machine)
    status, data = http_get(s.port, "/health")
    assert status == 200 and b"Connection: close" in data, data
    status, data = http_get(s.port, "/v1/models")
    assert status == 503, data
    assert b"Retry-After: 1" in data and b"Connection: close" in data and b"too_many_connections" in data
    # The limited connections too may be all busy (64 of them): then the 503 comes at once.
    limited = [busy_client(s.port) for _ in range(64)]
    time.sleep(0.5)
    with socket.create_connection(("127.0.0.1", s.port), timeout=10) as c:
        data = b""
        try:
            while chunk := c.recv(65536):
                data += chunk
        except ConnectionResetError:
            pass
    assert data.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in data, data
    for c in busy + limited:
        c.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and http_get(s.port, "/v1/models")[0] != 200:
        time.sleep(0.05)
    assert http_get(s.port, "/v1/models")[0] == 200


def test_the_default_limit_lets_no_idle_crowd_lock_anyone_out(serve, tmp_path):
    # 1,100 idle connections to each protocol, past the default limit of 1,024: before, the
    # frame protocol refused everyone after them and HTTP reset every new connection.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < FILES_NEEDED:
        if hard != resource.RLIM_INFINITY and hard < FILES_NEEDED:
            pytest.skip(f"the open-file limit is {hard} (ulimit -Hn); this test needs {FILES_NEEDED}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (FILES_NEEDED, hard))
    path = str(tmp_path / "s.sock")
    s = serve("--socket", path, "--http", "127.0.0.1:0")
    idle = []
    try:
        for _ in range(1100):
            idle.append(socket.create_connection(("127.0.0.1", s.port), timeout=10))
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(10)
            c.connect(path)
            idle.append(c)
        status, _ = http_get(s.port, "/v1/models")
        assert status == 200
        _, handshake = frame_client(path)
        assert "error" not in handshake, handshake
    finally:
        for c in idle:
            c.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
