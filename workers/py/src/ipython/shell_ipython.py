"""The InteractiveShell cellvisor runs cells in when the interpreter has IPython (see
`cellvisor_shell`). Importing this module imports IPython: a zygote does it once, before
it forks.

What cellvisor changes of IPython's shell, each for a reason:
- the display publisher sends every display as a cellvisor MIME bundle (IPython's prints
  `text/plain`), its `display_id` and `update=True` under the bundle's
  `application/x-cellvisor-display` (Jupyter clients get `update_display_data`), and `clear_output(wait)` tells the host to drop what the cell showed before
  it (Jupyter clients get `clear_output`, a JSON-RPC result keeps what came after);
- the display hook shows a trailing value as the built-in runner does: its text printed
  (held to go out with the cell's end), and a bundle when it has a richer form, as one
  bundle in its richest form;
- tracebacks are printed as Python prints them, on stderr, without IPython's colours and
  without the shell's own frames (`%xmode Minimal` still prints the exception line only);
- `SystemExit` and `KeyboardInterrupt` leave the cell to the runner (code mode's `exit()`,
  interrupts) instead of being printed;
- no history database, no output history kept beyond `Out` (a session that prints
  gigabytes keeps none of it), no pager (help is printed), `ls` without `--color`;
- the frontend magics and the debugger magics say why they do nothing here.
"""

import os
import re
import sys

import IPython
from IPython.core.autocall import IPyAutocall
from IPython.core.compilerop import CachingCompiler
from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.error import TryNext, UsageError
from IPython.core.formatters import (BaseFormatter, DisplayFormatter,
                                     IPythonDisplayFormatter, MimeBundleFormatter,
                                     PlainTextFormatter)
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.macro import Macro

# A trailing value's bundle repeats its text; past this size (as JSON) it is not sent twice.
TRAILING_BUNDLE_LIMIT = 1 << 20
# What IPython's input transforms act on: magics, shell escapes and help (`%`, `!`, `?`
# anywhere), autocall escapes and pasted prompts at a line's start. A cell with none of it
# (and no leading blank line or indent) comes out of them as it went in.
_SPECIAL_SYNTAX = re.compile(r"[%!?]|^[ \t]*(?:[,;/]|>>>|\.\.\.|In \[)", re.M)
# The first word of a one-line cell, as IPython's prefilter splits it (`LineInfo`).
_FIRST_WORD = re.compile(r"\s*([\w*.]+)")
_IPYTHON_DIR = IPython.__file__.rsplit("/", 1)[0]
# Values whose type no `_repr_*_` method can be added to: their display is their text alone
# unless a formatter has a printer registered for them (see `_plain_format`).
_SCALARS = frozenset((int, float, complex, bool, str, bytes))


def _prelude():
    return sys.modules["cellvisor_prelude"]


class CellPublisher(DisplayPublisher):
    """Sends displays as cellvisor bundles of the running cell."""

    def publish(self, data, metadata=None, source=None, *, transient=None, update=False,
                **kwargs):
        if not isinstance(data, dict):
            raise TypeError("publish: data must be a dict of MIME type to data")
        self._is_publishing = True
        display_id = (transient or {}).get("display_id")
        try:
            _prelude().send_bundle(dict(data), display_id=display_id, update=update)
        finally:
            self._is_publishing = False

    def clear_output(self, wait=False):
        """Clears the cell's output so far (with `wait`: when the next output arrives), as
        IPython's `clear_output` asks of a kernel."""
        _prelude().clear_output(wait)


