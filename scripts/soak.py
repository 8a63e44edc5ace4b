#!/usr/bin/env python3
"""Soak run: many cells per language through one connection, with the daemon's and each
worker's memory and descriptors printed every 10,000 cells and recorded at each tenth of
the run (decile). A Python worker's figures are also split into its shim's and its
interpreter's, so each process's growth is seen on its own.

Fails (exit status 1) when, from the 10% mark to the end, the daemon's or a worker's RSS
or descriptor count grows by more than 5%, or a cell fails. `--summary FILE` writes the
run as JSON: per language the cells, failures, rate, the figures of every process at each
decile and the growth from the 10% mark. Progress notifications are turned off (`events:
"none"`) where the daemon allows it, so a million cells cost the client only the answers.

    scripts/soak [--cells N] [--languages py,js,lua] [--summary FILE] [--release]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon_world import World, cellvisor_exe, open_fds, rss_bytes  # noqa: E402
from process_figures import tree_figures as tree_use, write_summary  # noqa: E402
# daemon_world puts the client package on the path.
from cellvisor import RpcError  # noqa: E402

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


def tree_figures(pid):
    """RSS (bytes) and descriptors of a worker and its children; None where unreadable."""
    use = tree_use(pid)
    return use["rss_bytes"], use["fds"]


def events_param_known(conn, session, language):
    """Whether this daemon takes `events: "none"` (an older one refuses the field)."""
    try:
        conn.call("eval", {"session": session, "events": "none",
                           "cells": [{"language": language, "code": "1"}]})
        return True
    except RpcError:
        return False


def soak_language(world, conn, language, cells, report):
    """Runs `cells` counter cells in one session; its samples (every 10,000 cells and at
    each tenth of the run, each marked with its decile when it is one), failures and
    seconds."""
    session = "soak-" + language
    conn.call("eval", {"session": session, "cells": [{"language": language, "code": "1"}]})
    quiet = events_param_known(conn, session, language)
    pid = next(r["pid"] for r in conn.call("status")
               if r["session"] == session and r["language"] == language)
    deciles = {cells * k // 10: k for k in range(1, 11)}
    samples, done, failures = [], 0, 0
    started = time.monotonic()
    while done < cells:
        next_mark = min([m for m in deciles if m > done] + [done + BATCH])
        batch = min(BATCH, cells - done, next_mark - done)
        params = {"session": session, "cells": [
            {"language": language, "code": COUNTER[language]} for _ in range(batch)]}
        if quiet:
            params["events"] = "none"
        result = conn.call("eval", params)
        failures += sum(1 for c in result["cells"] if c["status"] != "complete")
        done += batch
        if done % SAMPLE_EVERY == 0 or done in deciles:
            worker_rss, worker_fds = tree_figures(pid)
            shim_rss = rss_bytes(pid)
            sample = {"cells": done, "seconds": round(time.monotonic() - started, 1),
                      "daemon_rss": rss_bytes(world.pid), "daemon_fds": open_fds(world.pid),
                      "worker_pid": pid, "worker_rss": worker_rss, "worker_fds": worker_fds,
                      "shim_rss": shim_rss,
                      # The Python worker's interpreter (and anything under it): the tree
                      # without the shim; JavaScript and Lua run in the shim itself.
                      "interpreter_rss": None if language != "py" or None in (worker_rss, shim_rss)
                      else worker_rss - shim_rss}
            if done in deciles:
                sample["decile"] = deciles[done]
            samples.append(sample)
            report(language, sample)
    seconds = time.monotonic() - started
    final = conn.call("eval", {"session": session, "cells": [
        {"language": language, "code": READ_BACK[language]}]})
    counted = final["cells"][0]["output"].strip()
    if counted != str(cells):
        print("  %s: the counter reads %r after %d cells (same worker: %s)"
              % (language, counted, cells, pid))
        failures += 1
    conn.call("close", {"session": session})
    return samples, failures, seconds


FIGURES = ("daemon_rss", "daemon_fds", "worker_rss", "worker_fds", "shim_rss", "interpreter_rss")


def growth(samples):
    """Each figure's growth from the 10% mark (the first decile sample) to the last sample:
    {figure: (at 10%, at the end, fraction)}."""
    marked = [s for s in samples if s.get("decile")]
    if len(marked) < 2:
        return {}
    warm, last = marked[0], samples[-1]
    return {key: (warm[key], last[key], (last[key] - warm[key]) / warm[key])
            for key in FIGURES
            if warm[key] is not None and last[key] is not None and warm[key] != 0}


def growth_problems(language, samples):
    return ["%s: %s grew %.1f%% (%d -> %d) from the 10%% mark to the end"
            % (language, key, fraction * 100, first, last)
            for key, (first, last, fraction) in growth(samples).items()
            if fraction > ALLOWED_GROWTH]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=100_000, help="cells per language")
    parser.add_argument("--languages", default="py,js,lua")
    parser.add_argument("--summary", metavar="FILE",
                        help="write the run's JSON summary to FILE (`-`: stdout)")
    parser.add_argument("--release", action="store_true", help="build and run a release binary")
    parser.add_argument("--exe", help="a cellvisor binary to use instead of building one")
    args = parser.parse_args()
    if args.cells < 10:
        parser.error("--cells must be at least 10 (one per tenth of the run)")
    languages = args.languages.split(",")
    unknown = [language for language in languages if language not in COUNTER]
    if unknown:
        parser.error("--languages: unknown %s; allowed: py, js, lua" % ", ".join(unknown))
    exe = args.exe or cellvisor_exe(args.release)

    def report(language, s):
        mib = lambda b: "n/a" if b is None else "%.1f MiB" % (b / (1 << 20))  # noqa: E731
        interpreter = "" if s["interpreter_rss"] is None else \
            " (shim %s, interpreter %s)" % (mib(s["shim_rss"]), mib(s["interpreter_rss"]))
        print("%-3s %7d cells  daemon RSS %s fds %s  worker RSS %s%s fds %s"
              % (language, s["cells"], mib(s["daemon_rss"]), s["daemon_fds"],
                 mib(s["worker_rss"]), interpreter, s["worker_fds"]), flush=True)

    world = World(exe, CONFIG)
    problems, failures, runs = [], 0, {}
    try:
        conn = world.connect(timeout=300)
        for language in languages:
            samples, failed, seconds = soak_language(world, conn, language, args.cells, report)
            failures += failed
            found = growth_problems(language, samples)
            problems += found
            runs[language] = {
                "cells": args.cells, "failures": failed, "seconds": round(seconds, 1),
                "cells_per_second": round(args.cells / seconds, 1) if seconds > 0 else None,
                "growth_from_10pct": {key: {"at_10pct": first, "at_end": last,
                                            "percent": round(fraction * 100, 2)}
                                      for key, (first, last, fraction) in growth(samples).items()},
                "problems": found,
                "deciles": [s for s in samples if s.get("decile")],
            }
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
    if args.summary:
        write_summary(args.summary, {
            "run": "soak", "cells_per_language": args.cells, "languages": runs,
            "allowed_growth_percent": ALLOWED_GROWTH * 100, "orphans": len(left),
            "clean_stop": clean, "passed": not problems, "problems": problems,
        })
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
