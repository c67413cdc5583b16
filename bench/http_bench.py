#!/usr/bin/python3
"""lockstep serve --http against in-process decoding: streamed tokens per second and time to
first token.

    /usr/bin/python3 bench/http_bench.py [--build build] [--models s256,l768] [--seconds 10]
                                         [--cpu-cores N] [--tokens 200] [--check 8]

For s256 (lockstep init --seed 1 --d-model 256 --n-layers 6 --n-heads 8 --d-ff 768 --length 256)
and l768 (--d-model 768 --n-layers 12 --n-heads 12 --d-ff 2048 --length 256), the shapes of
bench/forward_bench.cpp: 1, 8 and 32 clients (connections of one event loop, one streamed
/v1/completions in flight each, back to back for --seconds) against one `lockstep serve --http`;
tokens per second over all clients, and time to first token (request sent to the first `data:`
event) p50 and p99.
Beside them in-process decoding with the same sampling: `lockstep generate` of --tokens tokens
minus one of 1 token, divided by the difference (so loading the model does not count).
Prompt plus tokens stay inside the 256-token window, so no restart is timed.
And the CPU time per streamed token: the server's event-loop thread (the main thread:
every read, event and write), its other threads (the model: the generation runner and its
lanes), and this client process, with the client's share of all three.
Each answer's SHA-256 (its last event) is kept; afterwards up to --check answers of each client
count are asked again, one at a time and not streamed, and must give the same SHA-256.

The batching ratio comes from --rounds interleaved rounds too: one client, then 32, each for a
window of --window seconds that opens a second after its clients start and closes before they
stop, counted by the server's lockstep_generation_tokens_total (so neither the batch filling
nor its last requests draining count); the median of the rounds' ratios.
One client against in-process decoding is measured in --rounds interleaved rounds (generate of
--tokens and of 1 token, then one streamed request), each side as seconds per token after the
first token, medians of the rounds: the same statistic on both sides and the same moments of a
noisy machine (the table's 1-client rate, with every request's first token, over the best of 3
generate runs before the server starts, is printed beside it).
The machine is noisy; the ratios, measured in the same run, are the point:
  batching       = s256, 32 clients tokens/s / 1 client's              (goal >= 4)
  one client     = in-process s/token / HTTP s/token, interleaved      (goal >= 0.9 on l768, 0.7 on s256)
Standard library only (Debian's /usr/bin/python3).
"""

import argparse
import http.client
import json
import os
import random
import re
import resource
import selectors
import signal
import socket
import subprocess
import tempfile
import threading
import time

MODELS = {
    "s256": ["--d-model", "256", "--n-layers", "6", "--n-heads", "8", "--d-ff", "768", "--length", "256"],
    "l768": ["--d-model", "768", "--n-layers", "12", "--n-heads", "12", "--d-ff", "2048", "--length", "256"],
}
CLIENTS = (1, 8, 32)
PROMPT = "The "


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def generate_seconds(lockstep, model, n, seed, cores):
    """Wall seconds of one `lockstep generate` of n tokens from PROMPT (loading included)."""
    cmd = [lockstep, "generate", model, "--prompt", PROMPT, "-n", str(n), "--temperature", "0.8", "--seed", str(seed)]
    if cores:
        cmd += ["--cpu-cores", str(cores)]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def in_process(lockstep, model, tokens, cores, repetitions=3):
    """Seconds per decoded token of `lockstep generate`: the fastest of `repetitions` runs of
    `tokens` tokens minus the fastest of 1 token (loading the model cancels out); None when the
    machine's noise hides the difference."""
    def timed(n):
        return min(generate_seconds(lockstep, model, n, r, cores) for r in range(repetitions))
    difference = timed(tokens) - timed(1)
    return difference / (tokens - 1) if difference > 0 else None