class CellDisplayHook(DisplayHook):
    """Shows a cell's trailing value as cellvisor does (see the module's docstring)."""

    _value = None

    def write_output_prompt(self):
        """No `Out[N]:` prompt: hosts number cells themselves."""

    def compute_format_data(self, result):
        self._value = result
        plain = _plain_format(self.shell.display_formatter, result)
        if plain is not None:
            return plain
        return super().compute_format_data(result)

    def write_format_data(self, format_dict, md_dict=None):
        value, self._value = self._value, None
        prelude = _prelude()
        text = format_dict.get("text/plain")
        if type(text) is str and len(format_dict) == 1 and not isinstance(value, (dict, list)):
            # Its text alone (most values): the bundle below would be that text, one MIME
            # type, no JSON form, nothing rich to publish.
            prelude.send_value({"text/plain": text})
            self.shell.cellvisor_host.show_trailing_text(text + "\n")
            return
        bundle = {}
        for mime, data in format_dict.items():
            if isinstance(data, (bytes, bytearray, memoryview)):
                data = prelude._base64(data)  # a PNG formatter's bytes (SymPy's, say)
            if prelude._json_or_none(data) is not None:
                bundle[str(mime)] = data
        if isinstance(value, (dict, list)):
            as_json = prelude._json_or_none(value)
            if as_json is not None:
                bundle["application/json"] = as_json
        rich = any(mime not in ("text/plain", "application/json") for mime in bundle)
        if text is not None:
            import json

            small = len(json.dumps(bundle)) <= TRAILING_BUNDLE_LIMIT
            prelude.send_value(bundle if small else {"text/plain": text})
        sent = False
        if len(bundle) > 1 and not prelude._is_pyplot_figure(value):
            import json

            if len(json.dumps(bundle)) <= TRAILING_BUNDLE_LIMIT:
                self.shell.display_pub.publish(bundle)  # `%%capture` catches it too
                sent = True
        if text is not None and not (rich and sent):
            self.shell.cellvisor_host.show_trailing_text(text + "\n")

    def log_output(self, format_dict):
        """Only the text, for `%history -o`: no bundle kept for the session's life."""
        text = format_dict.get("text/plain")
        if text is not None:
            self.shell.history_manager.output_hist_reprs[self.prompt_count] = text

    def update_user_ns(self, result):
        if result is self.shell.user_ns.get("_oh"):
            return  # as IPython: `Out` is not stored in itself
        super().update_user_ns(result)


class CellCompiler(CachingCompiler):
    """Names each cell's code `<cell N>` (N the runner's cell id), as the built-in runner
    does, and keeps a bounded number of cell sources in linecache."""

    # The last tree parsed from a source without `try` or `__exit__`: the exit() guards
    # have nothing to place in it (see `CellShell.transform_ast`).
    unguarded = None

    def ast_parse(self, source, *args, **kwargs):
        tree = super().ast_parse(source, *args, **kwargs)
        plain = isinstance(source, str) and "try" not in source and "exit__" not in source
        self.unguarded = tree if plain else None
        return tree

    def cache(self, transformed_code, number=0, raw_code=None):
        host = sys.modules["cellvisor_shell"]._host
        name = "<cell %d>" % host.cell_id()
        host.keep_source(name, transformed_code)
        return name


class _ExitGuards:
    """An AST transformer that guards the cell's handlers for code mode's `exit()`."""

    def visit(self, node):
        sys.modules["cellvisor_shell"]._host.import_beside("cellvisor_exit").guard_handlers(node)
        return node


