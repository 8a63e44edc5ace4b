"""IPython's magics beyond those of `cellvisor_ipython`: the shell aliases (`ls`, `cat`,
`mkdir`, ...), `%pwd`, `%history`, `%lsmagic`, `%magic`, `%automagic`, `%xmode`,
`%load_ext`, `%%file`, `%prun`, the help magics (`%pinfo`, `%pinfo2`, `%psearch`, by
`cellvisor_inspector`), and `%debug` and `%pdb`, which say that interactive debugging is
not supported. `Magics` is a base class of cellvisor_ipython's `Shell`: a magic `%name` is
its method `_line_name` (`_cell_name` for `%%name`), or one an IPython extension
registered. Loaded with cellvisor_ipython, by the first cell that uses IPython syntax.
"""

import os
import sys

# IPython's shell aliases on Linux: `%l` is the rest of the line, which otherwise follows
# the command. `ls` leaves out IPython's `--color`: output reaches hosts as text.
ALIASES = {
    "ls": "ls -F", "ll": "ls -F -o", "lf": "ls -F -o %l | grep ^-",
    "lk": "ls -F -o %l | grep ^l", "ldir": "ls -F -o %l | grep /$",
    "lx": "ls -F -o %l | grep ^-..x", "mkdir": "mkdir", "rmdir": "rmdir", "mv": "mv",
    "rm": "rm", "cp": "cp", "cat": "cat",
}
# IPython's exception reporting modes, in the order a bare `%xmode` cycles through them.
XMODES = ("Plain", "Context", "Verbose", "Minimal", "Docs", "Doctest")
NO_DEBUGGER = ("cellvisor: %s: interactive debugging is not supported here (cells run "
               "without a terminal); the traceback shows where the error happened")


# The magics of a notebook's frontend, which have nothing to act on here: each says why.
FRONTEND_MAGICS = {
    "qtconsole": "there is no Qt console to open: cells run in a cellvisor worker, which "
                 "hosts reach through the cellvisor daemon",
    "connect_info": "there is no kernel connection file: cells run in a cellvisor worker, "
                    "which hosts reach through the cellvisor daemon",
    "gui": "no GUI event loop runs here (cells have no display): matplotlib figures arrive "
           "as PNG displays",
    "autosave": "there is no notebook file to save: the host keeps the cells and outputs",
}


def frontend_magic(name):
    """The magic `%name` of FRONTEND_MAGICS: prints why it does nothing."""

    def magic(line=""):
        print("cellvisor: %%%s does nothing here: %s" % (name, FRONTEND_MAGICS[name]))

    magic.__name__ = name
    magic.__doc__ = "Does nothing here: %s." % FRONTEND_MAGICS[name]
    return magic


def _usage_error(message):
    return sys.modules["cellvisor_ipython"].UsageError(message)


def _notebook():
    return sys.modules["cellvisor_notebook"]


class _Listing:
    """What `%lsmagic` returns: shown as its text."""

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


class _Events:
    """`get_ipython().events`: callbacks an extension registers, run around each cell."""

    NAMES = ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell")

    def __init__(self):
        self.callbacks = {name: [] for name in self.NAMES}

    def register(self, event, function):
        if event not in self.callbacks:
            raise KeyError("Unknown event %s; cellvisor runs %s" % (event, ", ".join(self.NAMES)))
        self.callbacks[event].append(function)

    def unregister(self, event, function):
        try:
            self.callbacks.get(event, []).remove(function)
        except ValueError:
            raise ValueError("Function %r is not registered as a %s callback" % (function, event))

    def trigger(self, event, *args):
        for function in list(self.callbacks.get(event, ())):
            try:
                function(*args)
            except Exception:
                import traceback

                print("Error in callback %s (for %s):" % (function, event), file=sys.stderr)
                traceback.print_exc()


