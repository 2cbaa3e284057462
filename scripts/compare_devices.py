#!/usr/bin/env python3
"""CPU vs GPU, as the seed means it: one training epoch on each device, side by side.

  scripts/compare_devices.py [--config configs/resnet50_cifar10.yaml] [--tables seed,study,fastest]
      [--cpu-steps 30] [--gpu-steps N | --gpu-epochs 1] [--devices cpu,cuda] [--threads N]
      [--fastest-precisions fp32,bf16] [--trial-timeout 300] [--batch-size N]
      [--card NAME ...] [--out DIR] [--set key=value ...]

Three tables, each a `train compare` of one run per device:

  seed     the seed's settings: the config with ResNet-50, the torchvision (ImageNet) stem, 1000
           classes, batch 32, fp32, contiguous -- each device at the same settings
  study    the config as written, each device at the same settings
  fastest  each device at its own fastest precision and memory format, measured first by a short
           `train sweep` over fp32/bf16 (--fastest-precisions) x contiguous/channels_last at the
           config's batch size (trials that fail or time out, --trial-timeout, are left out); the
           table's "fastest setting" row says which won

--card NAME (repeatable) adds a predicted column per card beside the measured ones: the table's
setting (the fastest table: the card's own fastest of --fastest-precisions x both layouts) at
its batch, predicted by `train memory --card NAME --card-only` (no GPU needed): images/s and the
step by the speed model (estimated, training/cards/speed_model.h), the epoch's time at the CPU
run's steps per epoch, the reserved and allocated peaks by the allocator's replay. Rows it does
not predict (accuracy, utilisation) are "-". A card given by its size has no speed: its cells
say so.

Each device trains with `train`: the GPU one whole epoch (--gpu-epochs, or --gpu-steps steps),
the CPU --cpu-steps steps, its epoch time projected from its steady steps and marked so. Steps
beyond an epoch (a small data set) are trained over as many epochs as they take; the header says,
per table and device, the steps and epochs that were trained. Images/s are steady: each
process's first warm-up steps (cuDNN's autotuning, first allocations; `train`'s
Trainer::kWarmupSteps) are listed apart, never averaged in. Memory peaks and the mean utilisation
come from the runs' own records (the allocator, the sampler). Evaluation runs on data.test_limit
512 images unless --set says otherwise: accuracy is not what this compares.

Writes into DIR (default runs/compare-<date>-<time>):
  compare.md     the tables, under a header naming the work and the command; a device that did
                 not run is listed under its table
  compare.json   per table and device: the settings, the command, the exit code, the steps and
                 epochs trained, and the run's totals from `train compare` (steady images/s,
                 warm-up, epoch time and whether it is projected, peaks, utilisation) with the
                 speed-up over the CPU; `cards` per table with --card: each card's prediction
                 and its speed-up over the measured CPU (speedup_over_cpu, null without either)
  <table>/<device>/   each run; <table>/compare/ `train compare`'s files; fastest/sweep-<device>/;
                 <table>/card-<NAME>/ the card's `train memory` prediction

Exit codes: 0 when at least one device ran in every table; 2 for bad arguments (a config that is
missing, empty or a folder, steps that leave no steady step, an --out that is not empty) or when
no device ran (a device that is not available -- cuda on a machine without a GPU -- is listed, not
an error while another device ran).
"""
import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import script_support

REPO = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 5  # the trainer's warm-up (training/loop/trainer.h, Trainer::kWarmupSteps)
MIN_STEADY_STEPS = 10
PRECISIONS = ("fp32", "bf16", "fp16")  # training.precision's values
MAX_BATCH = 1 << 20  # training.batch_size's largest (kMaxBatchSize, training/config/config.h)
SEED_SETTINGS = ["model.arch=resnet50", "model.stem=imagenet", "model.num_classes=1000", "training.batch_size=32",
                 "training.precision=fp32", "training.memory_format=contiguous"]
TABLE_TITLES = {
    "seed": "The seed's settings (ResNet-50, torchvision stem, 1000 classes, batch 32, fp32), each device the same",
    "study": "The study config as written, each device the same",
    "fastest": "Each device at its own fastest precision and memory format (measured by train sweep)",
}


def fail(message):
    print(f"compare_devices: {message}", file=sys.stderr)
    sys.exit(2)


last_error = script_support.last_error


def work_flags(args, device):
    """training.max_steps / epochs for `device`: whole epochs on a GPU, steps on the CPU. Steps
    are trained over as many epochs as they take (each epoch has at least one step)."""
    steps = args.cpu_steps if device == "cpu" else args.gpu_steps
    if steps:
        return ["--set", f"training.max_steps={steps}", "--set", f"training.epochs={steps}"]
    return ["--set", f"training.epochs={args.gpu_epochs}"]


