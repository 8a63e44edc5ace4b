"""cellvisor's IPython compatibility: `!cmd` lines, `%magic` lines, `%%magic` cells and
`get_ipython()`, without IPython itself.

Loaded only when a cell needs it (a line starting with `!` or `%`, or a call of
`get_ipython()`), so it costs nothing at a worker's start. The runner hands each such cell to
`transform_cell`, which rewrites the IPython syntax into calls on the shell object, as
IPython's own input transformers do: `!ls` -> `get_ipython().system('ls')`, `x = !ls` ->
`x = get_ipython().getoutput('ls')`, `%cd /tmp` -> `get_ipython().run_line_magic('cd',
'/tmp')`, a first line `%%bash` -> `get_ipython().run_cell_magic('bash', '', body)`.
Commands and magic arguments expand `$name` and `{expression}` like IPython's `var_expand`.
"""

import builtins
import math
import os
import re
import string
import subprocess
import sys
import time

from cellvisor_magics import Magics  # imported from beside this module, as it was

# `x = !cmd` / `x = %magic`: an assignment target, then `!`, `!!` or `%`.
_SPECIAL_LINE = re.compile(r"^([ \t]*)(?:([\w.\[\], \t*]+?)[ \t]*=[ \t]*)?(!!|!|%)(.*)$")
_CELL_MAGIC = re.compile(r"^[ \t]*%%(\w+)[ \t]*(.*)$")
_MAGIC_NAME = re.compile(r"^(\w+)[ \t]*(.*)$", re.S)
# `obj?`, `obj.attr??`, `np.*cos*?`, `%magic?`, `x[0]?` at a line's end (IPython's HelpEnd);
# `?obj` and `??obj` at its start.
_HELP_END = re.compile(r"(%{0,2}(?!\d)[\w*]+(?:\.(?!\d)[\w*]+|\[-?[0-9]+\])*)(\?\??)$")
_HELP_START = re.compile(r"^([ \t]*)(\?\??)(.*)$")


class UsageError(Exception):
    """A magic was misused (IPython's `UsageError`)."""


UsageError.__module__ = "builtins"


# --- input transformation --------------------------------------------------------------


def needs_transform(source):
    """Whether `source` has a line that starts with `!` or `%` (maybe after `x =`)."""
    for line in source.splitlines():
        stripped = line.strip()
        if stripped[:1] in ("!", "%", "?") or _help_end(line):
            return True
        if "=" in stripped and _SPECIAL_LINE.match(line) and _SPECIAL_LINE.match(line).group(2):
            return True
    return False


def transform_cell(source):
    """`source` with IPython's special syntax rewritten into plain Python."""
    lines = source.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None:
        magic = _CELL_MAGIC.match(lines[first])
        if magic:
            body = "\n".join(lines[first + 1:])
            return "get_ipython().run_cell_magic(%r, %r, %r)" % (magic.group(1), magic.group(2), body)
    out = []
    scanner = _Scanner()
    for line in lines:
        if scanner.at_statement_start():
            line = _transform_line(line)
        scanner.feed(line)
        out.append(line)
    return "\n".join(out)


def _help_end(line):
    """The match of `obj?` ending the line's code (not its comment), or None. As IPython
    decides by Python's tokens, a `?` inside a string is not help: a docstring whose first
    line ends in `?` (`\"\"\"Which ball is odd?`) stays a docstring."""
    quote = None
    index = 0
    while index < len(line):
        char = line[index]
        if quote:
            if char == "\\":
                index += 1
            elif line.startswith(quote, index):
                index += len(quote) - 1
                quote = None
        elif char in "\"'":
            quote = char * 3 if line.startswith(char * 3, index) else char
            index += len(quote) - 1
        elif char == "#":
            line = line[:index]
            break
        index += 1
    if quote:
        return None  # the line ends inside a string
    line = line.strip()
    return _HELP_END.search(line) if line.endswith("?") else None


