"""scripts/launch.py: environment, output prefixes, failure propagation, and a 2-rank train run."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LAUNCH = [sys.executable, str(REPO / "scripts/launch.py")]


def running(pid):
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except FileNotFoundError:
        return False


class LaunchTest(unittest.TestCase):
    def test_each_rank_gets_the_torchrun_variables_and_a_prefix(self):
        code = "import os; print(os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['LOCAL_RANK'], os.environ['MASTER_ADDR'])"
        proc = subprocess.run(LAUNCH + ["-n", "2", "--master-port", "0", "--", sys.executable, "-c", code],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = sorted(proc.stdout.splitlines())
        self.assertEqual(lines, ["[rank 0] 0 2 0 127.0.0.1", "[rank 1] 1 2 1 127.0.0.1"])

    def test_a_failing_rank_stops_the_others_and_sets_the_exit_code(self):
        script = 'if [ "$RANK" = 1 ]; then echo failing; exit 7; fi; sleep 60'
        started = time.time()
        proc = subprocess.run(LAUNCH + ["-n", "2", "--grace", "2", "--", "sh", "-c", script],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 7)
        self.assertLess(time.time() - started, 15)
        self.assertIn("[rank 1] failing", proc.stdout)
        self.assertIn("launch: rank 1 exited with code 7; stopping the other ranks", proc.stderr)

    def test_a_stopped_rank_is_not_a_failure_and_its_peers_finish_their_stop(self):
        # Rank 1 stops at once (130); rank 0 is still writing its checkpoint: it must not be
        # signalled again (that killed it mid-write).
        with tempfile.TemporaryDirectory() as tmp:
            script = (f'if [ "$RANK" = 1 ]; then exit 130; fi; '
                      f'trap "echo signalled > {tmp}/signalled" TERM; sleep 2; '
                      f'echo written > {tmp}/checkpoint; exit 130')
            proc = subprocess.run(LAUNCH + ["-n", "2", "--grace", "5", "--", "sh", "-c", script],
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 130, proc.stderr)
            self.assertTrue((Path(tmp) / "checkpoint").exists())
            self.assertFalse((Path(tmp) / "signalled").exists(), "rank 0 was signalled again")
            self.assertNotIn("stopping the other ranks", proc.stderr)

    def test_ranks_die_with_a_killed_launcher(self):
        with tempfile.TemporaryDirectory() as tmp:
            script = f'echo $$ > {tmp}/rank$RANK.pid; exec sleep 60'
            launcher = subprocess.Popen(LAUNCH + ["-n", "2", "--", "sh", "-c", script],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.addCleanup(launcher.wait)
            self.addCleanup(launcher.kill)
            pids = [Path(tmp) / f"rank{r}.pid" for r in (0, 1)]
            deadline = time.time() + 30
            while not all(p.exists() and p.read_text().strip() for p in pids) and time.time() < deadline:
                time.sleep(0.05)
            ranks = [int(p.read_text()) for p in pids if p.exists() and p.read_text().strip()]
            self.assertEqual(len(ranks), 2, "the ranks did not start")
            launcher.kill()
            launcher.wait()
            deadline = time.time() + 10
            while any(map(running, ranks)) and time.time() < deadline:
                time.sleep(0.05)
            alive = [pid for pid in ranks if running(pid)]
            for pid in alive:
                os.kill(pid, 9)
            self.assertEqual(alive, [])

    def test_bad_arguments_are_refused(self):
        proc = subprocess.run(LAUNCH + ["-n", "0", "true"], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("need -n >= 1", proc.stderr)

    @unittest.skipUnless(os.environ.get("TRAIN_BINARY"), "TRAIN_BINARY not set (ctest sets it)")
    def test_two_ranks_train_with_gloo_and_only_rank_0_writes(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "tiny.yaml"
            config.write_text("model: {arch: resnet18, stem: imagenet}\n"
                              "data: {source: synthetic, synthetic_train_size: 128, synthetic_test_size: 32}\n"
                              "training: {device: cpu, epochs: 1, batch_size: 16, threads: 1}\n")
            run = Path(tmp) / "run"
            proc = subprocess.run(LAUNCH + ["-n", "2", "--master-port", "0", os.environ["TRAIN_BINARY"],
                                            "--config", str(config), "--output-dir", str(run)],
                                  capture_output=True, text=True, timeout=300)
            self.assertEqual(proc.returncode, 0, proc.stdout[-3000:])
            self.assertIn("[rank 1]", proc.stdout)
            self.assertIn("rank 1 of 2 (gloo", proc.stdout)
            row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
            self.assertEqual(row["world_size"], 2)
            self.assertEqual(row["step"], 4)  # 128 images / (2 ranks x 16)


if __name__ == "__main__":
    unittest.main()
