"""The texts the oracle test compares (over 1 MB): fortunes, the repository's sources, and
generated texts for what those lack: numbers and digit runs, whitespace runs, emoji and other
4-byte characters, CJK, combining marks (decomposed, so that NFC changes them), right-to-left
text, and special tokens' strings inside text. Deterministic: a seeded random.Random."""
import glob
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EMOJI = ["\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "\U0001F1EB\U0001F1F7",
         "\u2764\uFE0F", "\U0001F9D1\u200D\U0001F4BB", "\U0001D518\U0001D52B\U0001D526", "\U00020000\U0002A6D6"]
CJK = ["\u6211\u4eec\u7684\u6a21\u578b", "\u8bed\u8a00\u6a21\u578b\u5f88\u6709\u8da3\u3002",
       "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c", "\u30ab\u30bf\u30ab\u30ca\u3068\u6f22\u5b57",
       "\ud55c\uad6d\uc5b4 \ubb38\uc7a5", "\u5168\u89d2\uff21\uff22\uff23\uff11\uff12\uff13"]
COMBINING = ["e\u0301", "A\u030A", "n\u0303o", "\u1100\u1161\u11A8", "Vie\u0323\u0302t", "a\u0308\u0304",
             "\u0915\u094D\u0937", "Z\u0351\u036B\u0343\u036A"]
RTL = ["\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
       "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u0651\u064e\u0629",
       "\u200f\u05d0\u05d1\u05d2 123 \u05d3\u05d4\u05d5\u200e"]
SPACES = [" ", "  ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u0085", "\u2009", "   \t\n"]
WORDS = ["the", "The", "DON'T", "I'LL", "we've", "it's", "you'RE", "x'd", "'m", "foo_bar", "camelCase", "snake_case",
         "http://example.com/a?b=c", "<tag>", "{}", "();", "==", "->", "::", "...", "--", "!!", "?!", "\u00e9t\u00e9"]
SPECIAL = ["<|endoftext|>", "<|begin_of_text|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<think>", "</think>",
           "<mask>", "<repo_name>", "<|im_sta", "<|", "|>", "<|end_of_text|>x", "a<mask>b", "a <mask> b",
           "<sw>", "a<sw>b", " <sw> ", "_<sw>", "<sw>é", "x  <l>", "　<l>", "<r>  y", "<r>\n\nz", "<s>", "</s>",
           "a--b", "x.y.z", "1.5", "--"]


def fortunes(limit):
    out, size = [], 0
    for path in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if path.endswith(".dat") or os.path.isdir(path) or os.path.islink(path):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        for f in text.split("\n%\n"):
            if f.strip():
                out.append(f)
                size += len(f.encode())
                if size >= limit:
                    return out
    return out


def sources(limit, rng):
    out, size = [], 0
    files = sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.[ch]pp"), recursive=True) +
                   glob.glob(os.path.join(ROOT, "docs", "*.md")) + glob.glob(os.path.join(ROOT, "tools", "*.py")))
    for path in files:
        text = open(path, encoding="utf-8", errors="replace").read()
        at = 0
        while at < len(text) and size < limit:
            n = rng.randint(200, 4000)
            out.append(text[at:at + n])
            size += len(out[-1].encode())
            at += n
    return out


def generated(count, rng):
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 30)):
            kind = rng.randrange(9)
            if kind == 0:
                parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40))))
            elif kind == 1:
                parts.append(rng.choice(["3.14159", "1,000,000", "-42", "0x1F", "1e-9", "2026-12-03", "\u0663\u0664\u0665",
                                         "\u00bd", "\u2167", "\uff11\uff12"]))
            elif kind == 2:
                parts.append("".join(rng.choice(SPACES) for _ in range(rng.randint(1, 6))))
            elif kind == 3:
                parts.append(rng.choice(EMOJI))
            elif kind == 4:
                parts.append(rng.choice(CJK))
            elif kind == 5:
                parts.append(rng.choice(COMBINING))
            elif kind == 6:
                parts.append(rng.choice(RTL))
            elif kind == 7:
                parts.append(rng.choice(SPECIAL))
            else:
                parts.append(rng.choice(WORDS))
            if rng.random() < 0.6:
                parts.append(" ")
        out.append("".join(parts))
    # Edge cases, each alone.
    out += ["", " ", "  ", "\n", "a", " a", "\ufeff", "\ufeffhello", "a\u0085b", "\u00a0x", "x ", "x  ", "\U0010FFFF",
            "\u0378", "\U0001FAE8", "\U0001FAF8", "\u0000", "a\u0000b"] + SPECIAL + COMBINING
    return out


def training_text():
    rng = random.Random(7)
    return "\n".join(fortunes(300_000) + sources(150_000, rng) + generated(2000, rng))


def texts():
    rng = random.Random(2026)
    return fortunes(700_000) + sources(350_000, rng) + generated(6000, rng)
