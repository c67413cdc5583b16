#!/usr/bin/python3
"""lockstep serve against the same model in process: round-trip latency and calls per second.

    /usr/bin/python3 bench/serve_bench.py [--build build] [--cpu-cores 1] [--seconds 3]

For the tiny model (lockstep init --seed 1 --d-model 16 --n-layers 2 --n-heads 2 --d-ff 32
--length 32) and s256 (--seed 1 --d-model 256 --n-layers 6 --n-heads 8 --d-ff 768 --length 256),
served with --output logits (full windows), under --batch 1 and --batch 8, with 1, 8 and 32
clients (one process each, one call in flight each): p50 and p99 of the round trip as a client
sees it, calls per second over all clients, and the calls per run the server reports. Beside
them the in-process time of run_calls on the same model and layout (lockstep_bench
--benchmark_filter=ServeInProcess, same seed and --cpu-cores).

The machine is noisy; the ratios are the point:
  socket overhead  = tiny, 1 client, p50 round trip - in-process call    (target < 50 us)
  batching gain    = calls/s under --batch 8 / under --batch 1           (tiny, 32 clients: >= 2)
  lone-call ratio  = s256, 1 client, p50 under --batch 8 / under --batch 1 (target ~1)
Standard library and numpy (Debian's /usr/bin/python3).
"""

import argparse
import json
import multiprocessing as mp
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

MODELS = {
    "tiny": ["--d-model", "16", "--n-layers", "2", "--n-heads", "2", "--d-ff", "32", "--length", "32"],
    "s256": ["--d-model", "256", "--n-layers", "6", "--n-heads", "8", "--d-ff", "768", "--length", "256"],
}
CLIENTS = (1, 8, 32)
BATCHES = (1, 8)


def read_exact(s, view):
    got = 0
    while got < len(view):
        n = s.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("server closed")
        got += n


def client_loop(path, payloads, deadline_s, min_calls, barrier, results):
    """One client: calls back to back until the deadline (at least min_calls), timing each."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    head = bytearray(8)
    read_exact(s, memoryview(head))
    (n,) = struct.unpack("<Q", head)
    hs = bytearray(n)
    read_exact(s, memoryview(hs))
    about = json.loads(hs)
    out_bytes = 1 + sum(int(np.prod(o["shape"])) * 4 for o in about["outputs"])
    answer = bytearray(8 + out_bytes)
    view = memoryview(answer)
    frames = [struct.pack("<Q", len(p)) + p for p in payloads]
    # One untimed call: first-touch of the connection's buffers on both sides.
    s.sendall(frames[0])
    read_exact(s, view)
    barrier.wait()
    lat = []
    start = time.perf_counter()
    end = start + deadline_s
    i = 0
    while True:
        t0 = time.perf_counter_ns()
        s.sendall(frames[i % len(frames)])
        read_exact(s, view)
        lat.append(time.perf_counter_ns() - t0)
        if answer[8] != 0:
            raise RuntimeError("call failed: " + bytes(answer[9:]).decode(errors="replace"))
        i += 1
        if i >= min_calls and time.perf_counter() >= end:
            break
    results.put((start, time.perf_counter(), lat))
    s.close()


def serve(lockstep, model, sock, batch, cores):
    cmd = [lockstep, "serve", model, "--socket", sock, "--batch", str(batch), "--output", "logits"]
    if cores:
        cmd += ["--cpu-cores", str(cores)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("serving"):
        raise SystemExit("serve failed: " + p.stderr.read())
    return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    m = re.search(r"stopped by \w+, ([\d,]+) calls? in ([\d,]+) runs?", out)
    if not m:
        raise SystemExit("serve printed no stop line: " + out)
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


def measure(lockstep, model, tmp, length, batch, clients, cores, seconds, min_calls):
    """One server, `clients` client processes for about `seconds`: the raw latencies (us), the
    timed wall time and the server's calls and runs."""
    sock = os.path.join(tmp, "bench.sock")
    p = serve(lockstep, model, sock, batch, cores)
    rng = np.random.default_rng(0)
    payloads = [rng.integers(0, 256, size=length, dtype="<i4").tobytes() for _ in range(16)]
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(clients)
    results = ctx.Queue()
    procs = [ctx.Process(target=client_loop, args=(sock, payloads, seconds, min_calls, barrier, results))
             for _ in range(clients)]
    for q in procs:
        q.start()
    got = [results.get(timeout=600) for _ in procs]
    for q in procs:
        q.join()
    calls, runs = stop(p)
    lat = np.concatenate([np.array(g[2], dtype=np.float64) for g in got]) / 1e3
    wall = max(g[1] for g in got) - min(g[0] for g in got)
    return lat, wall, calls, runs


def summarise(parts):
    """Rounds of measure() -> p50, p99, calls/s over the timed walls, calls per run."""
    lat = np.concatenate([p[0] for p in parts])
    return {
        "p50": float(np.percentile(lat, 50)),
        "p99": float(np.percentile(lat, 99)),
        "calls_per_s": len(lat) / sum(p[1] for p in parts),
        "timed": len(lat),
        "calls_per_run": sum(p[2] for p in parts) / max(sum(p[3] for p in parts), 1),
    }


