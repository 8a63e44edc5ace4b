"""A cellvisor daemon in a private world, for scripts that abuse it (chaos, soak).

The world is a temporary directory holding the runtime directory, the state directory and
the config file. Every process the daemon starts inherits XDG_RUNTIME_DIR pointing into it,
and every worker's command line names a socket inside it, which is how the processes left
behind after stop (orphans) are found: never by name.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

sys_path = os.path.dirname(os.path.abspath(__file__))


class Connection:
    """One JSON-RPC connection; `call` answers a request by id, skipping notifications."""

    def __init__(self, path, timeout):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.lines = self.sock.makefile("r", encoding="utf-8")
        self.next_id = 1

    def call(self, method, params=None):
        request_id = self.next_id
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                           "params": params or {}})
        self.sock.sendall((line + "\n").encode("utf-8"))
        for line in self.lines:
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(message["error"]["message"])
                return message["result"]
        raise ConnectionError("the daemon closed the connection")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class World:
    """A daemon started from `exe` with `config` (TOML text) in a fresh directory."""

    def __init__(self, exe, config):
        self.dir = tempfile.mkdtemp(prefix="cellvisor-world-")
        self.run_dir = os.path.join(self.dir, "run")
        os.makedirs(self.run_dir)
        self.config = os.path.join(self.dir, "config.toml")
        with open(self.config, "w") as f:
            f.write(config)
        self.socket = os.path.join(self.run_dir, "cellvisor", "world.sock")
        env = dict(os.environ, XDG_RUNTIME_DIR=self.run_dir,
                   XDG_STATE_HOME=os.path.join(self.dir, "state"), CELLVISOR_CONFIG=self.config)
        env.pop("CELLVISOR_SOCKET", None)
        self.log = open(os.path.join(self.dir, "daemon.log"), "w")
        self.daemon = subprocess.Popen([os.path.abspath(exe), "serve", "--socket", self.socket], env=env,
                                       stdin=subprocess.DEVNULL, stdout=self.log,
                                       stderr=subprocess.STDOUT, cwd=self.dir)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.socket):
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                raise RuntimeError("the daemon did not start; see %s" % self.log.name)
            time.sleep(0.05)

    def connect(self, timeout=120):
        return Connection(self.socket, timeout)

    def stop(self, timeout=30):
        """Asks the daemon to shut down and waits for it; kills it if it will not."""
        try:
            conn = self.connect(timeout)
            conn.call("shutdown")
            conn.close()
        except (OSError, RuntimeError, ConnectionError):
            pass
        try:
            self.daemon.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            self.daemon.kill()
            self.daemon.wait()
            return False

    def processes(self):
        """Live processes of this world (zombies aside), the daemon included while it runs."""
        marker = ("XDG_RUNTIME_DIR=" + self.run_dir).encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open("/proc/%s/stat" % entry, "rb") as f:
                    if b") Z " in f.read():
                        continue
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    ours = self.run_dir.encode() in f.read()
                if not ours:
                    with open("/proc/%s/environ" % entry, "rb") as f:
                        ours = marker in f.read().split(b"\0")
            except OSError:
                continue
            if ours:
                found.append(int(entry))
        return found

    def kill_leftovers(self, pids):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def remove(self):
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


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
    """Builds cellvisor (debug unless `release`) and answers the binary's path."""
    root = os.path.dirname(sys_path)
    command = ["cargo", "build", "--quiet", "-p", "cellvisor"] + (["--release"] if release else [])
    subprocess.run(command, cwd=root, check=True)
    return os.path.join(root, "target", "release" if release else "debug", "cellvisor")
