#!/usr/bin/env python3
"""Plots a run directory written by `train`:

  loss_accuracy.png  train/test loss and accuracy per epoch
  throughput.png     training images/s per epoch
  memory.png         allocator peaks per epoch, and device memory sampled over time
                     (NVML used on a GPU, process RSS on the CPU) from gpu.jsonl

usage: plot_run.py RUN_DIR
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

import script_support  # noqa: E402
from figure_file import save  # noqa: E402
from script_support import number, read_jsonl  # noqa: E402

MIB = 1 << 20


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    run = script_support.path_argument("RUN_DIR", argv[1], "a run folder", kind="folder")
    rows = read_jsonl(run / "metrics.jsonl")
    if not rows:
        print(f"plot_run: {run / 'metrics.jsonl'}: no epochs", file=sys.stderr)
        return 2
    epochs = [r["epoch"] for r in rows]

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4))
    loss_ax.plot(epochs, [number(r["train_loss"]) for r in rows], "o-", label="train")
    loss_ax.plot(epochs, [number(r["test_loss"]) for r in rows], "o-", label="test")
    loss_ax.set_xlabel("epoch"), loss_ax.set_ylabel("cross-entropy"), loss_ax.set_title("Loss")
    acc_ax.plot(epochs, [100 * number(r["train_acc"]) for r in rows], "o-", label="train (augmented)")
    acc_ax.plot(epochs, [100 * number(r["test_acc"]) for r in rows], "o-", label="test")
    acc_ax.set_xlabel("epoch"), acc_ax.set_ylabel("top-1 (%)"), acc_ax.set_title("Accuracy")
    for ax in (loss_ax, acc_ax):
        ax.grid(True, alpha=0.3), ax.legend(), ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout(), save(fig, run / "loss_accuracy.png", dpi=110)

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(epochs, [r["images_per_second"] for r in rows], color="tab:blue", label="images/s")
    if all("data_wait_fraction" in r for r in rows):
        twin = ax.twinx()
        twin.plot(epochs, [100 * r["data_wait_fraction"] for r in rows], "o-", color="tab:red")
        twin.set_ylabel("waiting for data (% of epoch)", color="tab:red")
        twin.set_ylim(0, 100)
    ax.set_xlabel("epoch"), ax.set_ylabel("training images / s"), ax.set_title("Throughput per epoch")
    ax.grid(True, axis="y", alpha=0.3), ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout(), save(fig, run / "throughput.png", dpi=110)

    samples = read_jsonl(run / "gpu.jsonl")
    fig, (epoch_ax, time_ax) = plt.subplots(1, 2, figsize=(11, 4))
    # Each phase's own peak: training (what the study changes) and evaluation (its own batch size).
    for phase, style in (("train", "o-"), ("eval", "s-")):
        name = "training" if phase == "train" else "evaluation"
        epoch_ax.plot(epochs, [(r.get(f"{phase}_peak_allocated_bytes") or 0) / MIB for r in rows], style,
                      label=f"{name} peak allocated")
        if any(r.get(f"{phase}_peak_reserved_bytes") for r in rows):
            epoch_ax.plot(epochs, [(r.get(f"{phase}_peak_reserved_bytes") or 0) / MIB for r in rows],
                          style, alpha=0.5, label=f"{name} peak reserved")
    if any(r.get("memory_used_max_bytes") for r in rows):
        label = "device used (NVML)" if rows[-1].get("device", "cpu").startswith("cuda") else "process RSS"
        epoch_ax.plot(epochs, [(r.get("memory_used_max_bytes") or 0) / MIB for r in rows], "o--", label=f"max {label}")
    epoch_ax.set_xlabel("epoch"), epoch_ax.set_ylabel("MiB"), epoch_ax.set_title("Memory per epoch")
    epoch_ax.grid(True, alpha=0.3), epoch_ax.legend(fontsize=8)
    epoch_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    used = [(s["time"], s["memory_used_bytes"]) for s in samples if s.get("memory_used_bytes") is not None]
    if used:
        start = used[0][0]
        time_ax.plot([t - start for t, _ in used], [b / MIB for _, b in used], "-")
        label = "GPU memory used (NVML)" if samples[0]["device"].startswith("cuda") else "process RSS"
        time_ax.set_title(f"{label}, sampled")
    else:
        time_ax.set_title("no samples (monitor.sample_period: 0)")
    time_ax.set_xlabel("seconds since start"), time_ax.set_ylabel("MiB"), time_ax.grid(True, alpha=0.3)
    fig.tight_layout(), save(fig, run / "memory.png", dpi=110)
    print(f"wrote loss_accuracy.png, throughput.png, memory.png in {run}")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("plot_run", main, sys.argv))
