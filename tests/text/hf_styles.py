"""Byte-level BPE tokenizer.json files in the styles of real models, trained here on text the
machine has (the fortunes package, the repository's sources), so that no vocabulary is committed:
GPT-2 (ByteLevel with its regex), Llama 3 (Split with its regex, ignore_merges, a Sequence
post-processor adding <|begin_of_text|>), SmolLM (Digits + ByteLevel) and Qwen2 (NFC + its Split
regex), and `mixed`, no model's: the split behaviors, invert, String patterns, contiguous digits,
add_prefix_space, single_word/lstrip/rstrip added tokens, a template around the text and a
Sequence decoder. The trainer is a plain BPE on a rough split of the text: its merges need only be valid
(each pair's join in the vocabulary), not the merges Hugging Face's trainer would pick."""
import collections
import re

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
STYLES = ("gpt2", "llama3", "smollm", "qwen2", "mixed")


def byte_chars():
    """GPT-2's bytes_to_unicode()."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train(text, merges_wanted=1500, words_kept=12000):
    """(vocab, merges): the 256 byte characters, then one token per merge."""
    table = byte_chars()
    rough = re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+\n*|\s*\n+|\s+(?!\S)|\s+", text)
    counts = collections.Counter("".join(table[b] for b in w.encode()) for w in rough)
    words = [(list(w), c) for w, c in counts.most_common(words_kept)]
    vocab = {table[b]: i for i, b in enumerate(range(256))}
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, (w, c) in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[a, b] += c
            where[a, b].add(i)
    merges = []
    while len(merges) < merges_wanted and pairs:
        (a, b), n = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if n < 2:
            break
        merges.append((a, b))
        vocab.setdefault(a + b, len(vocab))
        for i in list(where[a, b]):
            w, c = words[i]
            for x, y in zip(w, w[1:]):
                pairs[x, y] -= c
                if pairs[x, y] <= 0:
                    del pairs[x, y]
            out, k = [], 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == a and w[k + 1] == b:
                    out.append(a + b)
                    k += 2
                else:
                    out.append(w[k])
                    k += 1
            words[i] = (out, c)
            for x, y in zip(out, out[1:]):
                pairs[x, y] += c
                where[x, y].add(i)
        pairs.pop((a, b), None)
    return vocab, merges


def added(first, names, special=True, **flags):
    out = []
    for name in names:
        out.append({"id": first + len(out), "content": name, "single_word": flags.get("single_word", False),
                    "lstrip": flags.get("lstrip", False), "rstrip": flags.get("rstrip", False),
                    "normalized": flags.get("normalized", not special), "special": special})
    return out


def byte_level(add_prefix_space=False, use_regex=True):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def style(name, vocab, merges):
    """The tokenizer.json (a dict) of one style."""
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": dict(vocab), "merges": [a + " " + b for a, b in merges]}
    doc = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None,
           "post_processor": byte_level(), "decoder": byte_level()}
    if name == "gpt2":
        tokens = added(len(vocab), ["<|endoftext|>"]) + added(len(vocab) + 1, ["<mask>"], lstrip=True, rstrip=True)
        doc["pre_tokenizer"] = byte_level()
    elif name == "llama3":
        model["ignore_merges"] = True
        model["merges"] = [[a, b] for a, b in merges]  # the newer pair form
        tokens = added(len(vocab), ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                               "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"])
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
            byte_level(use_regex=False)]}
        bot = tokens[0]["id"]
        doc["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bot],
                                                      "tokens": ["<|begin_of_text|>"]}}}]}
    elif name == "smollm":
        tokens = added(len(vocab), ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>"])
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True}, byte_level()]}
    elif name == "qwen2":
        tokens = added(len(vocab), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        tokens += added(len(vocab) + 3, ["<think>", "</think>"], special=False)
        doc["normalizer"] = {"type": "NFC"}
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
            byte_level(use_regex=False)]}
        doc["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                                 "use_regex": False}
    elif name == "mixed":
        def split(pattern, behavior, invert=False):
            return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}
        tokens = added(len(vocab), ["<s>", "</s>"]) + added(len(vocab) + 2, ["<sw>"], special=False, single_word=True)
        tokens += added(len(vocab) + 3, ["<l>"], special=False, lstrip=True)
        tokens += added(len(vocab) + 4, ["<r>"], special=False, rstrip=True, normalized=False)
        doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            split({"String": "."}, "MergedWithPrevious"), split({"Regex": r"\s+"}, "MergedWithNext"),
            split({"Regex": "[aeiou]"}, "Contiguous", invert=True), split({"String": "--"}, "Removed"),
            {"type": "Digits", "individual_digits": False}, byte_level(add_prefix_space=True)]}
        doc["post_processor"] = {"type": "TemplateProcessing",
                                 "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                            {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                                 "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                                 "special_tokens": {
                                     "<s>": {"id": "<s>", "ids": [tokens[0]["id"]], "tokens": ["<s>"]},
                                     "</s>": {"id": "</s>", "ids": [tokens[1]["id"]], "tokens": ["</s>"]}}}
        doc["decoder"] = {"type": "Sequence", "decoders": [byte_level()]}
    else:
        raise ValueError(name)
    doc["added_tokens"] = tokens
    doc["model"] = model
    return doc
