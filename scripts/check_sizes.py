#!/usr/bin/env python3
"""Checks the sources' sizes: no file over 400 lines, no function over 80.

  scripts/check_sizes.py [REPO_ROOT]

The sources are the tracked .h and .cpp files of app/, data/, models/ and training/. Functions
and their extents come from Universal Ctags (Debian's universal-ctags; its C++ parser gives each
function's first and last line), so the check costs well under a second where clang-tidy's
readability-function-size over every file costs minutes. A function counts from its signature's
line to its closing brace, lambdas inside it included. A function may stay longer only with a
comment on its first line that says why: `// NOLINT(readability-function-size): <reason>`.

Prints one line per violation (file:line: what and how long) and exits 1 when there is any; exit 0
and a summary otherwise. ctest runs it as `sizes`.
"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
ROOTS = ("app", "data", "models", "training")
EXEMPT = re.compile(r"NOLINT\(readability-function-size\):\s*\S")


def sources(root: Path) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *(f"{r}/*.cpp" for r in ROOTS), *(f"{r}/*.h" for r in ROOTS)],
        cwd=root, check=True, capture_output=True, text=True).stdout.splitlines()
    return sorted(f for f in listed if (root / f).is_file())


def functions(root: Path, files: list[str]) -> list[tuple[str, str, int, int]]:
    """(file, name, first line, last line) of every function defined in `files`."""
    ctags = shutil.which("ctags")
    if ctags is None:
        sys.exit("check_sizes: ctags not found: install Debian's universal-ctags "
                 "(scripts/setup.sh does)")
    out = subprocess.run(
        [ctags, "--languages=C++", "--language-force=C++", "--kinds-C++=f", "--fields=+ne",
         "-x", "--_xformat=%F\t%N\t%n\t%{end}", *files],
        cwd=root, check=True, capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        path, name, first, last = line.split("\t")
        if not (first.isdigit() and last.isdigit()):  # a function whose end ctags did not find
            sys.exit(f"check_sizes: {path}: ctags gives no extent for function {name} "
                     f"({first}..{last}); cannot check its size")
        found.append((path, name, int(first), int(last)))
    return found


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    files = sources(root)
    problems = []
    texts = {f: (root / f).read_text(encoding="utf-8").splitlines() for f in files}
    for f in files:
        if len(texts[f]) > MAX_FILE_LINES:
            problems.append(f"{f}: {len(texts[f])} lines, more than {MAX_FILE_LINES}")
    spans = functions(root, files)
    for path, name, first, last in spans:
        length = last - first + 1
        if length <= MAX_FUNCTION_LINES or EXEMPT.search(texts[path][first - 1]):
            continue
        problems.append(f"{path}:{first}: function {name} is {length} lines, more than "
                        f"{MAX_FUNCTION_LINES}")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"check_sizes: {len(files)} files within {MAX_FILE_LINES} lines, {len(spans)} functions "
          f"within {MAX_FUNCTION_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
