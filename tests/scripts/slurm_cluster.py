"""A real Slurm cluster for the tests, in a temporary folder: munged with its own key and socket,
slurmctld and one slurmd per node, each with its own slurm.conf, ports, state and spool folders
and logs. Two nodes on two test hosts made from network namespaces (netns_hosts.py): node `na`
and the controller on host A, node `nb` on host B; the filesystem is shared, as a cluster's is.
A node can be given a private view of a folder (a tmpfs over it in its own mount namespace), the
way a node sees a folder that is not on the shared filesystem.

Everything is stopped and removed on exit, also when a test fails: the array jobs are cancelled,
the daemons killed by their process groups, the namespaces deleted.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge (22.05). Where they are
absent the tests skip saying so, except under CI=true, where they fail.
"""
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest
from pathlib import Path

from netns_hosts import Hosts

TOOLS = ("slurmctld", "slurmd", "munged", "sbatch", "scontrol", "scancel", "squeue")


def require_slurm():
    """Skips the test (fails it under CI=true) where Slurm or munge is not installed."""
    missing = [tool for tool in TOOLS if not shutil.which(tool, path=os.environ.get("PATH", "") +
                                                          ":/usr/sbin:/sbin")]
    if missing:
        message = (f"Slurm is not installed here ({', '.join(missing)} not found): apt-get install "
                   "slurmctld slurmd slurm-client munge, or run scripts/setup.sh")
        if os.environ.get("CI") == "true":
            raise AssertionError(message + " (CI=true: these tests must run)")
        raise unittest.SkipTest(message)


def sbin(tool):
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


