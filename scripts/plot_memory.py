#!/usr/bin/env python3
"""Plots a memory study written by `train memory`:

  memory_breakdown.png  one stacked bar per setting: what the step's peak is made of (weights,
                        optimizer state, batch, gradients, activations per stage, autocast's
                        weight copies, the peak phase's transient), with the measured peak marked
  memory_timeline.png   MiB held after every allocation and free over the measured step, one
                        panel per setting, with the phase marks (forward per stage, backward,
                        optimizer)

usage: plot_memory.py STUDY_DIR
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from figure_file import save  # noqa: E402
import script_support  # noqa: E402

MIB = 1 << 20

# Bar segments in drawing order: (label, predicate on a row, colour).
SEGMENTS = [
    ("weights", lambda r: r["name"].startswith("weights"), "#4c72b0"),
    ("optimizer state", lambda r: r["name"].startswith("optimizer state"), "#55a868"),
    ("batch + scaler", lambda r: r["name"].startswith(("batch", "GradScaler")), "#8c8c8c"),
    ("library workspaces", lambda r: r["name"] == "library workspaces", "#bcbd22"),
    ("gradients", lambda r: r["group"] == "gradients", "#c44e52"),
    ("activations: stem", lambda r: r["stage"] == "stem", "#fdd0a2"),
    ("activations: layer1", lambda r: r["stage"] == "layer1", "#fdae6b"),
    ("activations: layer2", lambda r: r["stage"] == "layer2", "#fd8d3c"),
    ("activations: layer3", lambda r: r["stage"] == "layer3", "#e6550d"),
    ("activations: layer4", lambda r: r["stage"] == "layer4", "#a63603"),
    ("activations: head", lambda r: r["stage"] == "head", "#7f2704"),
    ("autocast weight copies", lambda r: r["stage"] == "autocast", "#9467bd"),
    ("transient", lambda r: r["group"] == "transient", "#dddd88"),
]


def resized(study):
    """ at 224x224" where data.image_size resized the images, "" at CIFAR's stored 32."""
    size = study.get("image_size", 32)
    return f" at {size}x{size}" if size != 32 else ""


def breakdown_plot(study, path):
    settings = [s for s in study["settings"] if s["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.7 * len(settings)))
    for y, setting in enumerate(settings):
        left = 0.0
        for label, wanted, colour in SEGMENTS:
            mib = sum(r["bytes"] for r in setting["rows"] if r["at_peak"] and wanted(r)) / MIB
            if mib <= 0:
                continue  # a negative head (it frees the last block's output) is not drawn
            ax.barh(y, mib, left=left, color=colour, label=label if y == 0 else None,
                    edgecolor="white", linewidth=0.5)
            left += mib
        peak = setting["measured_peak_bytes"] / MIB
        ax.plot([peak, peak], [y - 0.45, y + 0.45], color="black", linewidth=2,
                label="measured peak" if y == 0 else None)
    ax.set_yticks(range(len(settings)))
    ax.set_yticklabels([f'{s["setting"]} ({s["peak_phase"]})' for s in settings])
    ax.invert_yaxis()
    ax.set_xlabel("MiB at the step's peak")
    ax.set_title(f'{study["arch"]} ({study["stem"]} stem){resized(study)}, batch {study["batch_size"]}, '
                 f'{study["device"]}: what the peak is made of')
    handles, labels = ax.get_legend_handles_labels()
    seen = {}
    for handle, label in zip(handles, labels):
        seen.setdefault(label, handle)
    ax.legend(seen.values(), seen.keys(), fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    save(fig, path, dpi=120)


def timeline_plot(study, timelines, path):
    panels = [t for t in timelines["settings"] if len(t["points"]) > 1]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.6 * len(panels)), squeeze=False,
                             sharey=True)
    for ax, timeline in zip(axes[:, 0], panels):
        events = [p[0] for p in timeline["points"]]
        mib = [p[1] / MIB for p in timeline["points"]]
        ax.plot(events, mib, linewidth=1)
        top = max(mib)
        for event, label in timeline["marks"]:
            ax.axvline(event, color="grey", linestyle="--", linewidth=0.6)
            ax.text(event, top, f" {label}", rotation=90, va="top", fontsize=7, color="dimgrey")
        ax.set_title(f'{timeline["setting"]}: {timeline["events"]} allocations and frees',
                     fontsize=9)
        ax.set_ylabel("MiB held")
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("allocation/free event")
    fig.suptitle(f'{study["arch"]} ({study["stem"]} stem){resized(study)}, batch {study["batch_size"]}, '
                 f'{study["device"]}: one training step')
    fig.tight_layout()
    save(fig, path, dpi=120)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = script_support.path_argument("STUDY_DIR", argv[1], "a memory study folder", kind="folder")
    try:
        study = json.loads((folder / "memory_breakdown.json").read_text())
        timelines = json.loads((folder / "memory_timeline.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"plot_memory: {folder}: {e}", file=sys.stderr)
        return 2
    if not any(s["status"] == "ok" for s in study["settings"]):
        print(f"plot_memory: {folder}: no setting was measured, nothing to plot", file=sys.stderr)
        return 2
    breakdown_plot(study, folder / "memory_breakdown.png")
    timeline_plot(study, timelines, folder / "memory_timeline.png")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("plot_memory", main, sys.argv))
