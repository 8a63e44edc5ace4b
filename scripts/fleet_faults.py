#!/usr/bin/env python3
"""The fleet fault test (docs/fleet.md, "The fault test"): three nodes in etcd mode behind
a real HAProxy, a real etcd cluster of its own (three members by default), clients sending
many cells while faults come one after another, then the invariants checked
(scripts/fleet_audit.py): every cell acknowledged `complete` has its effect in its
session's final state exactly once, no session's cells took effect from two nodes running
at once (from the nodes' `cellvisor::cell` log lines), and every failed save was told on
its result.

    scripts/fleet-faults                                 # the full run: 10,000 cells, 30 faults
    scripts/fleet-faults --cells 400 --faults 5 --json   # the CI-sized run (tests/fleet_faults.rs)

The faults, in turn: `kill -9` of a node (started again after), a node stopped (SIGSTOP)
past its lease's TTL with a cell running and a request queued on it (then SIGCONT), an
etcd member's `kill -9` and restart, HAProxy's `kill -9` and restart with answers in
flight, and a full disk (the shared snapshot directory is a small tmpfs, filled for a
moment; mounting needs CAP_SYS_ADMIN: where mount is refused, that fault is skipped and
the report says so). Each client is the `cellvisor` package's (clients/python): it sends
every `eval` with a request_id and sends it again on a lost, silent or refused
connection. Every process started is ended by its pid. Exit status 0 when every
invariant held, 1 when one did not, 2 when the fleet could not be set up.
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from etcd_cluster import EtcdCluster  # noqa: E402
from fleet import RETRYABLE, Fleet, FleetError, default_binary, terminate_on_sigterm  # noqa: E402
import fleet_audit  # noqa: E402
from cellvisor import Client  # noqa: E402  (put on the path by fleet)

KINDS = ("kill", "pause", "etcd", "router", "disk")


def wall_ms():
    return int(time.time() * 1000)


def append_code(cell_id, sleep=0.0):
    """A cell that appends its id and where it ran to the session's `ids`."""
    pause = f"__import__('time').sleep({sleep})\n" if sleep else ""
    return (f"{pause}globals().setdefault('ids', []).append(({cell_id!r}, "
            "__import__('os').environ.get('XDG_RUNTIME_DIR', '')))")


