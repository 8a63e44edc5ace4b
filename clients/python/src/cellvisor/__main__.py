"""`python -m cellvisor`: the `cellvisor` program's own command line (`eval`, `status`,
`stop`, ... as `cellvisor --help` lists them) when the wheel installed it beside this
interpreter, as `python -m` runs a tool that ships its binary; otherwise, and for the
client's own form `python -m cellvisor [--session S] LANGUAGE CODE ...`, `cellvisor.cli`."""

import os
import sys

from .cli import main
from .daemon import bundled_program

#: The first words that are the program's (its subcommands and its version and help flags).
PROGRAM_WORDS = {
    "eval", "wait", "terminate", "serve", "mcp", "status", "interrupt", "reset", "close",
    "checkpoint", "restore", "checkpoints", "names", "drain", "undrain", "stop", "config",
    "check", "help", "--version", "-V", "--help", "-h",
}


def run() -> int:
    program = bundled_program()
    if program is not None and sys.argv[1:2] and sys.argv[1] in PROGRAM_WORDS:
        os.execv(program, [program, *sys.argv[1:]])
    return main()


sys.exit(run())
