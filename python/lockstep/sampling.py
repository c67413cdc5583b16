"""lockstep's sampler and generation policy in pure Python (standard library only), with the
bits of the C++ ones (src/model/sampling.cpp, src/model/generator.cpp, src/core/rng.cpp).

A client that gets logits from ``lockstep serve`` (examples/sample.py) chooses with this module
the same tokens ``lockstep generate`` and ``LanguageModelInference.generate()`` choose with the
same options: docs/ARITHMETIC.md, "Sampling" and "Generation past the window".

Every f32 operation is emulated exactly. Python's floats are IEEE binary64; for one add,
subtract, multiply or divide of two f32 values, the binary64 result rounded to f32 is the
correctly rounded f32 result (53 >= 2 * 24 + 2, so the double rounding is innocuous). A fused
multiply-add is not one such operation: its exact value is rebuilt as a binary64 sum and its
error (TwoSum) and rounded once (``fma_f32``).
"""

from __future__ import annotations

import math
import re
import struct
from fractions import Fraction

__all__ = [
    "round_f32", "f32_from_text", "fma_f32", "exp_f32", "philox4x32", "random_open01", "greedy_choice",
    "validate", "sample_token", "kept_on_restart", "GenerationContext", "generate_tokens",
]

_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_INF = math.inf
# Between the largest f32 (0x1.fffffep+127) and 2^128: from here on, round to nearest even gives
# infinity (the largest f32's last bit is odd).
_OVERFLOW = float.fromhex("0x1.ffffffp+127")


def round_f32(x: float) -> float:
    """x rounded to the nearest float32, ties to even (as a Python float)."""
    if x != x:
        return x
    if abs(x) >= _OVERFLOW:
        return math.copysign(_INF, x)
    return _F32.unpack(_F32.pack(x))[0]


_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_SPECIAL = re.compile(r"[+-]?(inf|infinity|nan)", re.IGNORECASE)


def f32_from_text(text: str) -> float:
    """A decimal's text rounded once to the nearest f32, as `lockstep generate` reads
    --temperature and --top-p (std::from_chars). Parsing to binary64 first and rounding that
    could round twice (1.0000000596046447753914720329472543003390683225006796419620513916015625
    would give 1, not 1 + 2^-23). ValueError for anything else, or a value outside f32's range."""
    if _SPECIAL.fullmatch(text):
        return float(text)
    if not _DECIMAL.fullmatch(text):
        raise ValueError(f"'{text}' is not a number")
    q = Fraction(text[1:] if text.startswith("+") else text)
    if q == 0:
        return math.copysign(0.0, -1.0 if text.startswith("-") else 1.0)
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()  # 2^e <= q < 2^(e + 1)
    if Fraction(2) ** e > q:
        e -= 1
    ulp = Fraction(2) ** (max(e, -126) - 23)
    m = q / ulp
    whole, rest = divmod(m.numerator, m.denominator)
    if 2 * rest > m.denominator or (2 * rest == m.denominator and whole % 2 == 1):
        whole += 1
    value = whole * ulp
    if whole == 0 or value >= 2 ** 128:
        raise ValueError(f"{text} is out of the f32 range")
    return sign * float(value)


def _bits(x: float) -> int:
    return _U32.unpack(_F32.pack(x))[0]


def _from_bits(u: int) -> float:
    return _F32.unpack(_U32.pack(u))[0]


def _next_f32(r: float, toward: float) -> float:
    """The f32 after r in the direction of `toward` (r an f32, r != toward)."""
    if r == 0.0:
        return math.copysign(float.fromhex("0x1p-149"), toward)
    u = _bits(r)
    return _from_bits(u + 1 if (toward > r) == (r > 0.0) else u - 1)


def _value(x: float) -> float:
    """x, with an infinity read as +-2^128 (the value round to nearest compares against)."""
    return math.copysign(2.0 ** 128, x) if math.isinf(x) else x


