#!/usr/bin/env python3
"""A fleet of cellvisor nodes on one machine, for tests and benchmarks (docs/fleet.md).

`Fleet` starts N nodes (`cellvisor serve`), each in a private directory of its own (its
config, log and runtime directory), listening on `ws://127.0.0.1:PORT` with one token, named
`node-0` .. `node-N-1`, sharing one snapshot directory and one snapshot key (mode 0400), with
leases on and an agent-check port each; then a real HAProxy in front of them, running the
shipped deploy/haproxy/haproxy.cfg (with N = 3, the file itself; with any other N, a copy
whose server lines are made from its `node-0` line). `router=False` starts the nodes only.

Every process it starts it stops by pid (HAProxy, each node, and whatever a node left
behind, found by its private runtime directory): on `stop()`, at the end of a `with` block,
on an exception and on Ctrl-C. The leftovers a clean stop had to kill are in `leaked`.

Run as a program, it starts a fleet, prints where to reach it and waits for Ctrl-C:

    scripts/fleet --nodes 3 [--lease-ttl 2s] [--binary target/debug/cellvisor]
    python3 scripts/cellvisor_client.py --url ws://127.0.0.1:PORT --token-file FILE py 'x = 1'

Needs HAProxy (apt-get install haproxy) for the router; its clients are the `cellvisor`
package's (clients/python, standard library only).
"""

import argparse
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import CellvisorError, Client, ConnectError, Daemon, RpcError  # noqa: E402
from daemon_world import kill_all, processes_under  # noqa: E402

ROOT = os.path.dirname(HERE)
SHIPPED_HAPROXY_CONFIG = os.path.join(ROOT, "deploy", "haproxy", "haproxy.cfg")
SERVER_LINE = re.compile(r"^\s*server\s+node-(\d+)\s.*$", re.MULTILINE)

# What a request through a fleet may meet while a node is gone or its lease still runs:
# retried by the callers that wait for a fleet (a 503 from HAProxy, a refused lease, a
# connection cut by a dying node).
RETRYABLE = (ConnectError, RpcError, CellvisorError, ConnectionError, OSError, TimeoutError)


class FleetError(RuntimeError):
    """The fleet could not be started or did not behave; the message says what and where."""


def free_port():
    """A TCP port nothing listens on now on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process, within=30.0, what="a node"):
    """Waits until 127.0.0.1:`port` accepts connections (or `process` exits, or time runs out)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if process.poll() is not None:
                raise FleetError(f"{what} exited (status {process.returncode}) before listening on port {port}")
            if time.monotonic() > deadline:
                raise FleetError(f"{what} never listened on 127.0.0.1:{port} within {within:.0f} s")
            time.sleep(0.02)


