#!/usr/bin/env python3
"""How often each thread on a warm cell's path sleeps, and what each process spends per cell.

    python3 scripts/measure_wakeups.py [--binary target/release/cellvisor] [--language js]
                                       [--cells 3000] [--python PYTHON]

Starts `cellvisor serve` with its own config and runtime directory, warms one session up, then
runs a loop of trivial cells through the daemon socket and prints, per cell: the loop's wall
time, the CPU microseconds of the daemon, the worker and (Python) the interpreter, and the
voluntary context switches of every thread that had any (from /proc, before and after the
loop). A voluntary switch is a sleep, and on a virtual machine every sleep ends in a costly
wake-up: this is the count the per-cell path is designed to keep at one per process.

Everything it starts is stopped by pid, and its directory removed.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cellvisor_client import Daemon  # noqa: E402

CODE = {"py": "1+1", "js": "1+1", "lua": "return 1+1"}


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


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
