"""`python -m cellvisor`: runs cells on a daemon and prints their output as it streams, as
the CLI renders it (a header per cell, its output, its status).

    python -m cellvisor --session demo py 'x = 41' py 'print(x + 1)' js '6 * 7'
    python -m cellvisor --url wss://127.0.0.1:7420 --token-file token --cafile cert.pem py 'print(6 * 7)'

Without cells it prints the daemon's `status`. Start the daemon first (`cellvisor serve`,
or any `cellvisor eval`, which starts one)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

from .client import Client
from .daemon import default_socket
from .errors import ConnectError
from .wire import Event


def print_event(event: Event) -> None:
    """Prints one `eval/event` as the CLI would: a header per cell, its output, its status."""
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


def main(argv: Optional[List[str]] = None, description: Optional[str] = None) -> int:
    parser = argparse.ArgumentParser(description=description or __doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", default=default_socket())
    parser.add_argument("--url", help="a daemon on the network: wss://HOST:PORT or ws://HOST:PORT")
    parser.add_argument("--token-file", help="the file holding that daemon's token")
    parser.add_argument("--cafile", help="PEM certificates to trust for wss (default: the system's)")
    parser.add_argument("--session", default="default")
    parser.add_argument("cells", nargs="*", help="pairs of LANGUAGE CODE")
    args = parser.parse_args(argv)
    if len(args.cells) % 2:
        parser.error("cells come in pairs: LANGUAGE CODE")
    cells = [{"language": lang, "code": code} for lang, code in zip(args.cells[::2], args.cells[1::2])]

    try:
        if args.url:
            # Bound to its session, so that a router in front of several nodes places it by the
            # Cellvisor-Session header (docs/fleet.md).
            client = Client(url=args.url, token_file=args.token_file, cafile=args.cafile, session=args.session)
        else:
            client = Client(args.socket)
    except ConnectError as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2
    with client:
        info = client.call("initialize")
        print(f"connected to cellvisor {info['server_version']} (protocol {info['protocol_version']})",
              file=sys.stderr)
        if not cells:
            print(json.dumps(client.call("status"), indent=2))
            return 0
        result = client.call("eval", {"session": args.session, "cells": cells}, on_event=print_event)
        return 1 if result["is_error"] else 0
