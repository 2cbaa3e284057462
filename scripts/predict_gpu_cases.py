#!/usr/bin/env python3
"""The card prediction's error, measured: predicts on this machine every GPU memory measurement the
project holds (docs/gpu.md, run 2 of 2026-11-30 on one H200) with `train memory --card H200
--card-only`, and prints predicted against measured.

  scripts/predict_gpu_cases.py --train build/train --out DIR [--docs docs/memory-studies.md]
  scripts/predict_gpu_cases.py --train build/train --out DIR --grid            # on the CPU machine
  scripts/predict_gpu_cases.py --train build/train --out DIR --grid --measure  # on the card
  scripts/predict_gpu_cases.py --compare PREDICTED_DIR --measured MEASURED_DIR

With --docs, the table replaces what stands between the markers
<!-- card-prediction:begin --> and <!-- card-prediction:end --> in that file. --grid predicts (or,
with --measure, measures with `train memory --device cuda`) cases that are not among those below,
so that a run on a GPU tests the predictor where it was not tuned (scripts/gpu_check.sh --only
card); --compare prints their error table. Checkpointing auto is not predicted: its blocks depend on
the card's budget.
The cases (each measured value as docs/gpu.md gives it):
  1. `train memory`, ResNet-50 (CIFAR stem) channels_last, batch 256, four settings: the measured
     allocated peak of one step (no prefetched batches).
  2. a sweep trial, ResNet-50 bf16 channels_last, batch 512, through the loader (2 prefetched
     batches): allocated and reserved peaks.
  3. find-max, ResNet-18 (CIFAR stem) fp32 contiguous under a 4 GiB memory.limit (2 prefetched
     batches): the largest batch that fit.
Exit code: 0, or 2 for bad arguments or a failed `train` run.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import script_support

MIB = 1 << 20
RN50 = "configs/resnet50_cifar10.yaml"

# (label, settings, batch, extra train arguments, measured {setting: (allocated MiB, reserved MiB)})
CASES = [
    ("ResNet-50 batch 256, `train memory`",
     "fp32+channels_last,bf16+channels_last,fp32+checkpointing+channels_last,"
     "bf16+checkpointing+channels_last", 256, ["--set", "data.prefetch=0"],
     {"fp32+channels_last": (6538.0, None), "bf16+channels_last": (3445.7, None),
      "fp32+checkpointing+channels_last": (2843.7, None),
      "bf16+checkpointing+channels_last": (1593.1, None)}),
    ("ResNet-50 bf16 batch 512, sweep trial", "bf16+channels_last", 512, [],
     {"bf16+channels_last": (6594.0, 7520.0)}),
]
FIND_MAX = ("ResNet-18 fp32, find-max under 4 GiB", "fp32", 844,
            ["--set", "model.arch=resnet18", "--memory-limit", "4GiB"], 844)


# The grid for a GPU run: (name, depth, stem, setting, batch, flags). The accumulating case is a
# step's last micro-batch with the others' gradients held (train memory's probe).
GRID = [
    ("rn34_fp16_b192", 34, "cifar", "fp16", 192, []),
    ("rn50_fp32_ckpt_cl_b384", 50, "cifar", "fp32+checkpointing+channels_last", 384, []),
    ("rn18_imagenet_bf16_cl_b1024", 18, "imagenet", "bf16+channels_last", 1024, []),
    ("rn101_bf16_cl_b96", 101, "cifar", "bf16+channels_last", 96, []),
    ("rn50_fp16_ckpt_b160", 50, "cifar", "fp16+checkpointing", 160, []),
    ("rn34_fp32_accumulate4_b128", 34, "cifar", "fp32", 128,
     ["--set", "training.accumulate_steps=4"]),
]


def train_memory(train, folder, settings, batch, extra, device="cpu", card=True):
    command = [str(train), "memory", "--config", RN50, "--device", device, "--batch-size",
               str(batch), "--settings", settings, "--set", "training.memory_format=contiguous",
               "--output-dir", str(folder)] + extra
    if card:
        command += ["--card", "H200", "--card-only"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise script_support.BadInput(f"train memory failed ({done.returncode}): {tail[0]}")
    facts = json.loads((folder / "memory_breakdown.json").read_text())
    return {s["setting"]: s for s in facts["settings"]}


def predict(train, out, name, settings, batch, extra):
    return train_memory(train, out / name, settings, batch, extra)


def grid(train, out, measure):
    for name, depth, stem, setting, batch, flags in GRID:
        extra = ["--set", f"model.arch=resnet{depth}", "--set", f"model.stem={stem}",
                 "--set", "data.prefetch=0"] + flags
        if measure:
            train_memory(train, out / name, setting, batch, extra, device="cuda", card=False)
        else:
            train_memory(train, out / name, setting, batch, extra)
        print(f"{name}: written to {out / name}")


def compare(predicted_dir, measured_dir):
    lines = ["| case | figure | measured | predicted | error |", "|---|---|---:|---:|---:|"]
    for name, _, _, setting, _, _ in GRID:
        read = {}
        for key, folder in (("predicted", predicted_dir), ("measured", measured_dir)):
            path = folder / name / "memory_breakdown.json"
            if not path.is_file():
                raise script_support.BadInput(f"{path}: missing; run the {key} side first")
            read[key] = json.loads(path.read_text())["settings"][0]
        p, m = read["predicted"], read["measured"]
        if m.get("status") != "ok" or "card_prediction_error" in p:
            lines.append(f"| {name} | - | {m.get('status')}: {m.get('message', '')} | "
                         f"{p.get('card_prediction_error', '')} | |")
            continue
        for figure, measured, predicted in (
                ("allocated peak MiB", m["measured_peak_bytes"], p["predicted_allocated_peak_bytes"]),
                ("reserved MiB", m["reserved_bytes"], p["predicted_reserved_peak_bytes"])):
            lines.append(f"| {name} | {figure} | {measured / MIB:,.1f} | {predicted / MIB:,.1f} | "
                         f"{error(predicted, measured)} |")
    return "\n".join(lines) + "\n"


def error(predicted, measured):
    return f"{100.0 * (predicted - measured) / measured:+.1f}%"


def rows(train, out):
    lines = []
    for index, (label, settings, batch, extra, measured) in enumerate(CASES):
        predicted = predict(train, out, f"case{index + 1}", settings, batch, extra)
        for setting, (allocated, reserved) in measured.items():
            p = predicted[setting]
            if "card_prediction_error" in p:
                raise script_support.BadInput(f"{setting}: {p['card_prediction_error']}")
            pa = p["predicted_allocated_peak_bytes"] / MIB
            pr = p["predicted_reserved_peak_bytes"] / MIB
            lines.append(f"| {label} | {setting} | allocated peak MiB | {allocated:,.1f} | {pa:,.1f} | "
                         f"{error(pa, allocated)} |")
            if reserved is not None:
                lines.append(f"| {label} | {setting} | reserved peak MiB | {reserved:,.1f} | "
                             f"{pr:,.1f} | {error(pr, reserved)} |")
    label, settings, batch, extra, largest = FIND_MAX
    p = predict(train, out, "case3", settings, batch, extra)[settings]
    lines.append(f"| {label} | {settings} | largest batch | {largest} | {p['largest_batch']} | "
                 f"{error(p['largest_batch'], largest)} |")
    return lines


def main(argv):
    parser = script_support.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train")
    parser.add_argument("--out")
    parser.add_argument("--docs")
    parser.add_argument("--grid", action="store_true")
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--compare")
    parser.add_argument("--measured")
    args = parser.parse_args(argv[1:])
    if args.compare is not None or args.measured is not None:
        predicted = script_support.path_argument("--compare", args.compare, "a predictions folder",
                                                 "folder")
        measured = script_support.path_argument("--measured", args.measured,
                                                "a measurements folder", "folder")
        print(compare(predicted, measured), end="")
        return 0
    train = script_support.path_argument("--train", args.train, "the train executable")
    script_support.path_argument("--out", args.out, "a folder to write into", "folder",
                                 must_exist=False)
    if args.measure and not args.grid:
        raise script_support.BadInput("--measure: goes with --grid")
    if args.grid:
        grid(train, Path(args.out), args.measure)
        return 0
    out = Path(args.out)
    begin, end = "<!-- card-prediction:begin -->", "<!-- card-prediction:end -->"
    docs = script_support.path_argument("--docs", args.docs, "a markdown file") if args.docs is not None else None
    if docs and not (begin in Path(docs).read_text() and end in Path(docs).read_text()):
        raise script_support.BadInput(f"--docs: {docs} has no {begin} ... {end} markers")
    out.mkdir(parents=True, exist_ok=True)
    table = ["| case | setting | figure | measured (H200) | predicted here | error |",
             "|---|---|---|---:|---:|---:|"] + rows(train, out)
    text = "\n".join(table) + "\n"
    print(text, end="")
    if docs:
        head, rest = Path(docs).read_text().split(begin, 1)
        tail = rest.split(end, 1)[1]
        written = Path(docs).with_name(f".{Path(docs).name}.tmp{os.getpid()}")
        written.write_text(head + begin + "\n" + text + end + tail)
        os.replace(written, docs)  # the docs whole, old or new, never half
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("predict_gpu_cases", main, sys.argv))
