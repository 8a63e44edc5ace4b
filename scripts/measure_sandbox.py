#!/usr/bin/env python3
"""What the sandbox costs a new Python session: the first cell of a new session (worker start,
interpreter start, `print(1)`) with and without `[sandbox]`, alternating, in one run.

    python3 scripts/measure_sandbox.py [path/to/cellvisor]   (default: target/release/cellvisor)

Starts its own daemon with `python.prewarm = 0`, so both sides pay a real start (with the
default prewarm, an unsandboxed session takes a prewarmed worker, which a sandboxed one never
does). Prints the median, min and max of 21 samples per side. Stops everything it started
by pid.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
import cellvisor  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "cellvisor")
SAMPLES = 21


def main():
    daemon = cellvisor.Daemon(BINARY, "[python]\nprewarm = 0\n")
    times = {"plain": [], "sandboxed": []}
    try:
        client = daemon.client
        for index in range(SAMPLES):
            for side, sandbox in (("plain", None), ("sandboxed", {"enabled": True})):
                session = "cold-%s-%d" % (side, index)
                params = {"session": session, "cells": [{"language": "py", "code": "print(1)"}]}
                if sandbox:
                    params["sandbox"] = sandbox
                started = time.perf_counter()
                result = client.call("eval", params)
                times[side].append((time.perf_counter() - started) * 1000)
                if result["cells"][0]["output"] != "1\n":
                    raise RuntimeError("unexpected result: %r" % (result,))
                client.call("close", {"session": session})
        for side, values in times.items():
            print("%-9s first cell of a new py session: %.1f ms median, %.1f min, %.1f max (n=%d)" % (
                side, statistics.median(values), min(values), max(values), len(values)))
        ratio = statistics.median(times["sandboxed"]) / statistics.median(times["plain"])
        print("sandboxed / plain: %.2fx" % ratio)
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
