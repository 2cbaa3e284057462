"""train sweep --launcher slurm on a real Slurm cluster (slurm_cluster.py: a controller and two
nodes, na and nb, on two test hosts made from network namespaces, in a temporary folder). ctest
runs each class apart (slurm.<Class>); each makes its own cluster on its own subnet.

  an 8-trial CPU sweep as one job array    the rows of the same sweep run locally (equal peaks),
                                           each with its node and job id, on both nodes
  a task's process killed mid-run          its row says FAILED with the signal; the rerun on the
                                           folder submits only it, and the rows are complete
  a task's node taken down mid-run         its row says NODE_FAIL and the node; the rerun runs
                                           it on the node left
  Ctrl-C / SIGTERM to the sweep            the array cancelled (scancel), exit 130, the trials
                                           done so far in the tables, no job left
  sbatch refusing the options, no sbatch   one line, exit 2, nothing submitted, no folder
  the folder or train not seen by a node   one line naming it and the node, exit 2, no job left
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from slurm_cluster import Cluster

TRAIN = os.environ.get("TRAIN_BINARY", "")
ROW_KEYS = ("trial", "precision", "checkpointing", "memory_format", "batch_size", "status",
            "peak_allocated_bytes", "peak_reserved_bytes", "steady_peak_allocated_bytes",
            "steady_peak_reserved_bytes")


def write_config(folder, batches="[4, 8]", grid=True, measure_steps=1, sweep_keys=""):
    """`sweep_keys`: more of the sweep section, e.g. "slurm: {options: [--nodelist=nb]}, "."""
    path = Path(folder) / "tiny.yaml"
    cells = ("checkpointing: [false, true], memory_formats: [contiguous, channels_last], "
             if grid else "")
    path.write_text(
        "model: {arch: resnet18, stem: cifar}\n"
        "data: {source: synthetic, synthetic_train_size: 64, synthetic_test_size: 16}\n"
        "training: {device: cpu, threads: 1}\n"
        f"sweep: {{batch_sizes: {batches}, precisions: [fp32], {cells}{sweep_keys}"
        f"warmup_steps: 0, measure_steps: {measure_steps}}}\n")
    return path


def trials(sweep):
    return json.loads((Path(sweep) / "sweep.json").read_text())["trials"]


def rows(sweep):
    return [{k: t[k] for k in ROW_KEYS} for t in trials(sweep)]


def trial_pids(sweep, yaml_name=".yaml"):
    """Processes of `train sweep-trial` running <sweep>/trials/<...yaml_name>: this test's own,
    never another test's (ctest runs tests side by side, and other sweeps have trials 002 too)."""
    folder = str(Path(sweep) / "trials").encode() + b"/"
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"sweep-trial" in cmd and any(arg.startswith(folder) and arg.endswith(yaml_name.encode())
                                         for arg in cmd):
            pids.append(int(entry.name))
    return pids


