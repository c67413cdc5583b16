#!/usr/bin/env python3
"""Sample text from a model that `lockstep serve --at` serves, printing it as it comes.

    lockstep serve MODEL --socket /tmp/model.sock --at --output logits &
    python3 examples/sample.py --socket /tmp/model.sock --prompt "Once upon" --tokens 200 \\
        --temperature 0.8 --top-k 40 --seed 1

Each step sends the window holding the text so far (the newest `length` bytes of it, padded
with zeros after its end) and `at` = the position of its last byte, and draws the next byte from
the logits the server answers there: greedy with --temperature 0, else softmax(logits / T) over
the --top-k highest, drawn with Python's random.Random(--seed), so the same seed, prompt and
model give the same text run after run. Bytes are decoded as UTF-8 as they arrive, an invalid
sequence printed as U+FFFD.

Standard library only (the client uses numpy when present, but this loop does not need it).
"""

from __future__ import annotations

import argparse
import codecs
import math
import os
import random
import struct
import sys

try:
    from lockstep.client import Client, ServerError
except ImportError:  # run from a checkout: python/ beside examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from lockstep.client import Client, ServerError


def choose(logits: list, temperature: float, top_k: int, rng: random.Random) -> int:
    """The next token: argmax (ties to the lowest id, NaN never) when temperature is 0, else a
    draw from softmax(logits / temperature) restricted to the top_k highest (0: all)."""
    candidates = [(v, i) for i, v in enumerate(logits) if not math.isnan(v)]
    if not candidates:
        raise ValueError("every logit is NaN")
    candidates.sort(key=lambda vi: (-vi[0], vi[1]))
    if temperature <= 0:
        return candidates[0][1]
    if top_k > 0:
        candidates = candidates[:top_k]
    top = candidates[0][0]
    weights = [math.exp((v - top) / temperature) for v, _ in candidates]
    r = rng.random() * sum(weights)
    for w, (_, i) in zip(weights, candidates):
        r -= w
        if r < 0:
            return i
    return candidates[-1][1]


def sample(client: Client, prompt: bytes, tokens: int, temperature: float, top_k: int, seed: int,
           out=sys.stdout) -> bytes:
    names = [s.name for s in client.inputs]
    if names[-1:] != ["at"] or len(client.inputs) != 2:
        raise SystemExit("sample.py: serve the model with --at (its inputs are " + ", ".join(names) + ")")
    window = client.inputs[0]
    if window.dtype != "i32" or len(window.shape) != 2 or window.shape[0] != 1:
        raise SystemExit(f"sample.py: the first input must be i32 [1, length]; got {window}")
    length = window.shape[1]
    logits_spec = next((s for s in client.outputs if s.name == "logits"), None)
    if logits_spec is None:
        raise SystemExit("sample.py: the server does not answer logits (serve with --output logits)")
    vocab = logits_spec.shape[-1]
    offset = 0
    for s in client.outputs:
        if s.name == "logits":
            break
        offset += s.nbytes
    if not prompt:
        raise SystemExit("sample.py: the prompt is empty; give at least one byte")
    text = bytearray(prompt)
    rng = random.Random(seed)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out.write(decoder.decode(bytes(text)))
    out.flush()
    for _ in range(tokens):
        context = text[-length:]
        ids = list(context) + [0] * (length - len(context))
        payload = struct.pack(f"<{length}i", *ids) + struct.pack("<i", len(context) - 1)
        raw = client.call_raw(payload)
        logits = list(struct.unpack_from(f"<{vocab}f", raw, offset))
        token = choose(logits, temperature, top_k, rng)
        if token > 255:
            raise SystemExit(f"sample.py: token {token} is not a byte; this loop samples byte models")
        text.append(token)
        out.write(decoder.decode(bytes([token])))
        out.flush()
    out.write(decoder.decode(b"", final=True) + "\n")
    out.flush()
    return bytes(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", required=True, help="the socket `lockstep serve --at` listens on")
    p.add_argument("--prompt", default="\n", help="the text to continue (UTF-8)")
    p.add_argument("--tokens", type=int, default=200, help="bytes to sample")
    p.add_argument("--temperature", type=float, default=0.8, help="0: greedy")
    p.add_argument("--top-k", type=int, default=40, help="draw among the k highest; 0: all")
    p.add_argument("--seed", type=int, default=0, help="seed of the draw")
    a = p.parse_args(argv)
    if a.tokens < 0 or a.temperature < 0 or a.top_k < 0:
        p.error("--tokens, --temperature and --top-k must not be negative")
    try:
        with Client(a.socket) as client:
            sample(client, a.prompt.encode("utf-8"), a.tokens, a.temperature, a.top_k, a.seed)
    except ServerError as e:
        print(f"sample.py: the server refused a call: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"sample.py: {a.socket}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
