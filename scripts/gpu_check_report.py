#!/usr/bin/env python3
"""gpu_check.sh's report: OUT_DIR/gpu_check.md and OUT_DIR/gpu_check.json from what its checks
left in OUT_DIR (checks.jsonl, the logs, matmul.json, the sweep and comparison folders).

  scripts/gpu_check_report.py OUT_DIR

Only figures that a check produced are reported; a missing file is reported as missing.
Exit code: 0, or 2 when OUT_DIR holds no checks.jsonl.
"""
import json
import re
import sys

import script_support

# ResNet-50 with the CIFAR stem: 1.298 GMAC per 32x32 image forward; a training step is about 3x
# the forward (forward, input gradients, weight gradients), 2 FLOP per MAC.
TRAIN_FLOP_PER_IMAGE = 3 * 2 * 1.298e9
# Dense bf16 peak of the H100/H200 SXM (NVIDIA's data sheet), for MFU when the GPU is one of them.
HOPPER_BF16_TFLOPS = 989.4


def read_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def ctest_counts(log):
    """(passed, failed, skipped, total) from ctest's output, or None."""
    try:
        text = log.read_text()
    except OSError:
        return None
    summary = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", text)
    if not summary:
        return None
    failed, total = int(summary.group(2)), int(summary.group(3))
    skipped = len(re.findall(r"\*\*\*Skipped", text)) + len(re.findall(r"Skipped\s", text))
    return {"total": total, "failed": failed, "skipped": min(skipped, total),
            "passed": total - failed - min(skipped, total)}


def first_ok_trial(sweep):
    for trial in (sweep or {}).get("trials", []):
        if trial.get("status") == "ok":
            return trial
    return None


def ok_trials_by_batch(sweep):
    return {t["batch_size"]: t for t in (sweep or {}).get("trials", [])
            if t.get("status") == "ok" and "batch_size" in t}


# The --speed sweeps run eager and with training.cuda_graph=on at the same settings.
GRAPH_PAIRS = (("ResNet-50 CIFAR stem, bf16, channels_last", "resnet50", "resnet50_graphed"),
               ("seed settings: ResNet-50 ImageNet stem, 1000 classes, fp32", "seed_eager", "seed_graphed"))


def graph_rows(out):
    rows = []
    for setting, eager_dir, graphed_dir in GRAPH_PAIRS:
        eager = ok_trials_by_batch(read_json(out / eager_dir / "sweep.json"))
        graphed = ok_trials_by_batch(read_json(out / graphed_dir / "sweep.json"))
        for batch in sorted(set(eager) & set(graphed)):
            e, g = eager[batch]["images_per_second"], graphed[batch]["images_per_second"]
            rows.append({"setting": setting, "batch_size": batch, "eager_images_per_second": e,
                         "graphed_images_per_second": g, "graphed_over_eager": g / e})
    return rows


# The fast config's runs (groups fast and fast-graphed): time to accuracy on the real data.
FAST_RUNS = (("eager", "fast"), ("graph-captured step", "fast_graphed"))
FAST_THRESHOLDS = (0.90, 0.93, 0.94, 0.95)


def time_to_accuracy(rows):
    """{threshold: seconds} of training + evaluation until the test accuracy first reached it
    (train's own definition, training/run/epoch_record.cpp); None where it never did."""
    reached = {}
    for threshold in FAST_THRESHOLDS:
        seconds, reached[threshold] = 0.0, None
        for row in rows:
            seconds += row["epoch_seconds"] + row["eval_seconds"]
            if row["test_acc"] >= threshold:
                reached[threshold] = seconds
                break
    return reached