def trained(run_dir):
    """The steps and epochs a run trained, from its metrics.jsonl."""
    rows = script_support.read_jsonl(Path(run_dir) / "metrics.jsonl")
    return rows and {"steps": rows[-1]["step"], "epochs": len(rows), "steps_per_epoch": rows[0].get("epoch_batches")}


def trained_text(entry):
    """'cpu 15 steps in 2 epochs of 8 steps', 'cuda 8 steps (1 epoch)', 'cpu 30 of an epoch's 1563 steps'."""
    work = entry["trained"]
    if not work:
        return f"{entry['device']} (no epoch recorded)"
    steps, epochs, per_epoch = work["steps"], work["epochs"], work["steps_per_epoch"]
    if epochs > 1:
        return f"{entry['device']} {steps} steps in {epochs} epochs of {per_epoch} steps"
    if per_epoch and steps < per_epoch:
        return f"{entry['device']} {steps} of an epoch's {per_epoch} steps"
    return f"{entry['device']} {steps} steps (1 epoch)"


def train_device(args, device, run_dir, overrides):
    command = [args.train, "--config", args.config, "--device", device, "--output-dir", str(run_dir),
               "--set", "checkpoint.enabled=false", "--set", "data.test_limit=512", *work_flags(args, device)]
    if args.threads:
        command += ["--set", f"training.threads={args.threads}"]
    for override in [*overrides, *args.set]:
        command += ["--set", override]
    print("$", " ".join(command), flush=True)
    proc = subprocess.run(command, capture_output=True, text=True)
    entry = {"device": device, "settings": overrides, "command": command, "run_dir": str(run_dir),
             "exit_code": proc.returncode, "available": proc.returncode == 0}
    if proc.returncode != 0:
        message = last_error(proc)
        entry["note"] = ("not available: no CUDA device on this machine"
                         if device.startswith("cuda") and "no CUDA device" in message else f"failed: {message}")
    return entry


def config_value(args, section, key):
    """A key of the effective config (`train --print-config` with the --set overrides)."""
    command = [args.train, "--config", args.config, "--print-config"]
    for override in args.set:
        command += ["--set", override]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"--config: {args.config}: {last_error(proc)}")
    current = None
    for line in proc.stdout.splitlines():
        if line and not line.startswith(" "):
            current = line.rstrip(":")
        elif current == section and line.strip().startswith(f"{key}:"):
            return line.split(":", 1)[1].strip()
    fail(f"{section}.{key}: not in the effective config of {args.config}")


def fastest_settings(args, device, sweep_dir):
    """The fastest precision x memory format on `device` (a short train sweep), as overrides."""
    command = [args.train, "sweep", "--config", args.config, "--device", device, "--output-dir", str(sweep_dir),
               "--precisions", args.fastest_precisions, "--memory-formats", "contiguous,channels_last",
               "--warmup-steps", "2", "--measure-steps", "3", "--set", f"sweep.trial_timeout={args.trial_timeout}"]
    command += ["--batch-sizes", str(args.batch_size or config_value(args, "training", "batch_size"))]
    if args.threads:
        command += ["--set", f"training.threads={args.threads}"]
    for override in args.set:
        command += ["--set", override]
    print("$", " ".join(command), flush=True)
    proc = subprocess.run(command, capture_output=True, text=True)
    sweep = sweep_dir / "sweep.json"
    if not sweep.exists():
        return None, f"failed: {last_error(proc)}"
    cells = [c for c in json.loads(sweep.read_text())["cells"] if c.get("fastest_batch")]
    if not cells:
        return None, "failed: no setting trained in the sweep"
    best = max(cells, key=lambda c: c["fastest_images_per_second"])
    return [f"training.precision={best['precision']}", f"training.memory_format={best['memory_format']}"], None


def effective_setting(args, overrides):
    """(precision, memory format, batch) of the config with `overrides` (a card's auto layout is channels_last)."""
    values = dict(o.split("=", 1) for o in [*args.set, *overrides])
    precision = values.get("training.precision") or config_value(args, "training", "precision")
    layout = values.get("training.memory_format") or config_value(args, "training", "memory_format")
    batch = values.get("training.batch_size") or config_value(args, "training", "batch_size")
    return precision, "channels_last" if layout in ("", "auto", "null", "~") else layout, int(batch)