class Cluster:
    """`with Cluster(net, folder, private=...)`: the cluster up; .env for Slurm's clients."""

    def __init__(self, net, folder, private=()):
        self.folder = Path(folder)
        self.private = [Path(p) for p in private]  # hidden from node nb
        self.net = net
        self.hosts = Hosts(net)
        self.procs = {}
        self.conf = self.folder / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    def __enter__(self):
        require_slurm()
        self.hosts.__enter__()
        try:
            self._configure()
            self._start()
            self._wait_nodes_idle()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _configure(self):
        f = self.folder
        for sub in ("ctld", "spool-na", "spool-nb", "munge"):
            (f / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(f / "munge", 0o700)
        key = f / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        a, b = self.hosts.addresses["a"], self.hosts.addresses["b"]
        cpus = 1
        self.conf.write_text(f"""ClusterName=trainsweep{self.net}
SlurmctldHost={socket.gethostname()}({a})
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={f}/munge/munge.socket
StateSaveLocation={f}/ctld
SlurmdSpoolDir={f}/spool-%n
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd-%n.pid
SlurmctldLogFile={f}/slurmctld.log
SlurmdLogFile={f}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
MessageTimeout=5
MinJobAge=3600
KillWait=2
InactiveLimit=0
SlurmdParameters=config_overrides
NodeName=na NodeAddr={a} CPUs={cpus} RealMemory=1000 State=UNKNOWN
NodeName=nb NodeAddr={b} CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=na,nb Default=YES MaxTime=INFINITE State=UP
""")

    def _popen(self, name, host, argv, mounts=()):
        log = self.folder / f"{name}.out"
        if mounts:  # a mount namespace of its own, with a tmpfs over each folder it must not see
            script = "".join(f"mount -t tmpfs none '{m}' && " for m in mounts) + 'exec "$@"'
            argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv]
        self.procs[name] = self.popen(argv, log, host)

    def _start(self):
        f = self.folder
        self._popen("munged", "a", [sbin("munged"), "-F", "-f", f"--socket={f}/munge/munge.socket",
                                    f"--key-file={f}/munge/munge.key",
                                    f"--pid-file={f}/munge/munged.pid",
                                    f"--log-file={f}/munge/munged.log",
                                    f"--seed-file={f}/munge/munged.seed"])
        self._wait(lambda: (f / "munge" / "munge.socket").exists(), 20, "munged's socket")
        self._popen("slurmctld", "a", [sbin("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._popen("slurmd-na", "a", [sbin("slurmd"), "-D", "-N", "na", "-f", str(self.conf)])
        self._popen("slurmd-nb", "b", [sbin("slurmd"), "-D", "-N", "nb", "-f", str(self.conf)],
                    mounts=self.private)

    def _wait(self, ready, seconds, what):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if ready():
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise AssertionError(f"{name} exited {proc.returncode}: {self.logs()}")
            time.sleep(0.2)
        raise AssertionError(f"{what} not ready after {seconds} s: {self.logs()}")

    def _wait_nodes_idle(self):
        def idle():
            out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False).stdout
            states = dict(line.split() for line in out.splitlines() if len(line.split()) == 2)
            return states.get("na") == "idle" and states.get("nb") == "idle"
        self._wait(idle, 60, "both nodes idle")

    def enter(self, host):
        """The command prefix that runs on `host`: its network namespace alone (`ip netns exec`
        would mount a /sys of its own, without the cgroup hierarchies slurmd needs)."""
        return [shutil.which("nsenter") or "/usr/bin/nsenter",
                f"--net=/var/run/netns/{self.hosts.names[host]}"]

    def run(self, argv, host="a", check=True, timeout=60):
        """A Slurm client command on `host` (A: beside the controller)."""
        return subprocess.run([*self.enter(host), *argv], capture_output=True, text=True,
                              env=self.env, check=check, timeout=timeout)

    def popen(self, argv, log, host="a", env=None):
        """A long command (train sweep, a daemon) on `host`, in its own process group."""
        with open(log, "wb") as out:
            return subprocess.Popen([*self.enter(host), *argv], stdout=out,
                                    stderr=subprocess.STDOUT, env=dict(self.env, **(env or {})),
                                    start_new_session=True)

    def jobs(self):
        """The jobs Slurm holds that are not ended: 'id state' lines."""
        return self.run(["squeue", "-h", "-r", "-o", "%i %T"], check=False).stdout.strip()

    def node_of(self, pid):
        """The node ("na", "nb") whose host the process `pid` runs on, or None."""
        try:
            own = os.stat(f"/proc/{pid}/ns/net")
        except OSError:
            return None
        for host, name in self.hosts.names.items():
            ns = os.stat(f"/var/run/netns/{name}")
            if (ns.st_dev, ns.st_ino) == (own.st_dev, own.st_ino):
                return "n" + host
        return None

    def take_down(self, node):
        """The node lost: every process on its host killed at once (slurmd, its job steps and
        their tasks), as when a machine goes down; the controller finds out by itself."""
        proc = self.procs.pop(f"slurmd-{node}")
        for entry in Path("/proc").glob("[0-9]*"):
            if self.node_of(entry.name) == node:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except OSError:
                    pass
        proc.wait()

    def logs(self):
        text = ""
        for log in sorted(self.folder.glob("*.log")) + sorted(self.folder.glob("*.out")):
            lines = log.read_text(errors="replace").splitlines()[-8:]
            text += f"\n--- {log.name}\n" + "\n".join(lines)
        return text

    def __exit__(self, *exc):
        try:
            if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
                self.run(["scancel", "--full", "--user=root"], check=False, timeout=20)
        except (OSError, subprocess.SubprocessError):
            pass
        # slurmd first (it ends its job steps), then the controller, then munged.
        for name in ("slurmd-nb", "slurmd-na", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        self._kill_leftover_steps()
        self.hosts.__exit__(None, None, None)
        return False

    def _kill_leftover_steps(self):
        """slurmstepd processes (and their tasks) of this cluster that outlived their slurmd."""
        for pid_dir in Path("/proc").glob("[0-9]*"):
            try:
                cmd = (pid_dir / "cmdline").read_bytes().split(b"\0")
                environ = (pid_dir / "environ").read_bytes()
            except OSError:
                continue
            if str(self.conf).encode() in environ and cmd and b"slurmstepd" in cmd[0]:
                try:
                    os.kill(int(pid_dir.name), signal.SIGKILL)
                except OSError:
                    pass
