"""scripts/compare_devices.py on a tiny synthetic config (needs TRAIN_BINARY)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = ("model: {arch: resnet18, stem: imagenet}\n"
        "data: {source: synthetic, synthetic_train_size: 512, synthetic_test_size: 32}\n"
        "training: {batch_size: 16}\n")


def compare(*args):
    return subprocess.run([sys.executable, str(REPO / "scripts/compare_devices.py"),
                           "--train", os.environ.get("TRAIN_BINARY", sys.executable), *args],
                          capture_output=True, text=True)


def cuda_usable():
    return shutil.which("nvidia-smi") is not None and \
        subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def tiny_config(tmp):
    """TINY written into the folder `tmp`; its path."""
    config = Path(tmp) / "tiny.yaml"
    config.write_text(TINY)
    return config


@unittest.skipUnless(os.environ.get("TRAIN_BINARY"), "TRAIN_BINARY not set (ctest sets it)")
class CompareDevicesTest(unittest.TestCase):
    def test_three_tables_with_steady_rates_and_a_projected_cpu_epoch(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = tiny_config(tmp)
            out = Path(tmp) / "compare"
            proc = compare("--config", str(config), "--cpu-steps", "15", "--threads", "1",
                           "--trial-timeout", "120", "--fastest-precisions", "fp32", "--out", str(out))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            result = json.loads((out / "compare.json").read_text())
            self.assertEqual(list(result["tables"]), ["seed", "study", "fastest"])
            table = (out / "compare.md").read_text()
            for name, entries in result["tables"].items():
                cpu, cuda = entries
                self.assertTrue(cpu["available"], (name, cpu))
                totals = cpu["totals"]
                # 15 of an epoch's 32 (seed: 16) batches: 5 warm-up steps apart, 10 steady ones,
                # the epoch projected from them.
                self.assertEqual(totals["warmup_steps"], 5, name)
                self.assertGreater(totals["warmup_seconds"], 0, name)
                self.assertGreater(totals["steady_images_per_second"], 0, name)
                self.assertTrue(totals["epoch_seconds_projected"], name)
                self.assertEqual(totals["projected_from_steps"], 10, name)
                self.assertGreater(totals["epoch_seconds"], 0, name)
                if not cuda["available"]:
                    self.assertIn("- cuda: ", table)
            self.assertEqual(result["tables"]["seed"][0]["settings"][:4],
                             ["model.arch=resnet50", "model.stem=imagenet", "model.num_classes=1000",
                              "training.batch_size=32"])
            fastest = result["tables"]["fastest"][0]["settings"]
            self.assertEqual(len(fastest), 2)
            self.assertEqual(fastest[0], "training.precision=fp32")
            self.assertIn(fastest[1], ["training.memory_format=contiguous", "training.memory_format=channels_last"])
            self.assertIn("projected from 10 steady steps", table)
            self.assertIn("| images/s, steady |", table)
            self.assertIn("| warm-up (steps, s) | 5, ", table)
            self.assertIn("| fastest setting (train sweep) | " + ", ".join(s.split("=")[1] for s in fastest), table)
            self.assertEqual(table.count("## "), 3)
            # The fastest table's sweep measured every setting it could.
            sweep = json.loads((out / "fastest/sweep-cpu/sweep.json").read_text())
            self.assertEqual(len(sweep["cells"]), 2)

    def test_a_card_gets_a_predicted_column_beside_the_measured_cpu(self):
        """--card NAME: the table's setting predicted on the card (issue 53): images/s estimated by
        the speed model, the peaks by replay; a card given by its size says it has no speed."""
        with tempfile.TemporaryDirectory() as tmp:
            config = tiny_config(tmp)
            out = Path(tmp) / "compare"
            proc = compare("--config", str(config), "--tables", "study", "--devices", "cpu", "--cpu-steps", "15",
                           "--threads", "1", "--card", "h100 sxm", "--card", "24GiB", "--out", str(out))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            table = (out / "compare.md").read_text()
            # The command is written as it can be typed back: each argument one shell word.
            self.assertIn("--card 'h100 sxm' --card 24GiB", table)
            self.assertIn("| | cpu | H100-SXM (predicted) | 24GiB (predicted) |", table)
            steady = next(line for line in table.splitlines() if line.startswith("| images/s, steady |"))
            cells = [c.strip() for c in steady.strip("|").split("|")]
            self.assertRegex(cells[2], r"^[0-9.]+ \(estimated\)$")
            self.assertEqual(cells[3], "no data sheet for '24GiB': speeds not estimated")
            reserved = next(line for line in table.splitlines() if line.startswith("| peak reserved (MiB) |"))
            self.assertRegex(reserved, r"\| [0-9.]+ \| [0-9.]+ \|$")
            result = json.loads((out / "compare.json").read_text())
            cards = result["cards"]["study"]
            self.assertEqual([c["card"] for c in cards], ["H100-SXM", "24GiB"])
            self.assertGreater(cards[0]["setting"]["predicted_images_per_second"], 0)
            self.assertIn("per-operation roofline", cards[0]["setting"]["speed_model"])
            # With the CPU the only measured device, each card still has its speed-up over it (the
            # row was added only where more than one device ran); the card without a speed has none.
            cpu_rate = result["tables"]["study"][0]["totals"]["steady_images_per_second"]
            speedup = cards[0]["setting"]["predicted_images_per_second"] / cpu_rate
            self.assertAlmostEqual(cards[0]["speedup_over_cpu"], speedup)
            self.assertIsNone(cards[1]["speedup_over_cpu"])
            row = next((line for line in table.splitlines() if line.startswith("| steady images/s vs the CPU |")), "")
            self.assertEqual([c.strip() for c in row.strip("|").split("|")],
                             ["steady images/s vs the CPU", "1.00x", f"{speedup:.2f}x (estimated)", "-"], table)

    def test_steps_beyond_an_epoch_are_trained_over_more_epochs_and_the_header_says_so(self):
        """--cpu-steps 15 on 256 images at batch 32 (8 steps an epoch) trained 8 steps under a header
        that said 15 (reliability round 3)."""
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "small.yaml"
            config.write_text(TINY.replace("synthetic_train_size: 512", "synthetic_train_size: 256")
                              .replace("batch_size: 16", "batch_size: 32"))
            out = Path(tmp) / "compare"
            proc = compare("--config", str(config), "--tables", "study", "--devices", "cpu", "--cpu-steps", "15",
                           "--threads", "1", "--out", str(out))
            self.assertEqual(proc.returncode, 0, proc.stderr)
            rows = [json.loads(line) for line in (out / "study/cpu/metrics.jsonl").read_text().splitlines()]
            self.assertEqual([(r["epoch"], r["step"]) for r in rows], [(1, 8), (2, 15)])
            cpu = json.loads((out / "compare.json").read_text())["tables"]["study"][0]
            self.assertEqual(cpu["trained"], {"steps": 15, "epochs": 2, "steps_per_epoch": 8})
            self.assertIn("Trained: study: cpu 15 steps in 2 epochs of 8 steps.", (out / "compare.md").read_text())

    @unittest.skipIf(cuda_usable(), "a GPU is present: cuda runs")
    def test_no_device_that_ran_exits_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = tiny_config(tmp)
            out = Path(tmp) / "compare"
            proc = compare("--config", str(config), "--tables", "study", "--devices", "cuda",
                           "--gpu-steps", "15", "--out", str(out))
            self.assertEqual(proc.returncode, 2, proc.stdout)
            self.assertIn("no device ran", proc.stderr)
            self.assertIn("- cuda: not available: no CUDA device on this machine", (out / "compare.md").read_text())


class CompareDevicesArgumentsTest(unittest.TestCase):
    def test_bad_input_is_one_line_and_exit_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = tiny_config(tmp)
            for args, message in (
                    (["--config", str(Path(tmp) / "missing.yaml")], "--config: "),
                    (["--config", str(config), "--cpu-steps", "-3"], "--cpu-steps: -3: expected at least 15"),
                    (["--config", str(config), "--gpu-steps", "8"], "--gpu-steps: 8: expected at least 15"),
                    (["--config", str(config), "--gpu-epochs", "0"], "--gpu-epochs: 0: expected a positive"),
                    (["--config", str(config), "--tables", "seed,bogus"], "--tables: bogus"),
                    (["--config", str(config), "--devices", "tpu"], "--devices: expected cpu"),
                    # One reading of a list for every script and train: no empty item dropped.
                    (["--config", str(config), "--tables", "seed,"], "--tables: 'seed,' has an empty item"),
                    (["--config", str(config), "--devices", "cpu,,cuda"], "--devices: 'cpu,,cuda' has an empty"),
                    (["--config", str(config), "--fastest-precisions", "fp32, "],
                     "--fastest-precisions: 'fp32, ' has an empty item"),
                    # Checked before anything runs (a hostile pass: the sweep ran, then exit 2),
                    # repeats in train's words for every list.
                    (["--config", str(config), "--fastest-precisions", "fp32,fp32"],
                     "--fastest-precisions: fp32,fp32: item 2 repeats item 1; list each value once"),
                    (["--config", str(config), "--fastest-precisions", "fp64"],
                     "--fastest-precisions: fp64: expected some of fp32,bf16,fp16"),
                    (["--config", str(config), "--tables", "seed,seed"], "item 2 repeats item 1"),
                    # One GPU however it is spelled, as train reads a device: cuda is cuda:0.
                    (["--config", str(config), "--devices", "cuda,cuda:00"],
                     "--devices: cuda,cuda:0: item 2 repeats item 1; list each value once (cuda is cuda:0)"),
                    (["--config", str(config), "--devices", "cudax"], "--devices: expected cpu"),
                    (["--config", str(config), "--batch-size", "1048577"], "--batch-size: 1048577: expected at most"),
                    # argparse's own errors are one line too, not its usage block.
                    (["--config", str(config), "--cpu-steps", "abc"], "argument --cpu-steps: invalid int value"),
                    (["--config", str(config), "--bogus"], "unrecognized arguments: --bogus"),
                    (["--config", str(config), "--card"], "argument --card: expected one argument")):
                proc = compare(*args, "--out", str(Path(tmp) / "out"))
                self.assertEqual(proc.returncode, 2, args)
                self.assertIn(message, proc.stderr)
                self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
                self.assertFalse((Path(tmp) / "out").exists())
            # A comparison stopped before its end left its runs but no compare.json: refused, kept.
            stopped = Path(tmp) / "stopped"
            (stopped / "study" / "cpu").mkdir(parents=True)
            proc = compare("--config", str(config), "--out", str(stopped))
            self.assertEqual(proc.returncode, 2)
            self.assertIn("not empty (a comparison stopped before its end?)", proc.stderr)
            self.assertTrue((stopped / "study" / "cpu").exists())


if __name__ == "__main__":
    unittest.main()
