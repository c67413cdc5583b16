"""Request framing on direct connections (issue 35, items 5 and 7): a request whose body length
is ambiguous (RFC 9112 section 6.3) is refused with 400 and its connection closed, so that its
body is never read as a next request (request smuggling); an oversized chunked trailer is
answered at once; 405's Allow names the endpoint's own methods. Raw sockets on loopback, every
read bounded."""
import json
import re
import socket
import time

import pytest


def exchange(port, data, timeout=10):
    """Sends `data` on one connection and reads until the server closes it (or `timeout` passes:
    then the bytes so far and False)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        got = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                return got, False
            except ConnectionResetError:
                return got, True
            if not chunk:
                return got, True
            got += chunk
        return got, False


def statuses(data):
    """The status codes of the responses in `data`, in order."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


NEXT = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.mark.parametrize("codings", [b"gzip", b"xchunked", b"identity", b"chunked, gzip", b"deflate",
                                     b"chunked;q=1", b"gzip, identity"])
def test_a_transfer_encoding_not_ending_in_chunked_is_400_and_closes(shared_server, codings):
    # Today's parser takes such a request as bodyless, so its "body" was served as the next request.
    request = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: " + codings + b"\r\n\r\n" + NEXT
    data, closed = exchange(shared_server.port, request)
    assert statuses(data) == [400], data
    assert closed and b"Connection: close" in data
    assert b"Transfer-Encoding" in data  # the message names what is wrong


@pytest.mark.parametrize("headers", [
    b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip\r\nContent-Length: 5\r\n",
    b"Content-Length: 5\r\nTransfer-Encoding: gzip\r\n",
])
def test_content_length_with_transfer_encoding_is_400_and_closes(shared_server, headers):
    request = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n0\r\n\r\n" + NEXT
    data, closed = exchange(shared_server.port, request)
    assert statuses(data) == [400], data
    assert closed and b"Connection: close" in data


@pytest.mark.parametrize("head", [
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5, 6\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
])
def test_unparseable_framing_is_400_and_closes(shared_server, head):
    data, closed = exchange(shared_server.port, head + NEXT)
    assert statuses(data) == [400], data
    assert closed and b"Connection: close" in data


def test_chunked_requests_still_work_and_keep_the_connection(shared_server):
    body = json.dumps({"prompt": "a", "max_tokens": 2, "seed": 1}).encode()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    request = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
    data, _ = exchange(shared_server.port, request + request + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       b"Connection: close\r\n\r\n")
    assert statuses(data) == [200, 200, 200], data


@pytest.mark.parametrize("size", [65540, 200000])
def test_an_oversized_chunked_trailer_is_answered_at_once(shared_server, size):
    # It waited for the read timeout (30 s) unanswered; now 431 at once, and the connection closes.
    trailer = b"X-Pad: " + b"a" * size + b"\r\n"
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"2\r\n{}\r\n0\r\n" + trailer + b"\r\n")
    start = time.monotonic()
    data, closed = exchange(shared_server.port, request, timeout=10)
    assert statuses(data) in ([431], [400]), data
    assert closed and time.monotonic() - start < 5


def test_a_small_trailer_is_fine(shared_server):
    body = json.dumps({"prompt": "a", "max_tokens": 1, "seed": 1}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
               b"%x\r\n%s\r\n0\r\nX-Pad: abc\r\n\r\n" % (len(body), body))
    data, closed = exchange(shared_server.port, request)
    assert statuses(data) == [200], data


@pytest.mark.parametrize("path,allow", [
    ("/", "GET, HEAD"), ("/health", "GET, HEAD"), ("/metrics", "GET, HEAD"), ("/v1/models", "GET, HEAD"),
    ("/v1/models/tiny", "GET, HEAD"), ("/tokenizer_info", "GET, HEAD"),
    ("/v1/completions", "POST"), ("/v1/chat/completions", "POST"), ("/tokenize", "POST"), ("/detokenize", "POST"),
])
def test_405_allow_names_the_endpoints_methods(shared_server, path, allow):
    wrong = "GET" if allow == "POST" else "POST"
    status, headers, body = shared_server.request(wrong, path, b"{}" if wrong == "POST" else None)
    assert status == 405 and headers["Allow"] == allow, (path, headers)
    assert json.loads(body)["error"]["code"] == "method_not_allowed"
