#!/usr/bin/env python3
"""Times each supervision scenario against a real daemon, in milliseconds.

    python3 scripts/measure_supervision.py [path/to/cellvisor]   (default: target/release/cellvisor)

Starts its own daemon (short heartbeat, grace and idle settings, in a temporary runtime
directory), runs every scenario of the supervision issue once, then the first cell of 20 new
Python sessions without and with `prewarm = 1`, and stops everything it started by pid.
"""

import os
import signal
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
import cellvisor  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target", "release", "cellvisor")
SETTINGS = """[sessions]
heartbeat-interval = "200ms"
heartbeat-timeout = "1s"
interrupt-grace = "1s"
idle-timeout = "3s"
sweep-interval = "100ms"
"""


class Daemon(cellvisor.Daemon):
    """`cellvisor serve` in a private runtime directory, with `extra` config."""

    def __init__(self, extra=""):
        super().__init__(BINARY, SETTINGS + extra)

    def cell(self, session, language, code, timeout=None):
        cell = {"language": language, "code": code}
        if timeout:
            cell["timeout"] = timeout
        return self.client.call("eval", {"session": session, "cells": [cell]})["cells"][0]

    def pid(self, session, language):
        for row in self.client.call("status"):
            if row["session"] == session and row["language"] == language:
                return row["pid"]
        return None


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return ") Z " not in f.read()
    except FileNotFoundError:
        return False


def timed(action):
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000


def scenarios(d, report):
    d.cell("crash", "py", "1")
    report("py cell kills its worker (SIGKILL) -> error, then the next cell answered",
           timed(lambda: (d.cell("crash", "py", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"),
                          d.cell("crash", "py", "1"))))
    d.cell("segv", "py", "1")
    report("py SIGSEGV (ctypes.string_at(0)) -> error, then the next cell answered",
           timed(lambda: (d.cell("segv", "py", "import ctypes; ctypes.string_at(0)"), d.cell("segv", "py", "1"))))
    for language in ("js", "lua"):
        d.cell("kill", language, "1")
        pid = d.pid("kill", language)
        report(f"{language} worker killed from outside -> next cell answered",
               timed(lambda: (os.kill(pid, signal.SIGKILL), d.cell("kill", language, "1"))))
    for language, spin in (("py", "while True: pass"), ("js", "while(true){}"), ("lua", "while true do end"),
                           ("lua", "pcall(function() while true do end end)")):
        d.cell("spin", language, "x = 1" if language != "js" else "var x = 1")
        report(f"{language} `{spin}` with timeout 1 -> cancelled",
               timed(lambda: d.cell("spin", language, spin, timeout=1)))
    d.cell("deaf", "py", "1")
    report("py ignoring SIGINT, timeout 1 + interrupt-grace 1s -> cancelled, next cell answered",
           timed(lambda: (d.cell("deaf", "py", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                               "while True: pass", timeout=1), d.cell("deaf", "py", "1"))))
    d.cell("stopped", "js", "1")
    pid = d.pid("stopped", "js")

    def replaced():
        os.kill(pid, signal.SIGSTOP)
        while d.pid("stopped", "js") in (pid, None):
            time.sleep(0.005)
    report("js worker SIGSTOPped -> caught by the heartbeat (200ms/1s) and replaced", timed(replaced))
    d.cell("idle", "lua", "1")

    def evicted():
        while any(row["session"] == "idle" for row in d.client.call("status")):
            time.sleep(0.01)
    report("lua session idle (idle-timeout 3s) -> evicted", timed(evicted))
    child = int(d.cell("orphan", "py", "import subprocess; print(subprocess.Popen(['sleep', '1000']).pid)")["output"])
    worker = d.pid("orphan", "py")

    def all_gone():
        d.process.kill()
        d.process.wait()
        while alive(child) or alive(worker):
            time.sleep(0.002)
    report("daemon SIGKILLed -> its worker and the cell's child process gone", timed(all_gone))


def first_cells(prewarm):
    d = Daemon(f"[python]\nprewarm = {prewarm}\n")
    try:
        times = []
        for i in range(20):
            if prewarm:
                time.sleep(0.3)  # let the pool refill, as it would between real sessions
            times.append(timed(lambda: d.cell(f"new-{i}", "py", "1+1")))
            d.client.call("close", {"session": f"new-{i}"})
        return statistics.median(times), min(times), max(times)
    finally:
        d.stop()


def main():
    rows = []

    def report(what, ms):
        rows.append((what, ms))
        print(f"{ms:9.1f} ms  {what}", flush=True)

    d = Daemon()
    try:
        scenarios(d, report)
    finally:
        d.stop()
    for prewarm in (0, 1):
        median, low, high = first_cells(prewarm)
        print(f"{median:9.1f} ms  first cell of a new py session, prewarm = {prewarm} "
              f"(median of 20, {low:.1f}-{high:.1f})", flush=True)


if __name__ == "__main__":
    main()
