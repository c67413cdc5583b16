#!/usr/bin/python3
"""Draw the loss curve of a training run from its metrics.jsonl (docs/TRAINING.md).

    /usr/bin/python3 tools/plot_loss.py RUN_DIR/metrics.jsonl -o loss.png

Plots the training loss of every step (faint), its moving average, and the held-out loss at the
evaluation steps, all in bits per byte, against the step. Needs matplotlib (Debian:
python3-matplotlib); it draws without a display.
"""

import argparse
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path):
    steps, train, held_steps, held = [], [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
                step, loss = int(row["step"]), float(row["loss"])
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}:{number}: not a metrics line ({e})")
            steps.append(step)
            train.append(loss / math.log(2))
            if "held_out_loss" in row:
                held_steps.append(step)
                held.append(float(row["held_out_loss"]) / math.log(2))
    if not steps:
        raise SystemExit(f"{path}: no metrics lines")
    return steps, train, held_steps, held


def moving_average(values, width):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= width:
            total -= values[i - width]
        out.append(total / min(i + 1, width))
    return out


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("metrics", help="a run's metrics.jsonl")
    parser.add_argument("-o", "--output", default="loss.png", help="the PNG to write (default loss.png)")
    parser.add_argument("--title", help="the plot's title (default: the metrics file's path)")
    args = parser.parse_args(argv)

    steps, train, held_steps, held = read_metrics(args.metrics)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    ax.plot(steps, train, color="tab:blue", alpha=0.25, linewidth=0.8, label="training batch")
    width = max(1, len(steps) // 50)
    ax.plot(steps, moving_average(train, width), color="tab:blue", linewidth=1.5,
            label=f"training, mean of {width} steps")
    if held:
        ax.plot(held_steps, held, "o-", color="tab:orange", linewidth=1.5, markersize=3, label="held-out")
        ax.annotate(f"{held[-1]:.3f}", (held_steps[-1], held[-1]), textcoords="offset points",
                    xytext=(-10, 8), color="tab:orange")
    ax.axhline(8.0, color="gray", linestyle=":", linewidth=1, label="8 bits/byte (uniform)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (bits per byte)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title(args.title or args.metrics)
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"wrote {args.output}: {len(steps)} steps, {len(held)} evaluations"
          + (f", last held-out {held[-1]:.3f} bits/byte" if held else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
