#!/usr/bin/env python3
"""The batched loader against LibTorch's torch::data loader, on the same data, side by side.

  scripts/bench_loader.py [--data BIN_DIR] [--pairs 3] [--batches 200] [--steps 40]
                          [--threads 2] [--quick] [--markdown FILE]

For each loader -- `batched` (data/loader.h), `torch_data` with 0 and with 1 worker
(data/torch_data.h) -- it measures, on real CIFAR-10 binary batches with augmentation on:

  the input pipeline alone   `train bench loader` (the training loader, no model), images/s
  training                   `train` with ResNet-18 (ImageNet stem), batch 64, on the CPU,
                             training.max_steps=STEPS, images/s of the epoch row

Runs alternate (one of each, --pairs times) and medians are compared, as ratios to `batched`
measured in the same run: no absolute speed is assumed. The binary batches are made from
--jpeg (../shared/data/cifar10-jpeg.tar.gz) when --data has none. --markdown writes the table and
the commands to FILE. Exit code 0, or 2 for bad arguments / a failed command.
"""
import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import script_support

REPO = Path(__file__).resolve().parents[1]
LOADERS = [("batched", 0), ("torch_data", 0), ("torch_data", 1)]


def run(command):
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_loader: command failed ({proc.returncode}): {shlex.join(command)}\n"
                         f"{proc.stderr[-2000:]}")
    return proc


def has_batches(folder):
    return (folder / "cifar-10-batches-bin" / "data_batch_1.bin").exists() or (folder / "data_batch_1.bin").exists()


def binary_root(folder, jpeg, train):
    if has_batches(folder):
        return folder
    run([sys.executable, str(REPO / "scripts/get_data.py"), "--from", jpeg, "--root", str(folder), "--to-binary",
         "--train", str(train)])
    return folder


def settings(args, root, loader, workers):
    return ["--set", "model.arch=resnet18", "--set", "model.stem=imagenet", "--set", "training.device=cpu",
            "--set", f"training.threads={args.threads}", "--set", "training.batch_size=64",
            "--set", f"data.root={root}", "--set", "data.source=binary", "--set", "data.augment=true",
            "--set", f"data.train_limit={args.train_limit}", "--set", "data.test_limit=100",
            "--set", f"data.loader={loader}", "--set", f"data.workers={workers}"]


def pipeline_rate(args, root, loader, workers):
    command = [args.train, "bench", "loader", "--config", str(REPO / "configs/resnet50_cifar10.yaml"),
               "--batches", str(args.batches)] + settings(args, root, loader, workers)
    return json.loads(run(command).stdout.strip().splitlines()[-1])["images_per_second"], command


def training_rate(args, root, loader, workers):
    with tempfile.TemporaryDirectory() as tmp:
        command = [args.train, "--config", str(REPO / "configs/resnet50_cifar10.yaml"),
                   "--output-dir", str(Path(tmp) / "run"), "--set", f"training.max_steps={args.steps}",
                   "--set", "checkpoint.enabled=false", "--set", "monitor.sample_period=0",
                   "--set", "training.epochs=1"] + settings(args, root, loader, workers)
        run(command)
        row = json.loads((Path(tmp) / "run/metrics.jsonl").read_text().splitlines()[-1])
        return row["images_per_second"], command


def main(argv=None):
    parser = script_support.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default=str(REPO / "build" / "train"))
    parser.add_argument("--data", default=str(REPO / "datasets" / "cifar10-bin"))
    parser.add_argument("--jpeg", default=str(REPO.parent / "shared" / "data" / "cifar10-jpeg.tar.gz"))
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="CI size: 1 round, 20 batches, 5 steps")
    parser.add_argument("--markdown")
    args = parser.parse_args(argv)
    if args.quick:
        args.pairs, args.batches, args.steps = 1, 20, 5
    if min(args.pairs, args.batches, args.steps, args.threads) < 1:
        parser.error("--pairs, --batches, --steps and --threads must be at least 1")
    args.train_limit = max(64 * args.steps, 64 * args.batches, 1280)
    data = script_support.bench_arguments(args, has_batches)
    root = binary_root(Path(args.data), args.jpeg, args.train)

    pipeline = {key: [] for key in LOADERS}
    training = {key: [] for key in LOADERS}
    commands = {}
    for _ in range(args.pairs):
        for key in LOADERS:
            rate, command = pipeline_rate(args, root, *key)
            pipeline[key].append(rate)
            commands[f"pipeline {key[0]} ({key[1]} workers)"] = command
            rate, command = training_rate(args, root, *key)
            training[key].append(rate)
            commands[f"training {key[0]} ({key[1]} workers)"] = command

    base_pipeline = statistics.median(pipeline[LOADERS[0]])
    base_training = statistics.median(training[LOADERS[0]])
    lines = [f"ResNet-18 (ImageNet stem), batch 64, CPU, {args.threads} threads, real CIFAR-10 binary batches, "
             f"augmentation on; {args.pairs} alternating round(s), medians; ratios to `batched` in the same run.", "",
             "| loader | workers | input pipeline alone (images/s) | ratio | training (images/s) | ratio |",
             "|---|---|---|---|---|---|"]
    results = []
    for key in LOADERS:
        p, t = statistics.median(pipeline[key]), statistics.median(training[key])
        lines.append(f"| {key[0]} | {key[1]} | {p:.0f} | {p / base_pipeline:.2f} | {t:.1f} | {t / base_training:.2f} |")
        results.append({"loader": key[0], "workers": key[1], "pipeline_images_per_second": pipeline[key],
                        "training_images_per_second": training[key]})
    lines += ["", "Commands:", ""] + [f"- {name}: `{shlex.join(cmd)}`" for name, cmd in commands.items()]
    text = "\n".join(lines)
    print(text)
    print("RESULTS " + json.dumps(results))
    if args.markdown:
        invocation = shlex.join(["scripts/bench_loader.py"] + (argv if argv is not None else sys.argv[1:]))
        Path(args.markdown).write_text(f"Regenerate with `{invocation}` ({time.strftime('%Y-%m-%d')}).\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("bench_loader", main))