def in_process(bench, models, cores, repetitions):
    """{(model, calls per run): [us per call, one per repetition]} from lockstep_bench."""
    if not os.path.exists(bench):
        print(f"serve_bench: {bench} is missing; in-process times skipped", file=sys.stderr)
        return {}
    r = subprocess.run([bench, "--benchmark_filter=ServeInProcess_(%s)/[18]/%d/" % ("|".join(models), cores),
                        "--benchmark_format=json", f"--benchmark_repetitions={repetitions}"],
                       check=True, capture_output=True, text=True)
    out = {}
    for b in json.loads(r.stdout)["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        name = b["run_name"]  # BM_ServeInProcess_tiny/1/1/real_time
        model, calls = name.split("_")[2].split("/")[0], int(name.split("/")[1])
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b["time_unit"]]
        out.setdefault((model, calls), []).append(b["real_time"] * scale / calls)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("LOCKSTEP_BUILD_DIR", "build"))
    ap.add_argument("--cpu-cores", default="0,1",
                    help="comma-separated worker-thread settings to run (0: serve's default, one per core)")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per configuration")
    ap.add_argument("--rounds", type=int, default=3,
                    help="--batch 1 and --batch 8 alternate this many times, so that drifting load "
                         "on the machine falls on both")
    ap.add_argument("--models", default="tiny,s256")
    a = ap.parse_args()
    lockstep = os.path.join(a.build, "src", "lockstep")
    bench = os.path.join(a.build, "bench", "lockstep_bench")
    models = a.models.split(",")
    settings = [int(c) for c in a.cpu_cores.split(",")]
    results, inproc = {}, {}
    with tempfile.TemporaryDirectory(prefix="lockstep-serve-bench-") as tmp:
        for name in models:
            model = os.path.join(tmp, name)
            subprocess.run([lockstep, "init", "--seed", "1", *MODELS[name], "-o", model], check=True,
                           capture_output=True)
            length = int(MODELS[name][MODELS[name].index("--length") + 1])
            for cores in settings:
                # In process before and after the served runs; the median of every repetition.
                times = in_process(bench, [name], cores, 3)
                served = {}
                for clients in CLIENTS:
                    print(f"serve_bench: {name}, --cpu-cores {cores or 'default'}, {clients} client(s), "
                          f"--batch {' and '.join(str(b) for b in BATCHES)}", file=sys.stderr, flush=True)
                    parts = {b: [] for b in BATCHES}
                    for _ in range(a.rounds):
                        for batch in BATCHES:
                            parts[batch].append(measure(lockstep, model, tmp, length, batch, clients, cores,
                                                        a.seconds / a.rounds,
                                                        min_calls=2 if name == "s256" else 50))
                    for batch in BATCHES:
                        served[(batch, clients)] = summarise(parts[batch])
                for key, more in in_process(bench, [name], cores, 3).items():
                    times.setdefault(key, []).extend(more)
                for (model_name, calls), ts in times.items():
                    inproc[(model_name, calls, cores)] = float(np.median(ts))
                alone, batched = inproc.get((name, 1, cores)), inproc.get((name, 8, cores))
                where = f"--cpu-cores {cores}" if cores else "default cores (one per core)"
                print(f"\n{name}, --output logits, {where}: in process "
                      + (f"{alone:.1f} us a call alone, {batched:.1f} us a call in a run of 8"
                         if alone else "not measured"))
                print(f"{'batch':>5} {'clients':>7} {'p50 us':>10} {'p99 us':>10} {'calls/s':>10} "
                      f"{'calls/run':>9} {'timed':>6}")
                for batch in BATCHES:
                    for clients in CLIENTS:
                        r = served[(batch, clients)]
                        results[(name, cores, batch, clients)] = r
                        print(f"{batch:>5} {clients:>7} {r['p50']:>10.1f} {r['p99']:>10.1f} "
                              f"{r['calls_per_s']:>10.1f} {r['calls_per_run']:>9.2f} {r['timed']:>6}",
                              flush=True)
    print("\nratios")
    for name in models:
        for cores in settings:
            tag = f"{name}, cores {cores or 'default'}"
            alone = inproc.get((name, 1, cores))
            if alone is not None:
                for batch in BATCHES:
                    over = results[(name, cores, batch, 1)]["p50"] - alone
                    print(f"  {tag}: socket overhead, 1 client, --batch {batch}: p50 {over:+.1f} us "
                          f"over in process" + ("  (target < 50 us)" if name == "tiny" else ""))
            for clients in CLIENTS:
                g = (results[(name, cores, 8, clients)]["calls_per_s"] /
                     results[(name, cores, 1, clients)]["calls_per_s"])
                target = ("  (target >= 2)" if name == "tiny" and clients == 32 else
                          "  (target >= 1)" if name == "s256" else "")
                print(f"  {tag}: batching gain, {clients:>2} clients: calls/s --batch 8 / --batch 1 = "
                      f"{g:.2f}{target}")
            lone = results[(name, cores, 8, 1)]["p50"] / results[(name, cores, 1, 1)]["p50"]
            print(f"  {tag}: lone call p50 --batch 8 / --batch 1 = {lone:.2f}"
                  + ("  (target ~1)" if name == "s256" else ""))


if __name__ == "__main__":
    main()
