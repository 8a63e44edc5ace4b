#!/usr/bin/env python3
"""How often each thread on a warm cell's path sleeps, and what each process spends per cell.

    python3 scripts/measure_wakeups.py [--binary target/release/cellvisor] [--language js]
                                       [--cells 3000] [--python PYTHON]
                                       [--events all,none [--rounds 10]]

Starts `cellvisor serve` with its own config and runtime directory, warms one session up, then
runs a loop of trivial cells through the daemon socket and prints, per cell: the loop's wall
time, the CPU microseconds of the daemon, the worker and (Python) the interpreter, and the
voluntary context switches of every thread that had any (from /proc, before and after the
loop). A voluntary switch is a sleep, and on a virtual machine every sleep ends in a costly
wake-up: this is the count the per-cell path is designed to keep at one per process.

With `--events`, it compares the eval `events` choices instead (`all`, `output`, `none`):
the loop runs in rounds, each running cells/rounds cells with every choice in turn, and
prints per choice the median over rounds of the CPU microseconds per cell of the host (this
script's process, which reads every line) and of each process on the path (every live
thread's time from /proc/PID/task/*/schedstat).

Everything it starts is stopped by pid, and its directory removed.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402

CODE = {"py": "1+1", "js": "1+1", "lua": "return 1+1"}


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def cpu_ns(pid):
    """CPU nanoseconds of the live threads of `pid`."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except OSError:
            continue
    return total


def compare_events(conn, cell, roles, args):
    """Median CPU per cell of the host and of `roles` under each `events` choice."""
    choices = args.events.split(",")
    per_round = max(1, args.cells // args.rounds)
    samples = {choice: {role: [] for role in ["host", *roles]} for choice in choices}
    for _ in range(args.rounds):
        for choice in choices:
            request = dict(cell, events=choice)
            before, host = {r: cpu_ns(p) for r, p in roles.items()}, time.process_time_ns()
            for _ in range(per_round):
                conn.call("eval", request)
            samples[choice]["host"].append((time.process_time_ns() - host) / per_round / 1e3)
            for role, pid in roles.items():
                samples[choice][role].append((cpu_ns(pid) - before[role]) / per_round / 1e3)
    print(f"{args.language}: {args.rounds} rounds of {per_round} cells per choice; "
          "median CPU us per cell:")
    for choice in choices:
        print(f"  events={choice:<7} " + ", ".join(
            f"{role} {statistics.median(spent):.1f}" for role, spent in samples[choice].items()))


def voluntary_switches(pids):
    """{"<pid>/<thread name>": voluntary switches}, summed over threads of one name."""
    counts = {}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                status = open(f"/proc/{pid}/task/{tid}/status").read()
                name = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            except OSError:
                continue
            switches = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
            key = f"{pid}/{name}"
            counts[key] = counts.get(key, 0) + switches
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--binary", default=os.path.join(root, "target", "release", "cellvisor"))
    parser.add_argument("--language", default="js", choices=sorted(CODE))
    parser.add_argument("--cells", type=int, default=3000)
    parser.add_argument("--python", default=os.path.realpath(sys.executable))
    parser.add_argument("--events", help="eval `events` choices to compare, comma-separated")
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()

    config = ('[sessions]\nidle-timeout = "0s"\n[daemon]\nidle-exit = "0s"\n'
              f"[python]\ninterpreter = {json.dumps(args.python)}\n")
    daemon = Daemon(args.binary, config, prefix="cellvisor-wakeups-", new_session=True)
    try:
        conn = daemon.client
        cell = {"session": "w", "cells": [{"language": args.language, "code": CODE[args.language]}]}
        for _ in range(200):
            conn.call("eval", cell)
        worker = next(row["pid"] for row in conn.call("status", {}) if row.get("pid"))
        children = open(f"/proc/{worker}/task/{worker}/children").read().split()
        roles = {"daemon": daemon.pid, "worker": worker}
        if children:
            roles["interpreter"] = int(children[0])
        pids = list(roles.values())
        if args.events:
            compare_events(conn, cell, roles, args)
            return

        switches, ticks = voluntary_switches(pids), {r: cpu_ticks(p) for r, p in roles.items()}
        started = time.perf_counter()
        for _ in range(args.cells):
            conn.call("eval", cell)
        wall = time.perf_counter() - started
        after, spent = voluntary_switches(pids), {r: cpu_ticks(p) - ticks[r] for r, p in roles.items()}

        per_cell = 1e6 / args.cells
        tick = os.sysconf("SC_CLK_TCK")
        print(f"{args.language}: {args.cells} cells, wall {wall * per_cell:.1f} us per cell")
        print("CPU us per cell: " + ", ".join(
            f"{role} {spent[role] / tick * per_cell:.1f}" for role in roles))
        names = {pid: role for role, pid in roles.items()}
        print("voluntary switches per cell:")
        for key in sorted(after):
            count = (after[key] - switches.get(key, 0)) / args.cells
            if count >= 0.01:
                pid, thread = key.split("/", 1)
                print(f"  {names[int(pid)]:<12} {thread:<16} {count:.2f}")
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
