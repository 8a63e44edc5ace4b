"""Per-cell overhead of the daemon's WebSocket (`/v1/rpc`, over TLS and plaintext) against its
Unix socket: one daemon listening on both, one client per transport (the `cellvisor` package
in clients/python, the same code but for the transport), a warm trivial cell (`1+1`)
repeated, the transports interleaved in blocks so that they share the machine's state, and each one's median wall time
per cell (request written to answer read) with the ratio to the socket's.

The Rust client crate is measured the same way (client/examples/rpc_latency.rs, built by
scripts/bench-network) unless --no-rust: its figures leave out the Python client's own costs.

Usage: scripts/bench-network [--cells 2000] [--language py] [--block 100] [--no-rust]
(needs `openssl` for the test certificate).
"""

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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Client, Daemon  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
TRIVIAL = {"py": "1+1", "js": "1+1", "lua": "return 1+1"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed(directory):
    """A certificate for 127.0.0.1 and its key, made by openssl."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1,DNS:localhost", "-addext",
         "basicConstraints=critical,CA:FALSE", "-keyout", key, "-out", cert],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


def one_cell(client, session, language, code):
    """Wall time of one cell, request to answer (seconds)."""
    started = time.perf_counter()
    cell = client.call("eval", {"session": session, "cells": [{"language": language, "code": code}]})["cells"][0]
    elapsed = time.perf_counter() - started
    if cell["status"] != "complete":
        raise RuntimeError(f"the trivial cell did not complete: {cell}")
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=2000, help="cells per transport (default 2000)")
    parser.add_argument("--block", type=int, default=100, help="cells per transport in a row (default 100)")
    parser.add_argument("--language", default="py", choices=sorted(TRIVIAL))
    parser.add_argument("--binary", default=os.path.join(HERE, "..", "target", "release", "cellvisor"))
    parser.add_argument("--rust-client", default=os.path.join(HERE, "..", "target", "release", "examples",
                                                              "rpc_latency"))
    parser.add_argument("--no-rust", action="store_true", help="measure the Python client only")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    files = tempfile.mkdtemp(prefix="cellvisor-bench-network-")
    daemons = []
    try:
        cert, key = self_signed(files)
        token_file = os.path.join(files, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        tls_port, plain_port = free_port(), free_port()
        # A daemon's listeners share one TLS setting, so TLS and plaintext are two daemons run
        # side by side, each WebSocket compared with its own daemon's socket.
        config = ("[sessions]\nidle-timeout = \"0s\"\n[daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\n"
                  "token-file = {token!r}\n{tls}")
        tls = Daemon(args.binary, config.format(
            port=tls_port, token=token_file, tls=f"tls-cert = {cert!r}\ntls-key = {key!r}\n"),
            prefix="cv-bn-tls-")
        daemons.append(tls)
        plain = Daemon(args.binary, config.format(port=plain_port, token=token_file, tls=""),
                       prefix="cv-bn-ws-")
        daemons.append(plain)
        clients = {
            "unix": tls.connect(),
            "wss": Client(url=f"wss://127.0.0.1:{tls_port}", token_file=token_file, cafile=cert),
            "unix-ws-daemon": plain.connect(),
            "ws": Client(url=f"ws://127.0.0.1:{plain_port}", token_file=token_file),
        }
        code = TRIVIAL[args.language]
        samples = {name: [] for name in clients}
        for name, client in clients.items():  # warm: workers started, caches hot
            for _ in range(200):
                one_cell(client, name, args.language, code)
        blocks = -(-args.cells // args.block)
        for _ in range(blocks):
            for name, client in clients.items():
                for _ in range(args.block):
                    samples[name].append(one_cell(client, name, args.language, code))
        for client in clients.values():
            client.close()
        medians = {name: statistics.median(values[:args.cells]) for name, values in samples.items()}
        figures = {
            "language": args.language, "cells_per_transport": args.cells,
            "median_us": {name: round(m * 1e6, 1) for name, m in medians.items()},
            "ratio_wss_to_unix": round(medians["wss"] / medians["unix"], 3),
            "ratio_ws_to_unix": round(medians["ws"] / medians["unix-ws-daemon"], 3),
            "overhead_wss_us": round((medians["wss"] - medians["unix"]) * 1e6, 1),
            "overhead_ws_us": round((medians["ws"] - medians["unix-ws-daemon"]) * 1e6, 1),
        }
        print(f"warm trivial cell ({args.language} `{code}`), median of {args.cells} per transport, interleaved:")
        for name, m in medians.items():
            print(f"  {name:<24} {m * 1e6:9.1f} us")
        print(f"  wss / unix: {figures['ratio_wss_to_unix']:.3f} (+{figures['overhead_wss_us']} us per cell)")
        print(f"  ws / unix:  {figures['ratio_ws_to_unix']:.3f} (+{figures['overhead_ws_us']} us per cell)")
        if not args.no_rust:
            common = ["--cells", str(args.cells), "--block", str(args.block), "--language", args.language]
            for name, daemon, url, ca in (("wss", tls, f"wss://127.0.0.1:{tls_port}", [cert]),
                                          ("ws", plain, f"ws://127.0.0.1:{plain_port}", [])):
                out = subprocess.run([args.rust_client, daemon.socket, url, token_file, *ca, *common],
                                     check=False, capture_output=True, text=True)
                if out.returncode != 0:
                    raise RuntimeError(f"{args.rust_client} failed: {out.stderr.strip()}")
                out = out.stdout
                rust = json.loads(out)
                figures[f"rust_{name}"] = rust
                print(f"  Rust client: unix {rust['unix_us']} us, {name} {rust['ws_us']} us, "
                      f"{name} / unix: {rust['ratio']:.3f} (+{rust['ws_us'] - rust['unix_us']:.1f} us per cell)")
        if args.json:
            print(json.dumps(figures))
        return 0
    finally:
        for daemon in daemons:
            daemon.stop()
        shutil.rmtree(files, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
