"""Load: 64 concurrent streaming clients against one `lockstep serve --http` for 30 s (bounded by
LOCKSTEP_HTTP_LOAD_SECONDS, 5..300, and LOCKSTEP_HTTP_LOAD_CLIENTS, 1..128). Each client cycles
through its own fixed requests (fixed seeds); every streamed answer must equal that request's
answer alone, asked before the load and again after it, and the server's resident memory at the
end must be within 10% of its resident memory after the first 10 s (a third of the run when the
run is shorter than 30 s)."""
import http.client
import json
import os
import threading
import time

import pytest


def bounded_env(name, default, low, high):
    value = int(os.environ.get(name, default))
    return max(low, min(high, value))


SECONDS = bounded_env("LOCKSTEP_HTTP_LOAD_SECONDS", 30, 5, 300)
CLIENTS = bounded_env("LOCKSTEP_HTTP_LOAD_CLIENTS", 64, 1, 128)
VARIANTS = 3  # requests per client, asked in turn


def body(client, variant):
    # Lengths 20..83 cross the tiny model's 32-token window, so restarts happen under load too.
    return dict(prompt=f"load {client}.{variant}", max_tokens=20 + (client * 7 + variant * 13) % 64,
                temperature=0.9, top_k=40, seed=10_000 + 100 * client + variant)


def solo(server, b):
    """The answer alone: a non-streamed completion with nothing else running."""
    status, answer = server.post("/v1/completions", b)
    assert status == 200, answer
    c = answer["choices"][0]
    return c["text"], c["sha256"]


def streamed(port, b, timeout):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({**b, "stream": True}))
        r = conn.getresponse()
        assert r.status == 200, r.read()
        events = [e[len("data: "):] for e in r.read().decode("utf-8").split("\n\n") if e]
    finally:
        conn.close()
    assert events and events[-1] == "[DONE]", events[-3:]
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    return "".join(c["text"] for c in chunks), chunks[-1]["sha256"]


def resident_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/PID/status")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc for resident memory")
def test_load_streaming_clients_equal_their_solo_answers_and_memory_stays(serve):
    s = serve("--http", "127.0.0.1:0", "--http-batch", str(CLIENTS))
    assert s.port, s.banner + s.err()
    bodies = [[body(c, v) for v in range(VARIANTS)] for c in range(CLIENTS)]
    before = [[solo(s, b) for b in row] for row in bodies]

    stop_at = time.monotonic() + SECONDS
    done = [0] * CLIENTS
    wrong = []  # (client, variant, got, expected)
    errors = []

    def client(c):
        try:
            k = 0
            while time.monotonic() < stop_at:
                v = k % VARIANTS
                got = streamed(s.port, bodies[c][v], timeout=60)
                if got != before[c][v]:
                    wrong.append((c, v, got, before[c][v]))
                done[c] += 1
                k += 1
        except Exception as e:  # reported below; a thread's exception would be lost
            errors.append((c, repr(e)))

    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    time.sleep(max(0.0, start + min(10.0, SECONDS / 3) - time.monotonic()))
    rss_early = resident_kib(s.proc.pid)
    for t in threads:  # bounded: a client's last request started before stop_at and times out in 60 s
        t.join(max(1.0, stop_at + 90 - time.monotonic()))
    rss_end = resident_kib(s.proc.pid)
    assert not any(t.is_alive() for t in threads), "a load client still runs past its bound"
    assert not errors, errors[:5]
    assert not wrong, wrong[:3]
    assert all(n >= 1 for n in done), done
    after = [[solo(s, b) for b in row] for row in bodies]
    assert after == before
    total = sum(done)
    print(f"\nload: {CLIENTS} streaming clients, {SECONDS} s, {total} answers, "
          f"VmRSS {rss_early} KiB after {min(10.0, SECONDS / 3):.0f} s, {rss_end} KiB at the end")
    assert abs(rss_end - rss_early) <= 0.10 * rss_early, (rss_early, rss_end)
    status, _, _ = s.request("GET", "/health")
    assert status == 200