class SlurmTestCase(unittest.TestCase):
    net = 0

    def setUp(self):
        if not TRAIN:
            self.skipTest("TRAIN_BINARY not set (ctest sets it)")
        self.tmp = Path(tempfile.mkdtemp(prefix="slurm-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        (self.tmp / "private").mkdir()  # a folder node nb does not see
        self.cluster = self.enterContext(Cluster(self.net, self.tmp / "cluster",
                                                 private=[self.tmp / "private"]))
        # Last in, first out: checked before the cluster goes down.
        self.addCleanup(self.assert_no_job_left)

    def assert_no_job_left(self):
        self.assertEqual(self.cluster.jobs(), "", "jobs left in the cluster")

    def sweep(self, config, out, *flags, train=None, env=None):
        """Starts `train sweep` on host A (beside the controller); its log is <out>.log."""
        argv = [train or TRAIN, "sweep", "--config", str(config), "--output-dir", str(out), *flags]
        return self.cluster.popen(argv, f"{out}.log", env=dict({"OMP_NUM_THREADS": "1"},
                                                                **(env or {})))

    def finish(self, proc, out, seconds=600):
        try:
            return proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            self.fail(f"train sweep still running after {seconds} s: {self.log(out)[-3000:]}")

    def log(self, out):
        return Path(f"{out}.log").read_text(errors="replace")


class Rows(SlurmTestCase):
    net = 61

    def test_an_8_trial_sweep_on_two_nodes_gives_the_rows_of_a_local_one(self):
        config = write_config(self.tmp)
        local, slurm = self.tmp / "local", self.tmp / "slurm"
        self.assertEqual(self.finish(self.sweep(config, local), local), 0, self.log(local))
        code = self.finish(self.sweep(config, slurm, "--launcher", "slurm"), slurm)
        self.assertEqual(code, 0, self.log(slurm)[-3000:])
        self.assertEqual(len(rows(local)), 8)
        self.assertEqual(rows(slurm), rows(local))  # equal peaks; the times differ
        ran = trials(slurm)
        jobs = {t["job_id"] for t in ran}
        self.assertEqual(len(jobs), 1, jobs)
        self.assertEqual([t["array_index"] for t in ran], list(range(1, 9)))
        self.assertEqual({t["host"] for t in ran}, {"na", "nb"})
        self.assertTrue(json.loads((slurm / "sweep.json").read_text())["complete"])
        log = self.log(slurm)
        self.assertIn(f"slurm job {jobs.pop()}: 8 done, 0 running, 0 pending, 0 failed", log)
        for t in trials(local):
            self.assertEqual((t["job_id"], t["array_index"]), ("", -1))
        # Sweep.csv has the columns too.
        header = (slurm / "sweep.csv").read_text().splitlines()[0].split(",")
        self.assertTrue({"host", "job_id", "array_index"} <= set(header), header)


class Failures(SlurmTestCase):
    net = 62

    def sweep_until_trial_2_runs(self, config, out):
        """A Slurm sweep started, returned once its second trial's process runs (or it ended)."""
        proc = self.sweep(config, out, "--launcher", "slurm")
        deadline = time.time() + 300
        while not trial_pids(out, "002.yaml") and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        return proc

    def test_a_killed_task_is_reported_with_slurms_state_and_the_rerun_submits_only_it(self):
        # Batch 256 runs for seconds: long enough to be killed while it runs.
        config = write_config(self.tmp, batches="[4, 256]", grid=False, measure_steps=2)
        out = self.tmp / "sweep"
        proc = self.sweep_until_trial_2_runs(config, out)
        for pid in trial_pids(out, "002.yaml"):
            os.kill(pid, signal.SIGKILL)
        self.assertEqual(self.finish(proc, out), 7, self.log(out)[-3000:])
        first = trials(out)
        self.assertEqual([t["status"] for t in first], ["ok", "error"])
        self.assertRegex(first[1]["message"],
                         r"^slurm task \d+_2: FAILED \(exit code 0:9, killed by signal 9\) on "
                         r"node n[ab]")
        self.assertFalse(json.loads((out / "sweep.json").read_text())["complete"])
        self.assertIn("the same sweep run again on this folder submits only them", self.log(out))

        again = self.sweep(config, out, "--launcher", "slurm")
        self.assertEqual(self.finish(again, out), 0, self.log(out)[-3000:])
        self.assertIn("sweep: 2 trial(s) as one Slurm job array, 1 already measured", self.log(out))
        second = trials(out)
        self.assertEqual([t["status"] for t in second], ["ok", "ok"])
        # Kept, not measured again: the same row, but for this run's wall time (0: it did not run).
        self.assertEqual({k: v for k, v in second[0].items() if k != "wall_seconds"},
                         {k: v for k, v in first[0].items() if k != "wall_seconds"})
        self.assertEqual(second[0]["wall_seconds"], 0.0)
        self.assertNotEqual(second[1]["job_id"], first[1]["job_id"])

    def test_a_task_whose_node_goes_down_is_reported_as_node_fail_and_rerun_elsewhere(self):
        config = write_config(self.tmp, batches="[4, 256]", grid=False, measure_steps=2)
        out = self.tmp / "node-lost"
        proc = self.sweep_until_trial_2_runs(config, out)
        node = self.cluster.node_of(trial_pids(out, "002.yaml")[0])
        self.cluster.take_down(node)
        # The controller marks the node down after SlurmdTimeout (10 s), the task NODE_FAIL.
        self.assertEqual(self.finish(proc, out), 7, self.log(out)[-3000:])
        lost = trials(out)[1]
        self.assertEqual(lost["status"], "error")
        self.assertRegex(lost["message"], rf"^slurm task \d+_2: NODE_FAIL .*on node {node}")
        self.assertEqual(lost["host"], node)
        again = self.sweep(config, out, "--launcher", "slurm")
        self.assertEqual(self.finish(again, out), 0, self.log(out)[-3000:])
        rerun = trials(out)[1]
        self.assertEqual(rerun["status"], "ok")
        self.assertNotEqual(rerun["host"], node)  # the node left

    def test_a_stop_cancels_the_array_and_exits_130_with_the_trials_done(self):
        config = write_config(self.tmp, batches="[4, 256, 264, 272]", grid=False,
                              measure_steps=2)
        out = self.tmp / "stopped"
        proc = self.sweep(config, out, "--launcher", "slurm")
        deadline = time.time() + 300
        while (not (out / "trials" / "001.json").exists() and proc.poll() is None and
               time.time() < deadline):
            time.sleep(0.05)
        while not (trial_pids(out, "002.yaml") or trial_pids(out, "003.yaml")) and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.finish(proc, out), 130, self.log(out)[-3000:])
        self.assertIn("cancelling the job array (scancel)", self.log(out))
        done = [t for t in trials(out) if t["status"] == "ok"]
        cancelled = [t for t in trials(out) if t["status"] != "ok"]
        self.assertGreaterEqual(len(done), 1)
        self.assertGreaterEqual(len(cancelled), 1)
        for t in cancelled:
            self.assertRegex(t["message"], r"^slurm task \d+_\d: CANCELLED")
        self.assertFalse(json.loads((out / "sweep.json").read_text())["complete"])
        self.assertEqual(self.cluster.jobs(), "")
        self.assertEqual(trial_pids(out), [])


class BadInput(SlurmTestCase):
    net = 63

    def one_line(self, out, code, contains):
        log = self.log(out).strip()
        self.assertEqual(code, 2, log)
        self.assertEqual(len(log.splitlines()), 1, log)
        self.assertIn(contains, log)

    def test_options_sbatch_refuses_are_one_line_and_nothing_is_submitted(self):
        config = write_config(self.tmp)
        out = self.tmp / "refused"
        code = self.finish(self.sweep(config, out, "--launcher", "slurm", "--set",
                                      "sweep.slurm.options=[--partition=nowhere]"), out)
        self.one_line(out, code, "sweep.slurm.options: sbatch refuses [--partition=nowhere]: ")
        self.assertFalse(out.exists())
        self.assertEqual(self.cluster.run(["scontrol", "-o", "show", "jobs"]).stdout.strip(),
                         "No jobs in the system")

    def test_without_sbatch_it_is_one_line(self):
        config = write_config(self.tmp)
        out = self.tmp / "no-sbatch"
        code = self.finish(self.sweep(config, out, "--launcher", "slurm",
                                      env={"PATH": str(self.tmp / "nothing")}), out)
        self.one_line(out, code, "sweep.launcher: slurm: sbatch is not on PATH")
        self.assertFalse(out.exists())

    def test_a_folder_or_train_a_node_cannot_see_is_one_line_naming_them(self):
        config = write_config(self.tmp)
        hidden = self.tmp / "private" / "sweep"
        code = self.finish(self.sweep(config, hidden, "--launcher", "slurm", "--set",
                                      "sweep.slurm.options=[--nodelist=nb]"), hidden)
        self.assertEqual(code, 2, self.log(hidden))
        last = self.log(hidden).strip().splitlines()[-1]
        self.assertRegex(last, rf"task \d+ on node nb cannot read the sweep folder {hidden}: "
                               r"put it on a filesystem the nodes share \(--output-dir\); job "
                               r"array \d+ cancelled")
        self.assertEqual(self.cluster.jobs(), "")

        train = self.tmp / "private" / "train"
        shutil.copy2(TRAIN, train)
        out = self.tmp / "seen"
        # The options in the config file this time: sweep.slurm.options as the YAML nests it.
        (self.tmp / "yaml").mkdir()
        in_file = write_config(self.tmp / "yaml",
                               sweep_keys="launcher: slurm, slurm: {options: [--nodelist=nb]}, ")
        code = self.finish(self.sweep(in_file, out, train=train), out)
        self.assertEqual(code, 2, self.log(out))
        self.assertRegex(self.log(out).strip().splitlines()[-1],
                         rf"task \d+ on node nb cannot run {train}: put train on a filesystem "
                         r"the nodes share; job array \d+ cancelled")


if __name__ == "__main__":
    unittest.main()
