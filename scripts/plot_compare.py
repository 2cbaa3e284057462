#!/usr/bin/env python3
"""Plots a comparison written by `train compare` (its compare.json), one line per run:

  accuracy.png  test accuracy per epoch, and against wall time (training + evaluation)
  loss.png      test loss per epoch, and against wall time
  memory.png    peak allocated (solid) and reserved (dashed, CUDA) MiB per epoch

usage: plot_compare.py COMPARE_DIR
"""
import json
import sys
from itertools import accumulate

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from figure_file import save  # noqa: E402
import script_support  # noqa: E402
from script_support import number  # noqa: E402

MIB = 1 << 20


def label(run):
    # null: a key the run has not (a decision it did not make), "-" as in compare.md
    differing = ", ".join(f"{k.split('.')[-1]}={'-' if v is None else v}" for k, v in run["config"].items())
    return f"{run['name']}" + (f" ({differing})" if differing and len(differing) < 60 else "")


def curves(runs, column, ylabel, path, scale=1.0):
    fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        epochs = run["epochs"]
        x = [e["epoch"] for e in epochs]
        wall = list(accumulate(e["epoch_seconds"] + e["eval_seconds"] for e in epochs))
        y = [number(e[column]) * scale for e in epochs]
        by_epoch.plot(x, y, marker="o", label=label(run))
        by_time.plot(wall, y, marker="o", label=label(run))
    by_epoch.set_xlabel("epoch")
    by_time.set_xlabel("wall time (s, training + evaluation)")
    for ax in (by_epoch, by_time):
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    by_epoch.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=110)


def memory(runs, path):
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        epochs = run["epochs"]
        x = [e["epoch"] for e in epochs]
        line, = ax.plot(x, [e["peak_allocated_bytes"] / MIB for e in epochs], marker="o",
                        label=f"{label(run)} allocated")
        reserved = [e.get("peak_reserved_bytes") for e in epochs]
        if all(r is not None for r in reserved):
            ax.plot(x, [r / MIB for r in reserved], linestyle="--", color=line.get_color(),
                    label=f"{label(run)} reserved")
    ax.set_xlabel("epoch")
    ax.set_ylabel("peak MiB")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=110)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = script_support.path_argument("COMPARE_DIR", argv[1], "a comparison folder", kind="folder")
    try:
        runs = json.loads((out / "compare.json").read_text())["runs"]
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_compare: {out / 'compare.json'}: {e}", file=sys.stderr)
        return 2
    curves(runs, "test_acc", "test accuracy (%)", out / "accuracy.png", scale=100)
    curves(runs, "test_loss", "test loss", out / "loss.png")
    memory(runs, out / "memory.png")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("plot_compare", main, sys.argv))
