#!/usr/bin/env python3
"""How late a yielded cell's `running` answer comes: the time from its `yield_time_ms` to the
response, in milliseconds, median of 20 per language.

    python3 scripts/measure_yield.py [path/to/cellvisor]   (default: target/release/cellvisor)

Starts its own daemon in a temporary runtime directory; each sample is an `eval` of a cell
that prints a line and then sleeps, with `yield_time_ms` = 300, timed from sending the
request to its answer, minus the 300 ms; the cell is then terminated. The worker is warmed
first, so worker starts are not counted. Stops everything it started by pid.
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
YIELD_MS = 300
SAMPLES = 20
SLEEPERS = {
    "py": "import time\nprint('a', flush=True)\ntime.sleep(30)",
    "js": "text('a'); await new Promise((resolve) => setTimeout(resolve, 30000))",
    "lua": "print('a')\nlocal t = os.clock()\nwhile os.clock() - t < 30 do end",
}


def main():
    daemon = cellvisor.Daemon(BINARY, "")
    try:
        client = daemon.client
        for language, code in SLEEPERS.items():
            session = "yield-" + language
            client.call("eval", {"session": session, "cells": [{"language": language, "code": "1"}]})
            late = []
            for _ in range(SAMPLES):
                started = time.perf_counter()
                result = client.call("eval", {"session": session, "cells": [
                    {"language": language, "code": code, "yield_time_ms": YIELD_MS}]})
                elapsed = (time.perf_counter() - started) * 1000
                cell = result["cells"][0]
                if cell["status"] != "running":
                    raise RuntimeError("the cell did not yield: %r" % (cell,))
                late.append(elapsed - YIELD_MS)
                client.call("terminate", {"session": session, "cell_id": cell["cell_id"]})
            print("%-3s yield_time_ms=%d -> running: +%.1f ms median, +%.1f min, +%.1f max (n=%d)" % (
                language, YIELD_MS, statistics.median(late), min(late), max(late), len(late)))
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
