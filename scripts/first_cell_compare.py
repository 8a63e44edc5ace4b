#!/usr/bin/env python3
"""The first cell of a new session through a running daemon (a worker's cold start), for two
cellvisor binaries side by side in one run, requests interleaved: median of N per language.

Usage: scripts/first_cell_compare.py BEFORE_BINARY AFTER_BINARY [N=20]
Each binary runs its own daemon in a private runtime directory; a warm-up request per language
writes the runner files and bytecode caches first, so the figures are the worker's start and
first cell, not one-time set-up."""
import json, os, socket, statistics, subprocess, sys, tempfile, time
binaries = {"before": sys.argv[1], "after": sys.argv[2]}
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 20
home = tempfile.mkdtemp()
env = dict(os.environ, XDG_RUNTIME_DIR=home, XDG_CONFIG_HOME=home + "/cfg")
env.pop("CELLVISOR_CONFIG", None)
daemons, conns = {}, {}
for name, exe in binaries.items():
    sock = os.path.join(home, name + ".sock")
    daemons[name] = subprocess.Popen([exe, "serve", "--socket", sock], env=env, cwd=home,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    s = socket.socket(socket.AF_UNIX); s.connect(sock); conns[name] = (s, s.makefile("r"))
ids = [0]
def call(name, method, params):
    s, f = conns[name]; ids[0] += 1
    s.sendall((json.dumps({"jsonrpc": "2.0", "id": ids[0], "method": method, "params": params}) + "\n").encode())
    while True:
        msg = json.loads(f.readline())
        if msg.get("id") == ids[0]:
            return msg
times = {(b, l): [] for b in binaries for l in ("py", "js")}
try:
    for lang in ("py", "js"):  # warm-up: runner files and bytecode in each daemon's directory
        for name in binaries:
            call(name, "eval", {"session": "warm", "cells": [{"language": lang, "code": "1"}]})
            call(name, "close", {"session": "warm"})
    for i in range(runs):
        for lang in ("py", "js"):
            for name in binaries:
                session = "s%d" % i
                start = time.perf_counter()
                r = call(name, "eval", {"session": session, "cwd": home, "cells": [{"language": lang, "code": "1"}]})
                times[(name, lang)].append((time.perf_counter() - start) * 1000)
                assert r["result"]["cells"][0]["output"] == "1\n", r
                call(name, "close", {"session": session})
finally:
    for name in binaries:
        try:
            call(name, "shutdown", {})
        except Exception:
            pass
        daemons[name].wait(10)
for lang in ("py", "js"):
    b = statistics.median(times[("before", lang)]); a = statistics.median(times[("after", lang)])
    print("%s first cell of a new session through the daemon, median of %d: before %.2f ms, after %.2f ms, diff %+.2f ms" % (lang, runs, b, a, a - b))