def tail(path, lines=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def haproxy_config(nodes, directory):
    """The shipped HAProxy config for `nodes` nodes: the file itself when it has that many
    server lines, else a copy in `directory` with server lines made from its node-0 line."""
    with open(SHIPPED_HAPROXY_CONFIG) as f:
        text = f.read()
    lines = SERVER_LINE.findall(text)
    if len(lines) == nodes:
        return SHIPPED_HAPROXY_CONFIG
    template = next((m.group(0) for m in SERVER_LINE.finditer(text) if m.group(1) == "0"), None)
    if template is None:
        raise FleetError(f"{SHIPPED_HAPROXY_CONFIG} has no `server node-0` line to make others from")

    def server(i):
        line = template.replace("node-0", f"node-{i}")
        return line.replace("CELLVISOR_NODE_0", f"CELLVISOR_NODE_{i}").replace(
            "CELLVISOR_AGENT_PORT_0", f"CELLVISOR_AGENT_PORT_{i}")

    block = "\n".join(server(i) for i in range(nodes))
    matches = list(SERVER_LINE.finditer(text))
    text = text[:matches[0].start()] + block + text[matches[-1].end():]
    path = os.path.join(directory, "haproxy.cfg")
    with open(path, "w") as f:
        f.write(text)
    return path


class Node(Daemon):
    """One node: `cellvisor serve` in a private directory, on 127.0.0.1:`port`, in a process
    group of its own (a terminal's Ctrl-C reaches the harness only, which stops it)."""

    def __init__(self, binary, index, port, agent_port, config_text, snapshots_dir, keep_log=None):
        self.index = index
        self.keep_log = keep_log
        self.name = f"node-{index}"
        self.port = port
        self.agent_port = agent_port
        self.killed = False
        self.leftovers = []
        self.log_tail = ""
        # The snapshot directory is the fleet's: Daemon points each daemon at its own by the
        # environment (which wins over the file), so this one points it at the shared one.
        # A short directory name: worker sockets under it must fit a Unix socket path.
        try:
            super().__init__(binary, config_text, prefix=f"cvf-{index}-", private_dirs=True,
                             env={"CELLVISOR_SNAPSHOTS__DIR": snapshots_dir}, new_session=True)
        except RuntimeError as error:
            raise FleetError(f"{self.name} did not start ({error}); its log said:\n{self.log_tail}") from None
        try:
            wait_for_port(port, self.process, what=self.name)
        except BaseException as error:
            self.stop()
            if isinstance(error, FleetError):
                raise FleetError(f"{error}; its log said:\n{self.log_tail}") from None
            raise

    @property
    def url(self):
        return f"ws://127.0.0.1:{self.port}"

    def alive(self):
        return self.process.poll() is None

    def pause(self):
        """SIGSTOP of the daemon alone (a long GC pause): its workers go on."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self):
        """SIGCONT of the daemon."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)

    def kill(self):
        """`kill -9` of the daemon (its workers are left to notice on their own)."""
        self.killed = True
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def remove(self):
        """Kills what the daemon left behind (after a `kill -9`, its workers until they notice),
        then removes its directory."""
        deadline = time.monotonic() + (5 if self.killed else 2)
        left = processes_under(self.run_dir)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = processes_under(self.run_dir)
        if left:
            if not self.killed:
                self.leftovers.extend(left)
            kill_all(left)
        self.log.flush()
        self.log_tail = tail(os.path.join(self.dir, "daemon.log"))
        if self.keep_log is not None:
            try:
                shutil.copyfile(os.path.join(self.dir, "daemon.log"), self.keep_log)
            except OSError:
                pass
        super().remove()


class Fleet:
    """`nodes` cellvisor nodes sharing a snapshot directory and key, with HAProxy in front
    unless `router=False`. `url` is where clients go (HAProxy, else node 0); `token_file`
    holds the token. `max_sessions` is each node's `sessions.max-sessions`, `config_extra`
    more TOML appended to each node's config. `leases` is "file" or "etcd" (then
    `etcd_endpoints`, client URLs); `snapshots` a directory of the caller's for the shared
    snapshots (a small tmpfs, to fill), else one in the fleet's directory; `keep_logs` a
    directory where each node's log is copied when the node is stopped or replaced."""

    def __init__(self, binary, nodes=3, router=True, lease_ttl="2s", haproxy="haproxy", max_sessions=64,
                 config_extra="", quiet=True, leases="file", etcd_endpoints=(), snapshots=None, keep_logs=None):
        if nodes < 1:
            raise FleetError("a fleet has at least one node")
        self.binary = os.path.abspath(binary)
        if not os.access(self.binary, os.X_OK):
            raise FleetError(f"no cellvisor binary at {self.binary} (cargo build -p cellvisor-cli, or --binary)")
        self.haproxy = haproxy
        self.lease_ttl = lease_ttl
        self.max_sessions = max_sessions
        self.config_extra = config_extra
        self.quiet = quiet
        if leases not in ("file", "etcd"):
            raise FleetError(f'leases must be "file" or "etcd", not {leases!r}')
        if leases == "etcd" and not etcd_endpoints:
            raise FleetError("etcd leases need etcd_endpoints")
        self.leases = leases
        self.etcd_endpoints = list(etcd_endpoints)
        self.keep_logs = keep_logs
        #: Each node's runtime directories, old and current: a cell that printed its
        #: XDG_RUNTIME_DIR ran on that node.
        self.run_dirs = {}
        self.generations = [0] * nodes
        self.nodes = [None] * nodes
        self.router = None
        self.router_log = None
        self.leaked = []
        self.started_pids = []
        self.dir = tempfile.mkdtemp(prefix="cellvisor-fleet-")
        # Open to traversal: as root the nodes give their sessions uids of their own.
        os.chmod(self.dir, 0o711)
        self.token = "fleet-" + secrets.token_hex(16)
        self.token_file = os.path.join(self.dir, "token")
        with open(self.token_file, "w") as f:
            f.write(self.token + "\n")
        os.chmod(self.token_file, 0o600)
        self.key_file = os.path.join(self.dir, "snapshot.key")
        with open(self.key_file, "wb") as f:
            f.write(secrets.token_bytes(32))
        os.chmod(self.key_file, 0o400)
        if snapshots is None:
            snapshots = os.path.join(self.dir, "snapshots")
            os.mkdir(snapshots)
        self.snapshots = snapshots
        self.ports = [(free_port(), free_port()) for _ in range(nodes)]
        self.router_port = free_port()
        try:
            for i in range(nodes):
                self.start_node(i)
            if router:
                self.start_router()
        except BaseException:
            self.stop()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop()

    def node_config(self, i):
        port, agent = self.ports[i]
        return (f'[sessions]\nmax-sessions = {self.max_sessions}\n'
                f'[daemon]\nlisten = ["tcp://127.0.0.1:{port}"]\ninsecure-plaintext = true\n'
                f'token-file = "{self.token_file}"\nnode = "node-{i}"\n'
                f'[snapshots]\nwhen = "every-cell"\ndir = "{self.snapshots}"\nkey-file = "{self.key_file}"\n'
                f'[fleet]\n{self.leases_config()}lease-ttl = "{self.lease_ttl}"\n'
                f'agent-listen = ["tcp://127.0.0.1:{agent}"]\n{self.config_extra}')

    def leases_config(self):
        if self.leases == "file":
            return "leases = true\n"
        endpoints = ", ".join(f'"{url}"' for url in self.etcd_endpoints)
        return f'leases = "etcd"\netcd-endpoints = [{endpoints}]\n'

    def start_node(self, i):
        """Starts node i (again, on the same ports, after `kill_node`)."""
        old = self.nodes[i]
        if old is not None:
            if old.alive():
                raise FleetError(f"node-{i} is running already")
            old.stop()
        port, agent = self.ports[i]
        keep = None
        if self.keep_logs is not None:
            keep = os.path.join(self.keep_logs, f"node-{i}.{self.generations[i]}.log")
        self.generations[i] += 1
        self.nodes[i] = Node(self.binary, i, port, agent, self.node_config(i), self.snapshots, keep)
        self.started_pids.append(self.nodes[i].pid)
        self.run_dirs[self.nodes[i].run_dir] = self.nodes[i].name
        return self.nodes[i]

    def kill_node(self, i):
        """`kill -9` of node i; answers the `time.monotonic()` just before the signal."""
        node = self.nodes[i]
        at = time.monotonic()
        node.kill()
        return at

    def start_router(self, wait=True):
        if shutil.which(self.haproxy) is None:
            raise FleetError(f"HAProxy ({self.haproxy}) is not installed: apt-get install haproxy")
        config = haproxy_config(len(self.nodes), self.dir)
        env = dict(os.environ)
        for i, (port, agent) in enumerate(self.ports):
            env[f"CELLVISOR_NODE_{i}"] = f"127.0.0.1:{port}"
            env[f"CELLVISOR_AGENT_PORT_{i}"] = str(agent)
        env["CELLVISOR_HAPROXY_BIND"] = f"127.0.0.1:{self.router_port}"
        env["CELLVISOR_HAPROXY_PEER_ADDR"] = f"127.0.0.1:{free_port()}"
        log_path = os.path.join(self.dir, "haproxy.log")
        if self.router_log is not None:
            self.router_log.close()
        self.router_log = open(log_path, "ab")
        self.router = subprocess.Popen([self.haproxy, "-db", "-L", "local", "-f", config], env=env,
                                       stdin=subprocess.DEVNULL, stdout=self.router_log,
                                       stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True)
        self.started_pids.append(self.router.pid)
        try:
            wait_for_port(self.router_port, self.router, within=15, what=f"HAProxy (log: {log_path})")
        except FleetError as error:
            raise FleetError(f"{error}\n{tail(log_path)}") from None
        if wait:
            self.wait_routed()

    def restart_router(self, hard=True):
        """Stops HAProxy (`kill -9` when `hard`, dropping every connection and answer in
        flight; else SIGTERM) and starts it again on the same port."""
        if self.router is not None and self.router.poll() is None:
            self.router.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
            self.router.wait()
        self.start_router(wait=False)

    @property
    def url(self):
        if self.router is not None:
            return f"ws://127.0.0.1:{self.router_port}"
        return self.nodes[0].url

    def live_nodes(self):
        return [n for n in self.nodes if n is not None and n.alive()]

    def client(self, session, timeout=30, url=None):
        """A WebSocket client bound to `session`, through HAProxy (or to `url`)."""
        return Client(url=url or self.url, token=self.token, session=session, timeout=timeout)

    def eval(self, session, language, code, timeout=30):
        """One cell of `session` on a connection of its own (as a client after a reconnect);
        the whole `eval` result. Raises one of RETRYABLE when no node answers it."""
        with self.client(session, timeout) as client:
            return client.call("eval", {"session": session, "cells": [{"language": language, "code": code}]})

    def close_session(self, session):
        try:
            with self.client(session, 10) as client:
                client.call("close", {"session": session})
        except RETRYABLE:
            pass

    def wait_routed(self, within=30.0, nodes=None):
        """Waits until HAProxy has placed a new session on every live node (or on each of
        `nodes`, names), by probe sessions it then closes; answers the names seen."""
        wanted = set(nodes or (n.name for n in self.live_nodes()))
        seen, probes, last = set(), [], None
        deadline = time.monotonic() + within
        while not wanted <= seen:
            if time.monotonic() > deadline:
                raise FleetError(f"HAProxy placed new sessions on {sorted(seen)} only, not on {sorted(wanted - seen)}, "
                                 f"within {within:.0f} s (last error: {last}; log: {self.dir}/haproxy.log)")
            session = f"fleet-probe-{secrets.token_hex(4)}"
            try:
                seen.add(self.eval(session, "lua", "1", timeout=10)["node"])
                probes.append(session)
            except RETRYABLE as error:
                last = error
                time.sleep(0.05)
        for session in probes:
            self.close_session(session)
        return seen

    def stop(self):
        """Stops HAProxy and every node (by pid), kills their leftovers, removes the fleet's
        directory; Ctrl-C and SIGTERM wait until it is done. Safe to call twice."""
        masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            if self.router is not None and self.router.poll() is None:
                self.router.terminate()
                try:
                    self.router.wait(10)
                except subprocess.TimeoutExpired:
                    self.router.kill()
                    self.router.wait()
            if self.router_log is not None:
                self.router_log.close()
            for node in self.nodes:
                if node is not None and not getattr(node, "stopped", False):
                    node.resume()  # a paused node could not be asked to stop
                    node.stop()
                    node.stopped = True
                    self.leaked.extend(node.leftovers)
            shutil.rmtree(self.dir, ignore_errors=True)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, masked)


