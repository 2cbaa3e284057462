#!/usr/bin/env python3
"""The speed model against a GPU: measured images/s of a `train sweep --card NAME` on that card
beside what the model predicted for each trial (training/cards/speed_model.h), as a markdown table
with each error and their median.

  scripts/speed_check.py SWEEP_DIR [SWEEP_DIR ...]

Reads each SWEEP_DIR/sweep.json (its trials' measured images_per_second and, from --card,
predicted_images_per_second). Prints the table; exits 2 when a folder holds no sweep, a sweep.json
that is not a sweep's, or a sweep not run on CUDA (its images/s are no card's), 1 when no trial
has both figures, else 0 (it reports, it does not judge).
"""
import json
import statistics
import sys
from pathlib import Path

import script_support


def fail(message):
    print(f"speed_check: {message}", file=sys.stderr)
    sys.exit(2)


def number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def rows(sweep_dir):
    path = Path(sweep_dir) / "sweep.json"
    if not path.is_file():
        fail(f"{sweep_dir}: no sweep.json (run `train sweep --card NAME` into it)")
    try:
        sweep = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: not a sweep's JSON ({e})")
    if not isinstance(sweep, dict) or not isinstance(sweep.get("trials"), list):
        fail(f"{path}: no trials; expected the sweep.json `train sweep` writes")
    device = str(sweep.get("device", ""))
    if not device.startswith("cuda"):
        fail(f"{path}: the sweep ran on '{device}', not on a card: its images/s measure no GPU")
    for trial in sweep["trials"]:
        if not isinstance(trial, dict):
            continue
        measured, predicted = number(trial.get("images_per_second")), number(trial.get("predicted_images_per_second"))
        if measured and predicted:
            yield (Path(sweep_dir).name, trial.get("precision"), trial.get("memory_format"),
                   trial.get("batch_size"), measured, predicted)


def main(argv):
    if not argv:
        fail("expected SWEEP_DIR [SWEEP_DIR ...]: folders of `train sweep --card NAME` run on that card")
    table = [row for folder in argv for row in rows(folder)]
    if not table:
        print("speed_check: no trial has a measured and a predicted images/s", file=sys.stderr)
        return 1
    print("| sweep | precision | layout | batch | measured img/s | predicted img/s | error |")
    print("|---|---|---|---:|---:|---:|---:|")
    errors = []
    for name, precision, layout, batch, measured, predicted in table:
        error = predicted / measured - 1
        errors.append(abs(error))
        print(f"| {name} | {precision} | {layout} | {batch} | {measured:.0f} | {predicted:.0f} | {100 * error:+.1f}% |")
    print(f"\n{len(errors)} trials: median |error| {100 * statistics.median(errors):.1f}%, "
          f"largest {100 * max(errors):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("speed_check", lambda: main(sys.argv[1:])))
