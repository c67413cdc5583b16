"""lockstep.http_client against the real server, through a loopback proxy that injects the
faults a replica's death causes: a connection refused, an answer cut off mid-stream, a 503.
A resumed stream must give exactly the text of an uninterrupted one."""
import json
import socket
import threading

import pytest
from conftest import Server, run

from lockstep.http_client import HttpClient, HttpError, ReplicaMismatch


def read_request(sock):
    """Reads one whole HTTP request (head and Content-Length body), so closing leaves no unread
    bytes (which would reset the connection instead of ending it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(4096)
        if not chunk:
            return
        body += chunk


class FaultProxy:
    """Forwards loopback connections to `upstreams` (port per connection, in turn), applying
    `faults[i]` to the i-th connection: None (pass), "refuse" (close at once), ("cut", N) (close
    after N bytes of the answer), ("status", CODE) (answer CODE without forwarding)."""

    def __init__(self, upstreams, faults=()):
        self.upstreams = list(upstreams)
        self.faults = list(faults)
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        while not self.done.is_set():
            try:
                client, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:  # closed
                return
            i = self.connections
            self.connections += 1
            fault = self.faults[i] if i < len(self.faults) else None
            upstream = self.upstreams[i % len(self.upstreams)]
            t = threading.Thread(target=self._serve, args=(client, upstream, fault), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, client, upstream, fault):
        client.settimeout(20)
        try:
            if fault == "refuse":
                return
            if isinstance(fault, tuple) and fault[0] == "status":
                read_request(client)
                body = json.dumps({"error": {"message": "injected", "type": "server_error"}}).encode()
                client.sendall(b"HTTP/1.1 %d Injected\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                               b"Retry-After: 0\r\nConnection: close\r\n\r\n%s" % (fault[1], len(body), body))
                return
            limit = fault[1] if isinstance(fault, tuple) and fault[0] == "cut" else None
            server = socket.create_connection(("127.0.0.1", upstream), timeout=20)
            up = threading.Thread(target=self._pump, args=(client, server, None), daemon=True)
            up.start()
            self._pump(server, client, limit)
            server.close()
        except OSError:
            pass
        finally:
            client.close()

    @staticmethod
    def _pump(src, dst, limit):
        sent = 0
        try:
            while limit is None or sent < limit:
                data = src.recv(min(4096, limit - sent) if limit is not None else 4096)
                if not data:
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        if limit is not None:  # the "replica" dies: both sides closed at once
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.done.set()
        self.threads[0].join(5)
        self.listener.close()


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    s = Server(model, ["--http", "127.0.0.1:0", "--name", "alone"], tmp_path_factory.mktemp("client"))
    assert s.port, s.banner + s.err()
    yield s
    s.stop()


BODY = dict(prompt="Once upon", max_tokens=60, temperature=0.9, top_k=20, seed=11)


def test_a_stream_cut_twice_resumes_with_exactly_the_same_text(server):
    whole = "".join(HttpClient(f"http://127.0.0.1:{server.port}").stream_completion(**BODY))
    assert len(whole) > 20
    proxy = FaultProxy([server.port], faults=[("cut", 400), "refuse", ("cut", 900)])
    try:
        client = HttpClient(proxy.url(), backoff=0.01)
        pieces = list(client.stream_completion(**BODY))
        assert "".join(pieces) == whole
        assert client.attempts == 4 and client.last_finish_reasons == ["length"]
        assert set(client.replicas) == {"alone"}
    finally:
        proxy.close()


def test_a_chat_stream_and_several_choices_resume_too(server):
    chat = dict(messages=[{"role": "user", "content": "Hi"}], max_tokens=30, seed=4, temperature=1)
    whole = "".join(HttpClient(f"http://127.0.0.1:{server.port}").stream_chat_completion(**chat))
    many = dict(BODY, n=3)
    base = HttpClient(f"http://127.0.0.1:{server.port}")
    texts = ["", "", ""]
    for i, t in base.stream_choices("/v1/completions", **many):
        texts[i] += t
    proxy = FaultProxy([server.port], faults=[("cut", 600), ("cut", 700)])
    try:
        client = HttpClient(proxy.url(), backoff=0.01)
        assert "".join(client.stream_chat_completion(**chat)) == whole
        got = ["", "", ""]
        for i, t in client.stream_choices("/v1/completions", **many):
            got[i] += t
        assert got == texts
        assert texts == [c["text"] for c in base.completion(**many)["choices"]]
    finally:
        proxy.close()
    # A batch of prompts (choice p * n + i) resumes as well.
    batch = dict(BODY, prompt=["Once upon", "The cat"], n=2)
    want = [c["text"] for c in base.completion(**batch)["choices"]]
    proxy = FaultProxy([server.port], faults=[("cut", 500)])
    try:
        got = [""] * 4
        for i, t in HttpClient(proxy.url(), backoff=0.01).stream_choices("/v1/completions", **batch):
            got[i] += t
        assert got == want
    finally:
        proxy.close()


def test_a_completion_is_retried_past_refusals_and_503_with_the_seed_it_chose(server):
    proxy = FaultProxy([server.port], faults=["refuse", ("status", 503), ("cut", 50), ("status", 502)])
    try:
        client = HttpClient(proxy.url(), backoff=0.01)
        answer = client.completion(prompt="Once upon", max_tokens=30, temperature=1.0)
        assert client.attempts == 5
        # The seed the client chose is the one answered with, and the same request alone agrees.
        assert answer["seed"] == client.last_seed
        alone = HttpClient(f"http://127.0.0.1:{server.port}").completion(
            prompt="Once upon", max_tokens=30, temperature=1.0, seed=client.last_seed)
        assert answer["choices"][0]["text"] == alone["choices"][0]["text"]
    finally:
        proxy.close()


def test_errors_that_resending_cannot_fix_are_raised_at_once(server):
    client = HttpClient(f"http://127.0.0.1:{server.port}")
    with pytest.raises(HttpError) as e:
        client.completion(prompt="x", max_tokens=-1)
    assert e.value.status == 400 and "max_tokens" in str(e.value) and client.attempts == 1
    proxy = FaultProxy([server.port], faults=[("status", 503)] * 3)
    try:
        with pytest.raises(HttpError) as e:
            HttpClient(proxy.url(), retries=2, backoff=0.01).completion(prompt="x", max_tokens=2)
        assert e.value.status == 503
    finally:
        proxy.close()


def test_a_resumed_stream_from_a_different_model_is_refused(server, tmp_path):
    other_model = str(tmp_path / "other")
    r = run("init", "--seed", "4", "--d-model", "16", "--n-layers", "2", "--n-heads", "2", "--d-ff", "32",
            "--length", "32", "-o", other_model)
    assert r.returncode == 0, r.stderr
    other = Server(other_model, ["--http", "127.0.0.1:0", "--name", "other"], tmp_path)
    proxy = FaultProxy([server.port, other.port], faults=[("cut", 1500)])
    try:
        with pytest.raises(ReplicaMismatch, match="other"):
            list(HttpClient(proxy.url(), backoff=0.01).stream_completion(**BODY))
    finally:
        proxy.close()
        other.stop()