def paired(lockstep, model, port, tokens, cores, rounds):
    """One HTTP client against in-process decoding, measured alike and interleaved so that the
    machine's drift falls on both: each round runs `lockstep generate` of `tokens` tokens and of
    1 (their difference over tokens - 1: seconds per decoded token, loading and the first token
    cancelled out), then one streamed request of `tokens` tokens (its time after the first
    token's event over tokens - 1). Returns the medians (in-process, HTTP) in seconds per token."""
    inproc, served = [], []
    for r in range(rounds):
        inproc.append((generate_seconds(lockstep, model, tokens, r, cores)
                       - generate_seconds(lockstep, model, 1, r, cores)) / (tokens - 1))
        results = []
        streams(port, [r], tokens, lambda: False, results)  # one request
        first, _, end, _, _, start = results[0]
        served.append((end - start - first) / (tokens - 1))
    return percentile(inproc, 0.5), percentile(served, 0.5)


def generated(port):
    """lockstep_generation_tokens_total from /metrics: tokens the server has generated."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    m = re.search(r"^lockstep_generation_tokens_total(?:\{[^}]*\})? (\S+)$", text, re.M)
    return float(m.group(1))


def window_rate(port, clients, tokens, seconds, seed):
    """Tokens per second while `clients` stream back to back: the server's token counter over a
    window of `seconds` that opens a second after they start and closes before any stops, so
    neither the batch filling nor the last requests draining fall in it."""
    stop = [False]
    results = []
    thread = in_background(port, [1000 + 100 * seed + c for c in range(clients)], tokens, lambda: not stop[0], results)
    time.sleep(1.0)
    n0, t0 = generated(port), time.perf_counter()
    time.sleep(seconds)
    n1, t1 = generated(port), time.perf_counter()
    stop[0] = True
    thread.join()
    return (n1 - n0) / (t1 - t0)


def batching(port, tokens, seconds, rounds):
    """32 clients' tokens/s over one client's, in `rounds` rounds of one window each, one client
    then 32 (the machine's drift falls on both): the median of the rounds' ratios, the ratios, and
    each round's (1 client, 32 clients) tokens/s."""
    ratios, rates = [], []
    for r in range(rounds):
        one = window_rate(port, 1, tokens, seconds, 2 * r)
        many = window_rate(port, 32, tokens, seconds, 2 * r + 1)
        ratios.append(many / one)
        rates.append((one, many))
    return percentile(ratios, 0.5), ratios, rates


def serve(lockstep, model, tmp, cores):
    out_path = os.path.join(tmp, f"serve-{time.monotonic_ns()}.out")
    cmd = [lockstep, "serve", model, "--http", "127.0.0.1:0", "--http-batch", "64"]
    if cores:
        cmd += ["--cpu-cores", str(cores)]
    out = open(out_path, "wb")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        text = open(out_path, errors="replace").read()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", text)
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"lockstep serve did not start: {open(out_path, errors='replace').read()}")


def body(seed, tokens, stream):
    return json.dumps({"prompt": PROMPT, "max_tokens": tokens, "temperature": 0.8, "seed": seed, "stream": stream})


SHA256 = re.compile(rb'"sha256":"([0-9a-f]{64})"')


