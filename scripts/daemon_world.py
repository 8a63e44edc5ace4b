"""A cellvisor daemon in a private world, for scripts that abuse it (chaos, soak).

The world is a temporary directory holding the runtime directory, the state directory and
the config file. Every process the daemon starts inherits XDG_RUNTIME_DIR pointing into it,
and every worker's command line names a socket inside it, which is how the processes left
behind after stop (orphans) are found: never by name.
"""

import os
import signal
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402


class World(Daemon):
    """A daemon started from `exe` with `config` (TOML text) in a fresh directory, its state
    and config directories private too; `stop()` answers whether it stopped by itself."""

    def __init__(self, exe, config):
        super().__init__(exe, config, prefix="cellvisor-world-", private_dirs=True)

    def connect(self, timeout=120):
        return super().connect(timeout)

    def processes(self):
        """Live processes of this world (zombies aside), the daemon included while it runs."""
        return processes_under(self.run_dir)

    def kill_leftovers(self, pids):
        kill_all(pids)


def processes_under(run_dir):
    """Live processes (zombies aside) started under the private runtime directory `run_dir`:
    their environment's XDG_RUNTIME_DIR or their command line names it."""
    marker = ("XDG_RUNTIME_DIR=" + run_dir).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                if b") Z " in f.read():
                    continue
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                ours = run_dir.encode() in f.read()
            if not ours:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    ours = marker in f.read().split(b"\0")
        except OSError:
            continue
        if ours:
            found.append(int(entry))
    return found


def kill_all(pids):
    """SIGKILL to each of `pids` (the ones a world or a fleet started), gone or not."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def rss_bytes(pid):
    """Resident memory of `pid`, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def open_fds(pid):
    """Open descriptors of `pid`, or None where they cannot be counted (a non-dumpable
    process of ours is readable by root only)."""
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


def cellvisor_exe(release):
    """Builds cellvisor's two programs (debug unless `release`), by binary name whichever crate
    holds them, and answers the `cellvisor` binary's path."""
    root = os.path.dirname(HERE)
    command = ["cargo", "build", "--quiet", "--bin", "cellvisor", "--bin", "cellvisor-py-worker"]
    command += ["--release"] if release else []
    subprocess.run(command, cwd=root, check=True)
    return os.path.join(root, "target", "release" if release else "debug", "cellvisor")
