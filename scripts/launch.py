#!/usr/bin/env python3
"""Starts N data-parallel ranks on this host the way torchrun does, and watches them.

  scripts/launch.py -n 2 train --config configs/quick_cpu.yaml
  scripts/launch.py -n 4 --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 train ...

Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; a
bare `train` means this checkout's build/train. Every output line is prefixed with "[rank R] ".
When a rank fails, the others are stopped (SIGTERM, then SIGKILL after --grace seconds) and the
launcher exits with the failed rank's code (a rank's exit 130, a stop, is not a failure: the
others are left to finish their stop); Ctrl-C / SIGTERM are passed on to every rank (which
then checkpoint and stop together). The ranks die with the launcher (SIGKILL when it dies, also by
kill -9: Linux PR_SET_PDEATHSIG), so no rank trains on unwatched (a rank's own children die with
the rank as train arranges for its sweep trials and plots). --master-port 0 picks a free port
(one host only).
"""
import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import script_support

REPO = Path(__file__).resolve().parents[1]
STOPPED = 130  # train's exit code for a stop (Ctrl-C / SIGTERM)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PR_SET_PDEATHSIG = 1
PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: the child only calls it


def die_with(launcher_pid):
    """A preexec_fn: the rank is killed when the launcher dies (also when it already has). It runs
    between fork and exec, so it only calls prctl and getppid."""
    def arrange():
        if PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != launcher_pid:
            os._exit(1)
    return arrange


def pump(stream, prefix, out, lock):
    for line in iter(stream.readline, b""):
        with lock:
            out.write(prefix + line.decode(errors="replace"))
            out.flush()


def main(argv=None):
    parser = script_support.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--nproc-per-node", type=int, required=True)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if not args.command:
        parser.error("give the command to run, e.g. train --config FILE")
    if args.nproc_per_node < 1 or args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        parser.error("need -n >= 1, --nnodes >= 1 and 0 <= --node-rank < --nnodes")
    command = list(args.command)
    if command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("give the command to run after --, e.g. -- train --config FILE")
    if command[0] == "train":
        command[0] = str(REPO / "build" / "train")
    port = args.master_port or (free_port() if args.nnodes == 1 else parser.error("--master-port 0 needs one node"))
    world = args.nnodes * args.nproc_per_node

    lock = threading.Lock()
    procs, pumps = [], []
    for local in range(args.nproc_per_node):
        rank = args.node_rank * args.nproc_per_node + local
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local),
                   LOCAL_WORLD_SIZE=str(args.nproc_per_node), MASTER_ADDR=args.master_addr, MASTER_PORT=str(port))
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=die_with(os.getpid()))
        procs.append((rank, proc))
        thread = threading.Thread(target=pump, args=(proc.stdout, f"[rank {rank}] ", sys.stdout, lock), daemon=True)
        thread.start()
        pumps.append(thread)

    def signal_rank(proc, signum):
        # Each rank runs in its own process group: the signal reaches anything it started too.
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    def forward(signum, _frame):
        for _, p in procs:
            if p.poll() is None:
                signal_rank(p, signum)
    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)

    exit_code = 0
    while True:
        codes = [p.poll() for _, p in procs]  # poll every rank each time round
        if all(code is not None for code in codes):
            break
        # A rank that stopped (130: Ctrl-C / SIGTERM, its checkpoint written) did not fail: its
        # peers are stopping too, and signalling them again could kill one mid-write.
        failed = [(r, code) for (r, _), code in zip(procs, codes) if code not in (None, 0, STOPPED)]
        if failed:
            rank, exit_code = failed[0]
            with lock:
                print(f"launch: rank {rank} exited with code {exit_code}; stopping the other ranks", file=sys.stderr)
            for _, p in procs:
                signal_rank(p, signal.SIGTERM)
            deadline = time.time() + args.grace
            while time.time() < deadline and None in [p.poll() for _, p in procs]:
                time.sleep(0.05)
            for _, p in procs:
                signal_rank(p, signal.SIGKILL)
            break
        time.sleep(0.05)
    for _, p in procs:
        p.wait()
    for thread in pumps:
        thread.join(timeout=2)
    if exit_code == 0:
        failed = [(r, p.returncode) for r, p in procs if p.returncode != 0]
        if failed:
            exit_code = failed[0][1]
    return exit_code if exit_code >= 0 else 128 - exit_code


if __name__ == "__main__":
    sys.exit(script_support.run("launch", main))
