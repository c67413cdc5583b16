"""Writes a byte-level BPE tokenizer.json (SmolLM's style, tests/text/hf_styles.py) trained on
the fortunes package's text, for the structured-output tests' random-weight BPE model; prints its
vocabulary size and the id of <|endoftext|>.

    /usr/bin/python3 make_bpe_tokenizer.py OUT.json"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "text"))
import hf_corpus  # noqa: E402
import hf_styles  # noqa: E402

text = "\n".join(hf_corpus.fortunes(120_000))
vocab, merges = hf_styles.train(text, merges_wanted=1200)
doc = hf_styles.style("smollm", vocab, merges)
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False)
ids = {t["content"]: t["id"] for t in doc["added_tokens"]}
print(max(max(doc["model"]["vocab"].values()), max(ids.values())) + 1, ids["<|endoftext|>"])