def fma_f32(a: float, b: float, c: float) -> float:
    """a * b + c on f32 values, rounded once to f32 (std::fma on floats)."""
    p = a * b  # exact: 48 significant bits at most, far inside binary64's range
    s = p + c
    if not math.isfinite(s) or not math.isfinite(p) or not math.isfinite(c):
        return round_f32(s)
    # TwoSum: p + c == s + e exactly.
    bp = s - p
    e = (p - (s - bp)) + (c - bp)
    r = round_f32(s)
    if e == 0.0 or r == s:
        return r  # s is the exact value, or an f32 (then the tiny e cannot move the rounding)
    # s + e rounds like s unless s is exactly halfway between two f32 values (every such
    # midpoint is a binary64 value, so the exact value cannot cross one that s does not sit on).
    n = _next_f32(r, s)
    if s * 2.0 != _value(r) + _value(n):
        return r
    return r if (e > 0.0) == (_value(r) > s) else n


def _add(a, b):
    return round_f32(a + b)


def _sub(a, b):
    return round_f32(a - b)


def _mul(a, b):
    return round_f32(a * b)


def _div(a, b):
    if b == 0.0:  # Python raises where IEEE gives inf or NaN
        if a != a or a == 0.0:
            return math.nan
        return math.copysign(_INF, a) * math.copysign(1.0, b)
    return round_f32(a / b)


# The constants of src/kernels/ref/math.hpp, as their exact f32 values.
_LOG2E = float.fromhex("0x1.715476p+0")
_ROUND_MAGIC = float.fromhex("0x1.8p+23")
_LN2_HI = float.fromhex("0x1.63p-1")
_LN2_LO = float.fromhex("-0x1.bd0106p-13")
_EXP_UPPER = 89.0
_EXP_LOWER = -104.0
_EXP_P = [float.fromhex(h) for h in ("0x1.a0d2cep-13", "0x1.6e879cp-10", "0x1.11121p-7", "0x1.555382p-5",
                                     "0x1.555554p-3", "0x1p-1")]


def exp_f32(x: float) -> float:
    """e^x of an f32 with the arithmetic profile's exp (docs/ARITHMETIC.md, "Elementary functions")."""
    if x != x:
        return x
    if x > _EXP_UPPER:
        return _INF
    if x < _EXP_LOWER:
        return 0.0
    n = _sub(_add(_mul(x, _LOG2E), _ROUND_MAGIC), _ROUND_MAGIC)
    r = fma_f32(n, -_LN2_HI, x)
    r = fma_f32(n, -_LN2_LO, r)
    z = _mul(r, r)
    p = _EXP_P[0]
    for coefficient in _EXP_P[1:]:
        p = fma_f32(p, r, coefficient)
    p = fma_f32(p, z, r)
    p = _add(p, 1.0)
    ni = int(n)
    a = ni >> 1  # floor(n / 2)
    return _mul(_mul(p, 2.0 ** a), 2.0 ** (ni - a))


_M32 = 0xFFFFFFFF


def philox4x32(counter, key):
    """Ten rounds of Philox4x32 (src/core/rng.cpp): four 32-bit words from four, keyed by two."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for round_ in range(10):
        if round_ > 0:
            k0 = (k0 + 0x9E3779B9) & _M32
            k1 = (k1 + 0xBB67AE85) & _M32
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & _M32, (p0 >> 32) ^ c3 ^ k1, p0 & _M32
    return c0, c1, c2, c3


def random_open01(seed: int, stream: int, index: int) -> float:
    """Uniform in (0, 1) from 53 random bits of (seed, stream, index), never 0 or 1."""
    b = philox4x32((index & _M32, (index >> 32) & _M32, stream & _M32, (stream >> 32) & _M32),
                   (seed & _M32, (seed >> 32) & _M32))
    bits = ((b[1] << 32) | b[0]) >> 11
    return (float(bits) + 0.5) * 2.0 ** -53


_SAMPLING_STREAM = 0x73616D70  # "samp"


def greedy_choice(logits) -> int:
    """The highest logit's id, ties to the lowest, NaN never chosen."""
    best = -1
    for i, v in enumerate(logits):
        if v != v:
            continue
        if best < 0 or v > logits[best]:
            best = i
    if best < 0:
        raise ValueError("every logit is NaN; no token can be chosen")
    return best


def validate(temperature: float, top_k: int, top_p: float, seed: int = 0) -> None:
    """Raises ValueError for options the C++ SamplingOptions::validate() refuses."""
    if not (math.isfinite(temperature) and temperature >= 0.0):
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top-k must be >= 0 (0: off), got {top_k}")
    if not (0.0 < top_p <= 1.0):
        raise ValueError(f"top-p must be in (0, 1] (1: off), got {top_p}")
    if not 0 <= seed < 2 ** 64:
        raise ValueError(f"the seed must be in [0, 2^64), got {seed}")