def streams(port, seeds, tokens, keep_going, results):
    """One streamed completion in flight per entry of `seeds`, back to back while keep_going()
    says so (asked as each ends), all on this thread: one selector over the connections, as load
    generators do, so that the client takes little of the machine it shares with the server (32
    threads blocking on a connection each took twice the CPU per token). Request k of connection
    c has seed seeds[c] * 1000 + k. Appends (ttft, tokens, end time, seed, sha256 of the answer,
    start time) per answer. Reads without parsing: the first `data:` is the time to first token,
    the last event before [DONE] carries the answer's SHA-256, and the server closing the
    connection (the request says Connection: close) ends the answer."""
    selector = selectors.DefaultSelector()

    def start(c, k):
        request_seed = seeds[c] * 1000 + k
        payload = body(request_seed, tokens, True).encode()
        sock = socket.create_connection(("127.0.0.1", port), timeout=300)
        begin = time.perf_counter()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, {"c": c, "k": k, "seed": request_seed, "start": begin,
                                                       "first": None, "tail": b""})

    for c in range(len(seeds)):
        start(c, 0)
    live = len(seeds)
    deadline = time.monotonic() + 600
    while live:
        if time.monotonic() > deadline:
            raise RuntimeError("streams: no answer ended within 600 s")
        for key, _ in selector.select(timeout=1.0):
            state = key.data
            try:
                chunk = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            if chunk:
                if state["first"] is None and b"data: " in chunk:
                    state["first"] = time.perf_counter() - state["start"]
                state["tail"] = (state["tail"] + chunk)[-4096:]
                continue
            selector.unregister(key.fileobj)
            key.fileobj.close()
            sha = SHA256.findall(state["tail"])
            results.append((state["first"], tokens, time.perf_counter(), state["seed"],
                            sha[-1].decode() if sha else None, state["start"]))
            deadline = time.monotonic() + 600
            if keep_going():
                start(state["c"], state["k"] + 1)
            else:
                live -= 1
    selector.close()


def in_background(port, seeds, tokens, keep_going, results):
    """streams() on a thread of its own, started."""
    t = threading.Thread(target=streams, args=(port, seeds, tokens, keep_going, results))
    t.start()
    return t