class Magics:
    """The magics of this module, mixed into cellvisor_ipython's Shell."""

    xmode = "Context"
    _extensions = None  # the names of the extensions loaded
    _registered = None  # {"line": {name: function}, "cell": {...}} that extensions added

    @property
    def events(self):
        """Callbacks run around each cell (`pre_run_cell`, `post_execute`, ...)."""
        notebook = _notebook()
        if notebook.events is None:
            notebook.events = _Events()
        return notebook.events

    def _magic_method(self, kind, name):
        found = getattr(self, "_%s_%s" % (kind, name), None)
        if found is None and self._registered is not None:
            found = self._registered[kind].get(name)
        return found

    def magic_names(self, kind):
        """The names of the line (`kind` "line") or cell ("cell") magics."""
        prefix = "_%s_" % kind
        names = {name[len(prefix):] for name in dir(self) if name.startswith(prefix)}
        names.update((self._registered or {}).get(kind, ()))
        return sorted(names)

    # A frontend's magics: nothing to act on here.
    def _line_qtconsole(self, line):
        return frontend_magic("qtconsole")(line)

    def _line_connect_info(self, line):
        return frontend_magic("connect_info")(line)

    def _line_gui(self, line):
        return frontend_magic("gui")(line)

    def _line_autosave(self, line):
        return frontend_magic("autosave")(line)

    # Shell aliases and directories.
    def _alias(self, name, rest):
        command = ALIASES[name]
        if "%l" in command:
            command, rest = command.replace("%l", rest), ""
        self.system("%s %s" % (command, rest))

    def _line_pwd(self, line):
        """Returns the current working directory."""
        return os.getcwd()

    # History.
    def _line_history(self, line):
        """Prints the session's inputs: `%history [-n] [-o] [-p] [-t] [-g PATTERN]
        [-l [N]] [-f FILE] [RANGE ...]`, ranges like `4`, `4-6`, `4:6` or `4-`."""
        return _history(self, line)

    _line_hist = _line_history

    # The magic system.
    def _line_lsmagic(self, line):
        """Lists the magics, and whether automagic is on."""
        text = "Available line magics:\n%s\n\nAvailable cell magics:\n%s\n\n%s" % (
            "  ".join("%" + name for name in self.magic_names("line")),
            "  ".join("%%" + name for name in self.magic_names("cell")),
            self._auto_status())
        return _Listing(text)

    def _auto_status(self):
        if _notebook().history.automagic:
            return "Automagic is ON, % prefix IS NOT needed for line magics."
        return "Automagic is OFF, % prefix IS needed for line magics."

    def _line_automagic(self, line):
        """Turns automagic on or off (`on`, `off`, `1`, `0`, `true`, `false`), or toggles it."""
        history = _notebook().history
        arg = line.strip().lower()
        history.automagic = (True if arg in ("on", "1", "true")
                             else False if arg in ("off", "0", "false") else not history.automagic)
        print("\n" + self._auto_status())

    def _line_magic(self, line):
        """Prints what the magics are and what each one does."""
        print("cellvisor's IPython magics\n==========================\n\n"
              "Magics are commands for the session, not Python: a line magic starts a line\n"
              "with %, and a cell magic starts a cell with %% and takes the whole cell.\n"
              "With automagic on, a one-line cell may leave out the % when no name in the\n"
              "namespace shadows the magic. `obj?` and `obj??` show help on an object.\n")
        for kind, mark in (("line", "%"), ("cell", "%%")):
            print("%s magics\n%s\n" % (kind.capitalize(), "=" * (len(kind) + 7)))
            for name in self.magic_names(kind):
                doc = _first_paragraph(self._magic_method(kind, name), name)
                print("%s%s:\n    %s\n" % (mark, name, doc.replace("\n", "\n    ")))
        print(self._auto_status())

    # Exceptions and debugging.
    def _line_xmode(self, line):
        """Sets how tracebacks look: Plain and Minimal (the exception line only) change
        them; Context, Verbose, Docs and Doctest are accepted and show Python's form."""
        arg = line.strip()
        if arg in ("--show", "--hide"):
            return
        if not arg:
            mode = XMODES[(XMODES.index(self.xmode) + 1) % len(XMODES)]
        else:
            mode = arg.capitalize()
            if mode not in XMODES:
                raise _usage_error("%%xmode: unknown mode %r; the modes are %s"
                                   % (arg, ", ".join(XMODES)))
        Magics.xmode = mode
        print("Exception reporting mode:", mode)

    def _line_pdb(self, line):
        """Not supported: says so."""
        print(NO_DEBUGGER % "%pdb")

    def _line_debug(self, line):
        """Not supported: says so, and runs the statement given, if any."""
        print(NO_DEBUGGER % "%debug")
        if line.strip():
            self.ex(line)

    def _cell_debug(self, line, cell):
        """Not supported: says so, and runs the cell."""
        print(NO_DEBUGGER % "%%debug")
        self.ex(cell)

    # Files and profiling.
    def _cell_file(self, line, cell):
        """`%%file` is `%%writefile`."""
        return self._cell_writefile(line, cell)

    def _line_prun(self, line):
        """Profiles a statement: `%prun [-s KEY]... [-l LIMIT]... [-r] [-q] [-T FILE]
        [-D FILE] statement`, as IPython's `%prun`."""
        return self._prun(line, None)

    def _cell_prun(self, line, cell):
        """Profiles the cell, with `%prun`'s options on the first line."""
        return self._prun(line, cell)

    def _prun(self, line, cell):
        import getopt
        import shlex

        try:
            opts, args = getopt.getopt(shlex.split(line, posix=False), "s:l:rqT:D:")
        except (getopt.GetoptError, ValueError) as error:
            raise _usage_error("%%prun: %s" % error) from None
        code = " ".join(args) if cell is None else " ".join(args) + "\n" + cell
        return _profile(self, opts, code)

    # Extensions.
    def _line_load_ext(self, line):
        """Loads an IPython extension (which needs IPython installed)."""
        return _load_ext(self, line.strip())

    def register_magics(self, *objects):
        """Adds the magics of IPython `Magics` classes or instances (from an extension)."""
        for magics in objects:
            if isinstance(magics, type):
                magics = magics(shell=self)
            table = getattr(magics, "magics", None) or {}
            for kind in ("line", "cell"):
                self._registry()[kind].update(table.get(kind, {}))

    def register_magic_function(self, func, magic_kind="line", magic_name=None):
        """Adds one function as a magic."""
        if magic_kind not in ("line", "cell"):
            raise ValueError("magic_kind must be 'line' or 'cell', not %r" % magic_kind)
        self._registry()[magic_kind][magic_name or func.__name__] = func

    def _registry(self):
        if self._registered is None:
            self._registered = {"line": {}, "cell": {}}
        return self._registered

    # Help.
    def _line_pinfo(self, line):
        """Shows what `obj?` shows: signature, docstring, file and type."""
        return _beside("cellvisor_inspector").pinfo(self, line)

    def _line_pinfo2(self, line):
        """Shows what `obj??` shows: with the source."""
        return _beside("cellvisor_inspector").pinfo(self, line, detail=1)

    def _line_psearch(self, line):
        """Lists the names matching a wildcard pattern (`np.*cos*`), as `np.*cos*?`."""
        return _beside("cellvisor_inspector").psearch(self, line)

    def show_usage(self):
        """What a bare `?` shows."""
        print("cellvisor runs IPython-style cells: `obj?` shows an object's signature, docstring\n"
              "and file, `obj??` its source too, `a*b?` searches names with wildcards;\n"
              "`%lsmagic` lists the magics and `%magic` explains them; `!cmd` runs a shell\n"
              "command; `In`, `Out`, `_`, `_N` and `_iN` hold the history.")


