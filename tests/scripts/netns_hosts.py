"""Test hosts made from network namespaces: two hosts joined by a veth pair, as two machines on one
network. Host A is 10.231.N.1, host B 10.231.N.2 (N one number per test, so that tests run side by
side); on each, the host name resolves to 127.0.0.1 (/etc/netns/NS/hosts), as on many cloud images
and containers. Traffic goes only between the hosts a test made. Everything is removed on exit,
also when the test fails; namespaces a killed test left are removed before they are made again.

Making them needs root and iproute2. Where that fails, the tests skip saying why, except under
CI=true, where they fail.
"""
import os
import shutil
import socket
import subprocess
import unittest
from pathlib import Path


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Hosts:
    def __init__(self, net):
        self.net = net
        self.names = {"a": f"trainh{net}a", "b": f"trainh{net}b"}
        self.links = {"a": f"tv{net}a", "b": f"tv{net}b"}
        self.addresses = {"a": f"10.231.{net}.1", "b": f"10.231.{net}.2"}

    def __enter__(self):
        self._remove()
        try:
            for host, ns in self.names.items():
                ip("netns", "add", ns)
                etc = Path("/etc/netns") / ns
                etc.mkdir(parents=True, exist_ok=True)
                (etc / "hosts").write_text(f"127.0.0.1 localhost\n127.0.0.1 {socket.gethostname()}\n")
            ip("link", "add", self.links["a"], "netns", self.names["a"], "type", "veth",
               "peer", "name", self.links["b"], "netns", self.names["b"])
            for host, ns in self.names.items():
                ip("-n", ns, "addr", "add", self.addresses[host] + "/24", "dev", self.links[host])
                ip("-n", ns, "link", "set", self.links[host], "up")
                ip("-n", ns, "link", "set", "lo", "up")
        except (OSError, subprocess.CalledProcessError) as error:
            self._remove()
            reason = getattr(error, "stderr", None) or str(error)
            message = f"cannot make network namespaces here: {reason.strip()}"
            if os.environ.get("CI") == "true":
                raise AssertionError(message + " (CI=true: these tests must run)")
            raise unittest.SkipTest(message)
        return self

    def __exit__(self, *exc):
        self._remove()
        return False

    def _remove(self):
        for ns in self.names.values():
            ip("netns", "del", ns, check=False)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)

    def popen(self, host, argv, log, env=None):
        """Starts argv on `host`, its output (stdout and stderr) into the file `log`."""
        with open(log, "wb") as out:
            return subprocess.Popen(["ip", "netns", "exec", self.names[host], *argv],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, **(env or {})), start_new_session=True)

    def set_link(self, host, up):
        ip("-n", self.names[host], "link", "set", self.links[host], "up" if up else "down")