def _transform_line(line):
    help_end = _help_end(line)
    help_start = _HELP_START.match(line) if line.lstrip().startswith("?") else None
    if help_end or help_start:
        indent = line[:len(line) - len(line.lstrip())]
        target, mark = (help_end.group(1), help_end.group(2)) if help_end else \
            (help_start.group(3).strip(), help_start.group(2))
        if not target:
            return indent + "get_ipython().show_usage()"
        magic = "pinfo2" if mark == "??" else "psearch" if "*" in target else "pinfo"
        return indent + "get_ipython().run_line_magic(%r, %r)" % (magic, target)
    match = _SPECIAL_LINE.match(line)
    if not match:
        return line
    indent, target, mark, rest = match.groups()
    if mark == "%" and rest.startswith("%"):
        return line  # a `%%` line not at the top: left for Python to reject
    if mark == "%":
        name = _MAGIC_NAME.match(rest)
        if not name:
            return line
        call = "get_ipython().run_line_magic(%r, %r)" % (name.group(1), name.group(2))
    elif mark == "!!" or target:
        call = "get_ipython().getoutput(%r)" % rest
    else:
        call = "get_ipython().system(%r)" % rest
    return indent + (target + " = " if target else "") + call


class _Scanner:
    """Just enough of Python's lexer to know whether a line starts a statement: not inside
    brackets, a string that spans lines, or after a backslash continuation."""

    def __init__(self):
        self.depth = 0
        self.quote = None  # the open triple quote
        self.continued = False

    def at_statement_start(self):
        return self.depth == 0 and self.quote is None and not self.continued

    def feed(self, line):
        i, n = 0, len(line)
        while i < n:
            if self.quote:
                end = line.find(self.quote, i)
                if end < 0:
                    break
                self.quote, i = None, end + 3
                continue
            c = line[i]
            if c == "#":
                break
            if c in "\"'":
                if line.startswith(c * 3, i):
                    self.quote, i = c * 3, i + 3
                    continue
                i += 1
                while i < n and line[i] != c:
                    i += 2 if line[i] == "\\" else 1
            elif c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(self.depth - 1, 0)
            i += 1
        self.continued = self.quote is None and line.endswith("\\")


# --- the shell -------------------------------------------------------------------------


class _DollarFormatter(string.Formatter):
    """IPython's `DollarFormatter`: `{expression}` is evaluated, `$name` (or `$a.b`) is looked
    up, `$$` is a literal `$`."""

    _dollar = re.compile(r"(.*?)\$(\$?[\w\.]+)(?=([^']*'[^']*')*[^']*$)")

    def vformat(self, format_string, args, kwargs):
        result = []
        for literal, field, spec, conversion in self.parse(format_string):
            result.append(literal)
            if field is not None:
                if spec:
                    field = ":".join([field, spec])
                value = eval(field, kwargs)
                result.append(self.format_field(self.convert_field(value, conversion), ""))
        return "".join(result)

    def parse(self, format_string):
        for literal, field, spec, conversion in string.Formatter.parse(self, format_string):
            continue_from, text = 0, ""
            for match in self._dollar.finditer(literal):
                new_text, new_field = match.group(1, 2)
                if new_field.startswith("$"):
                    text += new_text + new_field
                else:
                    yield text + new_text, new_field, "", None
                    text = ""
                continue_from = match.end()
            yield text + literal[continue_from:], field, spec, conversion


class SList(list):
    """What `x = !cmd` gives: the output's lines, with IPython's `.s`, `.n` and `.l`."""

    @property
    def s(self):
        return " ".join(self)

    spstr = s

    @property
    def n(self):
        return "\n".join(self)

    nlstr = n

    @property
    def l(self):  # noqa: E743 - IPython's name
        return list(self)


class DisplayPublisher:
    """`get_ipython().display_pub`: `publish(data)` sends a MIME bundle as a display."""

    def __init__(self, send_bundle):
        self._send_bundle = send_bundle

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **_):
        if not isinstance(data, dict):
            raise TypeError("publish: data must be a dict of MIME type to data")
        display_id = (transient or {}).get("display_id")
        self._send_bundle(dict(data), display_id=display_id, update=update)

    def clear_output(self, wait=False):
        """Clears the cell's output so far (with `wait`: when the next output arrives)."""
        sys.modules["cellvisor_prelude"].clear_output(wait)


