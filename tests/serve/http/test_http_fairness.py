"""One request may not hold the whole batch (issue 35; docs/HTTP.md, "Batching"): another
client's request is admitted while a request of 64 endless choices runs, and its answer is the
one it gets alone; a 429's Retry-After comes from the batch's state."""
import json
import socket
import time

from conftest import generate, read_in_background

def metric(server, name):
    return int(next(l for l in server.metrics().splitlines() if l.startswith(name + " ")).split()[1])

def start_stream(server, body):
    """Sends a streamed completion and reads it on a thread, keeping nothing; returns a closer."""
    conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    data = json.dumps({**body, "stream": True}).encode()
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
    first = conn.recv(65536)
    assert first.startswith(b"HTTP/1.1 200"), first[:200]
    return read_in_background(conn)

def test_a_request_of_64_endless_choices_leaves_room_for_another(serve, model):
    s = serve("--http", "127.0.0.1:0")
    close = start_stream(s, {"prompt": ["The ", "A ", "Q: ", "Never "], "n": 16, "max_tokens": 1 << 20})
    try:
        deadline = time.monotonic() + 10
        while metric(s, "lockstep_generation_tokens_total") < 1000:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        began = time.monotonic()
        status, answer = s.post("/v1/completions", {"prompt": "The ", "max_tokens": 16, "temperature": 0.8,
                                                    "seed": 3}, timeout=20)
        took = time.monotonic() - began
    finally:
        close()
    assert status == 200, answer
    assert took < 5, f"answered after {took:.1f} s"
    assert answer["choices"][0]["text"] == generate(model, "The ", 16, "0.8", 3).decode("utf-8", errors="replace")

def test_retry_after_of_a_full_queue_comes_from_the_batch(serve):
    s = serve("--http", "127.0.0.1:0", "--http-batch", "1", "--max-queue", "0")
    close = start_stream(s, {"prompt": "Hello", "max_tokens": 1 << 20})
    try:
        time.sleep(0.5)  # some steps, so that the server knows how long one takes
        status, headers, body = s.request("POST", "/v1/completions", json.dumps({"prompt": "a", "max_tokens": 2}).encode())
    finally:
        close()
    assert status == 429, body
    assert json.loads(body)["error"]["code"] == "queue_full"
    # The one running generation has about a million tokens to go.
    assert int(headers["Retry-After"]) > 1, headers
