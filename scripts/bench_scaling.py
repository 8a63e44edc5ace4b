#!/usr/bin/env python3
"""How the daemon holds up with many live sessions: the scaling rows of scripts/bench.

    python3 scripts/bench_scaling.py [--binary target/release/cellvisor] [--languages js,lua,py]
                                     [--sizes 1,16,256,1024] [--py-sizes 1,16,256] [--cells 2000]

For each language and each size N: one daemon (`max-sessions` above N, the default Python
zygote) opens N sessions (one cell each), then 4 client connections run `--cells` trivial
cells (`1+1`) round-robin over the N sessions. Reported per (language, N):

- cells/s of that loop, and the p99 of one cell's answer (wall, ms);
- the daemon's CPU per cell (µs, every thread's time from /proc/PID/task/*/schedstat);
- the total PSS of the daemon and every worker tree (MB, /proc/PID/smaps_rollup);
- the daemon's CPU while all N sessions sit idle for a few seconds (µs per second), from one
  heartbeat interval after the loop on: an idle session must cost it nothing.

Python's default sizes stop at 256: a thousand interpreters take ~10 GB, more than a shared
bench machine should be asked for (`--py-sizes 1,16,256,1024` to go on).
Everything started is stopped by pid, its directory removed.
"""

import argparse
import json
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402
from process_figures import cpu_ns, cpu_ns_since, thread_cpu_ns, tree  # noqa: E402

CONNECTIONS = 4
IDLE_SECONDS = 3.0
SETTLE_SECONDS = 6.0


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def percentile(samples, p):
    samples = sorted(samples)
    if not samples:
        return None
    k = (len(samples) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(samples) - 1)
    return samples[lo] + (samples[hi] - samples[lo]) * (k - lo)


def measure(binary, python, language, size, cells):
    config = (f"[sessions]\nidle-timeout = \"0s\"\nmax-sessions = {max(size, 4) + 8}\n"
              "[daemon]\nidle-exit = \"0s\"\n"
              f"[python]\ninterpreter = {json.dumps(python)}\n")
    daemon = Daemon(binary, config, prefix="cellvisor-scaling-", env={"VIRTUAL_ENV": None},
                    new_session=True)
    try:
        names = [f"s{i}" for i in range(size)]
        opened = time.perf_counter()
        for i, name in enumerate(names):
            result = daemon.client.call("eval", {"session": name, "events": "none",
                                                 "cells": [{"language": language, "code": "x = %d" % i}]})
            if result.get("is_error"):
                raise RuntimeError(f"{language} session {name}: {result}")
        opened = time.perf_counter() - opened
        conns = [daemon.connect() for _ in range(CONNECTIONS)]
        latencies = [[] for _ in conns]
        errors = []

        def drive(index):
            conn, mine = conns[index], latencies[index]
            own = names[index::CONNECTIONS] or names
            try:
                for k in range(cells // CONNECTIONS):
                    session = own[k % len(own)]
                    t0 = time.perf_counter()
                    result = conn.call("eval", {"session": session, "events": "none",
                                                "cells": [{"language": language, "code": "1+1"}]})
                    mine.append(time.perf_counter() - t0)
                    if result["cells"][0]["output"].rstrip("\n").rsplit("\n", 1)[-1] != "2":
                        raise RuntimeError(f"{session}: {result}")
            except BaseException as error:  # noqa: BLE001
                errors.append(error)

        threads = [threading.Thread(target=drive, args=(i,)) for i in range(CONNECTIONS)]
        before = cpu_ns(daemon.pid)
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        spent = cpu_ns(daemon.pid) - before
        if errors:
            raise errors[0]
        ran = sum(len(x) for x in latencies)
        for conn in conns:
            conn.close()
        # Each session's heartbeat stops at its first tick with no cell running (up to one
        # heartbeat interval, 5 s, after its last cell): idle is measured from then on.
        time.sleep(SETTLE_SECONDS)
        idle_before = thread_cpu_ns(daemon.pid)
        time.sleep(IDLE_SECONDS)
        idle = cpu_ns_since(daemon.pid, idle_before) / IDLE_SECONDS / 1e3
        pss = sum(pss_kb(p) for p in tree(daemon.pid)) / 1024
        all_latencies = [x for per in latencies for x in per]
        return {
            "language": language, "sessions": size, "open_s": opened,
            "cells_per_s": ran / elapsed, "daemon_us_per_cell": spent / ran / 1e3,
            "p99_ms": percentile(all_latencies, 0.99) * 1e3, "pss_mb": pss,
            "idle_daemon_us_per_s": idle,
        }
    finally:
        daemon.stop()


def print_rows(rows, out=sys.stdout):
    header = ("lang", "sessions", "cells/s", "daemon us/cell", "p99 ms", "total PSS MB", "idle daemon us/s",
              "open s")
    print("  ".join(f"{h:>16}" for h in header), file=out)
    for r in rows:
        print("  ".join(f"{v:>16}" for v in (
            r["language"], r["sessions"], f"{r['cells_per_s']:.0f}", f"{r['daemon_us_per_cell']:.1f}",
            f"{r['p99_ms']:.2f}", f"{r['pss_mb']:.0f}", f"{r['idle_daemon_us_per_s']:.0f}", f"{r['open_s']:.1f}")),
            file=out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "target", "release", "cellvisor"))
    parser.add_argument("--python", default=os.path.realpath(sys.executable))
    parser.add_argument("--languages", default="js,lua,py")
    parser.add_argument("--sizes", default="1,16,256,1024")
    parser.add_argument("--py-sizes", default="1,16,256")
    parser.add_argument("--cells", type=int, default=2000)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    for language in args.languages.split(","):
        sizes = args.py_sizes if language == "py" else args.sizes
        for size in [int(s) for s in sizes.split(",")]:
            rows.append(measure(args.binary, args.python, language, size, args.cells))
            print_rows(rows[-1:], out=sys.stderr)
    print_rows(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
