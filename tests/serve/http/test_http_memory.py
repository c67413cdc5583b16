"""What one completion may take of the server's memory (issue 35; docs/HTTP.md, "Limits and
timeouts"; docs/PROTOCOL.md, "Memory"): a non-streamed answer whose estimated size passes the
64 MiB budget is refused with 400 naming the field to lower; an accepted one stays within the
documented bound of a request, a stream keeps nothing it has sent, and the memory comes back
when they end. Resident sizes come from /proc/PID/status (VmHWM: the peak, reset through
clear_refs before each phase)."""
import json
import socket
import time

from conftest import generate, read_in_background

ANSWER_BUDGET = 64 << 20  # max_answer_bytes (src/serve/answer_budget.hpp)
# What one request may take (docs/PROTOCOL.md, "Memory"): its body parsed (at most 16 times the
# body) and its answer, at most twice the budget while it is written; plus the allocator's
# rounding and the pages a first large request touches.
SLACK = 16 << 20

def request_bound(body_bytes):
    return 2 * ANSWER_BUDGET + 16 * body_bytes + SLACK

def status_bytes(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")

def reset_peak(pid):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS (Linux, proc(5))

def metric(server, name):
    return int(next(l for l in server.metrics().splitlines() if l.startswith(name + " ")).split()[1])

def mib(b):
    return f"{b / (1 << 20):.1f} MiB"

def settle(server, pid, start, seconds=10):
    """Waits (bounded) until no generation runs and the resident size is back near `start`;
    returns the last resident size."""
    deadline = time.monotonic() + seconds
    rss = status_bytes(pid, "VmRSS")
    while time.monotonic() < deadline:
        rss = status_bytes(pid, "VmRSS")
        if metric(server, "lockstep_num_requests_running") == 0 and rss - start <= SLACK:
            break
        time.sleep(0.1)
    return rss

def warm(server):
    """One of each kind of completion first, so that code, threads and the first allocations are
    resident before the baseline is taken."""
    for body in ({"prompt": "a", "max_tokens": 8, "n": 4, "logprobs": 20},
                 {"prompt": "a", "max_tokens": 8, "echo": True, "logprobs": 2}):
        status, answer = server.post("/v1/completions", body)
        assert status == 200, answer

HEAVY = [
    # The probe's: 400,000 prompt tokens echoed with their scores by 16 choices (800 KB of body).
    ({"prompt": [1] * 400_000, "n": 16, "echo": True, "logprobs": 0, "max_tokens": 0}, "n"),
    # 64 choices of 3000 tokens with every token's top 20.
    ({"prompt": ["The ", "A ", "Q: ", "Never "], "n": 16, "max_tokens": 3000, "logprobs": 20, "seed": 5},
     "max_tokens"),
    ({"prompt": "The ", "n": 16, "max_tokens": 1 << 20}, "max_tokens"),
    # One choice is too many: without logprobs it would fit.
    ({"prompt": [1] * 400_000, "echo": True, "logprobs": 20, "max_tokens": 0}, "logprobs"),
    # Streamed, a choice's first event carries the echoed prompt with its scores: neither n = 1 nor
    # no logprobs is enough, without echo it fits.
    ({"prompt": [1] * 400_000, "n": 16, "echo": True, "logprobs": 5, "stream": True}, "echo"),
]

def test_answers_past_the_budget_are_refused_naming_the_field(serve):
    s = serve("--http", "127.0.0.1:0")
    pid = s.proc.pid
    warm(s)
    start = status_bytes(pid, "VmRSS")
    reset_peak(pid)
    for body, param in HEAVY:
        data = json.dumps(body, separators=(",", ":")).encode()  # 800 KB, under --max-body
        status, _, raw = s.request("POST", "/v1/completions", data, timeout=60)
        answer = json.loads(raw)
        assert status == 400, (param, raw[:300])
        error = answer["error"]
        assert error["param"] == param, error
        assert str(ANSWER_BUDGET) in error["message"], error
        peak = status_bytes(pid, "VmHWM")
        assert peak - start <= request_bound(len(data)), f"peak {mib(peak)}, at start {mib(start)} ({param})"
    # A stream may generate as long as it likes: only its echo counts.
    status, _, raw = s.request("POST", "/v1/completions", json.dumps(
        {"prompt": "The ", "n": 16, "max_tokens": 40, "logprobs": 20, "stream": True}).encode())
    assert status == 200 and raw.endswith(b"data: [DONE]\n\n")

def test_an_answer_within_the_budget_stays_within_its_bound_and_its_memory_comes_back(serve, model):
    s = serve("--http", "127.0.0.1:0")
    pid = s.proc.pid
    warm(s)
    # Nearly the most tokens that fit for 16 choices with the top 20 of each (the 400 names them).
    body = {"prompt": "The ", "n": 16, "max_tokens": 1 << 20, "logprobs": 20, "seed": 11}
    status, _, raw = s.request("POST", "/v1/completions", json.dumps(body).encode())
    assert status == 400
    message = json.loads(raw)["error"]["message"]
    most = int(message.split("at most ")[1].split(" ")[0])
    assert 1000 < most < 4000, message
    body["max_tokens"] = most
    start = status_bytes(pid, "VmRSS")
    reset_peak(pid)
    status, _, raw = s.request("POST", "/v1/completions", json.dumps(body).encode(), timeout=120)
    assert status == 200, raw[:300]
    peak = status_bytes(pid, "VmHWM")
    answer = json.loads(raw)
    del raw
    for i in (0, 15):
        choice = answer["choices"][i]
        assert len(choice["logprobs"]["tokens"]) == most
        expected = generate(model, "The ", most, "1", 11 + i)
        assert choice["text"] == expected.decode("utf-8", errors="replace")
    assert peak - start <= request_bound(100), f"peak {mib(peak)}, at start {mib(start)}"
    rss = settle(s, pid, start)
    assert rss - start <= SLACK, f"resident {mib(rss)} after the answer, {mib(start)} before it (peak {mib(peak)})"

def test_a_stream_keeps_nothing_it_has_sent(serve):
    """16 choices streaming every token's top 20 logprobs: the server's memory stays flat while
    tens of thousands of tokens go out, and comes back once the client leaves."""
    s = serve("--http", "127.0.0.1:0")
    pid = s.proc.pid
    warm(s)
    start = status_bytes(pid, "VmRSS")
    conn = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    body = json.dumps({"prompt": "The ", "n": 16, "max_tokens": 1 << 20, "logprobs": 20, "stream": True}).encode()
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    close = read_in_background(conn)
    try:
        deadline = time.monotonic() + 60

        def tokens_past(n):
            while (t := metric(s, "lockstep_generation_tokens_total")) < n:
                assert time.monotonic() < deadline, f"only {t} tokens generated"
                time.sleep(0.05)
            return t

        first = tokens_past(5_000)
        rss_first = status_bytes(pid, "VmRSS")
        last = tokens_past(first + 30_000)
        rss_last = status_bytes(pid, "VmRSS")
    finally:
        close()
    grown = rss_last - rss_first
    assert grown <= 4 << 20, f"resident grew {mib(grown)} over {last - first} streamed tokens"
    rss = settle(s, pid, start)
    assert rss - start <= SLACK, f"resident {mib(rss)} after the stream, {mib(start)} before it"