class CellShell(InteractiveShell):
    """IPython's InteractiveShell with cellvisor's display, errors and exits."""

    displayhook_class = CellDisplayHook
    display_pub_class = CellPublisher
    compiler_class = CellCompiler
    cellvisor_host = None
    # Set by run_code: the SystemExit or KeyboardInterrupt that ended the cell.
    cellvisor_stop = None
    # Set by `make`: IPython's own input transforms and prefilter checkers (see
    # `_plain_python`), and the exit() guards among the AST transformers.
    cellvisor_transforms = None
    cellvisor_checkers = None
    cellvisor_guards = None

    def should_run_async(self, raw_cell, *, transformed_cell=None,
                         preprocessing_exc_tuple=None):
        """Without `await` or `async` in the cell it cannot be a coroutine: no compiling it
        to ask (what IPython does for every cell)."""
        if (transformed_cell is not None and preprocessing_exc_tuple is None
                and "await" not in transformed_cell and "async" not in transformed_cell):
            return False
        return super().should_run_async(raw_cell, transformed_cell=transformed_cell,
                                        preprocessing_exc_tuple=preprocessing_exc_tuple)

    def transform_ast(self, node):
        """IPython's AST transforms, skipped when the exit() guards are the only one and
        the tree was parsed from a source they leave as it is (no `try`, no `__exit__`):
        their walk and IPython's location fix-up after it cost a trivial cell more than
        running it."""
        if (node is not None and node is getattr(self.compile, "unguarded", None)
                and len(self.ast_transformers) == 1
                and self.ast_transformers[0] is self.cellvisor_guards):
            return node
        return super().transform_ast(node)

    def transform_cell(self, raw_cell):
        """IPython's input transforms, skipped for a cell they would leave as it is (most
        cells): tokenizing the cell and a one-line cell's prefilter cost a trivial cell more
        CPU than running it."""
        if self._plain_python(raw_cell):
            return raw_cell if raw_cell.endswith("\n") else raw_cell + "\n"
        return super().transform_cell(raw_cell)

    def _plain_python(self, cell):
        """Whether IPython's transforms would return `cell` unchanged: none of their syntax,
        no transform or prefilter checker added (by an extension) since the shell was made,
        and, for one line, nothing its prefilter would run instead (an automagic name, an
        autocall object or a macro; autocall off)."""
        if not cell or cell[0].isspace() or _SPECIAL_SYNTAX.search(cell):
            return False
        if self.input_transformers_post or _transforms_of(self) != self.cellvisor_transforms:
            return False
        if "\n" in cell.rstrip("\n"):
            return True  # the prefilter acts on one-line cells only
        if self.autocall or self.prefilter_manager.transformers:
            return False
        if len(self.prefilter_manager.checkers) != self.cellvisor_checkers:
            return False
        word = _FIRST_WORD.match(cell)
        if word is None:
            return True
        name = word.group(1)
        if self.automagic and self.find_magic(name):
            return False
        return not (isinstance(self.user_ns.get(name), IPyAutocall)
                    or isinstance(self.user_ns.get(name.split(".", 1)[0]), Macro))

    def _tee(self, channel):
        import contextlib

        return contextlib.nullcontext()  # no output history kept (see the module)

    def init_virtualenv(self):
        """The worker already runs the session's interpreter."""

    def system(self, cmd):
        """`!cmd`: runs under bash (/bin/sh where there is none) with its output straight
        into the cell's (IPython's pseudo-terminal would end lines with CR LF); `_exit_code`
        holds its status."""
        import subprocess

        cmd = self.var_expand(cmd, depth=1)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        shell = _beside_ipython_module()._command_shell()
        code = subprocess.call(cmd, shell=True, executable=shell, stdin=subprocess.DEVNULL)
        self.user_ns["_exit_code"] = -(code - 128) if code > 128 else code
        if getattr(self, "system_raise_on_error", False) and code != 0:
            raise subprocess.CalledProcessError(code, cmd)

    system_piped = system

    def set_next_input(self, s, replace=False):
        """`%load`: a notebook would put the code in the next cell; here it is printed, so
        the host sees what to run."""
        print(s)

    async def run_code(self, code_obj, result=None, *, async_=False):
        __tracebackhide__ = "__ipython_bottom__"  # noqa: F841 - IPython's marker
        old_excepthook, sys.excepthook = sys.excepthook, self.excepthook
        try:
            try:
                if async_:
                    await eval(code_obj, self.user_global_ns, self.user_ns)
                else:
                    exec(code_obj, self.user_global_ns, self.user_ns)
            finally:
                sys.excepthook = old_excepthook
        except (SystemExit, KeyboardInterrupt) as stop:
            self.cellvisor_stop = stop
            if result is not None:
                result.error_in_exec = stop
            return True
        except self.custom_exceptions:
            etype, value, tb = sys.exc_info()
            if result is not None:
                result.error_in_exec = value
            self.CustomTB(etype, value, tb)
            return True
        except BaseException:
            if result is not None:
                result.error_in_exec = sys.exc_info()[1]
            self.showtraceback(running_compiled_code=True)
            return True
        return False

    runcode = run_code

    def showtraceback(self, exc_tuple=None, filename=None, tb_offset=None,
                      exception_only=False, running_compiled_code=False):
        try:
            etype, value, tb = self._get_exc_info(exc_tuple)
        except ValueError:
            print("No traceback available to show.", file=sys.stderr)
            return
        if issubclass(etype, KeyboardInterrupt):
            self.cellvisor_stop = value
            return
        if etype is UsageError:
            self.show_usage_error(value)
            return
        if filename and issubclass(etype, SyntaxError):
            try:
                value.filename = filename
            except AttributeError:
                pass
        value.__traceback__ = tb
        mode = getattr(self.InteractiveTB, "mode", "")
        self.cellvisor_host.report_error(value, minimal=mode == "Minimal")

    def showsyntaxerror(self, filename=None, running_compiled_code=False):
        self.showtraceback(filename=filename)

    def showindentationerror(self):
        self.showtraceback()

    def enable_gui(self, gui=None):
        """No GUI event loop runs here: figures arrive as PNG displays."""

    def enable_matplotlib(self, gui=None):
        """`%pylab` (and anything asking for matplotlib): figures render off-screen and
        arrive as PNG displays, at `plt.show()` and at the cell's end, whatever the backend
        asked for."""
        import matplotlib.pyplot  # noqa: F401 - the backend is Agg (MPLBACKEND)

        if gui not in (None, "inline", "agg", "auto"):
            _beside_ipython_module().shell(_prelude().send_bundle) \
                ._line_matplotlib(str(gui))
        return gui, "agg"


