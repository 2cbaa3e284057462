#!/usr/bin/env python3
"""C++ trainer vs the seed's Python loop, side by side, same torch, same data files, same threads.

  scripts/bench_python.py [--data DIR] [--pairs 3] [--steps 60] [--threads 2] [--device cpu]
                          [--accuracy-epochs 4] [--skip-accuracy] [--quick] [--markdown FILE]

1. Throughput: ResNet-50, ImageNet stem, 1000-way head (the seed's model), batch 32, fp32, SGD
   momentum 0.9, no augmentation on either side (the seed's loop has only ToTensor), N steps.
   Runs alternate (C++, Python, C++, Python, ...); the medians of images/s and their ratio. Both
   at the same settings (C++ in the Python loop's contiguous layout), then each at its defaults
   (C++ with training.memory_format: auto, which times both layouts and keeps the faster).
2. Input-pipeline overhead: the C++ trainer on the real data vs `data.source: synthetic`,
   alternating; the ratio of step times (real / synthetic).
3. Time to accuracy: ResNet-18, ImageNet stem, the first 10,000 real training images, test
   accuracy on the first 2,000 test images after each epoch. Python: the seed's loop (constant lr
   0.01, batch 32, no augmentation). C++: configs/quick_cpu.yaml. Reported: Python's final
   accuracy and time; the time the C++ run needed to first reach that accuracy.

--data is a folder of official-format binary batches; when it has none they are made once from
--jpeg (default ../shared/data/cifar10-jpeg.tar.gz) with scripts/get-data.sh --to-binary (train convert).
--quick runs a tiny configuration (ResNet-18, 5 steps, one pair, no accuracy part) for CI.
--markdown writes the tables and the exact commands to FILE (docs/performance.md).
"""
import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import script_support

REPO = Path(__file__).resolve().parents[1]


