"""Snapshot and restore of a session's namespace, measured through a real daemon: for each
namespace, the time of a `checkpoint` (the worker writes its snapshot), its size on disk, the
time of a `restore` of it, and the eviction-to-first-answer time (the first cell after an
idle eviction: a fresh worker, the restore, the cell), each the median of N runs.

  scripts/bench-snapshots [--runs N] [--only a,b,...]
  scripts/bench-snapshots --etcd [--cells N]

Namespaces: (a) 100 small Python names, (b) a 100 MB NumPy array, (c) a 50 MB pandas
DataFrame, (d) 10,000 JavaScript objects, (e) a 1e6-entry Lua table. Prints a table and
writes bench/snapshots.json.

--etcd: the per-cell cost of every-cell snapshots behind etcd's fenced pointer, the answer
after the commit (`every-cell-answer = "committed"`) against after the save ("async"): one
node on a single-member etcd of its own (`etcd` on PATH, Debian's etcd-server), N warm cells
`x += 1` back to back in one Python session per setting; prints median and mean per cell and
the ratio, and writes bench/snapshots-etcd.json."""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402

NAMESPACES = [
    ("a", "py", "100 small Python names",
     "for _i in range(100):\n    globals()[f'v{_i}'] = {'n': _i, 's': 'x' * 20}\ndel _i", "print(v99['n'])"),
    ("b", "py", "100 MB NumPy array",
     "import numpy as np\narr = np.random.rand(100 * 1024 * 1024 // 8)", "print(arr.shape[0])"),
    ("c", "py", "50 MB pandas DataFrame",
     "import numpy as np\nimport pandas as pd\ndf = pd.DataFrame(np.random.rand(50 * 1024 * 1024 // 64, 8))",
     "print(len(df))"),
    ("d", "js", "10,000 JavaScript objects",
     "var objs = []; for (let i = 0; i < 10000; i++) objs.push({i, s: 'x' + i, when: new Date(i)});",
     "console.log(objs.length)"),
    ("e", "lua", "1e6-entry Lua table",
     "t = {} for i = 1, 1000000 do t[i] = i end", "print(#t)"),
]

CONFIG = """[sessions]
idle-timeout = "1s"
sweep-interval = "100ms"
[snapshots]
max-size = "1GiB"
timeout = "10m"
"""


def timed(call):
    start = time.perf_counter()
    result = call()
    return (time.perf_counter() - start) * 1000, result


def wait_evicted(client, session, within=60):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(row["session"] == session for row in client.call("status")):
            return
        time.sleep(0.02)
    raise RuntimeError(f"{session} was never evicted")