def _plain_format(display, value):
    """The format data IPython's `display_formatter.format` gives `value`, computed with
    the text formatter alone when every other formatter would give nothing: a stock
    formatter gives nothing for a value of a built-in scalar type (which no `_repr_*_`
    method can be added to) unless a printer is registered for it. None: ask IPython."""
    kind = type(value)
    if kind not in _SCALARS or type(display).format is not DisplayFormatter.format:
        return None
    checks = ((display.ipython_display_formatter, IPythonDisplayFormatter.__call__),
              (display.mimebundle_formatter, MimeBundleFormatter.__call__))
    text_formatter = None
    for mime, formatter in display.formatters.items():
        if mime == "text/plain" and isinstance(formatter, PlainTextFormatter):
            text_formatter = formatter
        else:
            checks += ((formatter, BaseFormatter.__call__),)
    if text_formatter is None:
        return None
    mro, keys = _type_keys(kind)
    for formatter, stock in checks:
        # The traits' own values: the descriptors cost more than the look-ups.
        traits = getattr(formatter, "_trait_values", None)
        if type(formatter).__call__ is not stock or not isinstance(traits, dict):
            return None
        try:
            if (_has_method(kind, traits["print_method"])
                    or id(value) in traits["singleton_printers"]
                    or not traits["type_printers"].keys().isdisjoint(mro)
                    or not traits["deferred_printers"].keys().isdisjoint(keys)):
                return None  # a method or a printer for the value
        except (KeyError, TypeError, AttributeError):
            return None  # a trait not made yet, or not a dict: IPython knows
    data, metadata = text_formatter(value), None
    if isinstance(data, tuple) and len(data) == 2:
        data, metadata = data
    format_dict = {} if data is None else {"text/plain": data}
    return format_dict, ({} if metadata is None else {"text/plain": metadata})


_KNOWN_TYPES = {}


def _type_keys(kind):
    """A scalar type's classes and their (module, name) keys, as formatters look them up."""
    known = _KNOWN_TYPES.get(kind)
    if known is None:
        mro = kind.__mro__
        known = _KNOWN_TYPES[kind] = (mro, [(c.__module__, c.__name__) for c in mro])
    return known


_METHODS = {}


def _has_method(kind, name):
    """Whether built-in `kind` has attribute `name` (fixed for a built-in type)."""
    found = _METHODS.get((kind, name))
    if found is None:
        found = _METHODS[(kind, name)] = hasattr(kind, name)
    return found


def _transforms_of(shell):
    """The input transforms in force (see `CellShell._plain_python`)."""
    manager = shell.input_transformer_manager
    return (tuple(manager.cleanup_transforms), tuple(manager.line_transforms),
            tuple(manager.token_transformers))


def _beside_ipython_module():
    return sys.modules["cellvisor_shell"]._beside("cellvisor_ipython")


def _show_in_pager(self, data, start=0, screen_lines=0, pager_cmd=None):
    """Help goes into the cell's output (there is no terminal to page in)."""
    if isinstance(data, dict):
        data = data.get("text/plain", "")
    print(data)


