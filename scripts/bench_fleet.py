"""A fleet of cellvisor nodes behind HAProxy, measured on one machine (scripts/fleet.py starts it).

(a) Throughput: K client threads, each with its own session on its own WebSocket (`/v1/rpc`
    with the `Cellvisor-Session` header), run warm trivial cells (`1+1`) back to back for D
    seconds; cells per second, per-cell latency, and which node each session ran on, for
    1 node reached directly (no HAProxy), 1 node through HAProxy, and 3 nodes through HAProxy.
    Every node has the fleet's configuration (snapshots after every cell to the shared
    directory, leases), so the rows differ only in the nodes and the router.
(b) Failover: in a 3-node fleet, a session set on one node (`n = <r>`), that node killed with
    `kill -9`, and the session's next cell (`n`) sent through HAProxy on a new connection every
    --poll-ms until one answers: the time from the kill to that answer, over --failovers runs
    (the killed node is started again between runs, each run killing the next node).

Usage: scripts/bench-fleet [--threads 12] [--seconds 10] [--languages py,js,lua]
                           [--failovers 10] [--lease-ttl 2s] [--quick] [--json] [--binary PATH]
--quick: 3 threads for 1.5 s, no 1-node-through-HAProxy row, 2 failovers (a smoke test).
--json: the figures as JSON on stdout, the table on stderr.
"""

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fleet import RETRYABLE, Fleet, FleetError, default_binary, tail, terminate_on_sigterm  # noqa: E402

TRIVIAL = "1+1"  # an expression in each of py, js and lua


def duration_seconds(text):
    """Seconds in a duration as the config writes it: "2s", "500ms", "1m", "1.5s"."""
    for suffix, scale in (("ms", 0.001), ("s", 1), ("m", 60)):
        if text.endswith(suffix):
            try:
                return float(text[:-len(suffix)]) * scale
            except ValueError:
                break
    raise FleetError(f"--lease-ttl {text!r}: give a duration like 2s, 500ms or 1m")


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else None


class ClientThread(threading.Thread):
    """One client: its own session and connection, warm cells until `stop_at`."""

    def __init__(self, fleet, session, language, start, state):
        super().__init__(daemon=True)
        self.fleet, self.session, self.language = fleet, session, language
        self.start_barrier, self.state = start, state
        self.latencies, self.nodes, self.error, self.finished = [], set(), None, None

    def cell(self, client):
        started = time.perf_counter()
        result = client.call("eval", {"session": self.session,
                                      "cells": [{"language": self.language, "code": TRIVIAL}]})
        elapsed = time.perf_counter() - started
        cell = result["cells"][0]
        if cell["status"] != "complete" or cell["output"].strip() != "2":
            raise RuntimeError(f"{self.session}: `{TRIVIAL}` in {self.language} did not give 2: {cell}")
        self.nodes.add(result.get("node", ""))
        return elapsed

    def run(self):
        client = None
        try:
            client = self.fleet.client(self.session, timeout=60)
            for _ in range(3):  # the worker starts, then warms
                self.cell(client)
        except BaseException as error:  # reported by the main thread
            self.error = f"{self.session}: {error!r}"
            self.start_barrier.abort()
            if client is not None:
                client.close()
            return
        try:
            self.start_barrier.wait()
            while time.perf_counter() < self.state["stop_at"]:
                self.latencies.append(self.cell(client))
            self.finished = time.perf_counter()
        except threading.BrokenBarrierError:
            pass
        except BaseException as error:
            self.error = f"{self.session}: {error!r}"
        finally:
            client.close()


def throughput(fleet, label, threads, seconds, languages):
    """K client threads on `fleet` for `seconds`: cells/s, latencies, session placement."""
    start = threading.Barrier(threads + 1)
    state = {"stop_at": float("inf")}
    clients = [ClientThread(fleet, f"bench-{len(fleet.nodes)}{'h' if fleet.router else 'd'}-{i}", languages[i % len(languages)], start,
                            state) for i in range(threads)]
    for client in clients:
        client.start()
    try:
        start.wait(timeout=120)
    except threading.BrokenBarrierError:
        pass
    began = time.perf_counter()
    state["stop_at"] = began + seconds
    for client in clients:
        client.join(seconds + 120)
    errors = [c.error for c in clients if c.error] + [f"{c.session}: still running" for c in clients if c.is_alive()]
    if errors:
        raise FleetError(f"{label}: " + "; ".join(errors[:5]))
    ended = max(c.finished for c in clients)
    latencies = [v for c in clients for v in c.latencies]
    per_node = {}
    for c in clients:
        for node in c.nodes:
            per_node[node] = per_node.get(node, 0) + 1
    return {
        "setup": label, "nodes": len(fleet.nodes), "haproxy": fleet.router is not None,
        "threads": threads, "languages": languages, "cells": len(latencies),
        "seconds": round(ended - began, 3),
        "cells_per_second": round(len(latencies) / (ended - began), 1),
        "median_ms": round(statistics.median(latencies) * 1000, 3),
        "p95_ms": round(percentile(latencies, 0.95) * 1000, 3),
        "sessions_per_node": dict(sorted(per_node.items())),
        "sessions_on_more_than_one_node": sorted(c.session for c in clients if len(c.nodes) != 1),
    }


