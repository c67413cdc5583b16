#!/usr/bin/env python3
"""A 200-token greedy sampling loop three ways, for s256 and l768 on 1 and 2 threads:
(a) in process with a session (`lockstep bench MODEL`'s decode figure), (b) through
`lockstep serve --at` with its prefix cache, (c) through `serve --at --no-cache`. Prints tokens/s
and the ratios b/a and b/c, measured in the same run.

usage: bench/sampling_bench.py [--build build] [--shapes s256,l768] [--threads 1,2] [--tokens 200]
"""
import argparse
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from lockstep.client import Client  # noqa: E402

SHAPES = {
    "s256": ["--d-model", "256", "--n-layers", "6", "--n-heads", "8", "--d-ff", "768"],
    "l768": ["--d-model", "768", "--n-layers", "12", "--n-heads", "12", "--d-ff", "2048"],
}


def serve_loop(lockstep, model, sock, threads, tokens, cache):
    args = [lockstep, "serve", model, "--socket", sock, "--at", "--output", "logits", "--cpu-cores", str(threads)]
    if not cache:
        args.append("--no-cache")
    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(600):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    try:
        with Client(sock) as c:
            window = c.inputs[0].shape[1]
            row = np.zeros(window + 1, dtype="<i4")  # the window, then `at`
            prompt = [ord(ch) for ch in "Once upon a time"]
            row[: len(prompt)] = prompt
            n = len(prompt)
            start = time.perf_counter()
            for _ in range(tokens):
                row[window] = n - 1
                logits = np.frombuffer(c.call_raw(row.tobytes()), dtype="<f4")
                row[n] = int(logits.argmax())
                n += 1
            rate = tokens / (time.perf_counter() - start)
    finally:
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=60)
    stop_line = out.strip().splitlines()[-1] if out.strip() else ""
    return rate, stop_line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("LOCKSTEP_BUILD_DIR", "build"))
    ap.add_argument("--shapes", default="s256,l768")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tokens", type=int, default=200)
    args = ap.parse_args()
    lockstep = os.path.join(args.build, "src", "lockstep")
    print(f"{args.tokens}-token greedy loop, tokens/s: (a) in process  (b) serve --at, cache  (c) serve --at, no cache"
          "   b/a   b/c")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in args.shapes.split(","):
            model = os.path.join(tmp, shape)
            subprocess.run([lockstep, "init", "--seed", "1", "--length", "256", "-o", model] + SHAPES[shape],
                           check=True, stdout=subprocess.DEVNULL)
            for threads in args.threads.split(","):
                out = subprocess.run([lockstep, "bench", model, "--threads", threads, "--seconds", "1",
                                      "--decode-tokens", str(args.tokens)], check=True, capture_output=True, text=True).stdout
                a = float(re.search(r"decode, cpu +\d+ threads? +([0-9.]+) tokens/s", out).group(1))
                b, line_b = serve_loop(lockstep, model, os.path.join(tmp, "b.sock"), threads, args.tokens, True)
                c, _ = serve_loop(lockstep, model, os.path.join(tmp, "c.sock"), threads, args.tokens, False)
                print(f"  {shape} {threads} thread{'s' if threads != '1' else ' '}  {a:10.1f} {b:10.1f} {c:10.1f}"
                      f"   {b / a:5.2f} {b / c:6.1f}   ({line_b.split(', ', 1)[-1]})")


if __name__ == "__main__":
    main()
