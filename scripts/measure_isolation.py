#!/usr/bin/env python3
"""The cost of the `uid` isolation level against today's (`none`), side by side in one run:
two daemons of the same build and configuration but `[isolation]`, both without a prewarm
pool (the `uid` level uses none), measured alternately.

    sudo python3 scripts/measure_isolation.py [--exe target/release/cellvisor] [--sessions 20] [--cells 300]
    python3 scripts/measure_isolation.py --levels none,landlock   # the fallback, no root needed

- new session: a new session's first trivial cell, request to result (Python forked from the
  zygote, JavaScript, Lua), then the session is closed (at `uid`: its processes ended and its
  uid reclaimed, off the request's path);
- per cell: trivial cells back to back on one warm session.

Needs root (the `uid` level changes uids) and an interpreter every user can run
(/usr/bin/python3). Each daemon runs in a temporary directory opened to traversal (0711) and is
stopped by pid at the end.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRIVIAL = {"py": "1+1", "js": "1+1", "lua": "1+1"}


class Rpc:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.file = self.sock.makefile("rb")
        self.next = 1

    def call(self, method, params):
        ident = self.next
        self.next += 1
        line = json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        self.sock.sendall(line.encode() + b"\n")
        while True:
            message = json.loads(self.file.readline())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(message["error"])
                return message["result"]


def start(exe, level, uids):
    base = tempfile.mkdtemp(prefix="cv-iso-")
    for sub in ("run", "state", "work"):
        os.mkdir(os.path.join(base, sub))
    for path in (base, os.path.join(base, "state"), os.path.join(base, "work")):
        os.chmod(path, 0o711)
    config = os.path.join(base, "config.toml")
    with open(config, "w") as f:
        f.write('[python]\ninterpreter = "/usr/bin/python3"\nprewarm = 0\n'
                '[sessions]\nmax-sessions = 64\n[daemon]\nidle-exit = "0s"\n'
                '[isolation]\nlevel = "%s"\nuids = "%s"\n' % (level, uids))
    sock = os.path.join(base, "run", "d.sock")
    env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(base, "run"),
               XDG_STATE_HOME=os.path.join(base, "state"), CELLVISOR_CONFIG=config,
               HOME=base)
    proc = subprocess.Popen([exe, "serve", "--socket", sock], env=env, cwd=os.path.join(base, "work"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while True:
        try:
            rpc = Rpc(sock)
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError("the %s daemon did not start" % level)
            time.sleep(0.05)
    while not any(z.get("state") == "ready" for z in rpc.call("zygotes", {})):
        time.sleep(0.05)
    return proc, rpc, base


def eval_one(rpc, session, language, code):
    result = rpc.call("eval", {"session": session, "cells": [{"language": language, "code": code}]})
    cell = result["cells"][0]
    if cell["status"] != "complete":
        raise RuntimeError("%s/%s: %s" % (session, language, cell))


def new_session_ms(rpc, tag, language, index):
    session = "%s-%s-%d" % (tag, language, index)
    began = time.perf_counter()
    eval_one(rpc, session, language, TRIVIAL[language])
    took = (time.perf_counter() - began) * 1000
    rpc.call("close", {"session": session})
    return took


def per_cell_us(rpc, tag, language, cells):
    session = "%s-warm-%s" % (tag, language)
    eval_one(rpc, session, language, TRIVIAL[language])
    began = time.perf_counter()
    for _ in range(cells):
        eval_one(rpc, session, language, TRIVIAL[language])
    took = (time.perf_counter() - began) * 1e6 / cells
    rpc.call("close", {"session": session})
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--exe", default=os.path.join(ROOT, "target", "debug", "cellvisor"))
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--cells", type=int, default=300)
    parser.add_argument("--levels", default="none,uid",
                        help="the two levels to compare (landlock: every session confined)")
    args = parser.parse_args()
    levels = tuple(args.levels.split(","))
    if "uid" in levels and os.geteuid() != 0:
        sys.exit("needs root: the uid level changes uids")
    daemons = {}
    try:
        for level in levels:
            daemons[level] = start(args.exe, level, "61900-61999")
        rows = []
        for language in ("py", "js", "lua"):
            samples = {level: [] for level in levels}
            for index in range(args.sessions):
                for level in levels:  # alternately, so load falls on both
                    samples[level].append(new_session_ms(daemons[level][1], level, language, index))
            for level in levels:
                rows.append(("new session", language, level, statistics.median(samples[level]),
                             min(samples[level]), max(samples[level]), "ms"))
        for language in ("py", "js", "lua"):
            for level in levels:
                runs = [per_cell_us(daemons[level][1], "%s%d" % (level, r), language, args.cells)
                        for r in range(3)]
                rows.append(("per cell", language, level, statistics.median(runs), min(runs),
                             max(runs), "us"))
        print("%-12s %-4s %-8s %10s %10s %10s" % ("what", "lang", "level", "median", "min", "max"))
        for what, language, level, median, low, high, unit in rows:
            print("%-12s %-4s %-8s %8.2f%s %8.2f%s %8.2f%s" % (what, language, level, median, unit,
                                                          low, unit, high, unit))
    finally:
        for proc, _rpc, base in daemons.values():
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
