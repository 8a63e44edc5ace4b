#!/usr/bin/env python3
"""What strangers cost the daemon's network listener, on loopback only, bounded in time.

1. `--silent` (1,100) unauthenticated connections that send nothing, reopened as soon as the
   daemon closes them, from 50 loopback addresses (127.0.0.2-51); meanwhile a client with the
   token makes `--requests` (300) authenticated requests (`GET /readyz`, one fresh connection
   each, 5 s timeout each): the share served, and the daemon's RSS before and at its peak.
2. `--heavy` (1,000) connections each sending an unfinished 400 KB request head, in 16 KB
   pieces: the daemon's RSS before and at its peak.

    scripts/measure_strangers.py [--binary target/release/cellvisor] [--json]
"""

import argparse
import http.client
import json
import os
import resource
import socket
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Daemon  # noqa: E402

TOKEN = "measure-token-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Peak(threading.Thread):
    """Samples the daemon's RSS every 20 ms until stopped."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.done = pid, rss_kib(pid), threading.Event()

    def run(self):
        while not self.done.is_set():
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.02)

    def stop(self):
        self.done.set()
        self.join()
        return self.peak


def connect_from(index, port):
    s = socket.socket()
    s.bind((f"127.0.0.{2 + index % 50}", 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def silent_phase(port, pid, count, requests):
    before = rss_kib(pid)
    peak = Peak(pid)
    peak.start()
    stop = threading.Event()
    opened = [0]

    held = {}
    for i in range(count):  # every stranger in place before the first request
        try:
            held[i] = connect_from(i, port)
            opened[0] += 1
        except OSError:
            pass

    def hold():
        while not stop.is_set():
            for i in range(count):
                if stop.is_set():
                    break
                s = held.get(i)
                if s is not None:
                    try:
                        s.setblocking(False)
                        if s.recv(1) == b"":
                            s.close()
                            held.pop(i)
                    except BlockingIOError:
                        continue
                    except OSError:
                        s.close()
                        held.pop(i)
                    continue
                try:
                    held[i] = connect_from(i, port)
                    opened[0] += 1
                except OSError:
                    pass
            time.sleep(0.05)
        for s in held.values():
            s.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    served = 0
    for _ in range(requests):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/readyz", headers={"Authorization": f"Bearer {TOKEN}"})
            if conn.getresponse().status == 200:
                served += 1
            conn.close()
        except OSError:
            pass
    stop.set()
    holder.join()
    return {"silent": count, "requests": requests, "served": served,
            "share": served / requests, "opened": opened[0],
            "rss_before_kib": before, "rss_peak_kib": peak.stop()}


def heavy_phase(port, pid, count, head_bytes):
    before = rss_kib(pid)
    peak = Peak(pid)
    peak.start()
    conns = []
    for i in range(count):
        try:
            s = connect_from(i, port)
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nX-Big: ")
            conns.append(s)
        except OSError:
            pass
    piece = b"a" * 16384
    sent = 0
    for _ in range(head_bytes // len(piece)):
        for s in list(conns):
            try:
                s.setblocking(False)
                s.send(piece)
            except (BlockingIOError, OSError):
                pass
        sent += len(piece)
    time.sleep(1)
    for s in conns:
        s.close()
    return {"connections": count, "head_bytes": head_bytes, "rss_before_kib": before,
            "rss_peak_kib": peak.stop()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    release = os.path.join(HERE, "..", "target", "release", "cellvisor")
    debug = os.path.join(HERE, "..", "target", "debug", "cellvisor")
    parser.add_argument("--binary", default=release if os.path.exists(release) else debug)
    parser.add_argument("--silent", type=int, default=1100)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--heavy", type=int, default=1000)
    parser.add_argument("--head-bytes", type=int, default=400 * 1024)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    files = tempfile.mkdtemp(prefix="cellvisor-strangers-")
    token_file = os.path.join(files, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    port = free_port()
    config = f"[daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\ntoken-file = {token_file!r}\n"
    daemon = Daemon(args.binary, config, prefix="cv-strangers-")
    try:
        figures = {"binary": os.path.relpath(args.binary),
                   "silent": silent_phase(port, daemon.pid, args.silent, args.requests),
                   "heavy": heavy_phase(port, daemon.pid, args.heavy, args.head_bytes)}
    finally:
        daemon.stop()
        daemon.remove()
    s, h = figures["silent"], figures["heavy"]
    print(f"{s['silent']} silent unauthenticated connections: {s['served']}/{s['requests']} "
          f"authenticated requests served ({100 * s['share']:.1f}%), daemon RSS "
          f"{s['rss_before_kib'] / 1024:.1f} MB -> peak {s['rss_peak_kib'] / 1024:.1f} MB")
    print(f"{h['connections']} unfinished {h['head_bytes'] // 1024} KB heads: daemon RSS "
          f"{h['rss_before_kib'] / 1024:.1f} MB -> peak {h['rss_peak_kib'] / 1024:.1f} MB")
    if args.json:
        print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
