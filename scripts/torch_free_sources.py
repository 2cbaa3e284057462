#!/usr/bin/env python3
"""Prints the sources that include no LibTorch header, directly or through the project's own
headers, as a CMake list (absolute paths separated by ';').

  scripts/torch_free_sources.py REPO_ROOT DIR...

CMakeLists.txt runs it at configure time: those files skip the precompiled torch/torch.h (a
~700 MB .gch that costs a file 5-10 s to load, where the file alone compiles in about a second),
and so build while the precompiled header is being made. A file that later includes LibTorch
without a reconfigure still compiles, only without the precompiled header.
"""
import re
import sys
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^>"]+)[>"]', re.MULTILINE)
LIBTORCH = ("torch/", "ATen/", "caffe2/")


def main() -> int:
    root = Path(sys.argv[1]).resolve()
    seen: dict[Path, bool] = {}

    def includes_libtorch(path: Path) -> bool:
        if path in seen:
            return seen[path]
        seen[path] = False  # an include cycle adds nothing
        found = False
        for header in INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            ours = root / header
            if header.startswith(LIBTORCH) or (ours.is_file() and includes_libtorch(ours)):
                found = True
                break
        seen[path] = found
        return found

    free = [str(f) for d in sys.argv[2:] for f in sorted((root / d).rglob("*.cpp"))
            if not includes_libtorch(f)]
    print(";".join(free), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
