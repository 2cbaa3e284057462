"""Every plot script writes its PNGs through scripts/figure_file.py: whole or not at all, and a
failure leaves no temporary and names the PNG (reliability round 3)."""
import json
import resource
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
SETTING = {"precision": "fp32", "checkpointing": False, "memory_format": "contiguous"}

# Each plot script, the smallest input it draws, and the first PNG it writes.
INPUTS = {
    "plot_run.py": ("loss_accuracy.png", {"metrics.jsonl": {
        "epoch": 1, "train_loss": 2.0, "test_loss": 2.1, "train_acc": 0.1, "test_acc": 0.1,
        "images_per_second": 10.0, "data_wait_fraction": 0.0, "device": "cpu",
        "train_peak_allocated_bytes": MIB, "eval_peak_allocated_bytes": MIB}}),
    "plot_sweep.py": ("peak_memory.png", {"sweep.json": {
        "trials": [{**SETTING, "batch_size": 8, "status": "ok", "peak_reserved_bytes": MIB,
                    "images_per_second": 10.0}],
        "cells": [SETTING], "memory_limit_bytes": 1 << 30, "limit_is_emulated": True,
        "arch": "resnet18", "stem": "cifar", "device": "cpu"}}),
    "plot_memory.py": ("memory_breakdown.png", {
        "memory_breakdown.json": {"arch": "resnet18", "stem": "cifar", "batch_size": 8, "device": "cpu",
                                  "settings": [{"status": "ok", "setting": "fp32", "peak_phase": "backward",
                                                "measured_peak_bytes": MIB,
                                                "rows": [{"name": "weights", "group": "weights", "stage": "",
                                                          "bytes": MIB, "at_peak": True}]}]},
        "memory_timeline.json": {"settings": [{"setting": "fp32", "points": [[0, 0], [1, MIB]],
                                               "marks": [[1, "forward"]], "events": 2}]}}),
    "plot_compare.py": ("accuracy.png", {"compare.json": {"runs": [{
        "name": "a", "config": {}, "epochs": [{"epoch": 1, "epoch_seconds": 1.0, "eval_seconds": 0.5,
                                               "test_acc": 0.5, "test_loss": 1.0, "peak_allocated_bytes": MIB}]}]}}),
}


def write_inputs(folder, files):
    for name, content in files.items():
        (folder / name).write_text(json.dumps(content) + "\n")


def plot(script, folder, file_size_limit=None):
    limit = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit,) * 2)) if file_size_limit else None
    return subprocess.run([sys.executable, str(REPO / "scripts" / script), str(folder)], capture_output=True,
                          text=True, preexec_fn=limit)


def temporaries(folder):
    return [p.name for p in folder.iterdir() if ".tmp" in p.name]


class FigureFileTest(unittest.TestCase):
    def test_every_plot_script_draws_through_figure_file(self):
        scripts = sorted(p.name for p in (REPO / "scripts").glob("plot_*.py"))
        self.assertEqual(scripts, sorted(INPUTS))
        for script in scripts:
            self.assertIn("from figure_file import save", (REPO / "scripts" / script).read_text(), script)
            self.assertNotIn(".savefig(", (REPO / "scripts" / script).read_text(), script)

    def test_a_folder_where_the_png_goes_is_named_and_no_temporary_is_left(self):
        """The rename failed, the message named the temporary, and each try left one more."""
        for script, (png, files) in INPUTS.items():
            with tempfile.TemporaryDirectory() as tmp:
                folder = Path(tmp)
                write_inputs(folder, files)
                (folder / png).mkdir()
                for _ in range(2):
                    proc = plot(script, folder)
                    self.assertEqual(proc.returncode, 2, (script, proc.stderr))
                    self.assertEqual(proc.stderr.strip(), f"{script[:-3]}: {folder / png}: is a folder; expected "
                                                          "the PNG file to write there (move the folder away)")
                self.assertEqual(temporaries(folder), [], script)
                self.assertEqual(list((folder / png).iterdir()), [])

    def test_a_full_disk_while_drawing_leaves_no_temporary(self):
        """A write that fails part-way (here: the file-size limit, as a full disk) left the temporary."""
        png, files = INPUTS["plot_run.py"]
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            write_inputs(folder, files)
            proc = plot("plot_run.py", folder, file_size_limit=4096)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertEqual(proc.stderr.strip(), f"plot_run: {folder / png}: File too large")
            self.assertEqual(temporaries(folder), [])
            self.assertFalse((folder / png).exists())


if __name__ == "__main__":
    unittest.main()
