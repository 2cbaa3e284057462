"""Data-parallel training across hosts: two test hosts made from network namespaces
(netns_hosts.py), each host name resolving to 127.0.0.1 there. ctest runs each class apart
(hosts.<Class>), each on its own 10.231.N.0/24, so that they can run side by side.

  one rank per host, no variable set,    both ranks exit 4 within the timeout + a few seconds;
  the link of host B cut in epoch 2      --resume on both hosts ends as one host's run, exactly
  two ranks per host (scripts/launch.py) with GLOO_SOCKET_IFNAME: as 4 ranks on one host, exactly
  host B 20 s late / never               trains / exit 4 within the timeout + a few seconds
  host B's rank on loopback (GLOO_SOCKET_IFNAME=lo)  both exit 4 at once, naming it
  torchrun on one host and across two    trains alike; a killed rank ends the run
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

from netns_hosts import Hosts

REPO = Path(__file__).resolve().parents[2]
TRAIN = os.environ.get("TRAIN_BINARY", "")
LAUNCH = [sys.executable, str(REPO / "scripts/launch.py")]
TORCHRUN = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
PORT = "29533"
# What every rank's exit may take beyond distributed.timeout_seconds (the join's deadline is 5 s
# past it; the rest is the process's own start and end).
SLACK = 15


def write_config(folder, timeout, epochs=2, train_images=512):
    path = Path(folder) / "tiny.yaml"
    path.write_text(
        "model: {arch: resnet18, stem: imagenet}\n"
        f"data: {{source: synthetic, synthetic_train_size: {train_images}, synthetic_test_size: 32}}\n"
        f"training: {{device: cpu, epochs: {epochs}, batch_size: 8, threads: 1, log_every_steps: 4}}\n"
        "monitor: {tensorboard: false}\n"
        f"distributed: {{timeout_seconds: {timeout}}}\n")
    return path


def rank_env(rank, world, master, **extra):
    return dict(RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(world), MASTER_ADDR=master,
                MASTER_PORT=PORT, OMP_NUM_THREADS="1", **extra)


def curve(run):
    """Per epoch: the numbers train prints and records (loss, accuracy, rate), read back exactly."""
    keys = ("epoch", "step", "train_loss", "train_acc", "test_loss", "test_acc", "lr", "world_size")
    rows = [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines()]
    return [{k: row[k] for k in keys} for row in rows]


def epoch_checkpoint_written(run):
    """Epoch 1's checkpoint exists: a row in metrics.jsonl and a checkpoint written after it (the
    start checkpoint, written before the first step, is older than any row)."""
    metrics, checkpoint = Path(run) / "metrics.jsonl", Path(run) / "checkpoint.pt"
    try:
        return (metrics.read_text().strip() != "" and
                checkpoint.stat().st_mtime_ns >= metrics.stat().st_mtime_ns)
    except OSError:
        return False


def wait_all(procs, seconds):
    deadline = time.time() + seconds
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.time())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    return codes


def text(path):
    return Path(path).read_text(errors="replace")


def one_host_reference(tmp, config, ranks):
    run = Path(tmp) / f"one-host-{ranks}"
    proc = subprocess.run(LAUNCH + ["-n", str(ranks), "--master-port", "0", TRAIN, "--config", str(config),
                                    "--output-dir", str(run)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    return curve(run)


@unittest.skipUnless(TRAIN, "TRAIN_BINARY not set (ctest sets it)")
class TwoHosts(unittest.TestCase):
    """One rank on each host, no variable set."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hosts-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.hosts = self.enterContext(Hosts(41))
        self.master = self.hosts.addresses["a"]

    def start(self, args, name, timeout=30):
        return [self.hosts.popen(host, [TRAIN, *args], Path(self.tmp) / f"{name}-{host}.log",
                                 rank_env(rank, 2, self.master))
                for rank, host in enumerate(("a", "b"))]

    def test_one_rank_per_host_trains_as_one_host_and_a_cut_link_ends_both_in_time(self):
        # Three epochs: the link is cut once epoch 1's checkpoint exists, and two epochs are left
        # for the cut to land in.
        config = write_config(self.tmp, timeout=10, epochs=3, train_images=128)
        reference = one_host_reference(self.tmp, config, 2)
        run = Path(self.tmp) / "run"

        # Host B's link goes down in epoch 2: both ranks exit 4 in bounded time, naming the peer.
        procs = self.start(["--config", str(config), "--output-dir", str(run)], "cut")
        deadline = time.time() + 300
        while not epoch_checkpoint_written(run) and time.time() < deadline:
            if any(p.poll() is not None for p in procs):
                break  # a rank ended before epoch 1's checkpoint: the asserts below say how
            time.sleep(0.02)
        self.hosts.set_link("b", up=False)
        cut = time.time()
        codes = wait_all(procs, 10 + SLACK + 30)
        seconds = time.time() - cut
        self.hosts.set_link("b", up=True)
        log_a = text(Path(self.tmp) / "cut-a.log")
        self.assertEqual(codes, [4, 4], log_a[-3000:])
        self.assertLess(seconds, 10 + SLACK)
        print(f"link cut to the last rank's exit: {seconds:.1f} s (distributed.timeout_seconds 10)")
        self.assertIn("rank 0: lost contact with the other ranks in epoch 2", log_a)
        self.assertIn(f"rank 1 at {self.hosts.addresses['b']} ({self.hosts.links['b']})", log_a)
        self.assertEqual(len(curve(run)), 1)
        # Each rank was reached through the interface of its host's route to the store.
        for rank, host in enumerate(("a", "b")):
            self.assertIn(f"reached by its peers through {self.hosts.links[host]} ({self.hosts.addresses[host]}), "
                          f"chosen by the route to the store at {self.master}:{PORT}",
                          text(Path(self.tmp) / f"cut-{host}.log"))

        # Resumed on both hosts once the link is back: epoch 1 trained across the hosts before the
        # cut, epoch 2 after it, and the run is the one-host run, to the last digit.
        codes = wait_all(self.start(["--resume", str(run)], "resume"), 300)
        self.assertEqual(codes, [0, 0], text(Path(self.tmp) / "resume-a.log")[-3000:])
        self.assertEqual(curve(run), reference)
        for row in curve(run):
            print(f"epoch {row['epoch']}: train_loss {row['train_loss']!r} test_loss {row['test_loss']!r} "
                  f"test_acc {row['test_acc']!r} (2 hosts = 1 host)")


