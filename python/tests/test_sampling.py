"""The standard-library sampler (python/lockstep/sampling.py) against the C++ one
(lockstep._lockstep.sample_token with trace=True): the same token, candidates, f32 weights, f64
total and target, bit for bit, on thousands of logit vectors and options; its fma against an
exact rational computation; its Philox against the published known answers."""

import math
import random
import struct
from fractions import Fraction

import pytest

from lockstep import sampling as twin


def f32_bits(x):
    return struct.pack("<f", x)


def f64_bits(x):
    return struct.pack("<d", x)


def exact_f32(q: Fraction) -> float:
    """q rounded to the nearest f32, ties to even, by integer arithmetic alone."""
    if q == 0:
        return 0.0
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    ulp = Fraction(2) ** (max(e, -126) - 23)
    m = q / ulp
    whole = m.numerator // m.denominator
    rest = m - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    v = whole * ulp
    return sign * (math.inf if v >= Fraction(2) ** 128 else float(v))


def random_f32(rng):
    k = rng.random()
    if k < 0.3:
        return twin.round_f32(rng.uniform(-2.0, 2.0))
    if k < 0.6:  # any finite bit pattern, subnormals included
        u = rng.getrandbits(32)
        while (u >> 23) & 0xFF == 0xFF:
            u = rng.getrandbits(32)
        return struct.unpack("<f", struct.pack("<I", u))[0]
    return twin.round_f32(rng.uniform(-1.0, 1.0) * 2.0 ** rng.randint(-60, 60))


def test_fma_rounds_once():
    # Rounding the binary64 sum to f32 would give 1 + 2^-22 here (the sum lands on a midpoint).
    a, b, c = (1 + 2 ** -23) * 2 ** -24, 1 - 2 ** -23, 1 + 2 ** -23
    assert twin.round_f32(a * b + c) == 1 + 2 ** -22
    assert twin.fma_f32(a, b, c) == 1 + 2 ** -23
    assert twin.fma_f32(-a, b, -c) == -(1 + 2 ** -23)
    rng = random.Random(7)
    for _ in range(20000):
        a, b, c = random_f32(rng), random_f32(rng), random_f32(rng)
        if rng.random() < 0.4:  # near cancellation and near midpoints
            c = twin.round_f32(-(a * b) * (1 + rng.choice([0, 2 ** -24, -(2 ** -24), 2 ** -30])))
        if not math.isfinite(c):
            continue
        want = exact_f32(Fraction(a) * Fraction(b) + Fraction(c))
        got = twin.fma_f32(a, b, c)
        assert got == want and (got != 0 or math.copysign(1, got) == math.copysign(1, a * b + c)), (a, b, c)