def check_cards(args):
    """Each --card a card `train cards` finds (by name, as every --card finds it, or a size), once
    each; args.card becomes the cards' names as train gives them (H100-SXM for "h100 sxm"). Before
    any run."""
    if not args.card:
        return
    try:
        cards = script_support.train_cards(args.train, args.card)
    except script_support.BadInput as e:
        fail(str(e))
    repeat = script_support.first_repeat([script_support.card_key(c) for c in cards])
    if repeat:
        fail(f"--card: {', '.join(args.card)}: {repeat}")
    args.card = [c["name"] for c in cards]


def predict_card(args, card, table_dir, overrides, fastest):
    """The table's setting predicted on `card` (`train memory --card-only`): the best predicted setting."""
    precision, layout, batch = effective_setting(args, overrides)
    if fastest:
        batch = args.batch_size or batch
        labels = [p if f == "contiguous" else f"{p}+channels_last"
                  for p in args.fastest_precisions.split(",") for f in ("contiguous", "channels_last")]
    else:
        labels = [precision if layout == "contiguous" else f"{precision}+channels_last"]
    out = table_dir / f"card-{card}"
    command = [args.train, "memory", "--config", args.config, "--card", card, "--card-only", "--settings",
               ",".join(labels), "--batch-size", str(batch), "--output-dir", str(out)]
    for override in [*overrides, *args.set]:
        if not override.startswith(("training.precision=", "training.memory_format=", "training.batch_size=")):
            command += ["--set", override]
    print("$", " ".join(command), flush=True)
    proc = subprocess.run(command, capture_output=True, text=True)
    breakdown = out / "memory_breakdown.json"
    if proc.returncode != 0 or not breakdown.exists():
        return {"card": card, "note": f"failed: {last_error(proc)}"}
    settings = json.loads(breakdown.read_text())["settings"]
    rated = [s for s in settings if s.get("predicted_images_per_second")]
    if not rated:
        return {"card": card, "setting": settings[0], "batch": batch,
                "note": settings[0].get("speed_not_estimated") or settings[0].get("card_prediction_error", "no speed")}
    return {"card": card, "setting": max(rated, key=lambda s: s["predicted_images_per_second"]), "batch": batch}


def card_speedup(prediction, cpu):
    """The card's predicted steady images/s over the measured CPU's; None without either."""
    rate = (prediction.get("setting") or {}).get("predicted_images_per_second")
    cpu_rate = cpu and cpu.get("totals", {}).get("steady_images_per_second")
    return rate / cpu_rate if rate and cpu_rate else None


def card_cells(prediction, cpu):
    """The card's cell for each row label of `train compare`'s table."""
    s = prediction.get("setting") or {}
    rate = s.get("predicted_images_per_second")
    per_epoch = cpu and cpu.get("trained") and cpu["trained"].get("steps_per_epoch")
    speedup = card_speedup(prediction, cpu)
    mib = lambda key: f"{s[key] / 2**20:.1f}" if s.get(key) is not None else "-"
    return {
        "device": f"{prediction['card']} (estimated)",
        "images/s, steady": f"{rate:.1f} (estimated)" if rate else prediction.get("note", "-"),
        "time per epoch": (f"{per_epoch * s['predicted_step_seconds']:.1f} s (estimated)"
                           if rate and per_epoch else "-"),
        "peak allocated (MiB)": mib("predicted_allocated_peak_bytes"),
        "peak reserved (MiB)": mib("predicted_reserved_peak_bytes"),
        "steady images/s vs the CPU": f"{speedup:.2f}x (estimated)" if speedup else "-",
        "fastest setting (train sweep)": (f"{s.get('precision', '-')}, {s.get('memory_format', '-')} "
                                          "(by the speed model)") if rate else "-",
    }


def card_note(prediction, table_dir):
    """The line under a table that says where a card's column comes from."""
    card, setting = prediction["card"], prediction.get("setting") or {}
    where = f"`train memory --card {card} --card-only`, {table_dir.name}/card-{card}/memory_breakdown.md"
    if setting.get("predicted_images_per_second"):
        return (f"- {card}: predicted ({where}), not measured: speed estimated by the speed model, "
                f"{setting.get('speed_bound')}; peaks by the caching allocator's replay")
    return f"- {card}: predicted ({where}), not measured: peaks by the caching allocator's replay; {prediction.get('note')}"


def with_card_columns(rows, predictions, cpu):
    """`rows` (a markdown table) with one more column per card prediction."""
    out = []
    for i, row in enumerate(rows):
        label = row.strip("|").split("|")[0].strip()
        if i == 0:
            cells = [f"{p['card']} (predicted)" for p in predictions]
        elif i == 1:
            cells = ["---:" for _ in predictions]
        else:
            cells = [card_cells(p, cpu).get(label, "-") for p in predictions]
        out.append(row + "".join(f" {c} |" for c in cells))
    return out