@unittest.skipUnless(TRAIN, "TRAIN_BINARY not set (ctest sets it)")
class TwoHostsTwoRanks(unittest.TestCase):
    """scripts/launch.py --nnodes 2 on each host, GLOO_SOCKET_IFNAME naming each host's interface."""

    def test_two_ranks_per_host_train_as_four_on_one_host(self):
        tmp = self.enterContext(tempfile.TemporaryDirectory(prefix="hosts-"))
        hosts = self.enterContext(Hosts(42))
        config = write_config(tmp, timeout=30, epochs=1, train_images=256)
        reference = one_host_reference(tmp, config, 4)
        run = Path(tmp) / "run"
        procs = [hosts.popen(host, LAUNCH + ["-n", "2", "--nnodes", "2", "--node-rank", str(node),
                                            "--master-addr", hosts.addresses["a"], "--master-port", PORT,
                                            TRAIN, "--config", str(config), "--output-dir", str(run)],
                             Path(tmp) / f"{host}.log",
                             {"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": hosts.links[host]})
                 for node, host in enumerate(("a", "b"))]
        codes = wait_all(procs, 300)
        self.assertEqual(codes, [0, 0], text(Path(tmp) / "a.log")[-3000:] + text(Path(tmp) / "b.log")[-2000:])
        self.assertEqual(curve(run), reference)
        said = [line for line in text(Path(tmp) / "b.log").splitlines() if line.startswith("[rank 3] ")]
        self.assertTrue(any(f"rank 3 of 4 (gloo, local rank 1, rendezvous {hosts.addresses['a']}:{PORT}; reached by "
                            f"its peers through {hosts.links['b']} ({hosts.addresses['b']}), chosen by GLOO_SOCKET_IFNAME)"
                            in line for line in said), said[:3])


