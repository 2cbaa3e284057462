"""scripts/speed_holdout.py refuses bad input before any `train memory` run and stops its runs on
SIGTERM (reliability round: an empty --only ran the whole table, SIGTERM left its train running).
None of these runs the 56-figure table: each uses a one- or two-figure --figures file and a
stand-in --train (`train cards` is the real one, TRAIN_BINARY; `train memory` fails at once or
sleeps)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "speed_holdout.py"
FIGURE = {"precision": "fp32", "batch": 8, "images_per_second": 100, "source": "s"}


def stand_in(folder, memory="fail"):
    """An executable `train` in `folder`: each call appended to folder/calls; `train cards` is
    TRAIN_BINARY's; `train memory` fails at once ("fail") or adds its pid to folder/pids and
    sleeps as that same process ("sleep")."""
    path = Path(folder) / "train"
    work = ('echo "stand-in: no prediction" >&2\nexit 1\n' if memory == "fail"
            else f'echo $$ >> "{folder}/pids"\nexec sleep 60\n')
    path.write_text(f'#!/bin/sh\necho "$*" >> "{folder}/calls"\n'
                    f'[ "$1" = cards ] && exec "{os.environ["TRAIN_BINARY"]}" "$@"\n{work}')
    path.chmod(0o755)
    return path


def figures(folder, *cards):
    path = Path(folder) / "figures.json"
    path.write_text(json.dumps([dict(FIGURE, card=card) for card in cards]))
    return path


def memory_calls(folder):
    calls = Path(folder) / "calls"
    return [c for c in calls.read_text().splitlines() if c.startswith("memory")] if calls.exists() else []


def alive(pid):
    """Whether `pid` runs (a zombie, killed and not yet reaped by its new parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@unittest.skipUnless(os.environ.get("TRAIN_BINARY"), "TRAIN_BINARY not set (ctest sets it)")
class SpeedHoldoutTest(unittest.TestCase):
    def holdout(self, tmp, *args):
        """speed_holdout.py run in the empty folder tmp/cwd (so that a default --out would land
        there); returns the finished process."""
        cwd = Path(tmp) / "cwd"
        cwd.mkdir(exist_ok=True)
        return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd)

    def assertRefused(self, tmp, proc, said):
        """Exit 2, `said` as the one line on stderr, nothing run, nothing written."""
        self.assertEqual((proc.returncode, proc.stderr), (2, f"speed_holdout: {said}\n"))
        self.assertEqual(memory_calls(tmp), [])
        self.assertEqual(list((Path(tmp) / "cwd").iterdir()), [])
        self.assertFalse((Path(tmp) / "out").exists())

    def test_an_empty_value_is_refused_not_taken_as_the_default(self):
        """`--only ''` was no filter (the whole table ran); `--out ''` a traceback; `--figures ''`
        and `--train ''` Python's own errors, or with --reuse no train at all."""
        train_expected = "the train binary (build it: scripts/setup.sh)"
        for args, said in (
                (["--only", ""], "--only: expected a value, got an empty string"),
                (["--only=", "--reuse"], "--only: expected a value, got an empty string"),
                (["--out", ""], "--out: empty; expected a folder for the config, the runs and the report"),
                (["--figures", ""], "--figures: empty; expected the held-out figures (a JSON list)"),
                (["--train", ""], f"--train: empty; expected {train_expected}"),
                (["--train", "", "--reuse"], f"--train: empty; expected {train_expected}"),
                # Sixteenth pass: a value of only blanks is nothing too (a folder named " ").
                (["--only", " "], "--only: expected a value, got only blanks"),
                (["--out", " \t"], "--out: only blanks; expected a folder for the config, the runs and the report")):
            with self.subTest(args=args), tempfile.TemporaryDirectory() as tmp:
                base = ["--train", str(stand_in(tmp)), "--figures", str(figures(tmp, "T4")),
                        "--out", str(Path(tmp) / "out"), "--jobs", "1"]
                self.assertRefused(tmp, self.holdout(tmp, *base, *args), said)

    def test_precision_keeps_the_figures_at_it_and_their_folders(self):
        """fp16 steps are recorded for minutes each on a CPU without native fp16: --precision fp32
        runs the fp32 figures alone, in the folders a whole run names them."""
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "figures.json"
            path.write_text(json.dumps([dict(FIGURE, card="T4", precision="fp16"),
                                        dict(FIGURE, card="T4")]))
            proc = self.holdout(tmp, "--train", str(stand_in(tmp)), "--figures", str(path),
                                "--out", str(Path(tmp) / "out"), "--jobs", "1", "--precision", "fp32")
            self.assertEqual(proc.returncode, 1, proc.stderr)  # the stand-in predicts nothing
            calls = memory_calls(tmp)
            self.assertEqual(len(calls), 1, calls)
            self.assertIn("--settings fp32 ", calls[0])
            self.assertIn("/runs/01-T4-fp32-b8 ", calls[0] + " ")
            proc = self.holdout(tmp, "--train", str(stand_in(tmp)), "--figures", str(path),
                                "--precision", "bf16")
            self.assertEqual(proc.returncode, 2)
            self.assertIn("invalid choice: 'bf16'", proc.stderr)
        # One that keeps no figure is refused, nothing written (it wrote an empty report, exit 0).
        with tempfile.TemporaryDirectory() as tmp:
            proc = self.holdout(tmp, "--train", str(stand_in(tmp)), "--figures", str(figures(tmp, "T4")),
                                "--out", str(Path(tmp) / "out"), "--precision", "fp16")
            self.assertRefused(tmp, proc, "--precision fp16 matches no figure")

    def test_an_infinite_timeout_is_refused(self):
        """`--timeout inf` passed the check and each run's wait raised OverflowError: a traceback."""
        with tempfile.TemporaryDirectory() as tmp:
            proc = self.holdout(tmp, "--train", str(stand_in(tmp)), "--figures", str(figures(tmp, "T4")),
                                "--out", str(Path(tmp) / "out"), "--timeout", "inf")
            self.assertRefused(tmp, proc, "--timeout must be a positive number of seconds")

    def test_a_folder_or_a_missing_file_as_figures_is_one_line_in_path_arguments_form(self):
        with tempfile.TemporaryDirectory() as tmp:
            train = str(stand_in(tmp))
            for given, said in ((tmp, f"{tmp}: is a folder"), (f"{tmp}/none.json", f"{tmp}/none.json: no such file")):
                with self.subTest(figures=given):
                    proc = self.holdout(tmp, "--train", train, "--figures", given, "--out", str(Path(tmp) / "out"))
                    self.assertRefused(tmp, proc, f"--figures: {said}; expected the held-out figures (a JSON list)")

    def test_an_unknown_card_in_the_figures_is_refused_with_or_without_only(self):
        """Without --only the figure ran, failed, and the report was written (exit 1)."""
        for only in ([], ["--only", "T4"]):
            with self.subTest(only=only), tempfile.TemporaryDirectory() as tmp:
                path = figures(tmp, "T4", "H300")
                proc = self.holdout(tmp, "--train", str(stand_in(tmp)), "--figures", str(path),
                                    "--out", str(Path(tmp) / "out"), "--jobs", "1", *only)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertRegex(proc.stderr, f"^speed_holdout: --figures {path}: unknown card 'H300'[^\n]*\n$")
                self.assertEqual(memory_calls(tmp), [])
                self.assertFalse((Path(tmp) / "out").exists())

    def test_sigterm_kills_the_train_run_and_exits_130(self):
        """SIGTERM ended the script with 143 and left its `train memory` run going."""
        with tempfile.TemporaryDirectory() as tmp:
            pid_file = Path(tmp) / "pids"
            proc = subprocess.Popen([sys.executable, str(SCRIPT), "--train", str(stand_in(tmp, memory="sleep")),
                                     "--figures", str(figures(tmp, "T4", "A10")), "--out", str(Path(tmp) / "out"),
                                     "--jobs", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            pids = []
            try:
                deadline = time.time() + 30
                while len(pids) < 2 and time.time() < deadline:  # both runs under way
                    time.sleep(0.05)
                    pids = [int(p) for p in pid_file.read_text().split()] if pid_file.exists() else []
                self.assertEqual(len(pids), 2, "the stand-in's two train memory runs never started")
                proc.send_signal(signal.SIGTERM)
                _, stderr = proc.communicate(timeout=20)
                self.assertEqual(proc.returncode, 130, stderr)
                self.assertTrue(stderr.endswith("speed_holdout: interrupted\n"), stderr)
                deadline = time.time() + 5
                while any(alive(pid) for pid in pids) and time.time() < deadline:
                    time.sleep(0.05)
                self.assertEqual([pid for pid in pids if alive(pid)], [], "train runs outlived the script")
                self.assertFalse((Path(tmp) / "out" / "speed_holdout.md").exists())
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
                for pid in pids:
                    if alive(pid):
                        os.kill(pid, signal.SIGKILL)

if __name__ == "__main__":
    unittest.main()
