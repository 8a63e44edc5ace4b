#!/usr/bin/env python3
"""A cellvisor client in plain Python (standard library only).

Connects to the daemon's Unix socket, runs cells, and prints their output as it streams.

    python3 scripts/cellvisor_client.py --session demo py 'x = 41' py 'print(x + 1)' js '6 * 7'

Start the daemon first (`cellvisor serve`, or any `cellvisor eval`, which starts one).
"""

import argparse
import json
import os
import socket
import sys


def default_socket():
    """The daemon's default socket, as cellvisor computes it."""
    if os.environ.get("CELLVISOR_SOCKET"):
        return os.environ["CELLVISOR_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        base = os.path.join(runtime, "cellvisor")
    else:
        import tempfile

        base = os.path.join(tempfile.gettempdir(), f"cellvisor-{os.getuid()}")
    return os.path.join(base, "daemon.sock")


class Client:
    """One connection; requests are answered by id, notifications arrive in between."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.lines = self.sock.makefile("r", encoding="utf-8")
        self.next_id = 1

    def send(self, message):
        self.sock.sendall((json.dumps(message) + "\n").encode("utf-8"))

    def call(self, method, params=None, on_event=None, tools=None):
        """Calls `method`; `on_event` gets each `eval/event`, and `tools` (name -> function
        of the arguments) answers the daemon's `tool/call` requests."""
        request_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        for line in self.lines:
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{message['error']['code']}: {message['error']['message']}")
                return message["result"]
            if message.get("method") == "eval/event" and on_event:
                on_event(message["params"])
            elif message.get("method") == "tool/call":
                self.answer_tool_call(message, tools or {})
        raise ConnectionError("the daemon closed the connection")

    def answer_tool_call(self, request, tools):
        params = request["params"]
        function = tools.get(params["name"])
        try:
            if function is None:
                raise LookupError(f"this host has no tool {params['name']!r}")
            response = {"jsonrpc": "2.0", "id": request["id"], "result": function(params["arguments"])}
        except Exception as error:  # the tool's failure is the cell's to handle
            response = {"jsonrpc": "2.0", "id": request["id"],
                        "error": {"code": -32000, "message": str(error)}}
        self.send(response)


class Daemon:
    """`cellvisor serve` run from `binary` with the config `config_text`, in a private
    temporary runtime directory: for scripts that measure. `stop()` ends it by pid."""

    def __init__(self, binary, config_text):
        import subprocess
        import tempfile
        import time

        self.dir = tempfile.mkdtemp(prefix="cellvisor-daemon-")
        config = os.path.join(self.dir, "config.toml")
        with open(config, "w") as f:
            f.write(config_text)
        run = os.path.join(self.dir, "run")
        os.makedirs(run, mode=0o700)
        self.socket = os.path.join(run, "d.sock")
        env = dict(os.environ, XDG_RUNTIME_DIR=run)
        self.process = subprocess.Popen([binary, "serve", "--socket", self.socket, "--config", config],
                                        env=env, stderr=subprocess.DEVNULL)
        deadline = time.time() + 15
        while not os.path.exists(self.socket):
            if time.time() > deadline or self.process.poll() is not None:
                self.stop()
                raise RuntimeError("the daemon did not start")
            time.sleep(0.01)
        self.client = Client(self.socket)

    def stop(self):
        import shutil

        if self.process.poll() is None:
            try:
                self.client.call("shutdown")
                self.process.wait(timeout=20)
            except Exception:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def print_event(event):
    kind = event["event"]
    if kind == "cell_started":
        title = event.get("title") or event["language"]
        print(f"--- [{event['index'] + 1}] {title}", flush=True)
    elif kind == "output":
        stream = sys.stdout if event["stream"] == "stdout" else sys.stderr
        stream.write(event["text"])
        stream.flush()
    elif kind == "display":
        print(json.dumps(event["bundle"], indent=2), flush=True)
    elif kind == "cell_done":
        print(f"--- {event['status']}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", default=default_socket())
    parser.add_argument("--session", default="default")
    parser.add_argument("cells", nargs="*", help="pairs of LANGUAGE CODE")
    args = parser.parse_args()
    if len(args.cells) % 2:
        parser.error("cells come in pairs: LANGUAGE CODE")
    cells = [{"language": lang, "code": code} for lang, code in zip(args.cells[::2], args.cells[1::2])]

    client = Client(args.socket)
    info = client.call("initialize")
    print(f"connected to cellvisor {info['server_version']} (protocol {info['protocol_version']})", file=sys.stderr)
    if not cells:
        print(json.dumps(client.call("status"), indent=2))
        return 0
    result = client.call("eval", {"session": args.session, "cells": cells}, on_event=print_event)
    return 1 if result["is_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
