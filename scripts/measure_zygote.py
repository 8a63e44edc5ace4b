#!/usr/bin/env python3
"""Where a new Python session's time goes: opens N new sessions one after another (first
cell `1+1`, kept open), then reads the CPU time each process spent on them from the kernel's
scheduler statistics (`/proc/<pid>/task/*/schedstat`, nanoseconds, every thread): the daemon's
and the zygote's growth over the run, and each session's worker (the Rust shim, including the
zygote's clone it was exec'd from) and Python runner in full. Prints the latency and the CPU
per session of each process, with `zygote = true` and `false` side by side.

    python3 scripts/measure_zygote.py --binary target/release/cellvisor [--sessions 16]
        [--prewarm 0]

Measures, never asserts: the numbers depend on the machine (process creation dominates).
"""

import argparse
import glob
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_world import World  # noqa: E402


def cpu_ns(pid):
    """CPU time of every thread of `pid` so far (0 once it is gone)."""
    total = 0
    for path in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def children(pid):
    found = []
    for path in glob.glob("/proc/%d/task/*/children" % pid):
        try:
            with open(path) as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return found


def measure(binary, sessions, prewarm, zygote):
    config = (
        "[sessions]\nidle-timeout = \"0s\"\nmax-sessions = %d\n"
        "[python]\nprewarm = %d\nzygote = %s\n"
        "[daemon]\nidle-exit = \"0s\"\n" % (max(sessions, 1), prewarm, "true" if zygote else "false")
    )
    world = World(binary, config)
    try:
        conn = world.connect()
        zygote_pid = None
        deadline = time.monotonic() + 60
        while zygote and time.monotonic() < deadline:
            rows = conn.call("zygotes")
            if rows and all(r["state"] == "ready" for r in rows):
                zygote_pid = rows[0]["pid"]
                break
            time.sleep(0.05)
        time.sleep(0.5)  # the prewarm pool, if any, fills
        daemon_before = cpu_ns(world.pid)
        zygote_before = cpu_ns(zygote_pid) if zygote_pid else 0
        latency = []
        for i in range(sessions):
            started = time.perf_counter()
            conn.cell("measure-%d" % i, "py", "1+1")
            latency.append((time.perf_counter() - started) * 1000)
        daemon_ms = (cpu_ns(world.pid) - daemon_before) / sessions / 1e6
        zygote_ms = ((cpu_ns(zygote_pid) - zygote_before) / sessions / 1e6) if zygote_pid else 0.0
        workers, runners = [], []
        for row in conn.call("status"):
            if row["language"] == "py" and row.get("pid"):
                workers.append(cpu_ns(row["pid"]) / 1e6)
                runners += [cpu_ns(child) / 1e6 for child in children(row["pid"])]
        conn.close()
        return {
            "latency_p50_ms": statistics.median(latency),
            "daemon_ms": daemon_ms,
            "zygote_ms": zygote_ms,
            "worker_ms": statistics.mean(workers) if workers else 0.0,
            "runner_ms": statistics.mean(runners) if runners else 0.0,
        }
    finally:
        world.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True, help="the cellvisor binary")
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--prewarm", type=int, default=0,
                        help="[python] prewarm (default 0: every session starts on demand)")
    args = parser.parse_args()
    if args.sessions < 1 or args.prewarm < 0:
        parser.error("--sessions must be at least 1 and --prewarm at least 0")
    print("%-14s %10s %10s %10s %10s %10s %10s" % (
        "", "p50 ms", "daemon", "zygote", "worker", "runner", "total"))
    for zygote in (True, False):
        m = measure(args.binary, args.sessions, args.prewarm, zygote)
        total = m["daemon_ms"] + m["zygote_ms"] + m["worker_ms"] + m["runner_ms"]
        print("%-14s %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f" % (
            "zygote = %s" % ("true" if zygote else "false"), m["latency_p50_ms"], m["daemon_ms"],
            m["zygote_ms"], m["worker_ms"], m["runner_ms"], total))
    print("(CPU in ms per new session, every thread of each process; the worker's includes the "
          "zygote clone it was exec'd from)")


if __name__ == "__main__":
    main()
