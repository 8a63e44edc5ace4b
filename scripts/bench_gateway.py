"""cellvisor's Kernel Gateway API against its JSON-RPC WebSocket and against a real Jupyter
Kernel Gateway with ipykernel, in one run on one machine:

- a trivial `execute_request` (`1`) round trip, sent until both its `execute_reply` and its
  `status: idle` arrived (as a gateway host waits), median of --runs after a warm-up, through
  cellvisor's channels WebSocket and through the Kernel Gateway's (the same client code);
- the same cell as `eval` on cellvisor's JSON-RPC WebSocket (`/v1/rpc`), request to answer;
- the same cell on ipykernel through jupyter_client over ZMQ, without a gateway (the
  kernel's own round trip: the Kernel Gateway's WebSocket, tornado's, leaves Nagle's
  algorithm on, and its small frames wait for delayed ACKs);
- a kernel start: `POST /api/kernels` until its answer, and until the first cell's reply
  (a kernel ready to run), median of --starts, on each gateway.

Usage: scripts/bench-gateway [--runs 200] [--starts 5] [--binary target/release/cellvisor]
(the venv from `scripts/test-venv jupyter_server`, with ipykernel and jupyter_kernel_gateway).
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
import urllib.request
import uuid

import websocket  # websocket-client

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Client, Daemon  # noqa: E402

TOKEN = "bench-token-0123456789abcdef"
PATIENCE = 120.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rest(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", "token " + TOKEN)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=PATIENCE) as answer:
        text = answer.read().decode()
    return json.loads(text) if text.strip() else None


class Channels:
    """A kernel's channels WebSocket in the legacy JSON framing."""

    def __init__(self, base, kernel_id):
        url = base.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"
        self.ws = websocket.create_connection(url, header=["Authorization: token " + TOKEN],
                                              timeout=PATIENCE)
        self.session = uuid.uuid4().hex

    def execute(self, code):
        """Sends the cell; returns once both its execute_reply and its idle arrived."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": self.session,
                       "username": "bench", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell",
            "content": {"code": code, "silent": False, "store_history": True,
                        "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
        }))
        reply = idle = False
        while not (reply and idle):
            message = json.loads(self.ws.recv())
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = message.get("msg_type") or message["header"]["msg_type"]
            if kind == "execute_reply":
                if message["content"]["status"] != "ok":
                    raise RuntimeError(f"the cell failed: {message['content']}")
                reply = True
            elif kind == "status" and message["content"]["execution_state"] == "idle":
                idle = True

    def close(self):
        self.ws.close()


def wait_listening(port, process, what):
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} never listened on {port}")


def round_trips(channels, runs, code="1"):
    for _ in range(20):
        channels.execute(code)
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        channels.execute(code)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def kernel_starts(base, starts):
    """Medians of POST /api/kernels to its answer, and to the first cell's reply."""
    answered, ready = [], []
    for _ in range(starts):
        started = time.perf_counter()
        kernel = rest(base, "POST", "/api/kernels", {"name": "python3"})
        answered.append(time.perf_counter() - started)
        channels = Channels(base, kernel["id"])
        channels.execute("1")
        ready.append(time.perf_counter() - started)
        channels.close()
        rest(base, "DELETE", f"/api/kernels/{kernel['id']}")
    return statistics.median(answered), statistics.median(ready)


