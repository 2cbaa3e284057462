"""The helper scripts refuse bad input with one clear line and exit code 2."""
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(script, *args):
    return subprocess.run([sys.executable, str(REPO / "scripts" / script), *args], capture_output=True, text=True)


class ScriptArgumentsTest(unittest.TestCase):
    def test_plot_scripts_name_the_missing_file(self):
        with tempfile.TemporaryDirectory() as tmp:
            for script, name in (("plot_sweep.py", "sweep.json"), ("plot_run.py", "metrics.jsonl")):
                proc = run(script, tmp)
                self.assertEqual(proc.returncode, 2, script)
                self.assertIn(name, proc.stderr)

    def test_python_baseline_needs_binary_batches(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = run("python_baseline.py", "--data", tmp, "--steps", "1")
            self.assertEqual(proc.returncode, 2)
            self.assertIn("no data_batch_1.bin", proc.stderr)


if __name__ == "__main__":
    unittest.main()
