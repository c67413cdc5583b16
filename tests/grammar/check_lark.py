"""Parses generated texts with Debian's python3-lark, each with its grammar translated by hand
from llama.cpp's GBNF (lark/*.lark): an independent parser for the texts that lockstep's grammar
engine let through.

    /usr/bin/python3 check_lark.py ANSWERS.jsonl

ANSWERS.jsonl: one {"grammar" (json, arithmetic or list), "seed", "text", "finish"} a line. Prints
a line per grammar (answers, accepted, cut by max_tokens) and each failure; exits 1 on any
failure, or when fewer than 10 answers of a grammar were whole (these grammars bound no
repetition, so a sampled answer may run to max_tokens: those are counted, not parsed)."""
import collections
import json
import os
import sys

import lark

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    parsers = {}
    counts = collections.defaultdict(lambda: [0, 0, 0])
    failures = []
    for line in open(sys.argv[1], encoding="utf-8"):
        a = json.loads(line)
        name = a["grammar"]
        if name not in parsers:
            with open(os.path.join(HERE, "lark", name + ".lark"), encoding="utf-8") as f:
                parsers[name] = lark.Lark(f.read(), parser="earley", lexer="dynamic_complete")
        counts[name][0] += 1
        if a["finish"] == "length":
            counts[name][2] += 1
            continue
        try:
            parsers[name].parse(a["text"])
            counts[name][1] += 1
        except lark.exceptions.LarkError as e:
            failures.append(f"{name} seed {a['seed']}: {a['text']!r}: {str(e)[:200]}")
    for name, (n, ok, cut) in sorted(counts.items()):
        print(f"{name}: {n} answers, {ok} accepted by lark, {cut} cut by max_tokens")
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures or any(c[1] < 10 for c in counts.values()) else 0)


if __name__ == "__main__":
    main()
