#!/usr/bin/env python3
"""CPU-vs-GPU comparison: the same config, the same bounded amount of work, on each device.

  scripts/compare_devices.py --config configs/quick_cpu.yaml [--steps 50 | --epochs 1]
      [--train-limit 5000] [--threads 2] [--devices cpu,cuda] [--out DIR] [--set key=value ...]

Runs `train` once per device (training.max_steps or training.epochs bounds the work,
data.train_limit the subset, training.threads the CPU threads), then writes into DIR:

  compare.md     the table of `train compare` over the devices' runs (what differs in their
                 configs, accuracy, time per epoch, images/s and its ratio to the CPU, memory
                 peaks, waiting for data), under a header naming the work and the command; a
                 device that did not run is listed below it
  compare.json   per device: threads, steps, time, step time, images/s, speedup over the CPU,
                 the phases' peak memory, waiting for data, and its run directory
  compare.png    images/s per device, bar chart
  runs/          `train compare`'s own files (compare.md, compare.json, accuracy.png, loss.png,
                 memory.png) when two or more devices ran
  <device>/      each device's run directory

A device that is not available (cuda on a machine without a GPU) is marked "not available" and
the script still exits 0.
"""
import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_device(args, device, out):
    run_dir = out / device.replace(":", "-")
    command = [args.train, "--config", args.config, "--device", device, "--output-dir", str(run_dir),
               "--set", "checkpoint.enabled=false"]
    if args.steps:
        command += ["--set", f"training.max_steps={args.steps}"]
    if args.epochs:
        command += ["--set", f"training.epochs={args.epochs}"]
    if args.train_limit:
        command += ["--set", f"data.train_limit={args.train_limit}"]
    if args.threads:
        command += ["--set", f"training.threads={args.threads}"]
    for override in args.set:
        command += ["--set", override]
    print("$", " ".join(command), flush=True)
    started = time.time()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.time() - started
    entry = {"device": device, "command": command, "run_dir": str(run_dir), "exit_code": proc.returncode}
    if proc.returncode != 0:
        error = [line for line in proc.stderr.splitlines() if "[error]" in line]
        message = error[-1].split("] ", 2)[-1] if error else proc.stderr.strip().splitlines()[-1:]
        entry["available"] = False
        entry["note"] = ("not available: no CUDA device on this machine" if device.startswith("cuda")
                         and "no CUDA device" in str(message) else f"failed: {message}")
        return entry
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    log = (run_dir / "train.log").read_text()
    threads = re.search(r"device \S+ \((\d+) threads\)", log)
    seconds = sum(r["epoch_seconds"] for r in rows)
    images = sum(r["images_per_second"] * r["epoch_seconds"] for r in rows)
    steps = rows[-1]["step"]
    entry.update({
        "available": True,
        "threads": int(threads.group(1)) if threads else None,
        "steps": steps,
        "train_seconds": seconds,
        "step_seconds": seconds / steps if steps else None,
        "images_per_second": images / seconds if seconds else None,
        # The training phase's peaks: what training needs (evaluation has its own batch size).
        "train_peak_allocated_bytes": max(r.get("train_peak_allocated_bytes") or 0 for r in rows),
        "train_peak_reserved_bytes": max(r.get("train_peak_reserved_bytes") or 0 for r in rows),
        "eval_peak_allocated_bytes": max(r.get("eval_peak_allocated_bytes") or 0 for r in rows),
        "data_wait_fraction": sum(r.get("data_seconds", 0) for r in rows) / seconds if seconds else None,
        "test_acc": rows[-1]["test_acc"],
        "wall_seconds": wall,
    })
    return entry


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument("--train", default=str(REPO / "build" / "train"))
    parser.add_argument("--steps", type=int, help="optimizer steps per device (training.max_steps)")
    parser.add_argument("--epochs", type=int, help="epochs per device (training.epochs)")
    parser.add_argument("--train-limit", type=int, help="training images (data.train_limit)")
    parser.add_argument("--threads", type=int, help="CPU intra-op threads (training.threads)")
    parser.add_argument("--devices", default="cpu,cuda")
    parser.add_argument("--set", action="append", default=[], help="more config overrides")
    parser.add_argument("--out", default=f"runs/compare-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args(argv)
    if not args.steps and not args.epochs:
        parser.error("give --steps or --epochs: the amount of work must be bounded")
    out = Path(args.out)
    if (out / "compare.json").exists():
        print(f"compare_devices: {out}: already holds a comparison", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)

    entries = [run_device(args, device, out) for device in args.devices.split(",")]
    cpu = next((e for e in entries if e["device"] == "cpu" and e["available"]), None)
    for e in entries:
        e["speedup_over_cpu"] = (e["images_per_second"] / cpu["images_per_second"]
                                 if e["available"] and cpu and cpu["images_per_second"] else None)

    lines = [f"# CPU vs GPU: `{args.config}`", "",
             f"Work per device: {f'{args.steps} steps' if args.steps else f'{args.epochs} epoch(s)'}"
             f"{f', {args.train_limit} training images' if args.train_limit else ''}"
             f"{f', {args.threads} CPU threads' if args.threads else ''}. Command: "
             f"`scripts/compare_devices.py {' '.join(argv if argv is not None else sys.argv[1:])}`", ""]
    ran = [e for e in entries if e["available"]]
    if len(ran) >= 2:
        # The table is `train compare`'s: one column per device's run.
        subprocess.run([args.train, "compare", *[e["run_dir"] for e in ran], "--output", str(out / "runs")],
                       check=True, stdout=subprocess.DEVNULL)
        table = (out / "runs" / "compare.md").read_text()
        lines += table[table.index("|"):].rstrip("\n").split("\n")
    else:
        lines += [f"Only {', '.join(e['device'] for e in ran) or 'no device'} ran: nothing to compare."]
    lines += [f"- {e['device']}: {e['note']}" for e in entries if not e["available"]]
    (out / "compare.md").write_text("\n".join(lines) + "\n")
    (out / "compare.json").write_text(json.dumps({"config": args.config, "entries": entries}, indent=2) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 4))
    names = [e["device"] for e in entries]
    values = [e["images_per_second"] if e["available"] else 0 for e in entries]
    bars = ax.bar(names, values, color=["tab:blue" if e["available"] else "lightgray" for e in entries])
    for bar, e in zip(bars, entries):
        ax.annotate(f"{e['images_per_second']:.0f}" if e["available"] else "not available",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
    ax.set_ylabel("training images / s")
    ax.set_title(f"CPU vs GPU: {Path(args.config).name}")
    fig.tight_layout()
    fig.savefig(out / "compare.png", dpi=110)
    print("\n".join(lines))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
