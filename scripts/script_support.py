"""What the helper scripts share: one line and exit code 2 for any failure (never a traceback),
and reading the .jsonl files `train` writes.

    if __name__ == "__main__":
        sys.exit(script_support.run("plot_run", main, sys.argv))

TRAIN_DEBUG=1 shows the traceback instead (for developing the scripts).
"""
import json
import math
import os
import sys


def run(name, main, *args):
    """Calls main(*args) and returns its exit code; an exception becomes one line and exit 2,
    Ctrl-C exit 130."""
    try:
        return main(*args)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001: every failure is one line, by design
        if os.environ.get("TRAIN_DEBUG"):
            raise
        print(f"{name}: {describe(e)}", file=sys.stderr)
        return 2


def describe(error):
    """"path: No such file or directory", or the exception's type and message, on one line."""
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror}"
    text = " ".join(str(error).split()) or "no details"
    return f"{type(error).__name__}: {text}"


def read_jsonl(path):
    """The rows of a .jsonl file ([] when it is absent). A torn last line (its writer was killed
    mid-line) is left out; a bad line elsewhere raises ValueError naming it. JSON has no NaN:
    `train` writes a non-finite number (a diverged loss) as null; number() reads it back."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = []
    for n, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except ValueError as e:
            if n == len(lines):
                break
            raise ValueError(f"{path} line {n}: not JSON ({e})") from None
    return rows


def number(value):
    """A column's number, NaN for null (a loss that stopped being a number)."""
    return math.nan if value is None else value
