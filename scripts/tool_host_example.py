#!/usr/bin/env python3
"""A host that offers tools to the cells it runs (standard library only).

The `eval` request declares the tools; when a cell calls `tool.<name>(args)` the daemon
sends this client a `tool/call` request, which it answers like any JSON-RPC server.

    python3 scripts/tool_host_example.py [--socket PATH] [JS_CODE]

Without code it runs a cell that calls `add` (succeeds) and `divide` by zero (fails).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "clients", "python", "src"))  # the `cellvisor` package
from cellvisor import Client, default_socket, print_event  # noqa: E402

DEFAULT_CELL = """
const sum = await tool.add({a: 2, b: 3});
let failure;
try { await tools.divide({a: 1, b: 0}); } catch (error) { failure = error.message; }
text({sum, failure, offered: ALL_TOOLS.map(t => t.name)});
"""

TOOLS = [
    {"name": "add", "description": "Adds two numbers.",
     "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                      "required": ["a", "b"]}},
    {"name": "divide", "description": "Divides a by b.",
     "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                      "required": ["a", "b"]}},
]


def add(arguments):
    return arguments["a"] + arguments["b"]


def divide(arguments):
    if arguments["b"] == 0:
        raise ZeroDivisionError("cannot divide by zero")
    return arguments["a"] / arguments["b"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", default=default_socket())
    parser.add_argument("--session", default="tool-host")
    parser.add_argument("code", nargs="?", default=DEFAULT_CELL)
    args = parser.parse_args()
    client = Client(args.socket)
    result = client.call(
        "eval",
        {"session": args.session, "tools": TOOLS, "cells": [{"language": "js", "code": args.code}]},
        on_event=print_event,
        tools={"add": add, "divide": divide},
    )
    print(json.dumps(result["cells"][0], indent=2))
    return 1 if result["is_error"] else 0


if __name__ == "__main__":
    sys.exit(main())