def ipykernel_direct(runs, directory):
    """The same cell on an ipykernel over ZMQ through jupyter_client (no gateway, no
    WebSocket): the kernel's own round trip, for reading the Kernel Gateway's figure."""
    from jupyter_client.manager import start_new_kernel

    os.environ["JUPYTER_RUNTIME_DIR"] = os.path.join(directory, "runtime-direct")
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        run = lambda: client.execute_interactive("1", output_hook=lambda m: None, timeout=PATIENCE)  # noqa: E731
        for _ in range(20):
            run()
        samples = []
        for _ in range(runs):
            started = time.perf_counter()
            run()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def start_kernel_gateway(python, directory):
    """`jupyter kernelgateway` (its python3 kernelspec is this venv's ipykernel), in a process
    group of its own and with its Jupyter files in `directory`."""
    port = free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=os.path.join(directory, "runtime"),
               JUPYTER_DATA_DIR=os.path.join(directory, "data"),
               JUPYTER_CONFIG_DIR=os.path.join(directory, "config"), JUPYTER_PLATFORM_DIRS="1")
    env.pop("VIRTUAL_ENV", None)
    log = open(os.path.join(directory, "kernel-gateway.log"), "w")
    process = subprocess.Popen(
        [python, "-m", "kernel_gateway", "--KernelGatewayApp.ip=127.0.0.1",
         f"--KernelGatewayApp.port={port}", "--KernelGatewayApp.port_retries=0",
         f"--KernelGatewayApp.auth_token={TOKEN}", "--JupyterWebsocketPersonality.list_kernels=True"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=directory,
        process_group=0)
    wait_listening(port, process, "the Kernel Gateway")
    return process, f"http://127.0.0.1:{port}"


def end_group(process):
    """Ends `process` and its process group (its own: it was started with one)."""
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, 15)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        process.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="round trips per transport (default 200)")
    parser.add_argument("--starts", type=int, default=5, help="kernel starts per gateway (default 5)")
    release = os.path.join(HERE, "..", "target", "release", "cellvisor")
    debug = os.path.join(HERE, "..", "target", "debug", "cellvisor")
    parser.add_argument("--binary", default=release if os.path.exists(release) else debug)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    files = tempfile.mkdtemp(prefix="cellvisor-bench-gateway-")
    daemon = gateway = None
    try:
        token_file = os.path.join(files, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(token_file, 0o600)
        port = free_port()
        daemon = Daemon(args.binary, (
            "[sessions]\nidle-timeout = \"0s\"\n[python]\ninterpreter = \"/usr/bin/python3\"\n"
            f"[daemon]\nlisten = [\"tcp://127.0.0.1:{port}\"]\ntoken-file = {token_file!r}\n"),
            prefix="cv-bench-gw-")
        daemon.connect().close()
        wait_listening(port, None, "cellvisor's listener")
        cellvisor = f"http://127.0.0.1:{port}"
        gateway, kg = start_kernel_gateway(sys.executable, files)

        cv_start, cv_ready = kernel_starts(cellvisor, args.starts)
        kg_start, kg_ready = kernel_starts(kg, args.starts)

        kernel = rest(cellvisor, "POST", "/api/kernels", {"name": "python3"})
        cv_channels = Channels(cellvisor, kernel["id"])
        kg_kernel = rest(kg, "POST", "/api/kernels", {"name": "python3"})
        kg_channels = Channels(kg, kg_kernel["id"])
        rpc = Client(url=f"ws://127.0.0.1:{port}", token_file=token_file)
        cells = {"session": "bench-rpc", "cells": [{"language": "py", "code": "1"}]}

        def rpc_cell():
            cell = rpc.call("eval", cells)["cells"][0]
            if cell["status"] != "complete":
                raise RuntimeError(f"the cell failed: {cell}")

        for _ in range(20):
            rpc_cell()
        rpc_samples = []
        for _ in range(args.runs):
            started = time.perf_counter()
            rpc_cell()
            rpc_samples.append(time.perf_counter() - started)
        rpc_median = statistics.median(rpc_samples)
        cv_median = round_trips(cv_channels, args.runs)
        kg_median = round_trips(kg_channels, args.runs)
        for channels in (cv_channels, kg_channels):
            channels.close()
        rpc.close()
        direct_median = ipykernel_direct(args.runs, files)

        ms = lambda s: round(s * 1000, 3)  # noqa: E731
        figures = {
            "binary": os.path.relpath(args.binary), "runs": args.runs, "starts": args.starts,
            "round_trip_ms": {"cellvisor_gateway": ms(cv_median), "cellvisor_json_rpc": ms(rpc_median),
                              "kernel_gateway_ipykernel": ms(kg_median),
                              "ipykernel_jupyter_client_zmq": ms(direct_median)},
            "ratio_gateway_to_json_rpc": round(cv_median / rpc_median, 2),
            "ratio_gateway_to_kernel_gateway": round(cv_median / kg_median, 2),
            "kernel_start_ms": {"cellvisor_post": ms(cv_start), "cellvisor_ready": ms(cv_ready),
                                "kernel_gateway_post": ms(kg_start), "kernel_gateway_ready": ms(kg_ready)},
        }
        print(f"trivial execute_request (`1`) round trip to reply and idle, median of {args.runs} "
              f"({figures['binary']}):")
        print(f"  cellvisor gateway WebSocket       {ms(cv_median):8.3f} ms")
        print(f"  cellvisor JSON-RPC WebSocket eval {ms(rpc_median):8.3f} ms"
              f"   gateway / JSON-RPC: {figures['ratio_gateway_to_json_rpc']:.2f}")
        print(f"  Kernel Gateway + ipykernel        {ms(kg_median):8.3f} ms"
              f"   cellvisor / Kernel Gateway: {figures['ratio_gateway_to_kernel_gateway']:.2f}")
        print(f"  ipykernel via jupyter_client (ZMQ, no gateway) {ms(direct_median):8.3f} ms")
        print(f"kernel start (python3), median of {args.starts}: POST /api/kernels answered / first cell's reply")
        print(f"  cellvisor       {ms(cv_start):8.1f} ms / {ms(cv_ready):8.1f} ms")
        print(f"  Kernel Gateway  {ms(kg_start):8.1f} ms / {ms(kg_ready):8.1f} ms")
        if args.json:
            print(json.dumps(figures))
        return 0
    finally:
        end_group(gateway)
        if daemon is not None:
            daemon.stop()
        shutil.rmtree(files, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