def compare_table(args, table_dir, entries):
    """`train compare` over the runs that finished; its table, and its totals into the entries. The
    speed-up row where the CPU ran beside another device, or beside a predicted card (--card)."""
    ran = [e for e in entries if e["available"]]
    output = table_dir / "compare"
    proc = subprocess.run([args.train, "compare", *[e["run_dir"] for e in ran], "--output", str(output)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"train compare of {table_dir} failed: {last_error(proc)}")
    runs = json.loads((output / "compare.json").read_text())["runs"]
    for entry, run in zip(ran, runs):
        entry["totals"] = run["totals"]
    cpu = next((e for e in ran if e["device"] == "cpu"), None)
    cpu_rate = cpu["totals"]["steady_images_per_second"] if cpu else None
    for entry in ran:
        rate = entry["totals"]["steady_images_per_second"]
        entry["speedup_over_cpu"] = rate / cpu_rate if rate and cpu_rate else None
    table = (output / "compare.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("|")]
    if any(e.get("fastest") for e in ran):
        rows.append("| fastest setting (train sweep) | " + " | ".join(
            ", ".join(s.split("=", 1)[1] for s in e["settings"]) for e in ran) + " |")
    if cpu_rate and (len(ran) > 1 or args.card):
        rows.append("| steady images/s vs the CPU | " + " | ".join(
            f"{e['speedup_over_cpu']:.2f}x" if e["speedup_over_cpu"] else "-" for e in ran) + " |")
    return rows


def parse_args(argv):
    parser = script_support.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "configs" / "resnet50_cifar10.yaml"))
    parser.add_argument("--train", default=str(REPO / "build" / "train"))
    parser.add_argument("--tables", default="seed,study,fastest")
    parser.add_argument("--cpu-steps", type=int, default=30, help="CPU steps (its epoch time is projected)")
    parser.add_argument("--gpu-steps", type=int, help="GPU steps instead of whole epochs (projected too)")
    parser.add_argument("--gpu-epochs", type=int, default=1, help="GPU whole epochs (default 1)")
    parser.add_argument("--batch-size", type=int, help="the fastest table's sweep batch (default: the config's)")
    parser.add_argument("--trial-timeout", type=int, default=300, help="seconds per fastest-setting trial")
    parser.add_argument("--fastest-precisions", default="fp32,bf16",
                        help="the precisions the fastest table's sweep tries (fp32 alone skips bf16 on a "
                             "CPU without native bf16, where it is ~300x slower)")
    parser.add_argument("--threads", type=int, help="CPU intra-op threads (training.threads)")
    parser.add_argument("--devices", default="cpu,cuda")
    parser.add_argument("--set", action="append", default=[], help="more config overrides, for every run")
    parser.add_argument("--card", action="append", default=[],
                        help="also a predicted column for this card (a name: `train cards`), no GPU needed")
    parser.add_argument("--out", default=f"runs/compare-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args(argv)
    script_support.path_argument("--config", args.config, "a config file (YAML)")
    script_support.path_argument("--train", args.train, "the train binary (build it: scripts/setup.sh)")
    script_support.path_argument("--out", args.out, "a folder for the comparison", kind="folder", must_exist=False)
    for flag, value in (("--cpu-steps", args.cpu_steps), ("--gpu-steps", args.gpu_steps)):
        if value is not None and value < WARMUP_STEPS + MIN_STEADY_STEPS:
            fail(f"{flag}: {value}: expected at least {WARMUP_STEPS + MIN_STEADY_STEPS} "
                 f"({WARMUP_STEPS} warm-up steps and {MIN_STEADY_STEPS} steady ones to measure)")
    for flag, value in (("--gpu-epochs", args.gpu_epochs), ("--batch-size", args.batch_size),
                        ("--trial-timeout", args.trial_timeout), ("--threads", args.threads)):
        if value is not None and value < 1:
            fail(f"{flag}: {value}: expected a positive number")
    try:
        args.tables = script_support.items("--tables", args.tables)
        args.devices = script_support.items("--devices", args.devices)
        args.fastest_precisions = ",".join(
            script_support.items("--fastest-precisions", args.fastest_precisions))
    except script_support.BadInput as e:
        fail(str(e))
    unknown = [t for t in args.tables if t not in TABLE_TITLES]
    if unknown:
        fail(f"--tables: {','.join(unknown)}: expected some of seed,study,fastest")
    # train's device grammar (training/platform/device.h): an index is a number, so cuda:01 is
    # cuda:1, and cuda is cuda:0 (one GPU measured twice otherwise).
    grammar = [re.fullmatch(r"cpu|cuda(?::0*([0-9]{1,4}))?", d) for d in args.devices]
    if not all(grammar):
        fail(f"--devices: expected cpu and/or cuda[:N], comma-separated")
    args.devices = [d if d == "cpu" or ":" not in d else "cuda:%d" % int(m.group(1))
                    for d, m in zip(args.devices, grammar)]
    same_device = ["cpu" if d == "cpu" else "cuda:%d" % int(m.group(1) or 0)
                   for d, m in zip(args.devices, grammar)]
    if repeat := script_support.first_repeat(same_device):
        spelled_apart = len(set(args.devices)) == len(args.devices)
        fail(f"--devices: {','.join(args.devices)}: {repeat}" + (" (cuda is cuda:0)" if spelled_apart else ""))
    precisions = args.fastest_precisions.split(",")
    if any(p not in PRECISIONS for p in precisions):
        fail(f"--fastest-precisions: {args.fastest_precisions}: expected some of {','.join(PRECISIONS)}")
    if args.batch_size is not None and args.batch_size > MAX_BATCH:
        fail(f"--batch-size: {args.batch_size}: expected at most {MAX_BATCH} (training.batch_size's largest)")
    for flag, items in (("--tables", args.tables),
                        ("--fastest-precisions", precisions)):
        if repeat := script_support.first_repeat(items):  # the same run folder or trial twice
            fail(f"{flag}: {','.join(items)}: {repeat}")
    return args


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out)
    if (out / "compare.json").exists():
        fail(f"--out: {out}: already holds a comparison")
    if out.exists() and any(out.iterdir()):
        # compare.json is written last: without it, runs of a comparison that was stopped, which
        # `train` would refuse to train into again.
        fail(f"--out: {out}: not empty (a comparison stopped before its end?); give another folder")
    check_cards(args)
    out.mkdir(parents=True, exist_ok=True)

    lines = []
    result = {"config": args.config, "tables": {}}
    any_table_ran = True
    for name in args.tables:
        table_dir = out / name
        entries = []
        for device in args.devices:
            overrides = SEED_SETTINGS if name == "seed" else []
            note = None
            if name == "fastest":
                overrides, note = fastest_settings(args, device, table_dir / f"sweep-{device.replace(':', '-')}")
            if note:
                entries.append({"device": device, "available": False, "note": note, "settings": None})
                continue
            entry = train_device(args, device, table_dir / device.replace(":", "-"), overrides)
            entry["fastest"] = name == "fastest"
            if entry["available"]:
                entry["trained"] = trained(entry["run_dir"])
            entries.append(entry)
        lines += [f"## {TABLE_TITLES[name]}", ""]
        predictions = [predict_card(args, card, table_dir, SEED_SETTINGS if name == "seed" else [],
                                    name == "fastest") for card in args.card]
        if any(e["available"] for e in entries):
            rows = compare_table(args, table_dir, entries)
            cpu = next((e for e in entries if e["device"] == "cpu" and e["available"]), None)
            for p in predictions:
                p["speedup_over_cpu"] = card_speedup(p, cpu)
            lines += with_card_columns(rows, predictions, cpu) if predictions else rows
            lines += [""] + [card_note(p, table_dir) for p in predictions]
        else:
            any_table_ran = False
            lines.append("No device ran.")
        lines += [""] + [f"- {e['device']}: {e['note']}" for e in entries if not e["available"]]
        lines.append("")
        result["tables"][name] = entries
        if predictions:
            result.setdefault("cards", {})[name] = predictions
    gpu_work = f"{args.gpu_steps} steps" if args.gpu_steps else f"{args.gpu_epochs} whole epoch(s)"
    work = "; ".join(f"{name}: " + ", ".join(trained_text(e) for e in entries if e["available"])
                     for name, entries in result["tables"].items() if any(e["available"] for e in entries))
    lines = [f"# CPU vs GPU: `{args.config}`", "",
             f"Work per device: the CPU {args.cpu_steps} steps (its epoch time projected from the steps after "
             f"the warm-up when they are less than an epoch), a GPU {gpu_work}; steps beyond an epoch are "
             f"trained over more epochs. Trained: {work or 'nothing'}. Command: `scripts/compare_devices.py "
             f"{shlex.join(argv if argv is not None else sys.argv[1:])}`", "", *lines]
    (out / "compare.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "compare.md").write_text("\n".join(lines).rstrip("\n") + "\n")
    print("\n".join(lines))
    print(f"written to {out}")
    if not any_table_ran:
        print("compare_devices: no device ran in at least one table; see compare.md", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("compare_devices", main))
