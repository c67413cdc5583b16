#!/usr/bin/env python3
"""Sample text from a model that `lockstep serve --at` serves, printing it as it comes.

    lockstep serve MODEL --socket /tmp/model.sock --at --output logits &
    python3 examples/sample.py --socket /tmp/model.sock --prompt "Once upon" --tokens 200 \\
        --temperature 0.8 --top-k 40 --seed 1

Each step sends the context (padded with zeros after its end) and `at` = the position of its
last byte, and draws the next byte from the logits the server answers there with
python/lockstep/sampling.py: the library's sampler (greedy at --temperature 0; else
--top-k, --top-p and --seed) and its window policy, rewritten in standard-library Python with
the same bits. So the text is exactly what `lockstep generate` (and Python's generate()) print
with the same options: past the window, the context restarts from position 0 with its last
half (docs/ARITHMETIC.md, "Generation past the window"); a prompt longer than the window keeps
its last `length` bytes, with a notice on stderr (--no-truncate refuses it). The server's
prefix cache computes only the positions it has not seen. Bytes are decoded as UTF-8 as they
arrive, an invalid sequence printed as U+FFFD.

A model whose vocabulary is not the 256 bytes needs its tokenizer, which the socket does not
carry: give --model with the served model's directory, and the text goes through the tokenizer
its model.json names (BOS, then the prompt's pieces; the output as it settles, --stop on the
decoded text), through the compiled lockstep module (lockstep.Tokenizer), so the text is again
`lockstep generate`'s. A model without a tokenizer takes token ids only: sample it with
`lockstep generate --prompt-ids` or the Python module's generate().

Standard library only for a byte model: runs with any python3 3.8 or newer, numpy or not.
"""

from __future__ import annotations

import argparse
import codecs
import os
import struct
import sys

try:
    from lockstep.client import Client, ServerError
    from lockstep import sampling
except ImportError:  # run from a checkout: python/ beside examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from lockstep.client import Client, ServerError
    from lockstep import sampling


def sample(client: Client, prompt: bytes, tokens: int, temperature: float, top_k: int, seed: int,
           out=sys.stdout, top_p: float = 1.0, stop: bytes = b"", truncate: bool = True,
           err=sys.stderr, tokenizer=None) -> bytes:
    """Prints the prompt and the bytes sampled after it; returns them all. Every check (the
    server's inputs and outputs, the options, the prompt) comes before anything is printed.
    `tokenizer`: the model's lockstep.Tokenizer, for a model whose vocabulary is not bytes (the
    text is then the prompt's and generated ids decoded together, returned as UTF-8)."""
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
    if vocab != 256 and tokenizer is None:
        raise SystemExit(f"sample.py: the served model's vocabulary has {vocab} ids, not the 256 bytes; its text "
                         "needs its tokenizer: give --model with the model's directory (it needs the compiled "
                         "lockstep module), or sample a model without a tokenizer with "
                         "`lockstep generate --prompt-ids`")
    if tokenizer is not None and len(tokenizer) != vocab:
        raise SystemExit(f"sample.py: the tokenizer holds {len(tokenizer)} ids but the served model's vocabulary "
                         f"has {vocab}: is --model the served model?")
    ids = list(prompt)
    if tokenizer is not None:
        ids = ([] if tokenizer.bos is None else [tokenizer.bos]) + tokenizer.encode(prompt)
    offset = 0
    for s in client.outputs:
        if s.name == "logits":
            break
        offset += s.nbytes
    try:
        sampling.validate(sampling.round_f32(temperature), top_k, sampling.round_f32(top_p), seed)
        if tokens < 0:
            raise ValueError(f"the token count must be >= 0, got {tokens}")
        context = sampling.GenerationContext(length, ids, truncate)
    except ValueError as e:
        raise SystemExit(f"sample.py: {e}")
    unit = "bytes" if tokenizer is None else "tokens"
    if context.dropped_prompt_tokens:
        err.write(f"sample.py: the prompt holds {len(ids)} {unit}, more than the {length}-{unit[:-1]} window; "
                  f"generating from its last {length} (--no-truncate refuses it instead)\n")

    def logits_of(ids):
        at = len(ids) - 1
        payload = struct.pack(f"<{length}i", *ids, *([0] * (length - len(ids)))) + struct.pack("<i", at)
        raw = client.call_raw(payload)  # with --at, each output holds position `at` alone
        return list(struct.unpack_from(f"<{vocab}f", raw, offset))

    if tokenizer is not None:
        # The text as it settles (lockstep.TextStream): a piece may finish a character only later.
        stream = tokenizer.stream(ids, stop=stop or None)
        out.write(stream.prompt_text)
        out.flush()
        for token in sampling.generate_tokens(logits_of, context, tokens, temperature, top_k, top_p, seed):
            out.write(stream.push(token))
            out.flush()
            if stream.stopped:
                break
        out.write(stream.finish() + "\n")
        out.flush()
        return (stream.prompt_text + stream.text).encode("utf-8")
    text = bytearray(prompt)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out.write(decoder.decode(bytes(text)))
    out.flush()
    for token in sampling.generate_tokens(logits_of, context, tokens, temperature, top_k, top_p, seed, stop):
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
    p.add_argument("--temperature", type=sampling.f32_from_text, default=0.8, help="0: greedy")
    p.add_argument("--top-k", type=int, default=40, help="draw among the k highest; 0: all")
    p.add_argument("--top-p", type=sampling.f32_from_text, default=1.0, help="draw among the highest holding this mass; 1: all")
    p.add_argument("--seed", type=int, default=0, help="seed of the draw (0 to 2^64 - 1)")
    p.add_argument("--stop", default="", help="stop once the sampled text ends with this")
    p.add_argument("--model", help="the served model's directory, for its tokenizer (a model whose vocabulary is "
                                   "not bytes; needs the compiled lockstep module)")
    p.add_argument("--no-truncate", action="store_true",
                   help="refuse a prompt longer than the window instead of keeping its end")
    a = p.parse_args(argv)
    tokenizer = None
    if a.model:
        try:
            from lockstep import Tokenizer
        except ImportError:
            print("sample.py: --model needs the compiled lockstep module (lockstep.Tokenizer): build it and put "
                  "<build>/python on PYTHONPATH", file=sys.stderr)
            return 1
        try:
            tokenizer = Tokenizer.for_model(a.model)
        except Exception as e:  # lockstep's errors: a missing, changed or unreadable tokenizer
            print(f"sample.py: {a.model}: {e}", file=sys.stderr)
            return 1
        if tokenizer is None:
            print(f"sample.py: {a.model} names no tokenizer: a byte model needs no --model, and any other "
                  "takes token ids only (lockstep generate --prompt-ids)", file=sys.stderr)
            return 1
    try:
        with Client(a.socket) as client:
            sample(client, a.prompt.encode("utf-8"), a.tokens, a.temperature, a.top_k, a.seed,
                   top_p=a.top_p, stop=a.stop.encode("utf-8"), truncate=not a.no_truncate, tokenizer=tokenizer)
    except ServerError as e:
        print(f"sample.py: the server refused a call: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"sample.py: {a.socket}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
