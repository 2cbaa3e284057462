#!/usr/bin/env python3
"""Reads a run's TensorBoard event files back with TensorBoard's own reader, as `tensorboard
--logdir` does, and prints every scalar as JSON: {"tag": [[step, value], ...], ...}, in step order.
A value that is not a number (a diverged loss) is null, as in metrics.jsonl (JSON has no NaN).

  scripts/read_tensorboard.py RUN_DIR

Exit codes: 0; 2 when RUN_DIR holds no event file or the tensorboard package is missing.
"""
import contextlib
import json
import logging
import math
import sys

import script_support


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    run = script_support.path_argument("RUN_DIR", argv[1], "a run folder", kind="folder")
    if not list(run.glob("events.out.tfevents.*")):
        print(f"read_tensorboard: {run}: no events.out.tfevents.* file", file=sys.stderr)
        return 2
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as e:
        print(f"read_tensorboard: the tensorboard package is missing ({e}); run scripts/setup.sh",
              file=sys.stderr)
        return 2
    # TensorBoard says where a restart purged points (a resumed run); stdout is for the JSON only.
    logging.getLogger("tensorboard").setLevel(logging.ERROR)
    accumulator = EventAccumulator(str(run), size_guidance={"scalars": 0})  # 0: keep every point
    with contextlib.redirect_stdout(sys.stderr):
        accumulator.Reload()
    scalars = {tag: [[event.step, event.value if math.isfinite(event.value) else None]
                     for event in accumulator.Scalars(tag)]
               for tag in accumulator.Tags()["scalars"]}
    json.dump(scalars, sys.stdout, allow_nan=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(script_support.run("read_tensorboard", main, sys.argv))