for _name in ALIASES:
    setattr(Magics, "_line_" + _name,
            (lambda name: lambda self, line: self._alias(name, line))(_name))


class _Parser:
    """An argparse parser whose errors are UsageErrors rather than an exit."""

    def __new__(cls, prog):
        import argparse

        class Parser(argparse.ArgumentParser):
            def error(self, message):
                raise _usage_error("%s: %s" % (prog, message))

        return Parser(prog=prog, add_help=False)


_UNSET = object()


def _history(shell, line):
    import fnmatch
    import shlex

    parser = _Parser("%history")
    for flag, dest in (("-n", "print_nums"), ("-o", "get_output"), ("-p", "pyprompts"),
                       ("-y", "overwrite"), ("-u", "unique")):
        parser.add_argument(flag, dest=dest, action="store_true")
    parser.add_argument("-t", dest="raw", action="store_false")
    parser.add_argument("-f", dest="filename")
    parser.add_argument("-g", dest="pattern", nargs="*", default=None)
    parser.add_argument("-l", dest="limit", type=int, nargs="?", default=_UNSET)
    parser.add_argument("range", nargs="*")
    args = parser.parse_args(shlex.split(line))
    history = _notebook().history
    inputs = history.raw if args.raw else history.parsed
    numbered = list(enumerate(inputs))[1:]
    print_nums, range_pattern = args.print_nums, None
    if args.pattern is not None and not args.range:
        pattern = "*" + " ".join(args.pattern) + "*" if args.pattern else "*"
        found = [(n, text) for n, text in numbered if fnmatch.fnmatch(text, pattern)]
        if args.unique:
            seen = set()
            found = [(n, t) for n, t in reversed(found) if not (t in seen or seen.add(t))][::-1]
        hist = found if args.limit in (_UNSET, None) else found[-args.limit:] if args.limit else []
        print_nums = True
    elif args.limit is not _UNSET:
        count = 10 if args.limit is None else args.limit
        hist = numbered[:-1][-count:] if count > 0 else []  # not the %history cell itself
    else:
        if args.pattern:
            range_pattern, print_nums = "*" + " ".join(args.pattern) + "*", True
        hist = []
        for start, stop in _ranges(" ".join(args.range), len(inputs)):
            hist.extend(numbered[start - 1:stop - 1])
    out = sys.stdout
    if args.filename:
        path = os.path.expanduser(args.filename)
        if not args.overwrite and os.path.exists(path):
            print("Overwriting file.")
        out = open(path, "w", encoding="utf-8")
    try:
        for number, text in hist:
            if range_pattern and not fnmatch.fnmatch(text, range_pattern):
                continue
            text = text.expandtabs(4).rstrip()
            multiline = "\n" in text
            if print_nums:
                separator = "\n" if multiline else " "
                print("%s:%s" % (str(number).rjust(4), separator), file=out, end="")
            if args.pyprompts:
                print(">>> ", end="", file=out)
                if multiline:
                    text = "\n... ".join(text.splitlines()) + "\n..."
            print(text, file=out)
            output = history.reprs.get(number) if args.get_output else None
            if output:
                print(output, file=out)
    finally:
        if out is not sys.stdout:
            out.close()


