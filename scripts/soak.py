#!/usr/bin/env python3
"""Soak run: many cells per language through one connection, with the daemon's and each
worker's memory and descriptors sampled every 10,000 cells.

Fails (exit status 1) when, after the warm-up (the first sample), the daemon's or a
worker's RSS or descriptor count grows by more than 5%, or a cell fails.

    scripts/soak [--cells N] [--languages py,js,lua] [--release]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_world import World, cellvisor_exe, open_fds, rss_bytes  # noqa: E402

COUNTER = {
    "py": "n = globals().get('n', 0) + 1",
    "js": "globalThis.n = (globalThis.n ?? 0) + 1",
    "lua": "n = (n or 0) + 1",
}
READ_BACK = {"py": "print(n)", "js": "print(n)", "lua": "print(n)"}
CONFIG = """
[sessions]
idle-timeout = "0s"
[daemon]
idle-exit = "0s"
"""
SAMPLE_EVERY = 10_000
BATCH = 100
ALLOWED_GROWTH = 0.05


def tree(pid):
    """`pid` and its descendants."""
    found, stack = [], [pid]
    while stack:
        current = stack.pop()
        found.append(current)
        try:
            for task in os.listdir("/proc/%d/task" % current):
                with open("/proc/%d/task/%s/children" % (current, task)) as f:
                    stack.extend(int(child) for child in f.read().split())
        except OSError:
            pass
    return found


def tree_figures(pid):
    """RSS (bytes) and descriptors of a worker and its children; None where unreadable."""
    pids = tree(pid)
    rss = [rss_bytes(p) for p in pids]
    fds = [open_fds(p) for p in pids]
    return (sum(r for r in rss if r is not None),
            None if None in fds else sum(fds))


def soak_language(world, conn, language, cells, report):
    session = "soak-" + language
    conn.call("eval", {"session": session, "cells": [{"language": language, "code": "1"}]})
    pid = next(r["pid"] for r in conn.call("status")
               if r["session"] == session and r["language"] == language)
    samples, done, failures = [], 0, 0
    while done < cells:
        batch = min(BATCH, cells - done)
        result = conn.call("eval", {"session": session, "cells": [
            {"language": language, "code": COUNTER[language]} for _ in range(batch)]})
        failures += sum(1 for c in result["cells"] if c["status"] != "complete")
        done += batch
        if done % SAMPLE_EVERY == 0 or done == cells:
            worker_rss, worker_fds = tree_figures(pid)
            sample = {"cells": done, "daemon_rss": rss_bytes(world.pid),
                      "daemon_fds": open_fds(world.pid), "worker_rss": worker_rss,
                      "worker_fds": worker_fds}
            samples.append(sample)
            report(language, sample)
    final = conn.call("eval", {"session": session, "cells": [
        {"language": language, "code": READ_BACK[language]}]})
    counted = final["cells"][0]["output"].strip()
    if counted != str(cells):
        print("  %s: the counter reads %r after %d cells (same worker: %s)"
              % (language, counted, cells, pid))
        failures += 1
    conn.call("close", {"session": session})
    return samples, failures


def growth_problems(language, samples):
    problems = []
    if len(samples) < 2:
        return problems
    warm, last = samples[0], samples[-1]
    for key in ("daemon_rss", "daemon_fds", "worker_rss", "worker_fds"):
        if warm[key] is None or last[key] is None or warm[key] == 0:
            continue
        growth = (last[key] - warm[key]) / warm[key]
        if growth > ALLOWED_GROWTH:
            problems.append("%s: %s grew %.1f%% (%d -> %d) after warm-up"
                            % (language, key, growth * 100, warm[key], last[key]))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=100_000, help="cells per language")
    parser.add_argument("--languages", default="py,js,lua")
    parser.add_argument("--release", action="store_true", help="build and run a release binary")
    parser.add_argument("--exe", help="a cellvisor binary to use instead of building one")
    args = parser.parse_args()
    exe = args.exe or cellvisor_exe(args.release)

    def report(language, s):
        mib = lambda b: "n/a" if b is None else "%.1f MiB" % (b / (1 << 20))  # noqa: E731
        print("%-3s %7d cells  daemon RSS %s fds %s  worker RSS %s fds %s"
              % (language, s["cells"], mib(s["daemon_rss"]), s["daemon_fds"],
                 mib(s["worker_rss"]), s["worker_fds"]), flush=True)

    world = World(exe, CONFIG)
    problems, failures = [], 0
    try:
        conn = world.connect(timeout=300)
        for language in args.languages.split(","):
            samples, failed = soak_language(world, conn, language, args.cells, report)
            failures += failed
            problems += growth_problems(language, samples)
        conn.close()
        clean = world.stop()
        left = world.processes()
        world.kill_leftovers(left)
    finally:
        world.remove()
    if failures:
        problems.append("%d cells failed" % failures)
    if left or not clean:
        problems.append("not a clean stop: %d processes left" % len(left))
    for problem in problems:
        print("FAIL " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
