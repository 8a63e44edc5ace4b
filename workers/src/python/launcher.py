"""Starts cellvisor's Python runner. The shim runs this file (as runner.py); the runner
itself is the module cellvisor_runner beside it, because Python caches a module's bytecode
but compiles a script at every start: compiling the runner cost ~1 MB of resident memory
that an idle interpreter kept for its whole life, and milliseconds of its start."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
_dont_write = sys.dont_write_bytecode
sys.dont_write_bytecode = False  # the directory is ours, even under PYTHONDONTWRITEBYTECODE
try:
    import cellvisor_runner
finally:
    sys.dont_write_bytecode = _dont_write
    del sys.path[0]

cellvisor_runner.main()
