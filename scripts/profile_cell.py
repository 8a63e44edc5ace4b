#!/usr/bin/env python3
"""Where a warm trivial cell's CPU and system calls go, per process, per language.

    scripts/profile-cell [--binary target/release/cellvisor] [--languages py,js,lua]
                         [--cells 2000] [--strace-cells 500] [--python PYTHON] [--json OUT]

For each language: starts `cellvisor serve` with its own config and runtime directory, warms
one session up, then

1. CPU: runs a loop of `--cells` trivial cells (`1+1`) and reads, before and after, the CPU
   time of every live thread of each process on the path (`/proc/PID/task/*/schedstat`,
   nanoseconds; the host is this script's own process, `time.process_time_ns`). Printed as
   microseconds per cell: host (the Python client), daemon, worker (the engine process for
   js/lua, the shim for py) and interpreter (py's `python -u runner.py`).
2. System calls: runs `--strace-cells` more cells with `strace -c -f -p PID` attached to each
   process at once and prints the calls per cell per process, with the most frequent names.
   (strace slows the loop; the counts, not its time, are what this step reports.)

CPU time, not wall time: on a shared two-core machine it is the figure that stays put while
other work runs. Everything it starts (daemons, strace) is stopped by pid, its directory removed.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402
from process_figures import cpu_ns  # noqa: E402

CODE = {"py": "1+1", "js": "1+1", "lua": "1+1"}


def children(pid):
    found = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]
        except OSError:
            continue
    return found


def roles_of(daemon, conn):
    """{"host": our pid, "daemon": ..., "worker": ..., ["interpreter": ...]}"""
    worker = next(row["pid"] for row in conn.call("status", {}) if row.get("pid"))
    roles = {"host": os.getpid(), "daemon": daemon.pid, "worker": worker}
    kids = children(worker)
    if kids:
        roles["interpreter"] = kids[0]
    return roles


def measure_cpu(conn, cell, roles, cells):
    before = {r: cpu_ns(p) for r, p in roles.items() if r != "host"}
    host = time.process_time_ns()
    started = time.perf_counter()
    for _ in range(cells):
        conn.call("eval", cell)
    wall = time.perf_counter() - started
    spent = {"host": (time.process_time_ns() - host) / cells / 1e3}
    for role, pid in roles.items():
        if role != "host":
            spent[role] = (cpu_ns(pid) - before[role]) / cells / 1e3
    spent["all"] = sum(spent.values())
    spent["wall"] = wall / cells * 1e6
    return spent


def parse_strace(path):
    """{syscall: calls} from an `strace -c` summary."""
    calls = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return calls
    for line in lines:
        parts = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(parts) >= 5 and parts[0][0].isdigit() and not line.lstrip().startswith("100.00"):
            name = parts[-1]
            numbers = [p for p in parts[:-1]]
            try:
                calls[name] = calls.get(name, 0) + int(numbers[3])
            except (ValueError, IndexError):
                continue
    return calls


def measure_syscalls(conn, cell, roles, cells, workdir):
    tracers = {}
    try:
        for role, pid in roles.items():
            out = os.path.join(workdir, f"strace-{role}.txt")
            tracers[role] = (subprocess.Popen(["strace", "-c", "-f", "-qq", "-o", out, "-p", str(pid)],
                                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL), out)
        time.sleep(0.5)  # attached (strace attaches before its first report; a few cells early do no harm)
        for _ in range(20):
            conn.call("eval", cell)
        for _ in range(cells):
            conn.call("eval", cell)
    finally:
        for role, (proc, _) in tracers.items():
            proc.send_signal(signal.SIGINT)
        for role, (proc, _) in tracers.items():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    counts = {}
    for role, (_, out) in tracers.items():
        calls = parse_strace(out)
        counts[role] = {name: n / (cells + 20) for name, n in calls.items()}
    return counts


def profile(args, language, workdir):
    config = ('[sessions]\nidle-timeout = "0s"\n[daemon]\nidle-exit = "0s"\n'
              f"[python]\ninterpreter = {json.dumps(args.python)}\n")
    daemon = Daemon(args.binary, config, prefix="cellvisor-profile-", new_session=True)
    try:
        conn = daemon.client
        cell = {"session": "p", "cells": [{"language": language, "code": CODE[language]}]}
        for _ in range(200):
            conn.call("eval", cell)
        roles = roles_of(daemon, conn)
        cpu = measure_cpu(conn, cell, roles, args.cells)
        calls = measure_syscalls(conn, cell, roles, args.strace_cells, workdir) if args.strace_cells else {}
        return {"cpu_us": cpu, "syscalls": calls}
    finally:
        daemon.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "cellvisor"))
    parser.add_argument("--languages", default="py,js,lua")
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--strace-cells", type=int, default=500, help="0 leaves strace out")
    parser.add_argument("--python", default=os.path.realpath(sys.executable))
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if args.strace_cells and not any(os.access(os.path.join(d, "strace"), os.X_OK)
                                     for d in os.environ.get("PATH", "").split(os.pathsep)):
        sys.exit("profile-cell: strace is not installed (apt-get install strace), or pass --strace-cells 0")

    results = {}
    with tempfile.TemporaryDirectory(prefix="cellvisor-profile-") as workdir:
        for language in args.languages.split(","):
            results[language] = profile(args, language, workdir)

    print(f"warm trivial cell, CPU us per cell (/proc schedstat, {args.cells} cells; host = this client):")
    roles = ["host", "daemon", "worker", "interpreter", "all", "wall"]
    print(f"  {'lang':<5}" + "".join(f"{r:>13}" for r in roles))
    for language, figures in results.items():
        cpu = figures["cpu_us"]
        print(f"  {language:<5}" + "".join(f"{cpu[r]:>13.1f}" if r in cpu else f"{'-':>13}" for r in roles))
    if args.strace_cells:
        print(f"\nsystem calls per cell (strace -c -f, {args.strace_cells} cells):")
        for language, figures in results.items():
            for role, calls in figures["syscalls"].items():
                total = sum(calls.values())
                top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
                print(f"  {language:<4} {role:<12} {total:6.1f}  " +
                      ", ".join(f"{name} {n:.2f}" for name, n in top))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