def place(fleet, session, language, code, node_name, within=30.0):
    """Runs `code` in new sessions `session-0`, `session-1`, ... through HAProxy until one lands
    on `node_name`; answers (that session, sessions that landed elsewhere with their nodes)."""
    deadline = time.monotonic() + within
    elsewhere = []
    for j in range(10_000):
        name = f"{session}-{j}"
        try:
            result = fleet.eval(name, language, code)
        except RETRYABLE:
            result = None
            time.sleep(0.1)
        if result is not None and result["cells"][0]["status"] != "complete":
            raise FleetError(f"{name} on {result['node']}: `{code}` did not complete: {result['cells'][0]}")
        if result is not None and result["node"] == node_name:
            return name, elsewhere
        if result is not None:
            elsewhere.append((name, result["node"]))
            time.sleep(0.1)
        if time.monotonic() > deadline:
            break
    raise FleetError(f"HAProxy put no new session on {node_name} within {within:.0f} s")


def failover(fleet, run, language, poll):
    """One run: a session live on node `run % N`, that node killed, the session's next answer."""
    victim = run % len(fleet.nodes)
    victim_name = fleet.nodes[victim].name
    value = 1000 + run
    session, elsewhere = place(fleet, f"failover{run}", language, f"n = {value}", victim_name)
    bystander = next(iter(elsewhere), None)
    for name, _ in elsewhere[1:]:
        fleet.close_session(name)
    # "every-cell" saves once the cell's answer is out: the kill waits for that save (a kill
    # before it loses that cell, as docs/snapshots.md says), then comes at a random point of
    # the lease's renewal period (every third of lease-ttl), as a node's death would.
    snapshot = os.path.join(fleet.snapshots, session, language, "latest.snap")
    deadline = time.monotonic() + 10
    while not os.path.exists(snapshot):
        if time.monotonic() > deadline:
            log = tail(os.path.join(fleet.nodes[victim].dir, "daemon.log"))
            raise FleetError(f"run {run}: no snapshot of {session} at {snapshot} within 10 s; "
                             f"{victim_name}'s log ends:\n{log}")
        time.sleep(0.005)
    time.sleep(random.Random(run).uniform(0, duration_seconds(fleet.lease_ttl) / 3))
    killed_at = fleet.kill_node(victim)
    attempts, last, result = 0, None, None
    while time.monotonic() - killed_at < 60:
        attempts += 1
        try:
            result = fleet.eval(session, language, "n", timeout=30)
            break
        except RETRYABLE as error:
            last = error
            time.sleep(poll)
    answered = time.monotonic() - killed_at
    if result is None:
        raise FleetError(f"run {run}: {session} never answered within 60 s of {victim_name}'s kill (last: {last})")
    cell = result["cells"][0]
    source = (cell.get("state") or {}).get("from") or {}
    record = {
        "run": run, "killed": victim_name, "session": session, "language": language,
        "seconds": round(answered, 3), "attempts": attempts, "answered_by": result["node"],
        "output": cell["output"].strip(), "state_restored": cell["output"].strip() == str(value),
        "restored_from": source.get("node"), "restored_reason": source.get("reason"),
    }
    if bystander is not None:
        # A session of a live node stays where it is, its state with it.
        name, home = bystander
        check = fleet.eval(name, language, "n")
        record["bystander"] = {"session": name, "home": home, "answered_by": check["node"],
                               "stayed": check["node"] == home and check["cells"][0]["output"].strip() == str(value)}
        fleet.close_session(name)
    fleet.start_node(victim)
    fleet.wait_routed()  # HAProxy's health check has seen it again
    return record


def table(report):
    lines = [f"cellvisor fleet benchmark: {report['binary']} ({report['build']} build), "
             f"{report['cpus']} CPUs, haproxy {report['haproxy_version']}"]
    a = report["throughput"]
    if a:
        first = a[0]
        lines.append(f"(a) {first['threads']} client threads, each its own session and WebSocket, warm `{TRIVIAL}` "
                     f"in {','.join(first['languages'])}, {report['seconds']} s per setup")
        lines.append(f"    {'setup':<20} {'cells/s':>9} {'x direct':>9} {'median ms':>10} {'p95 ms':>8}  sessions per node")
        base = first["cells_per_second"]
        for row in a:
            ratio = row["cells_per_second"] / base if base else float("nan")
            per_node = ", ".join(f"{k} {v}" for k, v in row["sessions_per_node"].items())
            moved = f"  MOVED: {row['sessions_on_more_than_one_node']}" if row["sessions_on_more_than_one_node"] else ""
            lines.append(f"    {row['setup']:<20} {row['cells_per_second']:>9.1f} {ratio:>9.2f} "
                         f"{row['median_ms']:>10.2f} {row['p95_ms']:>8.2f}  {per_node}{moved}")
    b = report["failover"]
    if b["runs"]:
        lines.append(f"(b) kill -9 of a node to the first answer of its live session on another node, "
                     f"fleet.lease-ttl = \"{b['lease_ttl']}\", retried every {b['poll_ms']} ms through HAProxy, "
                     f"{len(b['runs'])} runs")
        lines.append(f"    median {b['median_seconds']:.3f} s (min {b['min_seconds']:.3f}, max {b['max_seconds']:.3f}); "
                     f"state restored {b['restored']}/{len(b['runs'])}; bystander sessions stayed "
                     f"{b['bystanders_stayed']}/{b['bystanders']}")
        lines.append("    runs (s): " + " ".join(f"{r['seconds']:.2f}" for r in b["runs"]))
    if report["leaked_processes"]:
        lines.append(f"LEAKED processes (killed): {report['leaked_processes']}")
    return "\n".join(lines)


