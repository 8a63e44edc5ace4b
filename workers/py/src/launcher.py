"""Starts cellvisor's Python runner. The shim runs this file (as runner.py); the runner
itself is the module cellvisor_runner beside it, because Python caches a module's bytecode
but compiles a script at every start: compiling the runner cost ~1 MB of resident memory
that an idle interpreter kept for its whole life, and milliseconds of its start.

The first interpreter in a new directory finds no cached bytecode. It compiles the runner
and the prelude in a forked child that exits, then loads the cache: compiling in-process
would leave ~1.8 MB of freed but resident heap in this interpreter for its whole life."""

import os
import sys

if sys.version_info < (3, 8):
    # Python 2 parses this file: the shim then names the version as the cause.
    sys.stderr.write("cellvisor's runner needs Python 3.8 or later\n")
    sys.exit(3)

_here = os.path.dirname(os.path.abspath(__file__))
_MODULES = ("cellvisor_runner", "cellvisor_prelude")


def _uncached():
    """Whether a module lacks its bytecode in the usual place (an unusual cache layout
    counts as cached: the import then goes as it always did)."""
    tag = sys.implementation.cache_tag
    if tag is None or getattr(sys, "pycache_prefix", None):
        return False
    return any(
        not os.path.exists(os.path.join(_here, "__pycache__", "%s.%s.pyc" % (name, tag)))
        for name in _MODULES
    )


def _compile_aside():
    """Imports the modules in a forked child, which writes their bytecode and exits. A
    confined interpreter may not write here: it compiles in-process, as without a cache."""
    if os.environ.get("CELLVISOR_SANDBOX") or not hasattr(os, "fork"):
        return
    try:
        pid = os.fork()
    except OSError:
        return
    if pid == 0:
        try:
            for name in _MODULES:
                __import__(name)
        finally:
            os._exit(0)
    try:
        os.waitpid(pid, 0)
    except (OSError, KeyboardInterrupt):
        pass


# A zygote (see cellvisor_zygote) loads the runner once and forks runners from it.
_zygote = os.environ.pop("CELLVISOR_ZYGOTE", "") == "1"
sys.path.insert(0, _here)
_dont_write = sys.dont_write_bytecode
sys.dont_write_bytecode = False  # the directory is ours, even under PYTHONDONTWRITEBYTECODE
try:
    if _uncached():
        _compile_aside()
    import cellvisor_runner
    if _zygote:
        import cellvisor_zygote
finally:
    sys.dont_write_bytecode = _dont_write
    del sys.path[0]

if _zygote:
    cellvisor_zygote.main()
else:
    cellvisor_runner.main()
