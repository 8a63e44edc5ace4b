"""The cost of one `GET /metrics` scrape: the daemon's CPU (user + system, from
/proc/<pid>/stat) and the wall time per scrape, with N live sessions (py, js and lua in turn),
and the size of the text. Usage: scripts/bench-metrics [--sessions 16] [--scrapes 500]
"""

import argparse
import http.client
import os
import socket
import statistics
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
CELLS = {"python": "x = 1", "javascript": "globalThis.x = 1", "lua": "x = 1"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--scrapes", type=int, default=500)
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "target", "release", "cellvisor"))
    args = parser.parse_args()
    port = free_port()
    token_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), "cellvisor-bench-metrics-%d" % os.getpid())
    os.makedirs(token_dir, exist_ok=True)
    token_file = os.path.join(token_dir, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN)
    per_language = -(-args.sessions // 3)
    config = (
        "[sessions]\nmax-sessions = %d\nidle-timeout = \"0s\"\n"
        "[daemon]\nlisten = [\"tcp://127.0.0.1:%d\"]\ntoken-file = %r\n"
        % (max(4, per_language), port, token_file)
    )
    daemon = Daemon(args.binary, config, private_dirs=True)
    try:
        languages = list(CELLS)
        for i in range(args.sessions):
            language = languages[i % 3]
            daemon.client.call("eval", {"session": "s%d" % i, "cells": [
                {"language": language, "code": CELLS[language]}]})
        request = urllib.request.Request(
            "http://127.0.0.1:%d/metrics" % port, headers={"Authorization": "Bearer " + TOKEN})
        body = urllib.request.urlopen(request, timeout=10).read()
        for _ in range(20):
            urllib.request.urlopen(request, timeout=10).read()
        # A scraper keeps its connection (as Prometheus does): the scrape alone.
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        headers = {"Authorization": "Bearer " + TOKEN}
        walls = []
        before = cpu_seconds(daemon.pid)
        for _ in range(args.scrapes):
            start = time.perf_counter()
            connection.request("GET", "/metrics", headers=headers)
            connection.getresponse().read()
            walls.append(time.perf_counter() - start)
        cpu = cpu_seconds(daemon.pid) - before
        connection.close()
        # A new connection each time: the scrape plus the accept, whose peer check looks for
        # the peer among the daemon's processes.
        fresh = []
        before_fresh = cpu_seconds(daemon.pid)
        for _ in range(args.scrapes):
            start = time.perf_counter()
            urllib.request.urlopen(request, timeout=10).read()
            fresh.append(time.perf_counter() - start)
        cpu_fresh = cpu_seconds(daemon.pid) - before_fresh
        print("metrics scrape, %d live sessions, %d scrapes" % (args.sessions, args.scrapes))
        print("  kept connection: daemon CPU %.0f us per scrape, wall median %.0f us"
              % (cpu / args.scrapes * 1e6, statistics.median(walls) * 1e6))
        print("  new connection each: daemon CPU %.0f us per scrape, wall median %.0f us"
              % (cpu_fresh / args.scrapes * 1e6, statistics.median(fresh) * 1e6))
        print("  text: %d bytes, %d lines" % (len(body), body.count(b"\n")))
    finally:
        daemon.stop()
        os.remove(token_file)
        os.rmdir(token_dir)


if __name__ == "__main__":
    main()
