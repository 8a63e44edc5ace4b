#!/usr/bin/env python3
"""What each `[python] shell` costs per cell: runs N warm trivial cells (`1+1`, then a
`print`) in one session with `shell = "builtin"` and with `shell = "ipython"`, and prints the
round trip's median wall time per cell and the CPU the Python runner spent per cell (from the
kernel's scheduler statistics, every thread), side by side. Also the first cell of a new
session, forked from the zygote (which made IPython's shell before it forked), or with
`--no-zygote` started plainly (which then imports IPython itself).

    python3 scripts/measure_shell.py --binary target/release/cellvisor \\
        --python target/test-venv/bin/python [--cells 2000] [--sessions 10]

The interpreter must have IPython (`scripts/test-venv IPython`). Measures, never asserts.
"""

import argparse
import glob
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_world import World  # noqa: E402


def cpu_ns(pid):
    """CPU time of every thread of `pid` so far."""
    total = 0
    for path in glob.glob("/proc/%d/task/*/schedstat" % pid):
        try:
            with open(path) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def runner_of(worker):
    for path in glob.glob("/proc/%d/task/*/children" % worker):
        with open(path) as f:
            for child in f.read().split():
                return int(child)
    return None


def measure(binary, python, shell, cells, sessions, zygote):
    config = (
        "[sessions]\nidle-timeout = \"0s\"\nmax-sessions = 4\n"
        "[python]\ninterpreter = %s\nshell = \"%s\"\nprewarm = 0\nzygote = %s\n"
        "[daemon]\nidle-exit = \"0s\"\n" % (json.dumps(python), shell, json.dumps(zygote))
    )
    world = World(binary, config)
    try:
        conn = world.connect()
        deadline = time.monotonic() + 120
        while zygote and time.monotonic() < deadline:
            rows = conn.call("zygotes")
            if rows and all(r["state"] == "ready" for r in rows):
                break
            time.sleep(0.05)
        first = []
        for i in range(sessions):
            started = time.perf_counter()
            conn.cell("first-%d" % i, "py", "1+1")
            first.append((time.perf_counter() - started) * 1000)
            conn.call("close", {"session": "first-%d" % i})
        results = {"first_cell_ms": statistics.median(first)}
        for name, code in (("value", "1+1"), ("print", "print(1)")):
            session = "warm-" + name
            for _ in range(50):
                conn.cell(session, "py", code)
            rows = conn.call("status")
            worker = next(r.get("pid") for r in rows if r["session"] == session)
            runner = runner_of(worker) if worker else None
            if runner is None:
                raise SystemExit("no runner for %s: %s" % (session, rows))
            before = cpu_ns(runner)
            wall = []
            for _ in range(cells):
                started = time.perf_counter()
                conn.cell(session, "py", code)
                wall.append((time.perf_counter() - started) * 1000)
            results[name + "_wall_ms"] = statistics.median(wall)
            results[name + "_runner_cpu_ms"] = (cpu_ns(runner) - before) / cells / 1e6
        engine = next(r["engine"] for r in conn.call("status") if r["session"] == "warm-value")
        results["engine"] = engine
        conn.close()
        return results
    finally:
        world.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True, help="the cellvisor binary")
    parser.add_argument("--python", required=True, help="an interpreter with IPython")
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--no-zygote", action="store_true",
                        help="zygote = false: every session starts its own interpreter")
    args = parser.parse_args()
    print("%-10s %12s %12s %12s %12s %12s  %s" % (
        "shell", "1st cell ms", "1+1 wall ms", "1+1 cpu ms", "print wall", "print cpu",
        "engine"))
    for shell in ("builtin", "ipython"):
        m = measure(args.binary, os.path.abspath(args.python), shell, args.cells, args.sessions,
                    not args.no_zygote)
        print("%-10s %12.2f %12.3f %12.3f %12.3f %12.3f  %s" % (
            shell, m["first_cell_ms"], m["value_wall_ms"], m["value_runner_cpu_ms"],
            m["print_wall_ms"], m["print_runner_cpu_ms"], m["engine"]))
    print("(medians of the round trip through the daemon; cpu: the Python runner's CPU per "
          "cell, every thread)")


if __name__ == "__main__":
    main()