def run(command, capture=True):
    print("$", shlex.join(command), flush=True)
    proc = subprocess.run(command, capture_output=capture, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench_python: command failed ({proc.returncode}): {shlex.join(command)}\n{proc.stderr[-2000:]}")
    return proc


def binary_batches(folder):
    """The folder of `folder` that holds binary batches, or None."""
    for bins in (folder / "cifar-10-batches-bin", folder):
        if (bins / "data_batch_1.bin").exists():
            return bins
    return None


def ensure_binary_data(folder, jpeg_source, train):
    if binary_batches(folder):
        return binary_batches(folder)
    run([sys.executable, str(REPO / "scripts/get_data.py"), "--from", jpeg_source, "--root", str(folder), "--to-binary",
         "--train", str(train)])
    return folder / "cifar-10-batches-bin"


def cpp_rate(args, bins, work, extra):
    with tempfile.TemporaryDirectory() as tmp:
        command = [args.train, "--config", str(REPO / "configs/resnet50_cifar10.yaml"), "--device", args.device,
                   "--output-dir", str(Path(tmp) / "run"),
                   "--set", f"model.arch={work['arch']}", "--set", "model.stem=imagenet",
                   "--set", f"model.num_classes={work['classes']}", "--set", f"training.batch_size={work['batch']}",
                   "--set", f"training.max_steps={work['steps']}", "--set", f"data.train_limit={work['batch'] * work['steps']}",
                   "--set", "data.test_limit=100", "--set", f"data.root={bins}", "--set", "data.augment=false",
                   "--set", "optimizer.nesterov=false", "--set", "optimizer.weight_decay=0",
                   "--set", "optimizer.lr=0.01", "--set", "schedule.name=constant", "--set", "schedule.warmup_epochs=0",
                   "--set", f"training.threads={args.threads}", "--set", "checkpoint.enabled=false",
                   "--set", "monitor.sample_period=0",
                   # The Python loop's layout (contiguous): the same work (auto would time both).
                   "--set", "training.memory_format=contiguous"] + extra
        run(command)
        row = json.loads((Path(tmp) / "run/metrics.jsonl").read_text().splitlines()[0])
        return row["images_per_second"], command


def python_rate(args, bins, work):
    command = [sys.executable, str(REPO / "scripts/python_baseline.py"), "--data", str(bins), "--arch", work["arch"],
               "--classes", str(work["classes"]), "--batch-size", str(work["batch"]), "--steps", str(work["steps"]),
               "--train-limit", str(work["batch"] * work["steps"]), "--threads", str(args.threads),
               "--device", args.device]
    out = run(command).stdout
    return json.loads(out.strip().splitlines()[-1])["images_per_second"], command


def main(argv=None):
    parser = script_support.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default=str(REPO / "build" / "train"))
    parser.add_argument("--data", default=str(REPO / "datasets" / "cifar10-bin"))
    parser.add_argument("--jpeg", default=str(REPO.parent / "shared" / "data" / "cifar10-jpeg.tar.gz"),
                        help="where to make --data from when it holds no binary batches yet")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--accuracy-epochs", type=int, default=4)
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--markdown")
    args = parser.parse_args(argv)
    data = script_support.bench_arguments(args, binary_batches)
    bins = ensure_binary_data(data, args.jpeg, args.train)
    work = {"arch": "resnet50", "classes": 1000, "batch": 32, "steps": args.steps}
    if args.quick:
        work.update(arch="resnet18", steps=5)
        args.pairs, args.skip_accuracy = 1, True

    ours, theirs, commands = [], [], {}
    for _ in range(args.pairs):
        rate, commands["cpp"] = cpp_rate(args, bins, work, [])
        ours.append(rate)
        rate, commands["python"] = python_rate(args, bins, work)
        theirs.append(rate)
    defaults, python_defaults = [], []
    for _ in range(args.pairs):
        rate, commands["cpp_defaults"] = cpp_rate(args, bins, work, ["--set", "training.memory_format=auto"])
        defaults.append(rate)
        rate, commands["python_defaults"] = python_rate(args, bins, work)
        python_defaults.append(rate)
    real, synthetic = [], []
    for _ in range(args.pairs):
        rate, commands["cpp_real"] = cpp_rate(args, bins, work, [])
        real.append(rate)
        rate, commands["cpp_synthetic"] = cpp_rate(args, bins, work, ["--set", "data.source=synthetic"])
        synthetic.append(rate)

    lines = [f"Device {args.device}, {args.threads} threads, torch from the project's virtualenv for both sides.", "",
             f"## Throughput: {work['arch']}, ImageNet stem, {work['classes']}-way head, batch {work['batch']}, "
             f"{work['steps']} steps, fp32", "",
             "| implementation | images/s per run | median |", "|---|---|---|",
             f"| C++ `train` | {', '.join(f'{r:.1f}' for r in ours)} | {statistics.median(ours):.1f} |",
             f"| Python loop | {', '.join(f'{r:.1f}' for r in theirs)} | {statistics.median(theirs):.1f} |", "",
             f"**C++ / Python = {statistics.median(ours) / statistics.median(theirs):.3f}** (ratio of medians; "
             f"per pair: {', '.join(f'{a / b:.3f}' for a, b in zip(ours, theirs))}).", "",
             "## Each at its defaults (C++: `training.memory_format: auto`; Python: the seed's loop)", "",
             "| implementation | images/s per run | median |", "|---|---|---|",
             f"| C++ `train` | {', '.join(f'{r:.1f}' for r in defaults)} | {statistics.median(defaults):.1f} |",
             f"| Python loop | {', '.join(f'{r:.1f}' for r in python_defaults)} | "
             f"{statistics.median(python_defaults):.1f} |", "",
             f"**C++ / Python at their defaults = {statistics.median(defaults) / statistics.median(python_defaults):.3f}**",
             "",
             "## Input-pipeline overhead (C++): real data vs synthetic", "",
             "| data | images/s per run | median |", "|---|---|---|",
             f"| real (binary batches) | {', '.join(f'{r:.1f}' for r in real)} | {statistics.median(real):.1f} |",
             f"| synthetic | {', '.join(f'{r:.1f}' for r in synthetic)} | {statistics.median(synthetic):.1f} |", "",
             f"**real / synthetic step time = {statistics.median(synthetic) / statistics.median(real):.3f}**", ""]
    results = {"throughput": {"cpp": ours, "python": theirs},
               "defaults": {"cpp": defaults, "python": python_defaults},
               "pipeline": {"real": real, "synthetic": synthetic}}

    if not args.skip_accuracy:
        py = json.loads(run([sys.executable, str(REPO / "scripts/python_baseline.py"), "--data", str(bins),
                             "--arch", "resnet18", "--classes", "10", "--batch-size", "32",
                             "--epochs", str(args.accuracy_epochs), "--train-limit", "10000", "--test-limit", "2000",
                             "--threads", str(args.threads), "--device", args.device, "--eval"]).stdout.splitlines()[-1])
        with tempfile.TemporaryDirectory() as tmp:
            command = [args.train, "--config", str(REPO / "configs/quick_cpu.yaml"), "--device", args.device,
                       "--output-dir", str(Path(tmp) / "run"), "--set", f"data.root={bins}",
                       "--set", f"training.threads={args.threads}", "--set", f"training.epochs={args.accuracy_epochs}",
                       "--set", "checkpoint.enabled=false", "--set", "monitor.sample_period=0"]
            run(command)
            rows = [json.loads(l) for l in (Path(tmp) / "run/metrics.jsonl").read_text().splitlines()]
        commands["accuracy_cpp"] = command
        target, py_time = py["epochs"][-1]["test_acc"], py["epochs"][-1]["elapsed_seconds"]
        elapsed, reached = 0.0, None
        lines += ["## Time to accuracy: ResNet-18, ImageNet stem, 10,000 train / 2,000 test images", "",
                  "| epoch | Python test acc | Python time (s) | C++ test acc | C++ time (s) |", "|---|---|---|---|---|"]
        for i, row in enumerate(rows):
            elapsed += row["epoch_seconds"] + row["eval_seconds"]
            if reached is None and row["test_acc"] >= target:
                reached = elapsed
            p = py["epochs"][i] if i < len(py["epochs"]) else None
            lines.append(f"| {row['epoch']} | {100 * p['test_acc']:.2f}% | {p['elapsed_seconds']:.1f} | "
                         f"{100 * row['test_acc']:.2f}% | {elapsed:.1f} |" if p else
                         f"| {row['epoch']} | - | - | {100 * row['test_acc']:.2f}% | {elapsed:.1f} |")
        lines += ["", f"Python's final accuracy {100 * target:.2f}% took {py_time:.1f} s; "
                  + (f"**the C++ run first reached it after {reached:.1f} s = {reached / py_time:.2f}x Python's time.**"
                     if reached else "**the C++ run did not reach it.**"), ""]
        results["accuracy"] = {"python": py, "cpp": rows, "cpp_seconds_to_target": reached}

    def shown(cmd):  # paths relative to the repository, temporary run folders elided
        text = shlex.join(cmd).replace(str(REPO) + "/", "").replace(sys.executable, "python")
        return re.sub(r"/tmp/tmp[^/ ]*/run", "<tmp>/run", text)

    lines += ["## Commands", ""] + [f"- {name}: `{shown(cmd)}`" for name, cmd in commands.items()]
    text = "\n".join(lines)
    print(text)
    print("RESULTS " + json.dumps(results))
    if args.markdown:
        invocation = shlex.join(["scripts/bench_python.py"] + (argv if argv is not None else sys.argv[1:]))
        Path(args.markdown).write_text(f"# Performance: C++ trainer vs the Python loop\n\nRegenerate with `{invocation}` "
                                       f"({time.strftime('%Y-%m-%d')}).\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("bench_python", main))
