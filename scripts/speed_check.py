#!/usr/bin/env python3
"""The speed model against a GPU: measured images/s of a `train sweep --card NAME` on that card
beside what the model predicted for each trial (training/cards/speed_model.h), as a markdown table
with each error and their median.

  scripts/speed_check.py SWEEP_DIR [SWEEP_DIR ...]

Reads each SWEEP_DIR/sweep.json (its trials' measured images_per_second and, from --card,
predicted_images_per_second). Prints the table; exits 2 when a folder holds no sweep, 1 when no
trial has both figures, else 0 (it reports, it does not judge).
"""
import json
import statistics
import sys
from pathlib import Path


def rows(sweep_dir):
    path = Path(sweep_dir) / "sweep.json"
    if not path.is_file():
        print(f"speed_check: {sweep_dir}: no sweep.json (run `train sweep --card NAME` into it)", file=sys.stderr)
        sys.exit(2)
    sweep = json.loads(path.read_text())
    for trial in sweep.get("trials", []):
        measured, predicted = trial.get("images_per_second"), trial.get("predicted_images_per_second")
        if measured and predicted:
            yield (Path(sweep_dir).name, trial.get("precision"), trial.get("memory_format"),
                   trial.get("batch_size"), measured, predicted)


def main(argv):
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
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
    sys.exit(main(sys.argv[1:]))
