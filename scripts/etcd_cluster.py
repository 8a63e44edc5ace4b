"""An etcd cluster of a test's own on this machine (Debian's `etcd-server`): N members on
free ports of 127.0.0.1, each in a private data directory, started and stopped by pid.

`restart(i)` kills member i (`kill -9`) and starts it again on its data directory, as a
crashed member comes back; `endpoints` are the client URLs a node is given; `metrics()`
reads a member's Prometheus counters (the gRPC requests it served), what the fault test
reports as etcd's load. Used by scripts/fleet_faults.py."""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from fleet import FleetError, free_port


class EtcdCluster:
    """`members` etcd members forming one cluster, healthy on return."""

    def __init__(self, members=3, etcd="etcd", within=30.0):
        if shutil.which(etcd) is None:
            raise FleetError(f"etcd ({etcd}) is not installed: apt-get install etcd-server")
        self.etcd = etcd
        self.dir = tempfile.mkdtemp(prefix="cellvisor-etcd-")
        self.ports = [(free_port(), free_port()) for _ in range(members)]
        self.names = [f"m{i}" for i in range(members)]
        self.cluster = ",".join(f"{name}=http://127.0.0.1:{peer}" for name, (_, peer) in zip(self.names, self.ports))
        self.processes = [None] * members
        self.logs = []
        self.started_pids = []
        try:
            for i in range(members):
                self.start(i)
            self.wait_healthy(within)
        except BaseException:
            self.stop()
            raise

    @property
    def endpoints(self):
        return [f"http://127.0.0.1:{client}" for client, _ in self.ports]

    def start(self, i):
        """Starts member i (on its data directory, kept across restarts)."""
        client, peer = self.ports[i]
        log = open(os.path.join(self.dir, f"{self.names[i]}.log"), "ab")
        self.logs.append(log)
        # Heartbeats and elections a little slower than etcd's defaults: on a loaded machine
        # the defaults (100 ms, 1 s) make leaders change for nothing.
        self.processes[i] = subprocess.Popen(
            [self.etcd, "--name", self.names[i], "--data-dir", os.path.join(self.dir, self.names[i]),
             "--listen-client-urls", f"http://127.0.0.1:{client}",
             "--advertise-client-urls", f"http://127.0.0.1:{client}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", self.cluster, "--initial-cluster-state", "new",
             "--heartbeat-interval", "150", "--election-timeout", "1500",
             "--logger", "zap", "--log-level", "warn"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.started_pids.append(self.processes[i].pid)

    def kill(self, i):
        process = self.processes[i]
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def restart(self, i, down_for=0.5):
        """`kill -9` of member i, then the member again after `down_for` seconds."""
        self.kill(i)
        time.sleep(down_for)
        self.start(i)

    def healthy(self, i):
        client, _ = self.ports[i]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{client}/health", timeout=2) as answer:
                return b'"true"' in answer.read()
        except OSError:
            return False

    def wait_healthy(self, within=30.0):
        """Waits until every member says it is healthy (it has a leader)."""
        deadline = time.monotonic() + within
        while not all(self.healthy(i) for i in range(len(self.ports))):
            for i, process in enumerate(self.processes):
                if process is not None and process.poll() is not None:
                    raise FleetError(f"etcd member {self.names[i]} exited (status {process.returncode}); "
                                     f"log: {self.dir}/{self.names[i]}.log")
            if time.monotonic() > deadline:
                raise FleetError(f"the etcd cluster was not healthy within {within:.0f} s (logs in {self.dir})")
            time.sleep(0.1)

    def metrics(self):
        """The sum over the live members of the gRPC requests they handled, by method
        (`grpc_server_handled_total`), and of the keep-alives they answered."""
        totals = {}
        for client, _ in self.ports:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{client}/metrics", timeout=5) as answer:
                    text = answer.read().decode()
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("grpc_server_handled_total{") or line.startswith("grpc_server_msg_received_total{"):
                    name, _, value = line.rpartition(" ")
                    method = name.split('grpc_method="', 1)[1].split('"', 1)[0]
                    kind = "handled" if line.startswith("grpc_server_handled") else "received"
                    key = f"{kind}:{method}"
                    totals[key] = totals.get(key, 0) + float(value)
        return totals

    def stop(self):
        """Stops every member by pid and removes the data directories."""
        for i in range(len(self.processes)):
            process = self.processes[i]
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        for log in self.logs:
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop()
