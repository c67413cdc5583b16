#!/usr/bin/env python3
"""An independent NumPy float32 implementation of one AdamW + EMA step as docs/ARITHMETIC.md
defines it ("AdamW", "EMA", "Clipping"), checked bit for bit against lockstep's step.

usage: optimizer_numpy.py DIR STEP LR BETA1 BETA2 EPS WEIGHT_DECAY CLIP EMA_DECAY
DIR holds float32 files grad, p0, m0, v0, ema0 (before the step) and p1, m1, v1, ema1 (after).
"""
import math
import sys

import numpy as np

f32 = np.float32


def power_by_squaring(b, t):
    result = 1.0
    while t > 0:
        if t & 1:
            result = result * b
        b = b * b
        t >>= 1
    return result


def main():
    folder = sys.argv[1]
    t = int(sys.argv[2])
    lr, b1, b2, eps, wd, clip, ema_decay = (float(f32(float(v))) for v in sys.argv[3:10])
    load = lambda name: np.fromfile(f"{folder}/{name}", dtype="<f4")
    g, p, m, v = load("grad"), load("p0"), load("m0"), load("v0")

    # Clipping: block sums of exact f64 squares, each block in order, then the blocks in order.
    scale = f32(1.0)
    if clip > 0:
        squares = g.astype(np.float64) ** 2
        total = 0.0
        for begin in range(0, len(g), 8192):
            total = total + np.cumsum(squares[begin : begin + 8192])[-1]
        s = clip / (math.sqrt(total) + 1e-6)
        if s < 1.0:
            scale = f32(s)
            g = g * scale

    c1, c2 = f32(1.0 - b1), f32(1.0 - b2)
    step_size = f32(lr / (1.0 - power_by_squaring(b1, t)))
    inv_sqrt_bc2 = f32(1.0 / math.sqrt(1.0 - power_by_squaring(b2, t)))
    decay = f32(1.0 - lr * wd)
    m1 = f32(b1) * m + c1 * g
    v1 = f32(b2) * v + c2 * (g * g)
    denom = np.sqrt(v1) * inv_sqrt_bc2 + f32(eps)
    p1 = p * decay - step_size * (m1 / denom)

    ok = True
    for name, want in (("p1", p1), ("m1", m1), ("v1", v1)):
        got = load(name)
        if not np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32)):
            bad = np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0]
            print(f"{name}: {len(bad)} elements differ, first at {bad[0]}: {got[bad[0]]!r} vs {want[bad[0]]!r}")
            ok = False
    if ema_decay > 0:
        d = min(ema_decay, (1.0 + t) / (10.0 + t))
        ema1 = f32(d) * load("ema0") + f32(1.0 - d) * p1
        got = load("ema1")
        if not np.array_equal(got.view(np.uint32), ema1.view(np.uint32)):
            print("ema1 differs")
            ok = False
    print(f"step {t}: clip scale {float(scale):.6g}, {'equal' if ok else 'DIFFERENT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
