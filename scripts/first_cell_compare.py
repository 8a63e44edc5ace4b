#!/usr/bin/env python3
"""The first cell of a new session through a running daemon (a worker's cold start), for two
cellvisor binaries side by side in one run, requests interleaved: median of N per language.

Usage: scripts/first_cell_compare.py BEFORE_BINARY AFTER_BINARY [N=20]
Each binary runs its own daemon in a private runtime directory; a warm-up request per language
writes the runner files and bytecode caches first, so the figures are the worker's start and
first cell, not one-time set-up."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402

binaries = {"before": sys.argv[1], "after": sys.argv[2]}
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 20
daemons = {}
try:
    for name, exe in binaries.items():
        daemons[name] = Daemon(exe, private_dirs=True)
    times = {(b, l): [] for b in binaries for l in ("py", "js")}
    for lang in ("py", "js"):  # warm-up: runner files and bytecode in each daemon's directory
        for name in binaries:
            daemons[name].client.cell("warm", lang, "1")
            daemons[name].client.call("close", {"session": "warm"})
    for i in range(runs):
        for lang in ("py", "js"):
            for name, daemon in daemons.items():
                session = "s%d" % i
                start = time.perf_counter()
                r = daemon.client.call("eval", {"session": session, "cwd": daemon.dir,
                                                "cells": [{"language": lang, "code": "1"}]})
                times[(name, lang)].append((time.perf_counter() - start) * 1000)
                assert r["cells"][0]["output"] == "1\n", r
                daemon.client.call("close", {"session": session})
finally:
    for daemon in daemons.values():
        daemon.stop()
for lang in ("py", "js"):
    b = statistics.median(times[("before", lang)]); a = statistics.median(times[("after", lang)])
    print("%s first cell of a new session through the daemon, median of %d: before %.2f ms, after %.2f ms, diff %+.2f ms" % (lang, runs, b, a, a - b))