def _ranges(text, count):
    """(start, stop) pairs of IPython's history ranges (`4`, `4-6`, `4:6`, `4-`) in this
    session; another session's (`~1/`) is refused: cellvisor keeps only this one."""
    import re

    if not text:
        yield 1, count
        return
    for part in text.split():
        match = re.match(r"^(?:(~?\d+)/)?(\d+)?(?:([-:])(?:(~?\d+)/)?(\d*))?$", part)
        if not match:
            continue
        if match.group(1) or match.group(4):
            raise _usage_error("%%history %s: only this session's history is kept" % part)
        if not match.group(2):
            continue
        start, sep, end = int(match.group(2)), match.group(3), match.group(5)
        if sep == "-":
            stop = int(end) + 1 if end else count
        else:
            stop = int(end) if end else start + 1
        yield start, min(stop, count)


def _profile(shell, opts, code):
    import cProfile
    import io
    import pstats

    options = {}
    for key, value in opts:
        options.setdefault(key, []).append(value)
    profile = cProfile.Profile()
    exit_note = ""
    try:
        profile.runctx(sys.modules["cellvisor_ipython"].transform_cell(code), shell.user_ns,
                       shell.user_ns)
    except SystemExit:
        exit_note = "*** SystemExit exception caught in code being profiled."
    stats = pstats.Stats(profile).strip_dirs().sort_stats(*options.get("-s", ["time"]))
    limits = []
    for limit in options.get("-l", []):
        for convert in (int, float):
            try:
                limit = convert(limit)
                break
            except ValueError:
                continue
        limits.append(limit)
    stream = io.StringIO()
    stats.stream = stream
    stats.print_stats(*limits)
    output = stream.getvalue().rstrip()
    if "-q" not in options:
        print(output)
    if exit_note:
        print(exit_note)
    if "-D" in options:
        stats.dump_stats(options["-D"][0])
        print("\n*** Profile stats marshalled to file %r. %s" % (options["-D"][0], exit_note))
    if "-T" in options:
        with open(options["-T"][0], "w", encoding="utf-8") as file:
            file.write(output)
        print("\n*** Profile printout saved to text file %r. %s" % (options["-T"][0], exit_note))
    return stats if "-r" in options else None


def _load_ext(shell, name):
    import importlib
    import importlib.util

    if not name:
        raise _usage_error("Missing module name.")
    if sys.modules["cellvisor_shell"].real_ipython_spec() is None:
        raise _usage_error("%%load_ext %s: IPython extensions need IPython, which %s does "
                           "not have (install it with `%%pip install ipython`)"
                           % (name, sys.executable))
    if shell._extensions is None:
        type(shell)._extensions = set()
    if name in shell._extensions:
        print("The %s extension is already loaded. To reload it, use:" % name)
        print("  %reload_ext", name)
        return
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError:
        if name not in ("autoreload", "storemagic"):
            raise
        module = importlib.import_module("IPython.extensions." + name)
    load = getattr(module, "load_ipython_extension", None)
    if load is None:
        print("The %s module is not an IPython extension." % name)
        return
    try:
        load(shell)
    except AttributeError as error:
        raise _usage_error("%%load_ext %s: the extension needs a part of IPython's shell that "
                           "cellvisor's get_ipython() does not have (%s)" % (name, error)) from None
    shell._extensions.add(name)


def traceback_text(error, text):
    """The traceback the runner prints for `error` in the current `%xmode`."""
    if Magics.xmode != "Minimal":
        return text
    import traceback

    return "".join(traceback.format_exception_only(type(error), error))


def _first_paragraph(method, name):
    doc = getattr(method, "__doc__", None) or ""
    if not doc.strip() and name in ALIASES:
        return "Alias for `%s`." % ALIASES[name].replace(" %l", "")
    return (doc.strip().split("\n\n")[0] or "No documentation.").replace("\n        ", "\n")


def _beside(name):
    return _notebook()._beside(name)