def fast_rows(out):
    runs = []
    for name, folder in FAST_RUNS:
        metrics = out / folder / "metrics.jsonl"
        if not metrics.exists():
            continue
        rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        if not rows:
            continue
        runs.append({"run": name, "epochs": len(rows), "final_test_acc": rows[-1]["test_acc"],
                     "seconds": sum(r["epoch_seconds"] + r["eval_seconds"] for r in rows),
                     "time_to_accuracy": {f"{t:g}": s for t, s in time_to_accuracy(rows).items()}})
    return runs


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = script_support.path_argument("OUT_DIR", argv[1], "the folder gpu_check.sh wrote", kind="folder")
    checks_file = out / "checks.jsonl"
    if not checks_file.exists():
        print(f"gpu_check_report: {checks_file}: not found", file=sys.stderr)
        return 2
    checks = [json.loads(line) for line in checks_file.read_text().splitlines() if line.strip()]
    report = {"checks": checks, "figures": {}}
    figures = report["figures"]

    gpu_log = out / "gpu.log"
    gpu_text = gpu_log.read_text() if gpu_log.exists() else ""
    report["gpu"] = gpu_text.strip().splitlines()
    hopper = bool(re.search(r"H100|H200", gpu_text))

    suite = ctest_counts(out / "cuda_suite.log")
    if suite:
        figures["cuda_suite"] = suite

    find_max = read_json(out / "find_max" / "sweep.json")
    if find_max:
        figures["find_max"] = [{"setting": f"{c['precision']} / checkpointing {c['checkpointing']}",
                                "largest_fitting_batch": c["largest_fitting_batch"],
                                "smallest_failing_batch": c["smallest_failing_batch"]}
                               for c in find_max["cells"]]

    compare = read_json(out / "compare" / "compare.json")
    if compare:
        figures["compare"] = {name: [{k: e.get(k) for k in ("device", "available", "settings", "totals",
                                                            "speedup_over_cpu", "note")} for e in entries]
                              for name, entries in compare["tables"].items()}

    matmul = read_json(out / "matmul.json")
    if matmul:
        figures["matmul"] = [{k: r.get(k) for k in ("dtype", "size", "gflops", "fraction_of_peak",
                                                    "peak_source", "note")} for r in matmul]

    resnet_sweep = read_json(out / "resnet50" / "sweep.json")
    resnet = ok_trials_by_batch(resnet_sweep).get(512) or first_ok_trial(resnet_sweep)
    if resnet:
        images = resnet["images_per_second"]
        tflops = images * TRAIN_FLOP_PER_IMAGE / 1e12
        figures["resnet50_bf16_channels_last_b512"] = {
            "images_per_second": images,
            "median_step_seconds": resnet["median_step_seconds"],
            "tflops": tflops,
            "mfu": tflops / HOPPER_BF16_TFLOPS if hopper else None,
            "epoch_seconds_at_this_rate": 50000 / images,
            "peak_reserved_bytes": resnet["peak_reserved_bytes"],
        }

    graphs = graph_rows(out)
    if graphs:
        figures["cuda_graph"] = graphs

    real = out / "real" / "metrics.jsonl"
    if real.exists():
        rows = [json.loads(line) for line in real.read_text().splitlines() if line.strip()]
        if rows:
            figures["real_data_epoch"] = {k: rows[-1].get(k) for k in (
                "test_acc", "epoch_seconds", "images_per_second", "peak_allocated_bytes",
                "peak_reserved_bytes")}

    fast = fast_rows(out)
    if fast:
        figures["fast_config"] = fast

    (out / "gpu_check.json").write_text(json.dumps(report, indent=2) + "\n")

    lines = ["# GPU check", ""]
    lines += [f"    {line}" for line in report["gpu"]] or ["GPU: not found (see gpu.log)"]
    lines += ["", "| check | result | seconds | log |", "|---|---|---|---|"]
    for c in checks:
        result = "passed" if c["passed"] else f"FAILED (exit {c['exit_code']})"
        lines.append(f"| {c['check']} | {result} | {c['seconds']} | `{c['log']}` |")
    if suite:
        lines += ["", f"CUDA suite: {suite['passed']} passed, {suite['failed']} failed, "
                      f"{suite['skipped']} skipped of {suite['total']}."]
    if "find_max" in figures:
        lines += ["", "Find-max under a 4 GiB limit (ResNet-18, CIFAR stem):", ""]
        lines += [f"- {c['setting']}: largest batch {c['largest_fitting_batch']}, smallest failing "
                  f"{c['smallest_failing_batch']}" for c in figures["find_max"]]
    if "compare" in figures:
        lines += ["", "CPU vs GPU (configs/resnet50_cifar10.yaml; compare/compare.md has the tables):"]
        for name, entries in figures["compare"].items():
            lines += ["", f"{name}:", ""]
            for e in entries:
                if not e["available"]:
                    lines.append(f"- {e['device']}: {e['note']}")
                    continue
                t = e["totals"]
                rate = f"{t['steady_images_per_second']:.0f}" if t["steady_images_per_second"] else "-"
                epoch = (f"{t['epoch_seconds']:.1f} s" + (f" (projected from {t['projected_from_steps']} steady "
                         "steps)" if t["epoch_seconds_projected"] else "")) if t["epoch_seconds"] else "-"
                speedup = f", {e['speedup_over_cpu']:.1f}x the CPU" if e["speedup_over_cpu"] else ""
                lines.append(f"- {e['device']} ({', '.join(e['settings']) or 'as written'}): {rate} steady "
                             f"images/s{speedup}, epoch {epoch}")
    if "matmul" in figures:
        lines += ["", "Matmul, N=8192:", ""]
        for r in figures["matmul"]:
            if r.get("gflops") is None:
                lines.append(f"- {r['dtype']}: {r.get('note')}")
                continue
            lines.append(f"- {r['dtype']}: {r['gflops'] / 1000:.1f} TFLOP/s, "
                         f"{100 * r['fraction_of_peak']:.1f}% of the {r['peak_source']} peak")
    if resnet:
        f = figures["resnet50_bf16_channels_last_b512"]
        mfu = f"{100 * f['mfu']:.1f}% MFU (of {HOPPER_BF16_TFLOPS} TFLOP/s)" if f["mfu"] else "MFU: peak unknown"
        lines += ["", "ResNet-50 (CIFAR stem) bf16 + channels_last, batch 512, synthetic batch on the device:",
                  "", f"- {f['images_per_second']:.0f} images/s, {f['median_step_seconds'] * 1000:.1f} ms/step, "
                      f"{f['tflops']:.1f} TFLOP/s, {mfu}; a 50,000-image epoch at this rate: "
                      f"{f['epoch_seconds_at_this_rate']:.2f} s"]
    if graphs:
        lines += ["", "The training step eager and captured in a CUDA graph (training.cuda_graph: on), "
                      "synthetic batch on the device, median of the measured steps:", "",
                  "| setting | batch | eager images/s | graphed images/s | graphed / eager |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['setting']} | {r['batch_size']} | {r['eager_images_per_second']:.0f} | "
                  f"{r['graphed_images_per_second']:.0f} | {r['graphed_over_eager']:.2f}x |" for r in graphs]
    if "real_data_epoch" in figures:
        f = figures["real_data_epoch"]
        lines += ["", f"Real CIFAR-10, one epoch of configs/resnet50_cifar10.yaml in bf16: "
                      f"{f['epoch_seconds']:.1f} s, {f['images_per_second']:.0f} images/s, "
                      f"test accuracy {100 * f['test_acc']:.2f}%"]
    if fast:
        lines += ["", "configs/resnet50_cifar10_fast.yaml on the real CIFAR-10 (training + evaluation "
                      "wall time until the test accuracy first reached each threshold):", "",
                  "| run | epochs | final test accuracy | total s | "
                  + " | ".join(f"to {100 * t:g}%" for t in FAST_THRESHOLDS) + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(FAST_THRESHOLDS)]
        for r in fast:
            reached = [r["time_to_accuracy"][f"{t:g}"] for t in FAST_THRESHOLDS]
            lines.append(f"| {r['run']} | {r['epochs']} | {100 * r['final_test_acc']:.2f}% | "
                         f"{r['seconds']:.1f} | "
                         + " | ".join("not reached" if s is None else f"{s:.1f} s" for s in reached)
                         + " |")
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("gpu_check_report", main, sys.argv))