def haproxy_version(haproxy):
    import subprocess
    try:
        out = subprocess.run([haproxy, "-v"], capture_output=True, text=True, timeout=10).stdout
        return out.split()[2] if out.startswith("HAProxy version") else "?"
    except (OSError, subprocess.SubprocessError):
        return "missing"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=12, help="client threads, one session each (default 12)")
    parser.add_argument("--seconds", type=float, default=10, help="measured seconds per setup (default 10)")
    parser.add_argument("--languages", default="py", help="languages the threads take in turn (default py)")
    parser.add_argument("--failovers", type=int, default=10, help="kill -9 runs (default 10)")
    parser.add_argument("--failover-language", default="py", choices=["py", "js", "lua"])
    parser.add_argument("--lease-ttl", default="2s", help='fleet.lease-ttl of every node (default "2s")')
    parser.add_argument("--poll-ms", type=float, default=25, help="retry interval after the kill (default 25)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: small, well under a minute")
    parser.add_argument("--binary", default=default_binary())
    parser.add_argument("--haproxy", default="haproxy")
    parser.add_argument("--json", action="store_true", help="the figures as JSON on stdout (the table on stderr)")
    args = parser.parse_args()
    languages = [lang.strip() for lang in args.languages.split(",") if lang.strip()]
    if not languages or any(lang not in ("py", "js", "lua") for lang in languages):
        parser.error("--languages: a comma-separated list of py, js, lua")
    setups = [("1 node, direct", 1, False), ("1 node, HAProxy", 1, True), ("3 nodes, HAProxy", 3, True)]
    if args.quick:
        args.threads, args.seconds, args.failovers = 3, 1.5, 2
        setups.pop(1)
    terminate_on_sigterm()
    build = "release" if "/release/" in os.path.abspath(args.binary) else "debug" if "/debug/" in args.binary else "?"
    report = {"binary": os.path.abspath(args.binary), "build": build, "cpus": os.cpu_count(),
              "haproxy_version": haproxy_version(args.haproxy), "seconds": args.seconds, "throughput": [],
              "failover": {"lease_ttl": args.lease_ttl, "poll_ms": args.poll_ms, "runs": []},
              "leaked_processes": [], "started_pids": []}
    out = sys.stderr if args.json else sys.stdout
    try:
        for label, nodes, router in setups:
            print(f"... {label}", file=sys.stderr, flush=True)
            with Fleet(args.binary, nodes, router=router, lease_ttl=args.lease_ttl, haproxy=args.haproxy) as fleet:
                try:
                    report["throughput"].append(throughput(fleet, label, args.threads, args.seconds, languages))
                finally:
                    fleet.stop()
                    report["leaked_processes"] += fleet.leaked
                    report["started_pids"] += fleet.started_pids
        if args.failovers:
            print(f"... {args.failovers} failovers", file=sys.stderr, flush=True)
            with Fleet(args.binary, 3, lease_ttl=args.lease_ttl, haproxy=args.haproxy) as fleet:
                try:
                    runs = report["failover"]["runs"]
                    for run in range(args.failovers):
                        runs.append(failover(fleet, run, args.failover_language, args.poll_ms / 1000))
                        print(f"    run {run}: {runs[-1]['seconds']:.3f} s", file=sys.stderr, flush=True)
                finally:
                    fleet.stop()
                    report["leaked_processes"] += fleet.leaked
                    report["started_pids"] += fleet.started_pids
            seconds = [r["seconds"] for r in runs]
            bystanders = [r["bystander"]["stayed"] for r in runs if "bystander" in r]
            report["failover"].update({
                "median_seconds": statistics.median(seconds), "min_seconds": min(seconds),
                "max_seconds": max(seconds), "restored": sum(r["state_restored"] for r in runs),
                "bystanders": len(bystanders), "bystanders_stayed": sum(bystanders)})
    except FleetError as error:
        print(f"bench-fleet: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench-fleet: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    a = report["throughput"]
    if len(a) >= 2:
        report["ratio_3_nodes_haproxy_to_1_direct"] = round(a[-1]["cells_per_second"] / a[0]["cells_per_second"], 3)
    print(table(report), file=out, flush=True)
    if args.json:
        print(json.dumps(report, indent=1))
    return 1 if report["leaked_processes"] else 0


if __name__ == "__main__":
    sys.exit(main())