def sample_token(logits, step: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                 seed: int = 0, trace: list | None = None) -> int:
    """The token lockstep's sampler chooses from `logits` (float32 values) at generation step
    `step`. temperature and top_p are rounded to float32 first, as the C++ options hold them.
    Where `trace` is a list, it receives (candidates, weights, total, target) as the C++
    SampleTrace holds them (nothing at temperature 0)."""
    temperature = round_f32(float(temperature))
    top_p = round_f32(float(top_p))
    validate(temperature, top_k, top_p, seed)
    if temperature == 0.0:
        return greedy_choice(logits)
    z = [round_f32(float(v)) for v in logits]
    order = [i for i, v in enumerate(z) if v == v]
    if not order:
        raise ValueError("every logit is NaN; no token can be chosen")
    order.sort(key=lambda i: -z[i])  # stable: ties keep the lower id first
    if 0 < top_k < len(order):
        del order[top_k:]
    top = z[order[0]]
    weights = []
    total = 0.0
    for i in order:
        w = exp_f32(_div(0.0 if z[i] == top else _sub(z[i], top), temperature))
        weights.append(w)
        total = total + w
    if top_p < 1.0:
        keep = top_p * total
        mass = 0.0
        n = 0
        while n < len(order) and mass < keep:
            mass = mass + weights[n]
            n += 1
        del order[n:], weights[n:]
        total = mass
    target = random_open01(seed, _SAMPLING_STREAM, step) * total
    if trace is not None:
        trace[:] = [list(order), list(weights), total, target]
    acc = 0.0
    last = 0
    for k, w in enumerate(weights):
        acc = acc + w
        if target < acc:
            return order[k]
        if w > 0.0:
            last = k
    return order[last]


def kept_on_restart(window: int) -> int:
    """How many tokens a full window keeps when a token must go past it: half, rounded up."""
    if window < 1:
        raise ValueError(f"the window must hold at least one token, got {window}")
    return window - window // 2


class GenerationContext:
    """The tokens the next logits are computed from, at positions 0, 1, ... (the C++
    GenerationContext, include/lockstep/generator.hpp)."""

    def __init__(self, window: int, prompt, truncate: bool = True):
        kept_on_restart(window)
        prompt = list(prompt)
        if not prompt:
            raise ValueError("the prompt is empty; generation needs at least one token")
        self.window = window
        self.dropped_prompt_tokens = 0
        if len(prompt) > window:
            if not truncate:
                raise ValueError(f"the prompt holds {len(prompt)} tokens; the window is {window} "
                                 f"(allow truncation to keep its last {window})")
            self.dropped_prompt_tokens = len(prompt) - window
            prompt = prompt[-window:]
        self.tokens = prompt

    def push(self, token: int) -> bool:
        """Appends a generated token; True when the context restarted from position 0."""
        if len(self.tokens) < self.window:
            self.tokens.append(token)
            return False
        keep = kept_on_restart(self.window)
        self.tokens = self.tokens[len(self.tokens) - (keep - 1):] + [token]
        return True


def generate_tokens(logits_of, context: GenerationContext, max_tokens: int, temperature: float = 0.0,
                    top_k: int = 0, top_p: float = 1.0, seed: int = 0, stop: bytes = b""):
    """Yields the tokens the C++ Generator gives: `logits_of(tokens)` returns the logits after the
    last of `tokens` (a full pass over them from position 0; a server with a prefix cache computes
    only the positions it has not seen)."""
    validate(round_f32(float(temperature)), top_k, round_f32(float(top_p)), seed)
    if max_tokens < 0:
        raise ValueError(f"the token count must be >= 0, got {max_tokens}")
    tail = b""
    token = None
    for step in range(max_tokens):
        if token is not None:
            context.push(token)
        token = sample_token(logits_of(context.tokens), step, temperature, top_k, top_p, seed)
        yield token
        if stop:
            tail = (tail + bytes([token & 0xFF]))[-len(stop):]
            if tail == stop:
                return
