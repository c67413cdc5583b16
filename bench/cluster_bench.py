#!/usr/bin/python3
"""Replicas behind HAProxy (deploy/cluster.sh) against one server: requests/s, generated tokens/s
and HAProxy's cost on one request's latency.

    /usr/bin/python3 bench/cluster_bench.py [--build build] [--seconds 10] [--clients 16]
                                            [--tokens 64] [--latency-requests 200] [--rounds 3]

On s256 (lockstep init --seed 1 --d-model 256 --n-layers 6 --n-heads 8 --d-ff 768 --length 256,
as bench/http_bench.py): --clients threads send non-streamed /v1/completions of --tokens tokens
back to back for --seconds (in --rounds turns, the three taking turns) to
  - one `lockstep serve --http --cpu-cores 2`, directly;
  - HAProxy in front of 1 replica (`--cpu-cores 1`);
  - HAProxy in front of 2 replicas (`--cpu-cores 1` each): the same 2 cores as the first.
Then, with 1 replica behind HAProxy, one client alone sends --latency-requests requests of 16
tokens, alternately to the replica's port and through HAProxy: the p50 latency of each and their
ratio (HAProxy's overhead on one request).

The machine is shared and noisy; the ratios, measured in the same run, are the point:
  2 replicas / 1 server of 2 cores      tokens/s (near 1: HAProxy and a second process cost little)
  2 replicas / 1 replica                tokens/s (near 2 where 2 cores are free)
  via HAProxy / direct                  p50 latency of one request (near 1)
Standard library only (Debian's /usr/bin/python3); needs haproxy (./run deps).
"""

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
S256 = ["--d-model", "256", "--n-layers", "6", "--n-heads", "8", "--d-ff", "768", "--length", "256"]
PROMPT = "The "


def percentile(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))] if s else float("nan")


def completion(address, body, timeout=300):
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body))
        r = conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
        return json.loads(data)
    finally:
        conn.close()


def load(address, clients, tokens, seconds):
    """{requests_per_s, tokens_per_s, answers}: clients back to back for seconds."""
    done, errors = [], []
    stop_at = time.monotonic() + seconds

    def client(c):
        k = 0
        try:
            while time.monotonic() < stop_at:
                a = completion(address, {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0.8,
                                         "seed": 1000 * c + k})
                done.append((a["usage"]["completion_tokens"], time.perf_counter()))
                k += 1
        except Exception as e:  # noqa: BLE001 (reported)
            errors.append(repr(e))

    begin = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"{len(errors)} clients failed, e.g. {errors[0]}")
    elapsed = max(t for _, t in done) - begin
    return {"requests_per_s": len(done) / elapsed, "tokens_per_s": sum(n for n, _ in done) / elapsed,
            "answers": len(done)}


def latency(direct, via, requests):
    """p50 seconds of one request alone, direct and via HAProxy, sent alternately."""
    times = {"direct": [], "via": []}
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0.8, "seed": 7}
    for address in (direct, via):  # warm both paths (connections, prefix cache)
        completion(address, body)
    for i in range(requests):
        for name, address in (("direct", direct), ("via", via)) if i % 2 == 0 else (("via", via), ("direct", direct)):
            t = time.perf_counter()
            completion(address, body)
            times[name].append(time.perf_counter() - t)
    return percentile(times["direct"], 0.5), percentile(times["via"], 0.5)


class Cluster:
    """deploy/cluster.sh with N replicas; stopped with SIGTERM."""

    def __init__(self, lockstep, model, replicas, folder):
        self.dir = folder
        os.makedirs(folder)
        self.out = open(os.path.join(folder, "cluster.out"), "wb")
        self.proc = subprocess.Popen([os.path.join(REPO, "deploy", "cluster.sh"), "--replicas", str(replicas),
                                      "--model", model, "--binary", lockstep, "--cpu-cores", "1", "--dir", folder,
                                      "--", "--http-batch", "64"],
                                     stdout=self.out, stderr=subprocess.STDOUT, start_new_session=True)
        env = os.path.join(folder, "cluster.env")
        deadline = time.monotonic() + 120
        while not os.path.exists(env):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("deploy/cluster.sh did not start:\n" + open(self.out.name).read())
            time.sleep(0.05)
        url = dict(line.split("=", 1) for line in open(env).read().splitlines())["HTTP_URL"]
        host, port = url[len("http://"):].rsplit(":", 1)
        self.http = (host, int(port))

    def replica(self, name):
        host, port = open(os.path.join(self.dir, f"{name}.ports")).read().split()[0].rsplit(":", 1)
        return host, int(port)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.out.close()