def measure(daemon, venv, key, language, define, use, runs):
    client = daemon.connect()
    session = f"bench-{key}"

    def cell(code):
        request = {"session": session, "cells": [{"language": language, "code": code}]}
        if language == "py" and venv:
            request["virtual_env"] = venv
        result = client.call("eval", request)["cells"][0]
        if result["status"] != "complete":
            raise RuntimeError(f"{key}: {result['output']}")
        return result

    cell(define)
    saves, restores, firsts, size = [], [], [], 0
    for run in range(runs):
        ms, rows = timed(lambda: client.call(
            "checkpoint", {"session": session, "language": language, "name": "bench"}))
        saves.append(ms)
        size = rows[0]["bytes"] if rows else 0
        ms, _ = timed(lambda: client.call(
            "restore", {"session": session, "language": language, "name": "bench"}))
        restores.append(ms)
        wait_evicted(client, session)
        ms, result = timed(lambda: cell(use))
        if not result.get("state"):
            raise RuntimeError(f"{key}: the first cell after eviction restored nothing: {result}")
        firsts.append(ms)
    client.call("close", {"session": session})
    client.close()
    return {
        "save_ms": statistics.median(saves),
        "restore_ms": statistics.median(restores),
        "eviction_to_first_answer_ms": statistics.median(firsts),
        "bytes": size,
        "runs": runs,
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """A single-member etcd in a directory of its own, stopped by its pid."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cv-bench-etcd-")
        client, peer = free_port(), free_port()
        self.url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self.process = subprocess.Popen(
            ["etcd", "--name", "b", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"b={peer_url}", "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", client), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("etcd did not listen")
                time.sleep(0.05)

    def stop(self):
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def etcd_cells(binary, etcd, answer, cells):
    """Per-cell latencies (ms) of `cells` warm cells with every-cell snapshots in etcd mode."""
    config = f"""[daemon]
node = "bench-{answer}"
[snapshots]
when = "every-cell"
every-cell-answer = "{answer}"
[fleet]
leases = "etcd"
lease-ttl = "10s"
etcd-endpoints = ["{etcd.url}"]
"""
    daemon = Daemon(binary, config, prefix="cv-bench-etcd-", private_dirs=True)
    try:
        client = daemon.connect()
        session = f"bench-{answer}"

        def cell(code):
            request = {"session": session, "cells": [{"language": "py", "code": code}]}
            result = client.call("eval", request)["cells"][0]
            if result["status"] != "complete" or not result.get("saved", {}).get("saved"):
                raise RuntimeError(f"{answer}: {result}")

        cell("x = 0")
        for _ in range(20):  # warm
            cell("x += 1")
        times = []
        for _ in range(cells):
            ms, _ = timed(lambda: cell("x += 1"))
            times.append(ms)
        client.close()
        return times
    finally:
        daemon.stop()


def bench_etcd(binary, cells):
    etcd = Etcd()
    try:
        rows = {answer: etcd_cells(binary, etcd, answer, cells) for answer in ("async", "committed")}
    finally:
        etcd.stop()
    summary = {}
    for answer, times in rows.items():
        summary[answer] = {"median_ms": statistics.median(times), "mean_ms": statistics.mean(times),
                           "p95_ms": sorted(times)[int(len(times) * 0.95) - 1], "cells": len(times)}
        row = summary[answer]
        print(f"every-cell-answer = {answer:9}  median {row['median_ms']:7.2f} ms  "
              f"mean {row['mean_ms']:7.2f} ms  p95 {row['p95_ms']:7.2f} ms  ({len(times)} cells)")
    ratio = summary["committed"]["median_ms"] / summary["async"]["median_ms"]
    extra = summary["committed"]["median_ms"] - summary["async"]["median_ms"]
    summary["ratio_median"] = ratio
    summary["binary"] = binary
    print(f"committed / async: {ratio:.2f}x the median per cell ({extra:+.2f} ms)")
    os.makedirs("bench", exist_ok=True)
    with open("bench/snapshots-etcd.json", "w") as f:
        json.dump(summary, f, indent=2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="target/release/cellvisor")
    parser.add_argument("--venv", default="target/test-venv", help="a venv with numpy and pandas")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", default="", help="comma-separated keys (a-e)")
    parser.add_argument("--etcd", action="store_true",
                        help="committed against async every-cell answers in etcd mode")
    parser.add_argument("--cells", type=int, default=300, help="cells per setting (--etcd)")
    args = parser.parse_args()
    if args.etcd:
        bench_etcd(args.binary, args.cells)
        return
    only = set(filter(None, args.only.split(",")))
    venv = os.path.abspath(args.venv) if os.path.isdir(args.venv) else None
    daemon = Daemon(args.binary, CONFIG, prefix="cv-bench-snap-", private_dirs=True)  # short: worker socket paths
    results = {}
    try:
        for key, language, label, define, use in NAMESPACES:
            if only and key not in only:
                continue
            row = measure(daemon, venv, key, language, define, use, args.runs)
            row["namespace"] = label
            row["language"] = language
            results[key] = row
            print(f"({key}) {label:28} snapshot {row['save_ms']:8.1f} ms  "
                  f"{row['bytes'] / 1e6:8.2f} MB  restore {row['restore_ms']:8.1f} ms  "
                  f"eviction->first answer {row['eviction_to_first_answer_ms']:8.1f} ms", flush=True)
    finally:
        daemon.stop()
        daemon.remove()
    os.makedirs("bench", exist_ok=True)
    with open("bench/snapshots.json", "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