class Shell(Magics):
    """What `get_ipython()` returns: the parts of IPython's InteractiveShell agents use."""

    def __init__(self, send_bundle):
        self.display_pub = DisplayPublisher(send_bundle)
        self._hidden = None
        self._oldpwd = None
        self._matplotlib_noticed = False

    @property
    def user_ns(self):
        return sys.modules["__main__"].__dict__

    @property
    def user_global_ns(self):
        """The cells' globals (what `%lprun` and `%mprun` run their statement in): the same
        namespace as `user_ns`, as in IPython."""
        return sys.modules["__main__"].__dict__

    @property
    def execution_count(self):
        """The number of the running cell, as `In[N]` and `Out[N]` count."""
        return sys.modules["cellvisor_notebook"].history.count

    # Shell commands.
    def var_expand(self, cmd, depth=0):
        namespace = dict(self.user_ns)
        try:
            frame = sys._getframe(depth + 1)
        except ValueError:
            pass
        else:
            namespace.update(frame.f_locals)
        try:
            return _DollarFormatter().vformat(cmd, args=[], kwargs=namespace)
        except Exception:
            return cmd  # like IPython: what cannot be expanded runs as written

    def system(self, cmd):
        """Runs `cmd` in a shell, its output into the cell's; `_exit_code` holds its status."""
        cmd = self.var_expand(cmd, depth=1)
        _flush()
        code = subprocess.call(cmd, shell=True, stdin=subprocess.DEVNULL,
                               executable=_command_shell())
        self.user_ns["_exit_code"] = code

    system_piped = system_raw = system

    def getoutput(self, cmd, split=True, depth=0):
        """The output of `cmd` (stdout and stderr) as an SList of lines."""
        cmd = self.var_expand(cmd, depth=depth + 1)
        done = subprocess.run(cmd, shell=True, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              executable=_command_shell())
        self.user_ns["_exit_code"] = done.returncode
        text = done.stdout.decode("utf-8", "replace")
        return SList(text.splitlines()) if split else text

    # Code.
    def ev(self, expr):
        return eval(expr, self.user_ns)

    def ex(self, cmd):
        exec(cmd, self.user_ns)

    def push(self, variables):
        self.user_ns.update(variables)

    # Magics.
    def run_line_magic(self, magic_name, line, _stack_depth=1):
        method = self._magic_method("line", magic_name)
        if method is None:
            raise UsageError("Line magic function `%%%s` not found." % magic_name)
        if magic_name not in ("time", "timeit"):
            line = self.var_expand(line, depth=_stack_depth)
        return method(line)

    def run_cell_magic(self, magic_name, line, cell):
        method = self._magic_method("cell", magic_name)
        if method is None:
            raise UsageError("Cell magic `%%%%%s` not found." % magic_name)
        if magic_name not in ("time", "timeit"):
            line = self.var_expand(line, depth=1)
        return method(line, cell)

    def magic(self, line):
        name, _, rest = line.lstrip("%").partition(" ")
        return self.run_line_magic(name, rest, _stack_depth=2)

    def _line_pip(self, line):
        """Runs pip in this Python (`%pip install pandas`)."""
        _flush()
        subprocess.call([sys.executable, "-m", "pip"] + _split(line), stdin=subprocess.DEVNULL)
        shim = sys.modules.get("cellvisor_ipython_shim")
        if shim is not None:
            shim.forget_if_shadowed()  # `%pip install ipython`: the next import is the real one
        print("Note: you may need to restart the kernel to use updated packages.")

    def _line_matplotlib(self, line):
        """`%matplotlib [backend]`: cellvisor's figures always arrive as image/png displays (at
        `plt.show()` and at cell end), which is IPython's `inline`; any other backend is
        accepted with a notice, printed once. matplotlib is not imported here."""
        args = [arg for arg in _split(line) if not arg.startswith("-")]
        if "-l" in line.split() or "--list" in line.split():
            print("Available matplotlib backends: ['inline']\n"
                  "(cellvisor sends figures as image/png displays; other backends are not supported)")
            return
        backend = args[0] if args else "inline"
        if backend.lower() not in ("inline", "agg") and not self._matplotlib_noticed:
            self._matplotlib_noticed = True
            # On stdout, as IPython's magics print their messages: in order with the cell's
            # prints (stdout and stderr travel apart).
            print("cellvisor: %%matplotlib %s: interactive backends are not available here; "
                  "figures arrive as PNG displays, as with %%matplotlib inline" % backend)

    def _line_cd(self, line):
        """Changes the working directory (`%cd -` goes back, `-q` is quiet), printing it."""
        args = _split(line)
        quiet = "-q" in args
        args = [arg for arg in args if arg != "-q"]
        target = args[0] if args else os.path.expanduser("~")
        if target == "-":
            target = self._oldpwd or os.getcwd()
        previous = os.getcwd()
        try:
            os.chdir(os.path.expanduser(target))
        except OSError as error:
            print(error)
            return
        self._oldpwd = previous
        dirs = sys.modules["cellvisor_notebook"].history.dirs  # `_dh`
        if dirs is not None:
            dirs.append(os.getcwd())
        if not quiet:
            print(os.getcwd())

    def _line_env(self, line):
        """Lists the environment, or gets (`%env KEY`) or sets (`%env KEY=value`) a variable."""
        line = line.strip()
        if not line:
            hidden = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASS")
            return {key: "<hidden>" if any(word in key.upper() for word in hidden) else value
                    for key, value in os.environ.items()}
        if "=" in line.split()[0] or " " in line:
            if "=" in line.split()[0]:
                key, value = line.split("=", 1)
            else:
                key, value = line.split(None, 1)
            key, value = key.strip(), value.strip()
            os.environ[key] = value
            print("env: %s=%s" % (key, value))
            return None
        try:
            return os.environ[line]
        except KeyError:
            raise UsageError("Environment does not have key: %s" % line) from None

    def _line_time(self, line):
        """Times one statement or expression: CPU and wall time."""
        return self._timed(line)

    def _cell_time(self, line, cell):
        """Times the cell: CPU and wall time."""
        return self._timed(cell)

    def _timed(self, code):
        import resource

        code_object, is_expression = _compile(code, "<timed exec>")
        wall, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        try:
            if is_expression:
                return eval(code_object, self.user_ns)
            exec(code_object, self.user_ns)
            return None
        finally:
            wall = time.perf_counter() - wall
            end = resource.getrusage(resource.RUSAGE_SELF)
            user, system = end.ru_utime - cpu.ru_utime, end.ru_stime - cpu.ru_stime
            print("CPU times: user %s, sys: %s, total: %s" % (
                _format_time(user), _format_time(system), _format_time(user + system)))
            print("Wall time: %s" % _format_time(wall))

    def _line_timeit(self, line):
        """Times a statement over many loops (`-n LOOPS`, `-r RUNS`): mean and deviation."""
        return self._timeit(line, "")

    def _cell_timeit(self, line, cell):
        """Times the cell over many loops, the first line being the setup."""
        return self._timeit(line, cell)

    def _timeit(self, line, cell):
        import timeit

        args = line.split()
        number = repeat = None
        while len(args) >= 2 and args[0] in ("-n", "-r"):
            try:
                value = int(args[1])
            except ValueError:
                raise UsageError("timeit: %s needs a number, got %r" % (args[0], args[1])) from None
            if args[0] == "-n":
                number = value
            else:
                repeat = value
            args = args[2:]
        statement = " ".join(args)
        setup = ""
        if cell:
            setup, statement = statement or "pass", cell
        timer = timeit.Timer(statement or "pass", setup or "pass", globals=self.user_ns)
        if number is None:
            for power in range(10):
                number = 10 ** power
                if timer.timeit(number) >= 0.2:
                    break
        runs = [total / number for total in timer.repeat(repeat or 7, number)]
        mean = sum(runs) / len(runs)
        std = math.sqrt(sum((run - mean) ** 2 for run in runs) / len(runs))
        print("%s ± %s per loop (mean ± std. dev. of %d run%s, %s loop%s each)" % (
            _format_time(mean), _format_time(std), len(runs), "" if len(runs) == 1 else "s",
            "{:,}".format(number), "" if number == 1 else "s"))

    def _line_who(self, line):
        """Lists the names the cells defined (optionally of the types given)."""
        wanted = set(line.split())
        hidden = self._hidden_names()
        names = sorted(
            name for name, value in self.user_ns.items()
            if not name.startswith("_") and name not in hidden
            and (not wanted or type(value).__name__ in wanted)
        )
        if not names:
            print("Interactive namespace is empty.")
            return
        print("\t".join(names))

    def _hidden_names(self):
        if self._hidden is None:
            self._hidden = {"In", "Out", "exit", "quit", "get_ipython"}
        return self._hidden

    def _line_run(self, line):
        """Runs a Python file (`-i`: in the cells' namespace), its names then in it."""
        args = _split(line)
        in_user_ns = "-i" in args[:1]
        if in_user_ns:
            args = args[1:]
        if not args:
            raise UsageError("%run: give the file to run")
        path = os.path.expanduser(args[0])
        if not os.path.isfile(path):
            raise UsageError("File `%r` not found." % args[0])
        with open(path, "rb") as file:
            code = compile(file.read(), path, "exec", dont_inherit=True)
        namespace = self.user_ns if in_user_ns else {
            "__name__": "__main__", "__file__": path, "__builtins__": builtins}
        saved_argv = sys.argv
        sys.argv = [path] + args[1:]
        try:
            exec(code, namespace)
        finally:
            sys.argv = saved_argv
        if not in_user_ns:
            namespace.pop("__builtins__", None)
            namespace.pop("__name__", None)
            namespace.pop("__file__", None)
            self.user_ns.update(namespace)

    def _cell_bash(self, line, cell):
        """Runs the cell with bash."""
        return self._script(["bash"] + _split(line), cell)

    def _cell_sh(self, line, cell):
        """Runs the cell with sh."""
        return self._script(["sh"] + _split(line), cell)

    def _script(self, command, cell):
        _flush()
        done = subprocess.run(command, input=cell.encode("utf-8"))
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, cell)

    def _cell_writefile(self, line, cell):
        """Writes the cell to a file (`-a` appends)."""
        args = _split(line)
        append = bool(args) and args[0] in ("-a", "--append")
        if append:
            args = args[1:]
        if len(args) != 1:
            raise UsageError("%%writefile: give one file name (and -a to append)")
        filename = os.path.expanduser(args[0])
        exists = os.path.exists(filename)
        if append:
            print("Appending to %s" % filename)
        else:
            print(("Overwriting %s" if exists else "Writing %s") % filename)
        with open(filename, "a" if append else "w", encoding="utf-8") as file:
            file.write(cell)


