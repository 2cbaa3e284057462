"""What the helper scripts share: one line and exit code 2 for any failure (never a traceback),
path arguments checked before any work, reading the .jsonl files `train` writes, the last error
line of a `train` run, and the cards `train cards` finds for names given (no script folds a card's
name by a rule of its own).

    if __name__ == "__main__":
        sys.exit(script_support.run("plot_run", main, sys.argv))

TRAIN_DEBUG=1 shows the traceback instead (for developing the scripts).
"""
import argparse
import json
import math
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path


class BadInput(Exception):
    """Input the user can fix: run() prints its message alone on one line and returns 2."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose errors (an unknown flag, a value of the wrong type, a flag without
    its value) are one line, as every other failure (BadInput), not its usage block; --help is
    argparse's own."""

    def error(self, message):
        raise BadInput(" ".join(message.split()))


def _stop(signum, frame):
    raise KeyboardInterrupt


def run(name, main, *args):
    """Calls main(*args) and returns its exit code; an exception becomes one line and exit 2,
    Ctrl-C or SIGTERM exit 130 (either unwinds: temporary folders are removed, a child started
    with subprocess.run is killed)."""
    signal.signal(signal.SIGTERM, _stop)
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
    if isinstance(error, BadInput):
        return str(error)
    if isinstance(error, OSError) and error.strerror:
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror}"
    text = " ".join(str(error).split()) or "no details"
    return f"{type(error).__name__}: {text}"


def path_argument(name, value, expected, kind="file", must_exist=True):
    """`value`, given as `name` (a flag or RUN_DIR), as a Path naming a `kind` ("file", "folder" or
    "file or folder"). Refused with BadInput ("--config: configs: is a folder; expected a config
    file") when it is empty or only blanks, missing (unless not `must_exist`: an output to create) or of another
    kind."""
    if not value or not value.strip():  # a folder named " " is no one's intent
        raise BadInput(f"{name}: {'only blanks' if value else 'empty'}; expected {expected}")
    try:
        mode = os.stat(value).st_mode
    except FileNotFoundError:
        if must_exist:
            raise BadInput(f"{name}: {value}: no such {kind}; expected {expected}") from None
        return Path(value)
    except OSError as e:
        raise BadInput(f"{name}: {value}: {e.strerror}; expected {expected}") from None
    is_folder, is_file = stat.S_ISDIR(mode), stat.S_ISREG(mode)
    if (is_folder and "folder" in kind) or (is_file and "file" in kind):
        return Path(value)
    what = "a folder" if is_folder else "a file" if is_file else "neither a file nor a folder"
    raise BadInput(f"{name}: {value}: is {what}; expected {expected}")


def bench_arguments(args, has_batches):
    """A bench script's --train, --data (made from --jpeg when it has no batches: `has_batches`)
    and --markdown, checked before any work; returns --data as a Path."""
    path_argument("--train", args.train, "the train binary (build it: scripts/setup.sh)")
    data = path_argument("--data", args.data, "a folder of binary batches (made from --jpeg when it "
                         "has none)", kind="folder", must_exist=False)
    if not has_batches(data):
        expected = "the JPEG tarball (or its unpacked folder, holding train/ and test/) to make --data from"
        jpeg = path_argument("--jpeg", args.jpeg, expected, kind="file or folder")
        if jpeg.is_dir() and not ((jpeg / "train").is_dir() and (jpeg / "test").is_dir()):
            raise BadInput(f"--jpeg: {jpeg}: a folder without train/ and test/; expected {expected}")
    if args.markdown is not None:
        path_argument("--markdown", args.markdown, "a file to write the table to", must_exist=False)
    return data

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


def last_error(proc):
    """The last `[error]` line of a finished `train` run, without its prefix (else its last line,
    else its exit status)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "[error]" in line]
    return (errors[-1].split("] ", 2)[-1] if errors else lines[-1] if lines else f"exit {proc.returncode}")


def items(flag, text):
    """The comma-separated items of a list flag as train's list flags read them: spaces around an
    item dropped, an empty item refused (BadInput), never one dropped in silence."""
    found = [item.strip(" \t") for item in text.split(",")]
    if any(not item for item in found):
        raise BadInput(f"{flag}: '{text}' has an empty item; expected items separated by single "
                       "commas, e.g. a,b")
    return found


def first_repeat(values):
    """train's rule for every list: "item 3 repeats item 1; list each value once" for the first
    value given again (compared as given: pass the values as the program reads them), else ""."""
    for i, value in enumerate(values):
        if value in values[:i]:
            return f"item {i + 1} repeats item {values.index(value) + 1}; list each value once"
    return ""


def train_cards(train, names, flag="--card"):
    """The cards `train cards --json --card NAME...` gives for `names`, in their order: each a dict
    with the card's "name" (H100-SXM for "h100 sxm", a size as it is typed back: "24GiB" for "24 gib"), "given",
    "known" (false for a size), "memory_bytes" and its data sheet. Each is found by train's own
    rule, the one every --card follows; an unknown card (train's line: "--card: unknown card ...",
    said as `flag`'s) or train failing is BadInput."""
    argv = [str(train), "cards", "--json"]
    asked = list(dict.fromkeys(names))  # train lists each card once; a name given again is its own
    for name in asked:
        argv += ["--card", name]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True)
    except OSError as e:
        raise BadInput(f"{flag}: `{train} cards` did not run: {describe(e)}") from None
    if proc.returncode != 0:
        error = last_error(proc)
        raise BadInput(f"{flag}: {error.removeprefix('--card: ')}")
    try:
        found = dict(zip(asked, json.loads(proc.stdout)["cards"]))
        return [found[name] for name in names]
    except (ValueError, KeyError):
        raise BadInput(f"{flag}: `{train} cards --json` gave no card list (an older train?)") from None


def card_key(card):
    """What makes two of train_cards()'s cards one card: the name of a card known by name, the
    memory of a card given by its size (24GiB and 24576MiB are one)."""
    return card["name"] if card["known"] else card["memory_bytes"]
