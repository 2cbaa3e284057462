#!/usr/bin/env python3
"""Plots a sweep directory written by `train sweep`:

  peak_memory.png   peak reserved memory (MiB) against batch size, one line per setting, the
                    fitted line dashed, out-of-memory batches as crosses on the limit line
  throughput.png    images/s against batch size, one line per setting

usage: plot_sweep.py SWEEP_DIR
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from figure_file import save  # noqa: E402
import script_support  # noqa: E402

MIB = 1 << 20


def setting(row):
    value = row["checkpointing"]  # false, true, or "auto"
    ckpt = "ckpt auto" if value == "auto" else "ckpt on" if value else "ckpt off"
    return f'{row["precision"]} / {ckpt} / {row["memory_format"]}'


def finish(fig, ax, ylabel, title, path):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=120)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = script_support.path_argument("SWEEP_DIR", argv[1], "a sweep folder", kind="folder")
    try:
        sweep = json.loads((folder / "sweep.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"plot_sweep: {folder / 'sweep.json'}: {e}", file=sys.stderr)
        return 2
    if not sweep.get("trials"):
        print(f"plot_sweep: {folder / 'sweep.json'}: no trial finished (the sweep stopped before its "
              "first), nothing to plot", file=sys.stderr)
        return 2
    if not any(t.get("status") == "ok" for t in sweep["trials"]):
        print(f"plot_sweep: {folder / 'sweep.json'}: no trial measured a step (every one ran out of "
              "memory, failed or timed out: sweep.md says which), nothing to plot", file=sys.stderr)
        return 2
    limit_mib = sweep["memory_limit_bytes"] / MIB
    size = sweep.get("image_size", 32)
    resized = f" at {size}x{size}" if size != 32 else ""
    title = f'{sweep["arch"]} ({sweep["stem"]} stem){resized} on {sweep["device"]}'

    fig, ax = plt.subplots(figsize=(8, 5))
    for cell in sweep["cells"]:
        name = setting(cell)
        rows = sorted((t for t in sweep["trials"] if setting(t) == name), key=lambda t: t["batch_size"])
        ok = [t for t in rows if t["status"] == "ok"]
        oom = [t for t in rows if t["status"] == "oom"]
        line, = ax.plot([t["batch_size"] for t in ok], [t["peak_reserved_bytes"] / MIB for t in ok],
                        "o-", label=name)
        if oom:
            ax.plot([t["batch_size"] for t in oom], [limit_mib] * len(oom), "x", color=line.get_color(),
                    markersize=9)
        fit = cell.get("fit")
        if fit and rows:
            # A straight line in batch, drawn over the measured range (curved on the log axis).
            low, high = rows[0]["batch_size"], rows[-1]["batch_size"]
            xs = [low * (high / low) ** (i / 99) for i in range(100)]
            ax.plot(xs, [(fit["intercept_bytes"] + fit["bytes_per_sample"] * x) / MIB for x in xs], "--",
                    color=line.get_color(), alpha=0.5)
    ax.plot([], [], "kx", markersize=9, label="out of memory (drawn at the limit)")
    ax.plot([], [], "k--", alpha=0.5, label="fit: peak = a + b x batch")
    label = "memory.limit" if sweep["limit_is_emulated"] else "device memory"
    ax.axhline(limit_mib, color="red", linewidth=1, label=f"{label} ({limit_mib:.0f} MiB)")
    finish(fig, ax, "peak reserved memory (MiB)", f"Peak memory per batch size: {title}", folder / "peak_memory.png")

    fig, ax = plt.subplots(figsize=(8, 5))
    for cell in sweep["cells"]:
        name = setting(cell)
        ok = sorted((t for t in sweep["trials"] if setting(t) == name and t["status"] == "ok"),
                    key=lambda t: t["batch_size"])
        ax.plot([t["batch_size"] for t in ok], [t["images_per_second"] for t in ok], "o-", label=name)
    finish(fig, ax, "images / s (median step)", f"Training throughput per batch size: {title}", folder / "throughput.png")
    print(f"wrote {folder / 'peak_memory.png'} and {folder / 'throughput.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("plot_sweep", main, sys.argv))