def _command_shell():
    """What `!cmd` runs under: bash, as IPython's `system` does on Linux, or /bin/sh where
    there is no bash."""
    import shutil

    return shutil.which("bash") or "/bin/sh"


def _split(line):
    import shlex

    try:
        return shlex.split(line)
    except ValueError as error:
        raise UsageError("cannot split the arguments %r: %s" % (line, error)) from None


def _compile(code, filename):
    """Code for `eval` when `code` is one expression, otherwise for `exec`."""
    try:
        return compile(code, filename, "eval", dont_inherit=True), True
    except SyntaxError:
        return compile(code, filename, "exec", dont_inherit=True), False


def _format_time(timespan, precision=3):
    """A duration as IPython's %time and %timeit write it."""
    if timespan >= 60.0:
        parts, leftover = [], timespan
        for suffix, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
            value = int(leftover / length)
            if value > 0:
                leftover = leftover % length
                parts.append("%s%s" % (value, suffix))
            if leftover < 1:
                break
        return " ".join(parts)
    units = ["s", "ms", "\xb5s", "ns"]
    scaling = [1, 1e3, 1e6, 1e9]
    order = min(-int(math.floor(math.log10(timespan)) // 3), 3) if timespan > 0.0 else 3
    return "%.*g %s" % (precision, timespan * scaling[order], units[order])


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


_shell = None


def shell(send_bundle):
    """The one shell of this process."""
    global _shell
    if _shell is None:
        _shell = Shell(send_bundle)
    return _shell