def serve_alone(lockstep, model, cores, folder):
    out_path = os.path.join(folder, "alone.out")
    out = open(out_path, "wb")
    p = subprocess.Popen([lockstep, "serve", model, "--http", "127.0.0.1:0", "--cpu-cores", str(cores),
                          "--http-batch", "64"], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        # The start line (stdout), not the note on stderr that the port answers 503 while loading.
        m = re.search(r"^serving .*http://127\.0\.0\.1:(\d+)", open(out_path, errors="replace").read(), re.M)
        if m:
            return p, ("127.0.0.1", int(m.group(1)))
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("lockstep serve did not start: " + open(out_path, errors="replace").read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("LOCKSTEP_BUILD_DIR", "build"))
    ap.add_argument("--seconds", type=float, default=10.0, help="timed seconds per configuration")
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per request (prompt + tokens <= 256)")
    ap.add_argument("--latency-requests", type=int, default=200, help="requests per path for the p50")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the three configurations")
    a = ap.parse_args()
    if not 1 <= a.tokens <= 256 - len(PROMPT):
        ap.error("--tokens must be 1..252 so that no restart is timed")
    if shutil.which("haproxy") is None:
        print("cluster_bench.py: haproxy is not installed (./run deps); skipped")
        return 0
    lockstep = os.path.abspath(os.path.join(a.build, "src", "lockstep"))
    rows = {}
    with tempfile.TemporaryDirectory(prefix="lockstep-cluster-bench-") as tmp:
        model = os.path.join(tmp, "s256")
        subprocess.run([lockstep, "init", "--seed", "1", *S256, "-o", model], check=True, capture_output=True)

        # All three up at once, measured in turn for --rounds rounds (so the machine's load
        # drifting over the run falls on each alike); idle ones only wait.
        p, address = serve_alone(lockstep, model, 2, tmp)
        clusters = []
        try:
            for replicas in (1, 2):
                clusters.append(Cluster(lockstep, model, replicas, os.path.join(tmp, f"cluster{replicas}")))
            configs = {"1 server, 2 cores, direct": address, "HAProxy + 1 replica x 1 core": clusters[0].http,
                       "HAProxy + 2 replicas x 1 core": clusters[1].http}
            parts = {name: [] for name in configs}
            for _ in range(a.rounds):
                for name, target in configs.items():
                    parts[name].append(load(target, a.clients, a.tokens, a.seconds / a.rounds))
            for name, runs in parts.items():
                seconds = sum(r["answers"] / r["requests_per_s"] for r in runs)
                answers = sum(r["answers"] for r in runs)
                tokens = sum(r["tokens_per_s"] * r["answers"] / r["requests_per_s"] for r in runs)
                rows[name] = {"requests_per_s": answers / seconds, "tokens_per_s": tokens / seconds,
                              "answers": answers}
            p50_direct, p50_via = latency(clusters[0].replica("r1"), clusters[0].http, a.latency_requests)
        finally:
            for c in clusters:
                c.stop()
            p.send_signal(signal.SIGKILL)
            p.wait(30)

    print(f"\ns256: {a.clients} clients, {a.tokens} tokens a request (temperature 0.8), {a.seconds:g} s each")
    print(f"{'configuration':<30} {'requests/s':>10} {'tokens/s':>10} {'answers':>8}")
    for name, r in rows.items():
        print(f"{name:<30} {r['requests_per_s']:>10.1f} {r['tokens_per_s']:>10.1f} {r['answers']:>8}")
    one_server = rows["1 server, 2 cores, direct"]["tokens_per_s"]
    one = rows["HAProxy + 1 replica x 1 core"]["tokens_per_s"]
    two = rows["HAProxy + 2 replicas x 1 core"]["tokens_per_s"]
    print(f"\none request alone ({a.latency_requests} each, 16 tokens): p50 direct {1000 * p50_direct:.2f} ms, "
          f"via HAProxy {1000 * p50_via:.2f} ms")
    print("\nratios (same run)")
    print(f"  2 replicas x 1 core / 1 server x 2 cores, tokens/s: {two / one_server:.2f}")
    print(f"  2 replicas / 1 replica (both via HAProxy), tokens/s: {two / one:.2f}")
    print(f"  via HAProxy / direct, p50 latency of one request:   {p50_via / p50_direct:.2f}")
    print(f"  tokens/s per core (1 replica x 1 core via HAProxy): {one:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