def test_philox_known_answers():
    # Salmon et al.'s known-answer vectors for Philox4x32-10.
    assert twin.philox4x32((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert twin.philox4x32((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)
    assert twin.philox4x32((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)) == (
        0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)


def logit_vector(rng, case):
    """Logits of many kinds: plain, heavy ties, infinities, NaN, huge and tiny spreads."""
    n = rng.choice([1, 2, 3, 5, 17, 40, 64, 256, 300]) if case % 7 else 256
    kind = case % 9
    if kind == 0:
        v = [rng.gauss(0.0, 3.0) for _ in range(n)]
    elif kind == 1:  # ties: a few distinct values
        levels = [rng.gauss(0.0, 2.0) for _ in range(3)]
        v = [rng.choice(levels) for _ in range(n)]
    elif kind == 2:  # infinities and NaN sprinkled in
        v = [rng.choice([math.inf, -math.inf, math.nan, rng.gauss(0, 1), 0.0, -0.0]) for _ in range(n)]
    elif kind == 3:  # huge values near the f32 limit
        v = [rng.choice([1, -1]) * rng.uniform(0.5, 1.0) * 3.4e38 for _ in range(n)]
    elif kind == 4:  # a spread over all of exp's range (subnormal and zero weights)
        v = [rng.uniform(-120.0, 0.0) for _ in range(n)]
    elif kind == 5:  # tiny differences
        base = rng.gauss(0, 10)
        v = [base + rng.randint(-50, 50) * 2.0 ** -20 for _ in range(n)]
    elif kind == 6:  # all -inf, or all equal
        v = [rng.choice([-math.inf, 1.5])] * n
    elif kind == 7:  # arbitrary finite bit patterns
        v = [random_f32(rng) for _ in range(n)]
    else:  # model-like: a few high, a long tail
        v = [rng.gauss(-8.0, 4.0) for _ in range(n)]
        for _ in range(min(n, 3)):
            v[rng.randrange(n)] = rng.uniform(0.0, 6.0)
    return [twin.round_f32(x) for x in v]


def options(rng):
    temperature = rng.choice([0.0, 1e-45, 1e-30, 1e-3, 0.1, 0.5, 0.8, 1.0, 1.3, 7.0, 1e30, rng.uniform(0.01, 3.0)])
    top_k = rng.choice([0, 0, 1, 2, 10, 40, 255, 256, 1000, rng.randint(0, 300)])
    top_p = rng.choice([1.0, 1.0, 1e-7, float.fromhex("0x1p-149"), 0.3, 0.9, 0.95, 0.999999, rng.uniform(0.0, 1.0) or 1.0])
    seed = rng.choice([0, 1, 2 ** 64 - 1, rng.getrandbits(64)])
    step = rng.choice([0, 1, 199, 2 ** 32 - 1, 2 ** 32, rng.getrandbits(40)])
    return temperature, top_k, top_p, seed, step


def test_the_twin_draws_what_the_library_draws(extension):
    np = pytest.importorskip("numpy")
    rng = random.Random(2024)
    cases = 0
    for case in range(3000):
        logits = logit_vector(rng, case)
        temperature, top_k, top_p, seed, step = options(rng)
        if all(math.isnan(v) for v in logits):
            continue
        array = np.array(logits, dtype=np.float32)
        token, candidates, weights, total, target = extension._lockstep.sample_token(
            array, step, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, trace=True)
        trace = []
        got = twin.sample_token(logits, step, temperature, top_k, top_p, seed, trace=trace)
        where = f"case {case}: T={temperature} k={top_k} p={top_p} seed={seed} step={step}"
        assert got == token, where
        if twin.round_f32(temperature) == 0.0:
            assert trace == [] and candidates == []
        else:
            assert trace[0] == candidates, where
            assert [f32_bits(w) for w in trace[1]] == [f32_bits(float(w)) for w in weights], where
            assert f64_bits(trace[2]) == f64_bits(total), where
            assert f64_bits(trace[3]) == f64_bits(target), where
        assert extension._lockstep.sample_token(array, step, temperature=temperature, top_k=top_k, top_p=top_p,
                                                 seed=seed) == token
        cases += 1
    assert cases > 2500


def test_the_twin_refuses_what_the_library_refuses(extension):
    for bad in (dict(temperature=-1.0), dict(temperature=math.inf), dict(top_k=-1), dict(top_p=0.0),
                dict(top_p=1.5)):
        with pytest.raises(ValueError):
            extension._lockstep.sample_token([0.0, 1.0], 0, **bad)
        with pytest.raises(ValueError):
            twin.sample_token([0.0, 1.0], 0, **bad)
    with pytest.raises(ValueError):
        twin.sample_token([math.nan], 0, temperature=1.0)
    with pytest.raises(ValueError):
        extension._lockstep.sample_token([math.nan], 0, temperature=1.0)


def test_the_window_policy():
    assert [twin.kept_on_restart(w) for w in (1, 2, 7, 24, 128)] == [1, 1, 4, 12, 64]
    c = twin.GenerationContext(7, [1, 2, 3, 4, 5])
    assert [c.push(t) for t in (6, 7, 8, 9)] == [False, False, True, False]
    assert c.tokens == [5, 6, 7, 8, 9]
    long = twin.GenerationContext(4, range(10))
    assert long.tokens == [6, 7, 8, 9] and long.dropped_prompt_tokens == 6
    with pytest.raises(ValueError, match="the window is 4"):
        twin.GenerationContext(4, range(10), truncate=False)