def _no_debugger(name):
    def magic(line="", cell=None):
        print(sys.modules["cellvisor_shell"]._beside("cellvisor_magics").NO_DEBUGGER % name)
        code = cell if cell is not None else line
        if name != "%pdb" and code and code.strip():  # `%debug STATEMENT` runs it
            shell = sys.modules["cellvisor_shell"]._shell
            exec(compile(code, "<debug>", "exec"), shell.user_global_ns, shell.user_ns)

    magic.__doc__ = "Interactive debugging is not supported here (cells have no terminal)."
    return magic


def _register_cellvisor_magics(shell):
    """The magics whose IPython form needs what a worker has not (a terminal, a GUI, a
    frontend, a debugger's stdin): each says so instead, or does what it can."""
    frontend = sys.modules["cellvisor_shell"]._beside("cellvisor_magics").frontend_magic
    for name in ("qtconsole", "connect_info", "gui", "autosave"):
        shell.register_magic_function(frontend(name), "line", name)
    for name, kind in (("pdb", "line"), ("debug", "line"), ("debug", "cell")):
        shell.register_magic_function(_no_debugger("%" * (1 if kind == "line" else 2) + name),
                                      kind, name)
    emulation = _beside_ipython_module().shell(_prelude().send_bundle)
    shell.register_magic_function(emulation._line_matplotlib, "line", "matplotlib")
    for name, command in sys.modules["cellvisor_shell"].ALIASES:
        shell.alias_manager.define_alias(name, command)


def _keep_cell_files(oinspect):
    """`obj?` names a cell's function's file `<cell N>`, as the built-in help does, not a
    made-up path under the working directory."""
    original = oinspect.find_file

    def find_file(obj):
        code = getattr(getattr(obj, "__wrapped__", obj), "__code__", None)
        name = getattr(code, "co_filename", "")
        if name.startswith("<cell "):
            return name
        return original(obj)

    oinspect.find_file = find_file


def make(module, host):
    """The shell over `module` (the cells' `__main__`), made once."""
    from IPython.core import oinspect
    from traitlets.config import Config

    _keep_cell_files(oinspect)

    config = Config()
    config.HistoryManager.enabled = False  # no database, no saving thread
    config.InteractiveShell.xmode = "Context"
    import warnings

    with warnings.catch_warnings():
        # An unwritable ~/.ipython (a sandboxed session's) makes IPython warn and use a
        # temporary directory, which is all it can do: not the first cell's business.
        warnings.simplefilter("ignore")
        shell = CellShell.instance(config=config, user_module=module)
    shell.cellvisor_host = host
    shell.cellvisor_made_in = os.getpid()  # a zygote's, in the sessions forked from it
    for colors in ("nocolor", "NoColor"):
        try:
            shell.colors = colors
            break
        except Exception:
            continue
    shell.set_hook("show_in_pager", _show_in_pager)
    shell.cellvisor_guards = _ExitGuards()
    shell.ast_transformers.append(shell.cellvisor_guards)
    # IPython's own transforms and checkers: a plain cell skips them while they are all.
    shell.cellvisor_transforms = _transforms_of(shell)
    shell.cellvisor_checkers = len(shell.prefilter_manager.checkers)
    _register_cellvisor_magics(shell)
    # IPython puts its own `display` in builtins: cellvisor's (JSON for dicts and lists, as
    # the anchors' display does, IPython's for the rest) stays.
    prelude = _prelude()
    import builtins

    builtins.display = prelude.display
    # Code mode's exit() (IPython's `exit` and `quit` would only ask a terminal to close).
    shell.user_ns["exit"] = shell.user_ns["quit"] = prelude.exit
    shell.user_ns_hidden["exit"] = shell.user_ns_hidden["quit"] = prelude.exit
    return shell


def run(source, store_history=True):
    """Runs one cell in the shell; returns the ExecutionResult."""
    shell = sys.modules["cellvisor_shell"]._shell
    shell.cellvisor_stop = None
    return shell.run_cell(source, store_history=store_history)


def own_frame(filename):
    """Whether a traceback frame of this file is the shell's own machinery."""
    return filename.startswith(_IPYTHON_DIR + "/core/") or filename == __file__


__all__ = ["make", "run", "own_frame", "TryNext"]