def terminate_on_sigterm():
    """SIGTERM (and SIGHUP) end the program as Ctrl-C does, so cleanup runs. Ctrl-C itself
    too when started with SIGINT ignored (a background job of a script), where Python would
    otherwise leave it ignored and `kill -INT` could never stop the fleet."""
    def raise_interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, raise_interrupt)
    signal.signal(signal.SIGHUP, raise_interrupt)


def default_binary():
    for build in ("release", "debug"):
        path = os.path.join(ROOT, "target", build, "cellvisor")
        if os.access(path, os.X_OK):
            return path
    return os.path.join(ROOT, "target", "release", "cellvisor")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    parser.add_argument("--lease-ttl", default="2s", help='each node\'s fleet.lease-ttl (default "2s")')
    parser.add_argument("--binary", default=default_binary(), help="the cellvisor binary")
    parser.add_argument("--haproxy", default="haproxy", help="the HAProxy program")
    parser.add_argument("--no-router", action="store_true", help="start the nodes only, no HAProxy")
    args = parser.parse_args()
    terminate_on_sigterm()
    try:
        with Fleet(args.binary, args.nodes, router=not args.no_router, lease_ttl=args.lease_ttl,
                   haproxy=args.haproxy) as fleet:
            print(f"fleet of {args.nodes} node(s), lease-ttl {args.lease_ttl}, binary {fleet.binary}")
            for node in fleet.nodes:
                print(f"  {node.name}: {node.url}  pid {node.pid}  agent 127.0.0.1:{node.agent_port}  "
                      f"log {node.dir}/daemon.log")
            if fleet.router is not None:
                print(f"  HAProxy: {fleet.url}  pid {fleet.router.pid}  log {fleet.dir}/haproxy.log")
            print(f"url {fleet.url}\ntoken-file {fleet.token_file}\nsnapshots {fleet.snapshots}")
            print(f"try: python3 {HERE}/cellvisor_client.py --url {fleet.url} --token-file {fleet.token_file} "
                  "--session demo py 'print(6 * 7)'")
            print("Ctrl-C stops the fleet.", flush=True)
            while True:
                signal.pause()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    except FleetError as error:
        print(f"fleet: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
