"""`exit()` as code mode defines it (and JavaScript does it): the cell ends at once and
successfully (with 0 or no code), and nothing after it runs to any effect, not even the
cell's `except` and `finally` blocks. Python would run those for any SystemExit, so the
runner compiles every cell with `try` or `__exit__` through `guard_handlers`, which starts
each handler, `finally` block, `__exit__` and `__aexit__` with a check that raises exit()'s
SystemExit again while the cell is ending. What the cells do not define (a library's
context manager, code of imported modules) still runs, so files close, but its output goes
nowhere.

Imported by the runner on the first cell with `try` or `__exit__`, and by `exit()`."""

import _ast
import builtins
import sys

#: The builtin the guards call; a name no cell uses by chance.
GUARD = "__cellvisor_exiting__"

_exit = None  # exit()'s SystemExit while the cell ends
_streams = None  # the cell's sys.stdout and sys.stderr, while theirs are silenced


class _Silent:
    """Where output goes once exit() was called."""

    encoding = "utf-8"
    errors = "replace"

    def write(self, text):
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


def begin(code):
    """Ends the cell: silences its output and raises the SystemExit it ends with."""
    global _exit, _streams
    _exit = SystemExit(code)
    if _streams is None:
        _streams = (sys.stdout, sys.stderr)
        sys.stdout = sys.stderr = _Silent()
    raise _exit


def _guard():
    """What each guarded handler and `finally` block runs first."""
    if _exit is not None:
        raise SystemExit(_exit.code)


def end_cell():
    """Called by the runner once the cell's code is done: gives back its streams, and
    raises exit()'s SystemExit again if exit() was called (whatever the cell did since)."""
    global _exit, _streams
    if _streams is not None:
        sys.stdout, sys.stderr = _streams
        _streams = None
    ended, _exit = _exit, None
    if ended is not None:
        raise ended from None


def guard_handlers(tree):
    """Puts a guard first in every `except` handler, `finally` block and context manager
    exit of `tree`."""
    try_types = tuple(getattr(_ast, name) for name in ("Try", "TryStar") if hasattr(_ast, name))
    functions = (_ast.FunctionDef, _ast.AsyncFunctionDef)
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, try_types):
            for body in [handler.body for handler in node.handlers] + [node.finalbody]:
                if body:
                    body.insert(0, _guard_statement(body[0]))
        elif isinstance(node, functions) and node.name in ("__exit__", "__aexit__"):
            first = node.body[0]
            docstring = isinstance(first, _ast.Expr) and isinstance(first.value, _ast.Constant)
            node.body.insert(1 if docstring else 0, _guard_statement(first))
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                stack.extend(item for item in value if isinstance(item, _ast.AST))
            elif isinstance(value, _ast.AST):
                stack.append(value)


def _guard_statement(first):
    """`__cellvisor_exiting__()`, placed where `first` is (tracebacks point at the block)."""
    name = _ast.Name(id=GUARD, ctx=_ast.Load())
    call = _ast.Call(func=name, args=[], keywords=[])
    statement = _ast.Expr(value=call)
    for node in (name, call, statement):
        node.lineno, node.col_offset = first.lineno, first.col_offset
        node.end_lineno, node.end_col_offset = first.lineno, first.col_offset
    return statement


setattr(builtins, GUARD, _guard)