class TinyDisk:
    """A tmpfs of `size` at `path` (the shared snapshot directory), to fill for a moment."""

    def __init__(self, path, size):
        self.path = path
        os.makedirs(path, exist_ok=True)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0711", "tmpfs", path],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.mounted = done.returncode == 0
        self.why = done.stdout.decode(errors="replace").strip()

    def fill(self):
        with open(os.path.join(self.path, "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
            except OSError:
                pass

    def free(self):
        try:
            os.remove(os.path.join(self.path, "filler"))
        except OSError:
            pass

    def unmount(self):
        if self.mounted:
            subprocess.run(["umount", "-l", self.path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Run:
    """One run: the fleet, its clients' records and the faults' timeline."""

    def __init__(self, fleet, etcd, disk, args):
        self.fleet, self.etcd, self.disk, self.args = fleet, etcd, disk, args
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.faults_done = threading.Event()
        self.sent = set()
        self.acks = {}          # id -> the answer's cell (status, saved) and node
        self.answers = []       # {node, cell_id, saved}
        self.failures = []      # (id, error) of requests no retry got answered
        self.home = {}          # session -> node of its last answer
        self.answered_at = []   # (monotonic, session, node)
        self.kills = []         # (node name, wall ms)
        self.faults = []
        self.failover = {"kill": [], "pause": []}
        self.skipped = []
        self.count = 0
        self.final_reads = {}

    def client(self, session):
        client = Client(url=self.fleet.url, token=self.fleet.token, session=session,
                        silent_after=self.args.silent_after)
        client.retries = 60
        client.retry_within = 60
        return client

    def record(self, session, cell_id, result):
        cell = result["cells"][0]
        node = result.get("node") or cell.get("node")
        with self.lock:
            self.acks[cell_id] = {"status": cell.get("status"), "saved": cell.get("saved"), "node": node,
                                  "at_ms": wall_ms(), "replayed": bool(result.get("replayed"))}
            self.answers.append({"node": node, "cell_id": cell.get("cell_id"), "saved": cell.get("saved")})
            self.home[session] = node
            self.answered_at.append((time.monotonic(), session, node))

    def send(self, client, session, cell_id, sleep=0.0):
        """One cell through the router, sent again by the client until answered; False
        when every retry failed (the request is then unacknowledged)."""
        with self.lock:
            self.sent.add(cell_id)
            self.count += 1
        try:
            result = client.eval(append_code(cell_id, sleep), language="py", session=session, request_id=cell_id)
        except RETRYABLE as error:
            with self.lock:
                self.failures.append((cell_id, f"{type(error).__name__}: {error}"))
            return False
        self.record(session, cell_id, result)
        return True

    def load(self, session):
        """A client's loop: cells of `session` back to back until the cells are sent and
        the faults are over."""
        client, n = None, 0
        while not self.stop.is_set():
            with self.lock:
                enough = self.count >= self.args.cells
            if enough and self.faults_done.is_set():
                break
            try:
                if client is None:
                    client = self.client(session)
                if not self.send(client, session, f"{session}.{n}"):
                    client.close()
                    client = None
            except RETRYABLE:
                client = None
                time.sleep(0.2)
                continue
            n += 1
        if client is not None:
            client.close()

    # -- faults -----------------------------------------------------------------------

    def first_moved_answer(self, since, sessions, away_from, within):
        """Seconds from `since` (monotonic) to the first answer after it, of one of
        `sessions`, from a node other than `away_from`; None if none came `within`."""
        deadline = since + within
        while time.monotonic() < deadline:
            with self.lock:
                for at, session, node in self.answered_at:
                    if at > since and session in sessions and node != away_from:
                        return at - since
            time.sleep(0.02)
        return None

    def sessions_on(self, node):
        with self.lock:
            return {s for s, n in self.home.items() if n == node}

    def busy_node(self):
        """A live node with sessions, preferring the one with most."""
        live = [n.name for n in self.fleet.live_nodes()]
        with self.lock:
            counts = {name: sum(1 for n in self.home.values() if n == name) for name in live}
        return max(live, key=lambda name: (counts[name], random.random()))

    def fault_kill(self):
        name = self.busy_node()
        index = int(name.split("-")[1])
        moved = self.sessions_on(name)
        at = self.fleet.kill_node(index)
        with self.lock:
            self.kills.append((name, wall_ms()))
        took = self.first_moved_answer(at, moved, name, within=30)
        if took is not None:
            self.failover["kill"].append(took)
        self.fleet.start_node(index)
        return {"node": name, "failover_s": took}

    def wait_busy(self, index, session, within=20.0):
        deadline = time.monotonic() + within
        with self.fleet.nodes[index].connect(5) as direct:
            while time.monotonic() < deadline:
                rows = direct.call("status") or []
                if any(r.get("session") == session and r.get("state") == "busy" for r in rows):
                    return True
                time.sleep(0.02)
        return False

    def fault_pause(self, number):
        """A session of its own on some node: a slow cell running there and a request
        queued behind it, then the node stopped past its lease's TTL, then continued."""
        session = f"pause-{number}"
        first = self.client(session)
        if not self.send(first, session, f"{session}.0"):
            first.close()
            return {"skipped": "the pause session's first cell was never answered"}
        name = self.home[session]
        index = int(name.split("-")[1])
        second = self.client(session)
        slow = threading.Thread(target=self.send, args=(first, session, f"{session}.1", self.args.slow_cell))
        slow.start()
        running = self.wait_busy(index, session)
        queued = threading.Thread(target=self.send, args=(second, session, f"{session}.2"))
        queued.start()
        time.sleep(0.2)  # the queued request reaches the node
        node = self.fleet.nodes[index]
        moved = self.sessions_on(name) | {session}
        at = time.monotonic()
        node.pause()
        took = self.first_moved_answer(at, moved, name, within=self.args.pause_for)
        rest = self.args.pause_for - (time.monotonic() - at)
        if rest > 0:
            time.sleep(rest)
        node.resume()
        if took is None:
            took = self.first_moved_answer(at, moved, name, within=30)
        if took is not None:
            self.failover["pause"].append(took)
        slow.join(120)
        queued.join(120)
        first.close()
        second.close()
        return {"node": name, "cell_was_running": running, "paused_s": self.args.pause_for, "failover_s": took}

    def fault_etcd(self):
        member = random.randrange(len(self.etcd.processes))
        self.etcd.restart(member, down_for=1.0)
        self.etcd.wait_healthy(60)
        return {"member": self.etcd.names[member]}

    def fault_router(self):
        self.fleet.restart_router(hard=True)
        return {"restarted": True}

    def fault_disk(self):
        if not self.disk.mounted:
            return {"skipped": f"no tmpfs: mount was refused ({self.disk.why})"}
        with self.lock:
            before = sum(1 for a in self.answers if (a["saved"] or {}).get("saved") is False)
        self.disk.fill()
        deadline = time.monotonic() + 10
        told = 0
        while time.monotonic() < deadline:
            with self.lock:
                told = sum(1 for a in self.answers if (a["saved"] or {}).get("saved") is False) - before
            if told >= 3:
                break
            time.sleep(0.05)
        self.disk.free()
        return {"saves_told_failed": told}

    def faults_loop(self):
        try:
            time.sleep(self.args.gap)
            for number in range(self.args.faults):
                if self.stop.is_set():
                    break
                kind = KINDS[number % len(KINDS)]
                started, started_ms = time.monotonic(), wall_ms()
                if kind == "pause":
                    what = self.fault_pause(number)
                else:
                    what = getattr(self, f"fault_{kind}")()
                what.update(kind=kind, seconds=round(time.monotonic() - started, 2), at_ms=started_ms)
                if "skipped" in what:
                    self.skipped.append(what)
                self.faults.append(what)
                print(f"fault {number + 1}/{self.args.faults}: {json.dumps(what)}  ({self.count} cells sent)",
                      file=sys.stderr, flush=True)
                time.sleep(self.args.gap)
        except Exception as error:
            self.faults.append({"kind": "error", "error": f"{type(error).__name__}: {error}"})
            raise
        finally:
            self.faults_done.set()

    # -- the end ----------------------------------------------------------------------

    def final_states(self, sessions, page=40):
        """Each session's `ids`, read through the router in pages (a cell's output is
        truncated past a few KiB)."""
        finals, unread = {}, []
        for session in sessions:
            try:
                with self.client(session) as client:
                    first = client.eval("print(len(globals().get('ids', [])))", language="py", session=session)
                    cell = first["cells"][0]
                    ids = []
                    for at in range(0, int(cell["output"]), page):
                        part = client.eval(f"print(__import__('json').dumps(ids[{at}:{at + page}]))",
                                           language="py", session=session)
                        ids += json.loads(part["cells"][0]["output"])
                finals[session] = ids
                self.final_reads[session] = {"node": first.get("node"), "ids": len(ids), "notice": cell.get("notice"),
                                             "from": (cell.get("state") or {}).get("from")}
            except (RETRYABLE + (ValueError, KeyError)) as error:
                unread.append(f"{session}: {error}")
        return finals, unread


def median(values):
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return round(values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2, 3)


def run(args):
    work = tempfile.mkdtemp(prefix="cellvisor-faults-")
    logs = os.path.join(work, "logs")
    os.mkdir(logs)
    os.chmod(work, 0o711)
    disk = TinyDisk(os.path.join(work, "snapshots"), args.disk_size)
    if not disk.mounted:
        print(f"the disk fault is skipped: mounting a tmpfs was refused ({disk.why}); it needs CAP_SYS_ADMIN",
              file=sys.stderr)
    etcd = fleet = None
    report = {}
    try:
        etcd = EtcdCluster(args.etcd_members)
        fleet = Fleet(args.binary, 3, lease_ttl=args.lease_ttl, leases="etcd", etcd_endpoints=etcd.endpoints,
                      snapshots=disk.path, keep_logs=logs, max_sessions=64)
        state = Run(fleet, etcd, disk, args)
        sessions = [f"s{i}" for i in range(args.sessions)]
        began = time.monotonic()
        threads = [threading.Thread(target=state.load, args=(s,), daemon=True) for s in sessions]
        for thread in threads:
            thread.start()
        faults = threading.Thread(target=state.faults_loop, daemon=True)
        faults.start()
        faults.join()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - began
        for node in fleet.nodes:
            if node is not None:
                node.resume()
        for i, node in enumerate(fleet.nodes):
            if node is None or not node.alive():
                fleet.start_node(i)
        pause_sessions = [f"pause-{n}" for n in range(args.faults) if KINDS[n % len(KINDS)] == "pause"]
        finals, unread = state.final_states(sessions + pause_sessions)
        run_dirs = dict(fleet.run_dirs)
        end_ms = wall_ms()
    finally:
        started, leaked = [], []
        if fleet is not None:
            fleet.stop()
            started += fleet.started_pids
            leaked += fleet.leaked
        if etcd is not None:
            etcd.stop()
            started += etcd.started_pids
        disk.unmount()

    def ends_at(node, start):
        later = [at for name, at in state.kills if name == node and at >= start]
        return min(later) if later else end_ms

    cells_logged = []
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), errors="replace") as f:
            cells_logged += fleet_audit.intervals(f, ends_at)
    if args.keep_logs:
        shutil.copytree(logs, args.keep_logs, dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    once, once_counts = fleet_audit.check_exactly_once(state.acks, finals, state.sent)
    told, told_counts = fleet_audit.check_told(state.answers, cells_logged)
    overlap, overlap_counts = fleet_audit.check_one_node_at_a_time(cells_logged, finals, run_dirs)
    violations = [f"final state of {u} not read" for u in unread] + once + told + overlap
    missing = [cell_id for cell_id, ack in state.acks.items() if any(v.startswith(cell_id + " was acknowledged")
                                                                     for v in once[:200])]
    lost = [{"id": m, **state.acks[m]} for m in missing[:30]]
    if disk.mounted and any(f["kind"] == "disk" for f in state.faults) and told_counts["saves failed and told"] == 0:
        violations.append("the disk filled but no answer told a failed save")
    report = {
        "cells_sent": len(state.sent), "cells_acknowledged": len(state.acks), "requests_unanswered": len(state.failures),
        "faults": state.faults, "skipped": state.skipped, "seconds": round(elapsed, 1),
        "failover_median_s": {k: median(v) for k, v in state.failover.items()},
        "failover_s": {k: [round(x, 3) for x in v] for k, v in state.failover.items()},
        "counts": {**once_counts, **told_counts, **overlap_counts},
 "violations": violations[:50], "violation_count": len(violations),
        "unanswered_examples": state.failures[:5], "final_reads": state.final_reads, "lost_examples": lost,
        "disk_fault": "on a tmpfs" if disk.mounted else f"skipped: mount refused ({disk.why})",
        "started_pids": started, "leaked_processes": leaked,
    }
    return report


def etcd_load(args):
    """etcd's load per held session per second, idle and at one cell per second: `sessions`
    sessions live on the fleet (each holding its lease), etcd's request counters read
    over `--etcd-load` seconds of each phase."""
    seconds = args.etcd_load
    with EtcdCluster(args.etcd_members) as etcd, \
            Fleet(args.binary, 3, lease_ttl=args.lease_ttl, leases="etcd", etcd_endpoints=etcd.endpoints) as fleet:
        state = Run(fleet, etcd, None, args)
        sessions = [f"load{i}" for i in range(args.sessions)]
        clients = {s: state.client(s) for s in sessions}
        for s, client in clients.items():
            state.send(client, s, f"{s}.first")
        phases = {}
        for phase in ("idle", "one cell per second"):
            before, began = etcd.metrics(), time.monotonic()
            n = 0
            while time.monotonic() - began < seconds:
                if phase != "idle":
                    for s, client in clients.items():
                        state.send(client, s, f"{s}.{n}")
                    n += 1
                time.sleep(max(0.0, began + n - time.monotonic()) if phase != "idle" else 0.1)
            elapsed = time.monotonic() - began
            after = etcd.metrics()
            per = {}
            for key in after:
                if key.startswith("received:"):
                    delta = after[key] - before.get(key, 0)
                    if delta > 0:
                        per[key.split(":", 1)[1]] = round(delta / len(sessions) / elapsed, 3)
            per["total"] = round(sum(per.values()), 3)
            phases[phase] = per
        for client in clients.values():
            client.close()
    return {"sessions": len(sessions), "seconds": seconds, "lease_ttl": args.lease_ttl,
            "etcd_requests_per_session_per_second": phases}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=default_binary(), help="the cellvisor binary (built with --features etcd)")
    parser.add_argument("--cells", type=int, default=10000, help="cells to send at least (default 10000)")
    parser.add_argument("--faults", type=int, default=30, help="faults, the five kinds in turn (default 30)")
    parser.add_argument("--sessions", type=int, default=12, help="sessions, one client each (default 12)")
    parser.add_argument("--lease-ttl", default="2s", help='the nodes\' fleet.lease-ttl (default "2s")')
    parser.add_argument("--etcd-members", type=int, default=3, help="members of the etcd cluster (default 3)")
    parser.add_argument("--pause-for", type=float, default=5.0, help="seconds a paused node stays stopped (5)")
    parser.add_argument("--slow-cell", type=float, default=1.5, help="seconds the paused node's running cell takes")
    parser.add_argument("--silent-after", type=float, default=3.0, help="the clients' silent_after (3 s)")
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between faults (1)")
    parser.add_argument("--disk-size", default="256m", help="the snapshot tmpfs's size (256m)")
    parser.add_argument("--seed", type=int, default=None, help="the random choices' seed")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON line")
    parser.add_argument("--keep-logs", default=None, metavar="DIR", help="copy the nodes' logs to DIR")
    parser.add_argument("--etcd-load", type=float, default=None, metavar="SECONDS",
                        help="no faults: measure etcd's requests per session per second, idle and at one "
                             "cell per second, SECONDS each")
    args = parser.parse_args()
    random.seed(args.seed)
    terminate_on_sigterm()
    try:
        if args.etcd_load is not None:
            print(json.dumps(etcd_load(args), indent=None if args.json else 2))
            return 0
        report = run(args)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 2
    except FleetError as error:
        print(f"fleet-faults: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report, indent=2))
    return 1 if report["violation_count"] else 0


if __name__ == "__main__":
    sys.exit(main())
