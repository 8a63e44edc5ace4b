#!/usr/bin/env python3
"""What watching workers costs the daemon, and how well the memory cap holds.

    python3 scripts/measure_sampling.py [path/to/cellvisor] [--cells N]

Starts its own daemons (temporary runtime directories, stopped by pid at the end) and prints:

1. idle CPU: the daemon's CPU use over 10 s with 12 idle sessions (4 per language), a 100 ms
   heartbeat and `max-rss` set;
2. descriptors: the daemon's open file descriptors before and while N cells (default
   10,000; 100 per request, across those sessions, `status` after every 1,000) run with
   `max-rss` set;
3. overshoot: with `max-rss = 200MiB` and the default 5 s heartbeat, a Python cell that
   allocates 50 MiB at a time up to 2 GiB: the RSS the cell was killed at (or that it was
   never killed).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
import cellvisor  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICKS = os.sysconf("SC_CLK_TCK")


class Daemon(cellvisor.Daemon):
    def eval(self, session, cells):
        return self.client.call("eval", {"session": session, "cells": cells})

    def fds(self):
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def cpu_seconds(self):
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS


SESSIONS = [(f"{lang}{i}", lang) for lang in ("py", "js", "lua") for i in range(4)]
TRIVIAL = {"py": "x = 1", "js": "1", "lua": "x = 1"}


def idle_cpu_and_descriptors(binary, cells):
    daemon = Daemon(binary, '[sessions]\nheartbeat-interval = "100ms"\nidle-timeout = "0s"\n'
                            '[limits]\nmax-rss = "4GiB"\n')
    try:
        for session, lang in SESSIONS:
            daemon.eval(session, [{"language": lang, "code": TRIVIAL[lang]}])
        daemon.client.call("status", {})
        time.sleep(1)
        start = daemon.cpu_seconds()
        time.sleep(10)
        idle = (daemon.cpu_seconds() - start) / 10 * 100
        print(f"idle CPU, 12 sessions, 100 ms heartbeat, max-rss set: {idle:.1f}% of a core")

        print(f"descriptors before: {daemon.fds()}")
        done = 0
        turn = 0
        try:
            while done < cells:
                session, lang = SESSIONS[turn % len(SESSIONS)]
                turn += 1
                batch = min(100, cells - done)
                result = daemon.eval(session, [{"language": lang, "code": TRIVIAL[lang]}] * batch)
                assert all(c["status"] == "complete" for c in result["cells"]), result
                done += batch
                if done % 1000 == 0:
                    daemon.client.call("status", {})
                if done % 2000 == 0:
                    print(f"descriptors after {done} cells: {daemon.fds()}")
            print(f"descriptors at the end ({done} cells): {daemon.fds()}")
        except ConnectionError as err:
            print(f"after {done} cells: {err} (exit status {daemon.process.poll()})")
    finally:
        daemon.stop()


HOG = """
chunks = []
for i in range(40):
    chunks.append(b'x' * (50 << 20))
print('never killed: reached', len(chunks) * 50, 'MiB')
"""


def overshoot(binary):
    daemon = Daemon(binary, '[limits]\nmax-rss = "200MiB"\n')
    try:
        cell = daemon.eval("hog", [{"language": "py", "code": HOG, "timeout": 60}])["cells"][0]
        lines = [line for line in cell["output"].splitlines() if "MiB" in line or "GiB" in line]
        print("overshoot, max-rss = 200MiB, 5 s heartbeat:", lines[-1] if lines else cell["output"])
    finally:
        daemon.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary", nargs="?", default=os.path.join(ROOT, "target", "debug", "cellvisor"))
    parser.add_argument("--cells", type=int, default=10_000)
    args = parser.parse_args()
    idle_cpu_and_descriptors(args.binary, args.cells)
    overshoot(args.binary)


if __name__ == "__main__":
    main()
