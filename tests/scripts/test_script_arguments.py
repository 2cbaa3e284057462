"""The helper scripts refuse bad input with one clear line and exit code 2."""
import json
import os
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
            for script, name in (("plot_sweep.py", "sweep.json"), ("plot_run.py", "metrics.jsonl"),
                                 ("plot_memory.py", "memory_breakdown.json"),
                                 ("plot_compare.py", "compare.json"),
                                 ("read_tensorboard.py", "no events.out.tfevents.* file")):
                proc = run(script, tmp)
                self.assertEqual(proc.returncode, 2, script)
                self.assertIn(name, proc.stderr)

    def test_a_sweep_that_measured_no_step_draws_nothing_and_says_so(self):
        # Every trial timed out (or ran out of memory): a log axis without data raised Python's
        # "ValueError: Data cannot be log-scaled".
        setting = {"precision": "fp32", "checkpointing": False, "memory_format": "contiguous"}
        for status in ("error", "oom"):
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / "sweep.json").write_text(json.dumps({
                    "trials": [{**setting, "batch_size": 8, "status": status, "peak_reserved_bytes": 0,
                                "images_per_second": 0.0}],
                    "cells": [setting], "memory_limit_bytes": 1 << 30, "limit_is_emulated": True,
                    "arch": "resnet18", "stem": "cifar", "device": "cpu"}))
                proc = run("plot_sweep.py", tmp)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)
                self.assertIn("no trial measured a step", proc.stderr)
                self.assertFalse((Path(tmp) / "peak_memory.png").exists())

    def test_python_baseline_needs_binary_batches(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = run("python_baseline.py", "--data", tmp, "--steps", "1")
            self.assertEqual(proc.returncode, 2)
            self.assertIn("no data_batch_1.bin", proc.stderr)

    def test_gpu_check_refuses_bad_arguments(self):
        for args in ([], ["--speed"], ["/tmp/x", "--fast"]):
            proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), *args],
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 2, args)
            self.assertIn("usage: scripts/gpu_check.sh OUT_DIR [--speed]", proc.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), tmp, "--only", "bogus"],
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 2)
            self.assertEqual(proc.stderr, "gpu_check: --only: unknown group 'bogus'\n")

    def test_gpu_check_without_a_gpu_says_so_first_and_stops(self):
        # nvidia-smi as on a machine without a GPU: absent, or present with no driver to talk to.
        for fake in (None, "echo 'NVIDIA-SMI has failed because it could not communicate with the driver'; exit 9"):
            with tempfile.TemporaryDirectory() as tmp:
                bin_dir = Path(tmp) / "bin"
                bin_dir.mkdir()
                for tool in ("bash", "dirname", "date", "mkdir"):
                    (bin_dir / tool).symlink_to(subprocess.run(["which", tool], capture_output=True,
                                                               text=True).stdout.strip())
                if fake:
                    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{fake}\n")
                    (bin_dir / "nvidia-smi").chmod(0o755)
                out = Path(tmp) / "out"
                proc = subprocess.run([str(bin_dir / "bash"), str(REPO / "scripts" / "gpu_check.sh"), str(out)],
                                      capture_output=True, text=True, env={"PATH": str(bin_dir), "HOME": tmp})
                self.assertEqual(proc.returncode, 1, proc.stderr)
                output = (proc.stderr + proc.stdout).splitlines()
                self.assertEqual(output, ["gpu_check: no GPU on this machine (nvidia-smi -L lists none); "
                                          "nothing was checked"])
                self.assertFalse(out.exists())

    def test_setup_scripts_refuse_bad_switches(self):
        proc = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], capture_output=True, text=True,
                              env=dict(os.environ, TRAIN_IGNORE_SYSTEM_CUDA="yes"))
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr, "setup: TRAIN_IGNORE_SYSTEM_CUDA=yes: expected 0 or 1\n")
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run(["bash", str(REPO / "scripts" / "pip_cuda.sh"), tmp],
                                  capture_output=True, text=True)
            self.assertEqual(proc.returncode, 2)
            self.assertEqual(proc.stderr, f"pip_cuda: {tmp} is not a virtualenv (no bin/python)\n")
        proc = subprocess.run(["bash", str(REPO / "scripts" / "check_pip_cuda.sh"), "--build"],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 2)
        self.assertEqual(proc.stderr,
                         "check_pip_cuda: unknown argument '--build' (expected --configure-only or nothing)\n")

    def test_gpu_check_report_needs_the_checks(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = run("gpu_check_report.py", tmp)
            self.assertEqual(proc.returncode, 2)
            self.assertIn("checks.jsonl: not found", proc.stderr)

    def test_gpu_check_report_reports_what_the_checks_left(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            (out / "checks.jsonl").write_text(
                '{"check": "build (Release)", "log": "build.log", "passed": true, "exit_code": 0, "seconds": 61.0}\n'
                '{"check": "CUDA suite (ctest -L cuda)", "log": "cuda_suite.log", "passed": false, "exit_code": 8, "seconds": 90.5}\n')
            (out / "gpu.log").write_text("name, memory.total [MiB]\nNVIDIA H200, 143771 MiB\n")
            (out / "cuda_suite.log").write_text("93% tests passed, 1 tests failed out of 14\n")
            (out / "resnet50").mkdir()
            (out / "resnet50" / "sweep.json").write_text(
                '{"trials": [{"status": "ok", "images_per_second": 25000.0, "median_step_seconds": 0.02048,'
                ' "peak_reserved_bytes": 1000}]}')
            proc = run("gpu_check_report.py", tmp)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            md = (out / "gpu_check.md").read_text()
            self.assertIn("| CUDA suite (ctest -L cuda) | FAILED (exit 8) | 90.5 | `cuda_suite.log` |", md)
            self.assertIn("CUDA suite: 13 passed, 1 failed, 0 skipped of 14.", md)
            # 25,000 images/s x 7.788 GFLOP = 194.7 TFLOP/s = 19.7% of 989.4 on an H200.
            self.assertIn("25000 images/s, 20.5 ms/step, 194.7 TFLOP/s, 19.7% MFU", md)
            report = __import__("json").loads((out / "gpu_check.json").read_text())
            self.assertAlmostEqual(report["figures"]["resnet50_bf16_channels_last_b512"]["epoch_seconds_at_this_rate"], 2.0)

    def test_gpu_check_report_pairs_eager_and_graphed_trials_by_batch(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            (out / "checks.jsonl").write_text(
                '{"check": "build (Release)", "log": "build.log", "passed": true, "exit_code": 0, "seconds": 61.0}\n')
            for name, trials in (("resnet50", [(128, 12000.0), (512, 15000.0)]),
                                 ("resnet50_graphed", [(128, 18000.0), (512, 0.0)])):
                (out / name).mkdir()
                rows = ",".join(
                    f'{{"status": "{"ok" if rate else "out_of_memory"}", "batch_size": {batch}, '
                    f'"images_per_second": {rate}, "median_step_seconds": 0.01, "peak_reserved_bytes": 1}}'
                    for batch, rate in trials)
                (out / name / "sweep.json").write_text(f'{{"trials": [{rows}]}}')
            proc = run("gpu_check_report.py", tmp)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            md = (out / "gpu_check.md").read_text()
            self.assertIn("| ResNet-50 CIFAR stem, bf16, channels_last | 128 | 12000 | 18000 | 1.50x |", md)
            self.assertNotIn("| 512 |", md)  # the graphed trial at 512 did not finish
            self.assertIn("15000 images/s", md)  # the b512 figure is the batch-512 trial

    def test_gpu_check_report_gives_the_fast_configs_time_to_accuracy(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            (out / "checks.jsonl").write_text(
                '{"check": "build (Release)", "log": "build.log", "passed": true, "exit_code": 0, "seconds": 61.0}\n')
            (out / "fast").mkdir()
            # Epochs of 3 s + 0.5 s of evaluation: 90% after epoch 2 (7 s), 94% after epoch 4 (14 s).
            (out / "fast" / "metrics.jsonl").write_text("".join(
                f'{{"epoch": {e}, "test_acc": {acc}, "epoch_seconds": 3.0, "eval_seconds": 0.5}}\n'
                for e, acc in ((1, 0.85), (2, 0.91), (3, 0.935), (4, 0.9405))))
            proc = run("gpu_check_report.py", tmp)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            md = (out / "gpu_check.md").read_text()
            self.assertIn("| eager | 4 | 94.05% | 14.0 | 7.0 s | 10.5 s | 14.0 s | not reached |", md)
            self.assertNotIn("| graph-captured step |", md)  # that run left nothing
            report = __import__("json").loads((out / "gpu_check.json").read_text())
            self.assertEqual(report["figures"]["fast_config"][0]["time_to_accuracy"]["0.94"], 14.0)

    def test_gpu_check_report_gives_the_seeds_cpu_vs_gpu_table(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            (out / "checks.jsonl").write_text(
                '{"check": "build (Release)", "log": "build.log", "passed": true, "exit_code": 0, "seconds": 61.0}\n')
            (out / "compare").mkdir()

            def totals(rate, seconds, projected):
                return {"steady_images_per_second": rate, "warmup_steps": 5, "warmup_seconds": 2.0,
                        "epoch_seconds": seconds, "epoch_seconds_projected": projected,
                        "projected_from_steps": 25 if projected else 0}
            seed = ["model.stem=imagenet", "model.num_classes=1000"]
            (out / "compare" / "compare.json").write_text(__import__("json").dumps({"tables": {"seed": [
                {"device": "cpu", "available": True, "settings": seed, "totals": totals(150.0, 333.3, True),
                 "speedup_over_cpu": 1.0},
                {"device": "cuda", "available": True, "settings": seed, "totals": totals(3000.0, 17.5, False),
                 "speedup_over_cpu": 20.0}]}}))
            proc = run("gpu_check_report.py", tmp)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            md = (out / "gpu_check.md").read_text()
            self.assertIn("- cpu (model.stem=imagenet, model.num_classes=1000): 150 steady images/s, 1.0x the CPU, "
                          "epoch 333.3 s (projected from 25 steady steps)", md)
            self.assertIn("- cuda (model.stem=imagenet, model.num_classes=1000): 3000 steady images/s, 20.0x the CPU, "
                          "epoch 17.5 s", md)

    def test_failures_are_one_line_and_exit_two_never_a_traceback(self):
        """Cases that ended in tracebacks (reliability round 2)."""
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "afile").write_text("")
            (tmp / "loop1").symlink_to(tmp / "loop2")
            (tmp / "loop2").symlink_to(tmp / "loop1")
            (tmp / "sweep").mkdir()
            (tmp / "sweep" / "sweep.json").write_text('{"trials": [], "cells": []}')
            cases = [("get_data.py", "--root", str(tmp / "afile"), "--from", str(tmp)),
                     ("get_data.py", "--root", str(tmp / "loop1"), "--from", str(tmp)),
                     ("launch.py", "-n", "1", "--"),
                     ("launch.py", "-n", "1", str(tmp / "no-such-binary")),
                     ("plot_sweep.py", str(tmp / "sweep")),
                     ("compare_devices.py", "--config", str(tmp / "missing.yaml"), "--out", str(tmp / "cmp")),
                     ("compare_devices.py", "--devices", "cpu,cpu", "--out", str(tmp / "cmp"))]
            for script, *args in cases:
                proc = run(script, *args)
                self.assertEqual(proc.returncode, 2, (script, args, proc.stderr))
                self.assertNotIn("Traceback", proc.stderr, (script, args))
                last = proc.stderr.strip().splitlines()[-1]
                self.assertRegex(last, r"^(get-data|launch|plot_sweep|compare_devices|launch\.py): ", (script, args))

    def test_the_speed_models_scripts_refuse_bad_input_in_one_line(self):
        """speed_check.py, speed_holdout.py and compare_devices.py --card (issue 53): one line,
        exit 2, before any run."""
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "afile").write_text("")
            (tmp / "cpu").mkdir()
            (tmp / "cpu" / "sweep.json").write_text('{"device": "cpu", "trials": []}')
            (tmp / "broken").mkdir()
            (tmp / "broken" / "sweep.json").write_text("{not json")
            (tmp / "figures.json").write_text(json.dumps(
                [{"card": "A10", "precision": "fp32", "batch": "x", "images_per_second": 1, "source": "s"}]))
            cases = [(("speed_check.py",), "speed_check: expected SWEEP_DIR"),
                     (("speed_check.py", str(tmp / "none")), "no sweep.json"),
                     (("speed_check.py", str(tmp / "cpu")), "the sweep ran on 'cpu', not on a card"),
                     (("speed_check.py", str(tmp / "broken")), "not a sweep's JSON"),
                     (("speed_holdout.py", "--out", str(tmp / "afile"), "--train", sys.executable),
                      "--out: " + str(tmp / "afile") + ": is a file; expected a folder"),
                     (("speed_holdout.py", "--figures", str(tmp / "figures.json")),
                      "figure 0: batch 'x' is not a positive whole number"),
                     (("speed_holdout.py", "--timeout", "0", "--train", sys.executable),
                      "--timeout must be a positive number")]
            if os.environ.get("TRAIN_BINARY"):
                train = os.environ["TRAIN_BINARY"]
                cases += [(("compare_devices.py", "--train", train, "--card", "nosuch", "--out", str(tmp / "c1")),
                           "--card: unknown card 'nosuch'"),
                          # One card however it is named: train's own rule (train cards refuses it).
                          (("compare_devices.py", "--train", train, "--card", "A100-80GB", "--card", "a100_80gb",
                            "--out", str(tmp / "c2")), "--card: item 2 repeats item 1"),
                          (("compare_devices.py", "--train", train, "--card", "24GiB", "--card", "24576MiB",
                            "--out", str(tmp / "c3")), "--card: item 2 repeats item 1"),
                          (("compare_devices.py", "--train", train, "--card", "T4", "--card", "T4",
                            "--out", str(tmp / "c4")), "--card: T4, T4: item 2 repeats item 1"),
                          (("speed_holdout.py", "--train", train, "--only", "nosuch", "--out", str(tmp / "h1")),
                           "speed_holdout: --only: unknown card 'nosuch'"),
                          (("speed_holdout.py", "--train", train, "--only", "h100,", "--out", str(tmp / "h2")),
                           "speed_holdout: --only: 'h100,' has an empty item"),
                          (("speed_holdout.py", "--train", train, "--only", "T4", "--out", str(tmp / "h3"),
                            "--figures", str(tmp / "one.json")), "speed_holdout: --only T4 matches no figure")]
                (tmp / "one.json").write_text(json.dumps(
                    [{"card": "A10", "precision": "fp32", "batch": 8, "images_per_second": 1, "source": "s"}]))
            for (script, *args), said in cases:
                proc = run(script, *args)
                self.assertEqual(proc.returncode, 2, (script, args, proc.stderr))
                lines = proc.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, (script, args, proc.stderr))
                self.assertIn(said, lines[0], (script, args))
            for out in ("c1", "c2", "c3", "c4", "h1", "h2", "h3"):
                self.assertFalse((tmp / out).exists(), out)

    @unittest.skipUnless(os.environ.get("TRAIN_BINARY"), "TRAIN_BINARY not set (ctest sets it)")
    def test_speed_holdout_only_finds_cards_as_train_does(self):
        """--only and the figures' cards are each found by `train cards` (no rule of the script's):
        "h100_sxm" keeps the H100-SXM figure, "A100 80GB SXM" the one written "a100-80gb-sxm"."""
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            figure = {"precision": "fp32", "batch": 8, "images_per_second": 100, "source": "s"}
            (tmp / "figures.json").write_text(json.dumps(
                [dict(figure, card=card) for card in ("H100-SXM", "a100-80gb-sxm", "T4", "H100-PCIe")]))
            # train for `train cards`; every `train memory` run fails at once (nothing to predict here).
            stand_in = tmp / "train"
            stand_in.write_text(f'#!/bin/sh\n[ "$1" = cards ] && exec {os.environ["TRAIN_BINARY"]} "$@"\n'
                                'echo "stand-in: no prediction" >&2\nexit 1\n')
            stand_in.chmod(0o755)
            proc = run("speed_holdout.py", "--train", str(stand_in), "--figures", str(tmp / "figures.json"),
                       "--only", "h100_sxm,A100 80GB SXM", "--out", str(tmp / "out"), "--jobs", "1")
            self.assertEqual(proc.returncode, 1, proc.stderr)  # the report made, its runs failed
            kept = json.loads((tmp / "out" / "speed_holdout_results.json").read_text())["figures"]
            self.assertEqual([f["card"] for f in kept], ["H100-SXM", "a100-80gb-sxm"])

    def test_predict_gpu_cases_refuses_before_it_runs_train(self):
        """Bad arguments are one line, exit 2, before any `train memory` run or write."""
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            (tmp / "plain.md").write_text("no markers here\n")
            cases = [(["--train", sys.executable, "--out", str(tmp / "o1"), "--docs", str(tmp / "plain.md")],
                      "--docs: "),
                     (["--train", sys.executable, "--out", str(tmp / "o2"), "--measure"], "--measure: goes with --grid"),
                     (["--train", str(tmp / "missing"), "--out", str(tmp / "o3")], "--train: "),
                     (["--compare", str(tmp / "none"), "--measured", str(tmp)], "--compare: ")]
            for args, said in cases:
                proc = run("predict_gpu_cases.py", *args)
                self.assertEqual(proc.returncode, 2, (args, proc.stderr))
                lines = proc.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, (args, proc.stderr))
                self.assertIn(said, lines[0])
            self.assertEqual((tmp / "plain.md").read_text(), "no markers here\n")
            self.assertFalse(any((tmp / name).exists() for name in ("o1", "o2", "o3")))

    def test_a_folder_an_empty_value_or_a_missing_path_is_said_with_what_was_expected(self):
        """`compare_devices.py --config <a folder>` said "no such file"; `plot_run.py ''` read the
        current folder; a folder as --markdown failed after the benchmark (reliability round 3)."""
        with tempfile.TemporaryDirectory() as tmp:
            folder, afile, missing = tmp, str(Path(tmp) / "afile"), str(Path(tmp) / "missing")
            Path(afile).write_text("")
            (Path(tmp) / "empty").mkdir()
            empty, python = str(Path(tmp) / "empty"), sys.executable
            config, train = "a config file (YAML)", "the train binary (build it: scripts/setup.sh)"
            cases = [
                ("compare_devices.py", ["--config", folder], f"--config: {folder}: is a folder; expected {config}"),
                ("compare_devices.py", ["--config", ""], f"--config: empty; expected {config}"),
                ("compare_devices.py", ["--config", missing], f"--config: {missing}: no such file; expected {config}"),
                ("compare_devices.py", ["--config", afile, "--train", folder],
                 f"--train: {folder}: is a folder; expected {train}"),
                ("compare_devices.py", ["--config", afile, "--train", python, "--out", afile],
                 f"--out: {afile}: is a file; expected a folder for the comparison"),
                ("compare_devices.py", ["--config", afile, "--train", python, "--out", ""],
                 "--out: empty; expected a folder for the comparison"),
                ("python_baseline.py", ["--data", afile],
                 f"--data: {afile}: is a file; expected a folder of binary batches (data_batch_1..5.bin, test_batch.bin)"),
                ("python_baseline.py", ["--data", ""],
                 "--data: empty; expected a folder of binary batches (data_batch_1..5.bin, test_batch.bin)"),
                ("python_baseline.py", ["--data", empty, "--json", folder],
                 f"--json: {folder}: is a folder; expected a file to write the result to"),
                ("bench_memory.py", ["--train", folder], f"--train: {folder}: is a folder; expected {train}"),
                ("bench_memory.py", ["--train", python, "--out", afile],
                 f"--out: {afile}: is a file; expected a folder for the sweep"),
                ("bench_memory.py", ["--train", python, "--markdown", folder],
                 f"--markdown: {folder}: is a folder; expected a file to write the table to"),
            ]
            for script in ("bench_loader.py", "bench_python.py"):
                data = ["--data", empty, "--jpeg", afile]  # never the defaults: the repository's datasets/
                cases += [
                    (script, ["--train", missing, *data], f"--train: {missing}: no such file; expected {train}"),
                    (script, ["--train", python, "--data", afile],
                     f"--data: {afile}: is a file; expected a folder of binary batches (made from --jpeg when it has none)"),
                    (script, ["--train", python, "--data", empty, "--jpeg", folder],
                     f"--jpeg: {folder}: a folder without train/ and test/; expected the JPEG tarball (or its "
                     "unpacked folder, holding train/ and test/) to make --data from"),
                    (script, ["--train", python, "--data", empty, "--jpeg", ""],
                     "--jpeg: empty; expected the JPEG tarball (or its unpacked folder, holding train/ and test/) "
                     "to make --data from"),
                    (script, ["--train", python, *data, "--markdown", folder],
                     f"--markdown: {folder}: is a folder; expected a file to write the table to")]
            for script, name, what in (("plot_run.py", "RUN_DIR", "a run folder"),
                                       ("read_tensorboard.py", "RUN_DIR", "a run folder"),
                                       ("plot_sweep.py", "SWEEP_DIR", "a sweep folder"),
                                       ("plot_memory.py", "STUDY_DIR", "a memory study folder"),
                                       ("plot_compare.py", "COMPARE_DIR", "a comparison folder"),
                                       ("gpu_check_report.py", "OUT_DIR", "the folder gpu_check.sh wrote")):
                cases += [(script, [""], f"{name}: empty; expected {what}"),
                          (script, [afile], f"{name}: {afile}: is a file; expected {what}"),
                          (script, [missing], f"{name}: {missing}: no such folder; expected {what}")]
            for script, args, message in cases:
                with self.subTest(script=script, args=args):
                    proc = subprocess.run([sys.executable, str(REPO / "scripts" / script), *args],
                                          capture_output=True, text=True, cwd=empty)
                    self.assertEqual((proc.returncode, proc.stderr), (2, f"{script[:-3]}: {message}\n"))
            self.assertEqual(list(Path(empty).iterdir()), [])
            self.assertEqual(Path(afile).read_text(), "")

    def test_a_torn_last_line_and_a_diverged_loss_still_plot(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp)
            row = {"epoch": 1, "train_loss": None, "test_loss": None, "train_acc": 0.1, "test_acc": 0.1,
                   "images_per_second": 10.0, "data_wait_fraction": 0.0, "device": "cpu",
                   "train_peak_allocated_bytes": 1, "eval_peak_allocated_bytes": 1}
            (run_dir / "metrics.jsonl").write_text(__import__("json").dumps(row) + "\n")
            (run_dir / "gpu.jsonl").write_text('{"time": 1.0, "device": "cpu", "memory_used_bytes": 5}\n{"time": 2')
            proc = run("plot_run.py", tmp)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            self.assertTrue((run_dir / "loss_accuracy.png").exists())

    @unittest.skipUnless(os.environ.get("TRAIN_BINARY"), "TRAIN_BINARY not set (ctest sets it)")
    def test_the_converter_refuses_splits_with_other_class_folders_as_train_does(self):
        sys.path.insert(0, str(REPO / "scripts"))
        import get_data
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "src"
            for split, classes in (("train", ("bird", "cat", "deer")), ("test", ("bird", "deer"))):
                for name in classes:
                    (src / split / name).mkdir(parents=True)
            with self.assertRaises(get_data.Refused) as refused:
                get_data.convert_to_binary(src, Path(tmp) / "out", Path(os.environ["TRAIN_BINARY"]))
            self.assertIn("its class folders differ", str(refused.exception))
            self.assertIn("missing 'cat'", str(refused.exception))


if __name__ == "__main__":
    unittest.main()
