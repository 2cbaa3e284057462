#!/usr/bin/env python3
"""Memory benchmark: what AMP and gradient checkpointing save and cost, measured side by side.

Runs one `train sweep` (each trial in its own process) over precision x checkpointing at small
batch sizes and prints, per batch: peak bytes for fp32, bf16, fp32 + checkpointing and
bf16 + checkpointing, each as a ratio of fp32's, and the step-time overhead as a ratio.

  scripts/bench_memory.py [--arch resnet50] [--stem cifar] [--batch-sizes 8,16] [--device cpu]
                          [--precisions fp32,bf16] [--out DIR] [--markdown FILE]

--markdown writes the table and the exact command to FILE (e.g. docs/memory-studies.md).
"""
import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import script_support

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def main(argv=None):
    parser = script_support.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", default=str(REPO / "build" / "train"), help="the train binary")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--stem", default="cifar")
    parser.add_argument("--batch-sizes", default="8,16")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warmup-steps", default="1")
    parser.add_argument("--measure-steps", default="3")
    parser.add_argument("--out", help="sweep directory (default: a temporary one)")
    parser.add_argument("--markdown", help="also write the results as Markdown to this file")
    args = parser.parse_args(argv)
    script_support.path_argument("--train", args.train, "the train binary (build it: scripts/setup.sh)")
    if args.out is not None:
        script_support.path_argument("--out", args.out, "a folder for the sweep", kind="folder", must_exist=False)
    if args.markdown is not None:
        script_support.path_argument("--markdown", args.markdown, "a file to write the table to", must_exist=False)

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-memory-")) / "sweep"
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as config:
        config.write(f"model: {{arch: {args.arch}, stem: {args.stem}}}\n")
    command = [args.train, "sweep", "--config", config.name, "--device", args.device,
               "--batch-sizes", args.batch_sizes, "--precisions", args.precisions,
               "--checkpointing", "off,on", "--warmup-steps", args.warmup_steps,
               "--measure-steps", args.measure_steps, "--output-dir", str(out)]
    print("$", shlex.join(command), flush=True)
    if subprocess.call(command, stdout=subprocess.DEVNULL) != 0:
        print("bench_memory: the sweep failed; see", out, file=sys.stderr)
        return 1
    sweep = json.loads((out / "sweep.json").read_text())

    def find(precision, checkpointing, batch):
        for t in sweep["trials"]:
            if (t["precision"], t["checkpointing"], t["batch_size"]) == (precision, checkpointing, batch):
                return t
        return None

    lines = [f"Model {sweep['arch']} ({sweep['stem']} stem) on {sweep['device_description']}; "
             f"{sweep['warmup_steps']} warm-up + {sweep['measure_steps']} measured steps per trial, "
             "each trial in its own process. Peak = peak reserved bytes (the tracking allocator's "
             "peak on the CPU). Ratios are against fp32 without checkpointing at the same batch.", "",
             "| batch | setting | peak (MiB) | peak ratio | step (s) | step-time ratio | images/s |",
             "|---|---|---|---|---|---|---|"]
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        base = find("fp32", False, batch)
        for precision in args.precisions.split(","):
            for checkpointing in (False, True):
                t = find(precision, checkpointing, batch)
                name = precision + (" + checkpointing" if checkpointing else "")
                if not t or t["status"] != "ok" or not base or base["status"] != "ok":
                    lines.append(f"| {batch} | {name} | - | - | - | - | {t['status'] if t else 'missing'} |")
                    continue
                lines.append(
                    f"| {batch} | {name} | {t['peak_reserved_bytes'] / MIB:.1f} | "
                    f"{t['peak_reserved_bytes'] / base['peak_reserved_bytes']:.3f} | "
                    f"{t['median_step_seconds']:.3f} | "
                    f"{t['median_step_seconds'] / base['median_step_seconds']:.3f} | "
                    f"{t['images_per_second']:.1f} |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        invocation = shlex.join(["scripts/bench_memory.py"] + (argv if argv is not None else sys.argv[1:]))
        Path(args.markdown).write_text(
            "# Memory benchmark: AMP and gradient checkpointing\n\n"
            f"    {invocation}\n\n"
            f"(config `model: {{arch: {args.arch}, stem: {args.stem}}}`, then `{shlex.join(command[3:])}`)\n\n"
            f"{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("bench_memory", main))
