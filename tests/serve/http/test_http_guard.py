"""Who may call the HTTP API (docs/HTTP.md, "Who may call the API"; issue 35, items 7 and 8):
the replica name's characters, the API key file (whitespace, permissions), one Authorization
header, the Host (DNS rebinding), a browser's cross-site requests, and the access log. The real
server on loopback; every wait bounded."""
import json
import os
import re
import socket
import subprocess
import time

import pytest

from conftest import BINARY

BODY = json.dumps({"prompt": "a", "max_tokens": 2, "seed": 1}).encode()


def refused_at_start(model, *args, timeout=15):
    """The exit status and stderr of `serve` with `args`; a server that starts anyway is killed
    once its start line shows (or after `timeout`), and reported as status None."""
    proc = subprocess.Popen([BINARY, "serve", model, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=timeout)
        return proc.returncode, err.decode(errors="replace")
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, ""


def key_file(tmp_path, text, mode=0o600):
    path = tmp_path / f"key-{time.monotonic_ns()}"
    path.write_bytes(text)
    os.chmod(path, mode)
    return str(path)


def raw(port, request, timeout=10):
    """One request's bytes sent as they are; the response's status and bytes (until close)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", data)
    return (int(m.group(1)) if m else None), data


# Item 7c: --name goes into every response's headers and every /metrics label.
@pytest.mark.parametrize("name", ["r1\r\nX-Injected: 1", "r1\nSet-Cookie: a=b", "tab\tname", 'quo"te', "back\\slash",
                                  "space name", "x" * 129, "caf\u00e9"])
def test_a_replica_name_with_control_or_quote_characters_is_refused(model, name):
    status, err = refused_at_start(model, "--http", "127.0.0.1:0", "--name", name)
    assert status == 1, "the server started with --name %r" % name
    assert "--name must be 1 to 128 printable ASCII characters" in err and "\n" not in err.strip(), err


def test_a_plain_replica_name_is_taken(serve):
    s = serve("--http", "127.0.0.1:0", "--name", "r1.example:8080/a")
    status, headers, _ = s.request("GET", "/health")
    assert status == 200 and headers["X-Lockstep-Replica"] == "r1.example:8080/a"


# Items 7e and 7f: the key file.
@pytest.mark.parametrize("text", [b"s3cret \n", b"s3cret\r\n", b"s3cret\t \r\n", b"  s3cret\n", b"s3cret"])
def test_a_key_file_line_with_whitespace_around_the_key_matches(serve, tmp_path, text):
    s = serve("--http", "127.0.0.1:0", "--api-key-file", key_file(tmp_path, text))
    assert s.port, s.err()
    assert s.request("POST", "/v1/completions", BODY, {"Authorization": "Bearer s3cret"})[0] == 200
    assert s.request("POST", "/v1/completions", BODY, {"Authorization": "Bearer s3cret "})[0] == 200  # OWS is not the key's
    assert s.request("POST", "/v1/completions", BODY, {"Authorization": "Bearer s3cre"})[0] == 401


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o660])
def test_a_key_file_others_may_read_is_refused(model, tmp_path, mode):
    path = key_file(tmp_path, b"s3cret\n", mode)
    status, err = refused_at_start(model, "--http", "127.0.0.1:0", "--api-key-file", path)
    assert status == 1, "the server started with a key file of mode %o" % mode
    assert path in err and "mode %04o" % mode in err and "chmod 600" in err, err


def test_a_key_file_that_is_not_a_regular_file_is_refused(model, tmp_path):
    status, err = refused_at_start(model, "--http", "127.0.0.1:0", "--api-key-file", str(tmp_path))
    assert status == 1 and "not a regular file" in err, err


# Item 7g: one Authorization header.
def test_two_authorization_headers_are_400(serve, tmp_path):
    s = serve("--http", "127.0.0.1:0", "--api-key-file", key_file(tmp_path, b"s3cret\n"))
    for first, second in [(b"s3cret", b"wrong"), (b"wrong", b"s3cret"), (b"s3cret", b"s3cret")]:
        status, data = raw(s.port, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + first +
                           b"\r\nAuthorization: Bearer " + second + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                           % len(BODY) + BODY)
        assert status == 400 and b"more than one Authorization header" in data, data
    status, data = raw(s.port, b"GET /health HTTP/1.1\r\nHost: a\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert status == 400 and b"more than one Host header" in data, data


# Item 8: the Host header (DNS rebinding).
@pytest.mark.parametrize("host", ["localhost", "localhost:{port}", "LocalHost:1", "127.0.0.1", "127.0.0.1:{port}",
                                  "127.1.2.3:99", "[::1]", "[::1]:{port}"])
def test_loopback_hosts_are_served(shared_server, host):
    status, _, _ = shared_server.request("GET", "/v1/models", None, {"Host": host.format(port=shared_server.port)})
    assert status == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "localhost.evil.example", "127.0.0.1.nip.io",
                                  "10.0.0.1:{port}", "[::2]", "[::1", "localhost:x"])
def test_another_host_is_403(shared_server, host):
    host = host.format(port=shared_server.port)
    for method, path, body in [("GET", "/v1/models", None), ("POST", "/v1/completions", BODY), ("GET", "/", None),
                               ("GET", "/metrics", None)]:
        status, _, data = shared_server.request(method, path, body, {"Host": host})
        assert status == 403, (host, path)
        assert json.loads(data)["error"]["code"] == "forbidden_host"


def test_allowed_host_names_more_hosts(serve):
    s = serve("--http", "127.0.0.1:0", "--allowed-host", "api.example.com", "--allowed-host", "Other.Example")
    for host in ["api.example.com", "API.example.com:443", "other.example", "localhost"]:
        assert s.request("GET", "/v1/models", None, {"Host": host})[0] == 200, host
    assert s.request("GET", "/v1/models", None, {"Host": "evil.example"})[0] == 403
    anything = serve("--http", "127.0.0.1:0", "--allowed-host", "*")
    assert anything.request("POST", "/v1/completions", BODY, {"Host": "evil.example"})[0] == 200


def test_a_bad_allowed_host_is_refused(model):
    for name in ["a b", "http://x", ""]:
        status, err = refused_at_start(model, "--http", "127.0.0.1:0", "--allowed-host", name)
        assert status == 1 and "--allowed-host" in err, (name, err)


def test_no_host_header_is_served(shared_server):
    # HAProxy's `option httpchk GET /health` sends HTTP/1.0 without a Host.
    status, _ = raw(shared_server.port, b"GET /health HTTP/1.0\r\n\r\n")
    assert status == 200


# Item 8: a browser's requests from another site.
@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Origin": "http://localhost:3000"},  # another port is another origin
    {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"},
    {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"},  # a form posted from another site
])
def test_a_cross_site_post_is_403(shared_server, headers):
    status, _, data = shared_server.request("POST", "/v1/completions", BODY,
                                            {"Content-Type": "text/plain", **headers})
    assert status == 403, headers
    assert json.loads(data)["error"]["code"] == "cross_site_request"


def test_same_origin_and_non_browser_requests_are_served(shared_server):
    port = shared_server.port
    for headers in [{}, {"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
                    {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"},
                    {"Sec-Fetch-Site": "none"}, {"Sec-Fetch-Site": "same-site"}]:
        assert shared_server.request("POST", "/v1/completions", BODY, headers)[0] == 200, headers
    # A link followed from another site to the playground is a GET navigation: served.
    status, _, _ = shared_server.request("GET", "/", None, {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"})
    assert status == 200


def test_a_cors_origin_is_served_and_others_are_not(serve):
    app = "http://app.example:3000"
    s = serve("--http", "127.0.0.1:0", "--cors-origin", app)
    status, headers, _ = s.request("POST", "/v1/completions", BODY, {"Origin": app, "Sec-Fetch-Site": "cross-site"})
    assert status == 200 and headers["Access-Control-Allow-Origin"] == app
    assert s.request("POST", "/v1/completions", BODY, {"Origin": "http://evil.example"})[0] == 403


# Item 8: the access log.
def test_the_access_log_has_a_line_per_request(serve, tmp_path):
    log = tmp_path / "access.log"
    log.write_text("an earlier line\n")
    s = serve("--http", "127.0.0.1:0", "--access-log", str(log), "--name", "r7")
    secret = "do-not-log-this-prompt"
    body = json.dumps({"prompt": secret, "max_tokens": 3, "seed": 1, "stream": True}).encode()
    status, _, streamed = s.request("POST", "/v1/completions?key=hidden", body)
    assert status == 200
    assert s.request("GET", "/nothing/here")[0] == 404
    assert s.request("GET", "/health", None, {"Host": "evil.example"})[0] == 403
    status, _, answer = s.request("POST", "/v1/completions", json.dumps({"prompt": secret, "max_tokens": 2}).encode())
    assert status == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and log.read_text().count("\n") < 5:
        time.sleep(0.02)
    text = log.read_text()
    lines = text.splitlines()
    assert lines[0] == "an earlier line" and len(lines) == 5, text  # appended
    assert secret not in text and "hidden" not in text
    pattern = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) 127\.0\.0\.1:(\d+) (\S+) (\S+) (\d{3}) (\d+) "
                         r"(\d+\.\d{6}) r7$")
    fields = [pattern.match(line) for line in lines[1:]]
    assert all(fields), lines
    got = [(m.group(3), m.group(4), int(m.group(5))) for m in fields]
    assert got == [("POST", "/v1/completions", 200), ("GET", "/nothing/here", 404), ("GET", "/health", 403),
                   ("POST", "/v1/completions", 200)]
    # The bytes are the whole response, head and body; the stream's events included.
    assert int(fields[0].group(6)) > len(streamed) and int(fields[3].group(6)) > len(answer)
    assert all(float(m.group(7)) < 30 for m in fields)


def test_an_access_log_that_cannot_be_opened_is_refused(model, tmp_path):
    path = str(tmp_path / "no" / "such" / "dir" / "access.log")
    status, err = refused_at_start(model, "--http", "127.0.0.1:0", "--access-log", path)
    assert status == 1 and "--access-log" in err and path in err, err
