"""IPython's own shell for the cells, where the session's interpreter has IPython.

`[python] shell` (the worker's CELLVISOR_PYTHON_SHELL) chooses: `auto` runs cells through a
real `IPython.core.interactiveshell.InteractiveShell` (what a Jupyter kernel runs, without
its messaging) when IPython can be imported, and cellvisor's built-in emulation
(`cellvisor_notebook`, `cellvisor_ipython`) otherwise; `ipython` asks for IPython (and says
why when it cannot have it); `builtin` always runs the emulation.

Around IPython's shell, cellvisor keeps what it does for every cell: displays go out as
cellvisor's MIME bundles (the shell's display publisher and display hook are cellvisor's, so
every formatter registered with `display_formatter`, SymPy's LaTeX and PNG ones say, feeds
the bundles), stdout and stderr stay on the worker's pipes, stdin is refused with the
anchor's text, SIGINT interrupts, tracebacks are printed as the built-in runner prints them,
the namespace is the shell's `user_ns` (the `__main__` module the snapshots save), and
code mode's `exit()` ends a cell. A zygote makes the shell before it forks, so a forked
session pays nothing for IPython's import and set-up (0.2 to 0.8 s).
"""

import os
import sys

SHELL_VAR = "CELLVISOR_PYTHON_SHELL"
CHOICES = ("auto", "ipython", "builtin")
# IPython's shell aliases on Linux without `--color`: output reaches hosts as text.
ALIASES = (("ls", "ls -F"), ("ll", "ls -F -o"), ("lf", "ls -F -o %l | grep ^-"),
           ("lk", "ls -F -o %l | grep ^l"), ("ldir", "ls -F -o %l | grep /$"),
           ("lx", "ls -F -o %l | grep ^-..x"))

_shell = None  # the InteractiveShell, once made
_failure = None  # why `shell = "ipython"` could not have IPython
_host = None  # the runner's side (see `prepare`)
_making = False  # IPython is being imported and its shell made


def making():
    """Whether the shell is being made now (IPython's modules load meanwhile)."""
    return _making


def wanted():
    """The operator's choice, `auto` when unset or not one of CHOICES."""
    value = os.environ.get(SHELL_VAR, "").strip().lower()
    return value if value in CHOICES else "auto"


def active():
    """The InteractiveShell the cells run in, or None (the built-in emulation)."""
    return _shell


def describe():
    """Which shell the cells run in, for the engine's name in `status`."""
    if _shell is None:
        return "built-in shell"
    import IPython

    return "IPython %s shell" % IPython.__version__


def notice():
    """The first cell's notice when the session does not run the shell the operator asked
    for (`ipython` without IPython, or an IPython whose shell could not start), else None:
    `status` says which shell every session runs (a notice on every session would read as
    a restart to hosts that treat any notice as one)."""
    choice = wanted()
    if _shell is not None or choice == "builtin":
        return None
    if _failure is not None:
        return ("Python cells run in cellvisor's built-in IPython emulation: %s "
                "([python] shell = %r)" % (_failure, choice))
    return None


def hidden_names():
    """Names the shell put in the namespace (`get_ipython`, `exit`, `%pylab`'s, ...), which
    snapshots and `%who` leave out."""
    if _shell is None:
        return {}
    return _shell.user_ns_hidden


def prepare(module, host):
    """Makes the shell over the cells' `__main__` `module` when the operator's choice and the
    interpreter allow; `host` is the runner's side (the running cell's id, error reports,
    the trailing text). Returns the shell or None."""
    global _host
    _host = host
    choice = wanted()
    if _shell is None and choice != "builtin":
        _make(module, host, choice)
    if _shell is None:
        _install_fallback()  # only now: the choice above saw the interpreter's own IPython
    return _shell


def _make(module, host, choice):
    global _shell, _failure, _making
    _making = True
    try:
        _shell = _beside("cellvisor_shell_ipython").make(module, host)
    except ImportError as error:
        if choice == "ipython":
            _failure = "this interpreter cannot import IPython (%s)" % error
    except Exception as error:  # an IPython this module cannot drive
        _failure = "IPython's shell could not start (%s: %s)" % (type(error).__name__, error)
    finally:
        _making = False


# --- the `IPython` package for interpreters without one (cellvisor_ipython_shim) -----------

class _FallbackFinder:
    """A `sys.meta_path` finder placed last, so it answers `import IPython` (and the shim's
    submodules) only when no finder before it found a real IPython; an IPython installed
    later is found first on its next import. Imports the shim only when it answers."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith("IPython") or fullname.partition(".")[0] != "IPython":
            return None  # every failed import of the session asks: answered at once
        if fullname != "IPython" and not _shim_imported():
            return None
        return _beside("cellvisor_ipython_shim").find_spec(fullname)


def _install_fallback():
    if not any(isinstance(finder, _FallbackFinder) for finder in sys.meta_path):
        sys.meta_path.append(_FallbackFinder())


def _shim_imported():
    """Whether `IPython` in sys.modules is cellvisor's shim."""
    return getattr(sys.modules.get("IPython"), "__cellvisor_shim__", False)


def real_ipython_spec():
    """The spec of the interpreter's own IPython (found now, whether or not the shim was
    imported), or None; as `importlib.util.find_spec`, an `IPython` imported (or blocked
    with None) in sys.modules answers for itself, unless it is the shim."""
    if "IPython" in sys.modules and not _shim_imported():
        module = sys.modules["IPython"]
        return None if module is None else getattr(module, "__spec__", None)
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None or isinstance(finder, _FallbackFinder):
            continue
        try:
            spec = find("IPython", None)
        except (ImportError, ValueError):
            continue
        if spec is not None:
            return spec
    return None


def _beside(name):
    module = sys.modules.get(name)
    return module if module is not None else _host.import_beside(name)
