"""Checks sampled structured answers against their schemas with an independent validator:
Debian's python3-jsonschema (Draft 2020-12, with its format checker) and, for the formats it has
no checker for here (date-time, time), RFC 3339 regexes of this file's own.

    /usr/bin/python3 validate_answers.py SCHEMAS.json ANSWERS.jsonl

ANSWERS.jsonl: one {"model", "schema" (a name in SCHEMAS.json), "seed", "text", "finish"} a line.
An answer whose finish is "length" (cut by max_tokens) is counted and reported, not validated.
Prints one line per model and schema (answers, valid, cut) and every failure; exits 1 when an
answer that was not cut fails to parse or validate, or any answer was cut."""
import collections
import json
import re
import sys

import jsonschema

TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
DATE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
FORMATS = {"time": re.compile("^" + TIME + "$"), "date-time": re.compile("^" + DATE + "[Tt]" + TIME + "$")}


def checker():
    c = jsonschema.FormatChecker()
    for name, pattern in FORMATS.items():
        c.checks(name)(lambda value, p=pattern: not isinstance(value, str) or bool(p.match(value)))
    return c


def main():
    schemas = {s["name"]: s["schema"] for s in json.load(open(sys.argv[1], encoding="utf-8"))}
    fc = checker()
    counts = collections.defaultdict(lambda: [0, 0, 0])
    examples = collections.defaultdict(list)
    failures = []
    for line in open(sys.argv[2], encoding="utf-8"):
        a = json.loads(line)
        key = (a["model"], a["schema"])
        counts[key][0] += 1
        if len(examples[key]) < 2:
            examples[key].append(a["text"])
        if a["finish"] == "length":
            counts[key][2] += 1
            continue
        try:
            value = json.loads(a["text"])
            jsonschema.Draft202012Validator(schemas[a["schema"]], format_checker=fc).validate(value)
            counts[key][1] += 1
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failures.append(f"{a['model']} {a['schema']} seed {a['seed']}: {a['text']!r}: {type(e).__name__}: {str(e)[:200]}")
    for (model, schema), (n, ok, cut) in sorted(counts.items()):
        print(f"{model} {schema}: {n} answers, {ok} valid, {cut} cut by max_tokens; e.g. "
              + " ".join(json.dumps(t, ensure_ascii=False) for t in examples[(model, schema)]))
    for f in failures:
        print("FAIL", f)
    cut = sum(c[2] for c in counts.values())
    sys.exit(1 if failures or cut else 0)


if __name__ == "__main__":
    main()
