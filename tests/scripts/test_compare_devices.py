"""scripts/compare_devices.py on a few steps of a tiny synthetic config (needs TRAIN_BINARY)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@unittest.skipUnless(os.environ.get("TRAIN_BINARY"), "TRAIN_BINARY not set (ctest sets it)")
class CompareDevicesTest(unittest.TestCase):
    def test_cpu_side_runs_and_cuda_is_marked_when_absent(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "tiny.yaml"
            config.write_text("model: {arch: resnet18, stem: imagenet}\n"
                              "data: {source: synthetic, synthetic_train_size: 96, synthetic_test_size: 32}\n"
                              "training: {batch_size: 16}\n")
            out = Path(tmp) / "compare"
            proc = subprocess.run([sys.executable, str(REPO / "scripts/compare_devices.py"), "--config", str(config),
                                   "--train", os.environ["TRAIN_BINARY"], "--steps", "3", "--threads", "1",
                                   "--out", str(out)], capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            result = json.loads((out / "compare.json").read_text())
            cpu, cuda = result["entries"]
            self.assertTrue(cpu["available"])
            self.assertEqual(cpu["steps"], 3)
            self.assertEqual(cpu["threads"], 1)
            self.assertGreater(cpu["images_per_second"], 0)
            self.assertAlmostEqual(cpu["speedup_over_cpu"], 1.0)
            table = (out / "compare.md").read_text()
            if not cuda["available"]:
                self.assertEqual(cuda["note"], "not available: no CUDA device on this machine")
                self.assertIn("Only cpu ran: nothing to compare.", table)
                self.assertIn("- cuda: not available: no CUDA device on this machine", table)
            else:
                self.assertGreater(cuda["images_per_second"], 0)
                self.assertIn("| | cpu | cuda |", table)  # train compare's table of the two runs
                self.assertEqual((out / "runs" / "accuracy.png").read_bytes()[1:4], b"PNG")
            self.assertEqual((out / "compare.png").read_bytes()[1:4], b"PNG")

    def test_unbounded_work_is_refused(self):
        proc = subprocess.run([sys.executable, str(REPO / "scripts/compare_devices.py"), "--config", "x.yaml"],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("give --steps or --epochs", proc.stderr)


if __name__ == "__main__":
    unittest.main()