def thread_cpu(pid):
    """{thread id: CPU seconds (user + system)} of every thread of process pid."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def own_cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def measure(port, pid, clients, tokens, seconds):
    results = []
    server0, client0 = thread_cpu(pid), own_cpu()
    begin = time.perf_counter()
    stop_at = time.monotonic() + seconds
    streams(port, list(range(clients)), tokens, lambda: time.monotonic() < stop_at, results)
    end = max(r[2] for r in results)
    server1, client1 = thread_cpu(pid), own_cpu()
    n = sum(r[1] for r in results)
    # The event loop runs on serve's main thread (thread id = process id); every other thread
    # computes (the generation runner, its lanes, the model's pool).
    loop = server1.get(pid, 0) - server0.get(pid, 0)
    model = sum(v - server0.get(t, 0) for t, v in server1.items() if t != pid)
    ttft = [r[0] for r in results if r[0] is not None]
    return {"tokens_per_s": n / (end - begin), "answers": len(results),
            "ttft_p50": percentile(ttft, 0.5), "ttft_p99": percentile(ttft, 0.99),
            "loop_us": 1e6 * loop / n, "model_us": 1e6 * model / n, "client_us": 1e6 * (client1 - client0) / n,
            "results": results}


def check_answers(port, results, tokens, count):
    """Asks `count` of the answers again, alone and not streamed: (equal, asked)."""
    sample = random.Random(0).sample(results, min(count, len(results)))
    equal = 0
    for r in sample:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        conn.request("POST", "/v1/completions", body=body(r[3], tokens, False))
        answer = json.loads(conn.getresponse().read())
        conn.close()
        equal += answer["choices"][0]["sha256"] == r[4]
    return equal, len(sample)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("LOCKSTEP_BUILD_DIR", "build"))
    ap.add_argument("--models", default="s256,l768")
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds per client count")
    ap.add_argument("--tokens", type=int, default=200, help="tokens per request (prompt + tokens <= 256)")
    ap.add_argument("--cpu-cores", type=int, default=0, help="serve's and generate's worker threads (0: default)")
    ap.add_argument("--check", type=int, default=8, help="answers of each client count asked again alone")
    ap.add_argument("--rounds", type=int, default=7,
                    help="interleaved rounds: of one client against generate, and of 1 against 32 clients (s256)")
    ap.add_argument("--window", type=float, default=3.0, help="seconds of each window of the 1 against 32 rounds")
    a = ap.parse_args()
    if not 10 <= a.tokens <= 256 - len(PROMPT):
        ap.error("--tokens must be 10..252 so that no restart is timed")
    lockstep = os.path.join(a.build, "src", "lockstep")
    ratios = []
    mismatches = 0
    with tempfile.TemporaryDirectory(prefix="lockstep-http-bench-") as tmp:
        for name in a.models.split(","):
            model = os.path.join(tmp, name)
            subprocess.run([lockstep, "init", "--seed", "1", *MODELS[name], "-o", model], check=True,
                           capture_output=True)
            per_token = in_process(lockstep, model, a.tokens, a.cpu_cores)
            inproc = 1.0 / per_token if per_token else float("nan")
            p, port = serve(lockstep, model, tmp, a.cpu_cores)
            try:
                pair = paired(lockstep, model, port, a.tokens, a.cpu_cores, a.rounds)
                served = {c: measure(port, p.pid, c, a.tokens, a.seconds) for c in CLIENTS}
                if name == "s256":
                    rounds_ratio = batching(port, a.tokens, a.window, a.rounds)
                checked = {c: check_answers(port, served[c]["results"], a.tokens, a.check) for c in CLIENTS}
            finally:
                p.send_signal(signal.SIGKILL)
                p.wait(30)
            print(f"\n{name}: in-process generate {inproc:.1f} tokens/s ({a.tokens} tokens, temperature 0.8)")
            print(f"{'clients':>7} {'tokens/s':>10} {'x 1 client':>10} {'x in-proc':>9} {'ttft p50 ms':>11} "
                  f"{'ttft p99 ms':>11} {'answers':>7} {'same alone':>10} | CPU us/token: {'loop':>6} {'model':>7} "
                  f"{'client':>7} {'client %':>8}")
            for c in CLIENTS:
                r = served[c]
                equal, asked = checked[c]
                mismatches += asked - equal
                cpu = r["loop_us"] + r["model_us"] + r["client_us"]
                print(f"{c:>7} {r['tokens_per_s']:>10.1f} {r['tokens_per_s'] / served[1]['tokens_per_s']:>10.2f} "
                      f"{r['tokens_per_s'] / inproc:>9.2f} {1000 * r['ttft_p50']:>11.2f} "
                      f"{1000 * r['ttft_p99']:>11.2f} {r['answers']:>7} {f'{equal}/{asked}':>10} | {'':>13} "
                      f"{r['loop_us']:>6.1f} {r['model_us']:>7.1f} {r['client_us']:>7.1f} "
                      f"{100 * r['client_us'] / cpu:>7.1f}%", flush=True)
            print(f"one client, {a.rounds} interleaved rounds, medians: in-process {1 / pair[0]:.1f} tokens/s, "
                  f"HTTP {1 / pair[1]:.1f} tokens/s after the first token")
            one = pair[0] / pair[1]
            ratios.append(f"  {name}: one HTTP client / in-process decoding: {one:.2f}  "
                          f"(goal >= {0.9 if name == 'l768' else 0.7}; interleaved rounds; "
                          f"{served[1]['tokens_per_s'] / inproc:.2f} for the table's 1-client rate, with "
                          f"every request's first token, over the best of 3 generate runs)")
            if name == "s256":
                ratios.append(f"  s256: 32 clients / 1 client tokens/s: {rounds_ratio[0]:.2f}  (goal >= 4; median of "
                              f"{a.rounds} interleaved rounds: {' '.join(f'{x:.2f}' for x in rounds_ratio[1])}; "
                              f"{served[32]['tokens_per_s'] / served[1]['tokens_per_s']:.2f} from the table)")
                ratios.append("    the rounds' tokens/s, 1 client / 32 clients: " +
                              " ".join(f"{one:.0f}/{many:.0f}" for one, many in rounds_ratio[2]))
    print("\nratios (same run)")
    print("\n".join(ratios))
    if mismatches:
        print(f"\n{mismatches} answers differed from the same request alone: the bits changed under load")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
