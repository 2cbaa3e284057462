#!/usr/bin/env python3
"""Checks that every source file includes only its own layer and the layers below it.

  scripts/check_layers.py [REPO_ROOT]

The layers, lowest first (docs/architecture.md):

  training/platform   device and process plumbing: the CUDA seam, memory accounting, c10d,
                      sampler, profiler, child processes, atomic files, locks, errors
  data, models        CIFAR-10 readers and loader; the ResNets (each on its own)
  training            one training run, in rooms, lowest first:
    training/step       one training step and its parts (AMP, optimizer, schedule, EMA,
                        gradient checkpointing, the graph-captured step)
    training/config     the typed config: its schema and the YAML machinery
    training/parts      the config turned into the parts of a run (model, loaders, layout)
    training/run        what writes or reads a run directory: run and output directories, epoch
                        records, checkpoints, report, diagnosis
    training/loop       the loop and what watches it (observers, timing, evaluation, progress)
    training            the commands (training/*.cpp: train, convert)
  training/cards      a card this machine does not have: the caching allocator's model and its
                      options, the cards' data, the allocation stream scaled and replayed, the
                      step's estimated time
  training/bench      micro-benchmarks of this machine: matmul throughput, the input pipeline
  training/studies    measurements over runs: sweeps and trials, memory model, plans
  app                 command-line parsing and dispatch

Prints one line per violation (file:line: what it includes and why that is not allowed) and
exits 1 when there is any; exit 0 and a summary otherwise. ctest runs it as `layers`.
"""
import re
import sys
from pathlib import Path

# The rooms of the training layer, lowest first; a room may include itself and the rooms before it.
ROOMS = ["training/step", "training/config", "training/parts", "training/run", "training/loop",
         "training"]
BELOW_TRAINING = {"training/platform", "data", "models"}
# Each layer (a room counts as one) and the layers it may include (itself included).
ALLOWED = {
    "training/platform": {"training/platform"},
    "data": {"data"},
    "models": {"models"},
    **{room: set(ROOMS[:i + 1]) | BELOW_TRAINING for i, room in enumerate(ROOMS)},
    "training/cards": {"training/cards", *ROOMS, *BELOW_TRAINING},
    "training/bench": {"training/bench", *ROOMS, *BELOW_TRAINING},
    "training/studies": {"training/studies", "training/cards", *ROOMS, *BELOW_TRAINING},
    "app": {"app", "training/studies", "training/cards", "training/bench", *ROOMS, *BELOW_TRAINING},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """The layer of a repository-relative path, or None for files outside the layers."""
    parts = Path(path).parts
    if len(parts) >= 3 and parts[0] == "training" and f"training/{parts[1]}" in ALLOWED:
        return f"training/{parts[1]}"
    if parts and parts[0] in ("training", "data", "models", "app"):
        return parts[0]
    return None


def main(argv):
    root = Path(argv[1] if len(argv) > 1 else Path(__file__).resolve().parents[1])
    violations, checked = [], 0
    for top in ("app", "data", "models", "training"):
        for source in sorted((root / top).rglob("*")):
            if source.suffix not in (".h", ".cpp"):
                continue
            relative = source.relative_to(root).as_posix()
            layer = layer_of(relative)
            checked += 1
            for number, line in enumerate(source.read_text().splitlines(), 1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                target = layer_of(match.group(1))
                if target is not None and target not in ALLOWED[layer]:
                    violations.append(f"{relative}:{number}: includes {match.group(1)} "
                                      f"({target}), which layer {layer} may not include")
    for violation in violations:
        print(violation)
    if violations:
        return 1
    print(f"layers: {checked} files, every include goes to the same or a lower layer")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
