"""The floor for Python cells: a bare `python3 -u` child, nothing else.

Protocol (used by scripts/bench.py):
  stdin   one JSON object per line: {"code": "..."}
  stdout  the cell's output (stdout and stderr share the pipe) as raw text, then
          "\x1e" + {"status": "complete"|"error"|"cancelled"} + "\n" when the cell ends.
State persists in one namespace; a trailing expression's repr is printed, like a REPL;
SIGINT interrupts the running cell.
"""

import ast
import json
import sys
import traceback

namespace = {"__name__": "__main__", "__builtins__": __builtins__}


def run(code):
    tree = ast.parse(code, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<cell>", "exec"), namespace)
    if last is not None:
        value = eval(compile(last, "<cell>", "eval"), namespace)
        if value is not None:
            print(repr(value))


while True:
    try:
        line = sys.stdin.readline()
        if not line:
            break
        try:
            run(json.loads(line)["code"])
            status = "complete"
        except KeyboardInterrupt:
            status = "cancelled"
        except BaseException:
            traceback.print_exc()
            status = "error"
        sys.stdout.write("\x1e" + json.dumps({"status": status}) + "\n")
    except KeyboardInterrupt:
        continue