@unittest.skipUnless(TRAIN, "TRAIN_BINARY not set (ctest sets it)")
class LateHosts(unittest.TestCase):
    def setUp(self):
        self.tmp = self.enterContext(tempfile.TemporaryDirectory(prefix="hosts-"))
        self.hosts = self.enterContext(Hosts(43))
        self.master = self.hosts.addresses["a"]

    def test_a_host_started_20_s_late_within_the_timeout_trains(self):
        config = write_config(self.tmp, timeout=45, epochs=1, train_images=64)
        args = [TRAIN, "--config", str(config), "--output-dir", str(Path(self.tmp) / "run")]
        first = self.hosts.popen("a", args, Path(self.tmp) / "a.log", rank_env(0, 2, self.master))
        time.sleep(20)
        second = self.hosts.popen("b", args, Path(self.tmp) / "b.log", rank_env(1, 2, self.master))
        self.assertEqual(wait_all([first, second], 300), [0, 0], text(Path(self.tmp) / "a.log")[-3000:])

    def test_a_rank_on_loopback_with_a_peer_elsewhere_is_named_at_once(self):
        config = write_config(self.tmp, timeout=60, epochs=1, train_images=64)
        args = [TRAIN, "--config", str(config), "--output-dir", str(Path(self.tmp) / "run")]
        started = time.time()
        procs = [self.hosts.popen("a", args, Path(self.tmp) / "a.log", rank_env(0, 2, self.master)),
                 self.hosts.popen("b", args, Path(self.tmp) / "b.log",
                                  rank_env(1, 2, self.master, GLOO_SOCKET_IFNAME="lo"))]
        self.assertEqual(wait_all(procs, 120), [4, 4], text(Path(self.tmp) / "a.log")[-2000:])
        self.assertLess(time.time() - started, 30)  # not the 60 s timeout
        self.assertIn(f"rank 0: rank 1 is reached at 127.0.0.1 (loopback) but rank 0 at {self.master}, on "
                      "another host: set GLOO_SOCKET_IFNAME (or distributed.interface) on rank 1's host",
                      text(Path(self.tmp) / "a.log"))

    def test_a_host_that_never_comes_ends_the_other_in_time(self):
        config = write_config(self.tmp, timeout=5, epochs=1, train_images=64)
        args = [TRAIN, "--config", str(config), "--output-dir", str(Path(self.tmp) / "run")]
        started = time.time()
        lonely = self.hosts.popen("a", args, Path(self.tmp) / "a.log", rank_env(0, 2, self.master))
        self.assertEqual(wait_all([lonely], 5 + SLACK + 30), [4])
        self.assertLess(time.time() - started, 5 + SLACK)
        lines = text(Path(self.tmp) / "a.log").splitlines()
        self.assertIn("rank 0: rank(s) 1 did not join within 5 s (each has to reach the store at "
                      f"{self.master}:{PORT}", lines[-1])
        self.assertFalse((Path(self.tmp) / "run").exists())


@unittest.skipUnless(TRAIN and TORCHRUN, "TRAIN_BINARY not set (ctest sets it) or no torchrun")
class Torchrun(unittest.TestCase):
    """torchrun starts the ranks; its agent hosts the store (TORCHELASTIC_USE_AGENT_STORE)."""

    def setUp(self):
        self.tmp = self.enterContext(tempfile.TemporaryDirectory(prefix="hosts-"))

    def torchrun(self, *args):
        return [TORCHRUN, *args, "--no-python", TRAIN]

    def test_torchrun_on_one_host_and_across_two_hosts_trains_alike(self):
        config = write_config(self.tmp, timeout=30, epochs=1, train_images=128)
        one = Path(self.tmp) / "one"
        proc = subprocess.run(self.torchrun("--standalone", "--nproc-per-node", "2")
                              + ["--config", str(config), "--output-dir", str(one)],
                              capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
        self.assertEqual(proc.returncode, 0, (proc.stdout + proc.stderr)[-3000:])
        self.assertEqual([row["world_size"] for row in curve(one)], [2])

        hosts = self.enterContext(Hosts(44))
        two = Path(self.tmp) / "two"
        endpoint = hosts.addresses["a"] + ":" + PORT
        procs = [hosts.popen(host, self.torchrun("--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                                                 "--rdzv-backend", "static", "--rdzv-endpoint", endpoint)
                             + ["--config", str(config), "--output-dir", str(two)],
                             Path(self.tmp) / f"{host}.log", {"OMP_NUM_THREADS": "1"})
                 for node, host in enumerate(("a", "b"))]
        codes = wait_all(procs, 300)
        self.assertEqual(codes, [0, 0], text(Path(self.tmp) / "a.log")[-3000:] + text(Path(self.tmp) / "b.log")[-2000:])
        self.assertEqual(curve(two), curve(one))

    def test_a_rank_killed_under_torchrun_ends_the_run(self):
        config = write_config(self.tmp, timeout=10, epochs=50, train_images=128)
        run = Path(self.tmp) / "run"
        log = Path(self.tmp) / "torchrun.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(self.torchrun("--standalone", "--nproc-per-node", "2")
                                    + ["--config", str(config), "--output-dir", str(run)],
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=dict(os.environ, OMP_NUM_THREADS="1"))
        deadline = time.time() + 120
        while not (run / "checkpoint.pt").exists() and time.time() < deadline:
            time.sleep(0.05)
        victims = subprocess.run(["pgrep", "-f", "-P", str(proc.pid), TRAIN], capture_output=True, text=True)
        ranks = [int(pid) for pid in victims.stdout.split()]
        self.assertEqual(len(ranks), 2, victims)
        rank1 = [pid for pid in ranks if "RANK=1" in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")]
        os.kill(rank1[0], 9)
        killed = time.time()
        code = wait_all([proc], 60)[0]
        self.assertEqual(code, 1, text(log)[-3000:])
        self.assertLess(time.time() - killed, 10 + SLACK)
        self.assertIn("exitcode  : -9", text(log))
        self.assertEqual(subprocess.run(["pgrep", "-f", str(run)], capture_output=True).returncode, 1)
        self.assertEqual(sorted(p.name for p in run.glob(".checkpoint*")), [])


if __name__ == "__main__":
    unittest.main()
