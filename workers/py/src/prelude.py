"""cellvisor's Python prelude: the helpers cells find in builtins, rich display, matplotlib
capture and host tools.

It lives in its own module (not in runner.py) so that Python caches its bytecode in
`__pycache__` beside it: the runner script itself is compiled on every start, a module is
not. The runner imports it once at start and calls `install(host)`; `host` is the runner's
side (events, the running cell, the tool round trip). Everything costly (difflib,
base64, matplotlib) is imported only when a helper first needs it.

Every helper reports what it did as one status event: a display bundle whose only MIME type
is `application/x-cellvisor-status`, which the supervisor files under the cell's
`status_events` (see PRELUDE.md for the exact keys). Helpers raise the usual Python errors,
naming the helper and the argument, and report nothing when they fail.
"""

import builtins
import json
import os
import sys

# Every cell goes through it (history, IPython syntax, the value's text): imported with the
# prelude (from beside it, as the prelude is), so that a prewarmed worker's first cell does not
# wait for it (~0.3 ms) and the launcher's first run caches its bytecode with the prelude's.
import cellvisor_notebook  # noqa: F401

STATUS_MIME = "application/x-cellvisor-status"
# The key under which the cell's trailing value's bundle goes to the host (see send_value).
VALUE_MIME = "application/x-cellvisor-value"
# The key of a `clear_output(wait)`: the host drops what the cell showed before it.
CLEAR_MIME = "application/x-cellvisor-clear"
# A display's id and whether it updates that display: Jupyter's `transient.display_id` and
# `update_display_data`, which the gateway makes of it.
DISPLAY_MIME = "application/x-cellvisor-display"
# A trailing value's bundle repeats what its text already says; past this size (as JSON) it
# is not worth sending twice.
TRAILING_BUNDLE_LIMIT = 1 << 20
ARTIFACT_DIR_VAR = "CELLVISOR_ARTIFACT_DIR"

_host = None


def install(host):
    """Puts the helpers into builtins and hooks matplotlib; `host` gives `send_event(event)`,
    `cell_id()`, `flush()`, `call_tool(name, args)`, `yield_control()` and
    `import_beside(name)`."""
    global _host
    _host = host
    for name in ("read", "write", "append", "sort", "uniq", "counter", "diff", "tree",
                 "env", "output", "display") + CODE_MODE_HELPERS:
        setattr(builtins, name, globals()[name])
    builtins.tool = builtins.tools = _TOOLS
    builtins.ToolError = ToolError
    builtins.ALL_TOOLS = []
    builtins.get_ipython = get_ipython
    if not hasattr(print, "__wrapped__"):
        builtins.print = _print_in_one_write(print)
    builtins.__cellvisor_exiting__ = lambda: None  # the guard, until cellvisor_exit loads
    if not any(isinstance(finder, _PostImportHook) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PostImportHook())


def _print_in_one_write(builtin_print):
    """`print` to the standard streams in one write, so that `print(42)` streams as one
    `"42\\n"` event and not `"42"` then `"\\n"` (the streams are unbuffered); any other file
    gets the built-in `print` as it is."""

    def print(*values, sep=None, end=None, file=None, flush=False):
        stream = sys.stdout if file is None else file
        if (stream is not sys.stdout and stream is not sys.stderr) or stream is None \
                or not (sep is None or type(sep) is str) or not (end is None or type(end) is str):
            return builtin_print(*values, sep=sep, end=end, file=file, flush=flush)
        stream.write((" " if sep is None else sep).join(map(str, values))
                     + ("\n" if end is None else end))
        if flush:
            stream.flush()

    # What `functools.wraps` sets, without importing it: pickle and help() see `print`.
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(print, name, getattr(builtin_print, name))
    print.__wrapped__ = builtin_print
    return print


def _status(op, **details):
    details["op"] = op
    _host.send_event({"type": "display", "id": _host.cell_id(), "bundle": {STATUS_MIME: details}})


# --- argument checks -------------------------------------------------------------------


def _type_name(value):
    return type(value).__name__


def _text(helper, name, value):
    if not isinstance(value, str):
        raise TypeError("%s: %s must be a string, not %s" % (helper, name, _type_name(value)))
    return value


def _path(helper, value):
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    _text(helper, "path", value)
    if not value:
        raise ValueError("%s: path must not be empty" % helper)
    scheme, uri, _ = value.partition("://")  # as the Rust helpers of JS and Lua refuse one
    if uri and scheme.isascii() and scheme[:1].isalpha() and scheme.translate(_MARKS).isalnum():
        raise ValueError("%s: '%s' is a URI: file helpers take local file paths only (remote "
                         "and file:// URIs are not supported)" % (helper, value))
    return value


_MARKS = str.maketrans("", "", "+-.")  # the characters of a URI scheme besides alphanumerics


def _count(helper, name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s: %s must be an integer, not %s" % (helper, name, _type_name(value)))
    if value < minimum:
        raise ValueError("%s: %s must be at least %d, not %d" % (helper, name, minimum, value))
    return value


def _os_error(helper, error, path):
    """The same kind of OSError (FileNotFoundError, IsADirectoryError, ...) with the helper's
    name in front, so the message says who failed on what."""
    if error.errno is None:
        return error
    return type(error)(error.errno, "%s: %s" % (helper, error.strerror), path)


def _lines(text):
    """The lines of `text`, split on "\\n" only; a final newline ends the last line rather
    than starting an empty one."""
    if not text:
        return []
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    return lines


def _join(lines, like):
    """Lines joined with newlines, ending with one iff `like` (the input) did."""
    text = "\n".join(lines)
    if lines and like.endswith("\n"):
        text += "\n"
    return text


# --- files -----------------------------------------------------------------------------


def read(path, offset=1, limit=None, numbered=False):
    """The file's text; `offset` (1-based) and `limit` select lines, and `numbered` shows
    them numbered like `cat -n` instead."""
    path = _path("read", path)
    offset = _count("read", "offset", offset, 1)
    if limit is not None:
        limit = _count("read", "limit", limit, 0)
    selected = []
    try:
        with open(path, "rb") as file:
            if limit != 0:
                for number, raw in enumerate(file, 1):
                    if number < offset:
                        continue
                    selected.append((number, raw))
                    if limit is not None and len(selected) >= limit:
                        break
    except OSError as error:
        raise _os_error("read", error, path) from None
    _status("read", path=path, lines=len(selected), offset=offset)
    if numbered:
        return "".join("%6d\t%s\n" % (number, raw.rstrip(b"\n").decode("utf-8", "replace"))
                       for number, raw in selected)
    return b"".join(raw for _, raw in selected).decode("utf-8", "replace")


def _store(helper, path, content, mode):
    path = _path(helper, path)
    data = _text(helper, "content", content).encode("utf-8", "surrogateescape")
    try:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(path, mode) as file:
            file.write(data)
    except OSError as error:
        raise _os_error(helper, error, path) from None
    _status(helper, path=path, bytes=len(data))


def write(path, content):
    """Creates or truncates `path` (and its parent directories) and writes `content`."""
    _store("write", path, content, "wb")


def append(path, content):
    """Appends `content` to `path`, creating it (and its parent directories) if missing."""
    _store("append", path, content, "ab")


# --- text ------------------------------------------------------------------------------


def sort(text, reverse=False, unique=False):
    """The lines of `text` sorted by code point (optionally reversed, optionally without
    duplicates)."""
    lines = sorted(_lines(_text("sort", "text", text)), reverse=bool(reverse))
    if unique:
        lines = [line for index, line in enumerate(lines) if index == 0 or line != lines[index - 1]]
    _status("sort", lines=len(lines))
    return _join(lines, text)


def uniq(text, count=False):
    """Collapses adjacent duplicate lines, like `uniq` (with `count`, like `uniq -c`)."""
    groups = []
    for line in _lines(_text("uniq", "text", text)):
        if groups and groups[-1][0] == line:
            groups[-1][1] += 1
        else:
            groups.append([line, 1])
    if count:
        lines = ["%7d %s" % (times, line) for line, times in groups]
    else:
        lines = [line for line, _ in groups]
    _status("uniq", lines=len(lines))
    return _join(lines, text)


def counter(items, limit=None, reverse=False):
    """`[(item, count)]` by count, most common first (ties in order of first appearance);
    `items` is a list of strings or numbers, or a text whose lines are counted."""
    if limit is not None:
        limit = _count("counter", "limit", limit, 0)
    if isinstance(items, str):
        items = _lines(items)
    elif isinstance(items, (bytes, bytearray, dict)) or not hasattr(items, "__iter__"):
        raise TypeError("counter: items must be a list or a string, not %s" % _type_name(items))
    counts = {}
    for item in items:
        try:
            counts[item] = counts.get(item, 0) + 1
        except TypeError:
            raise TypeError(
                "counter: items must be strings or numbers, not %s" % _type_name(item)
            ) from None
    pairs = sorted(counts.items(), key=lambda pair: pair[1], reverse=not reverse)
    if limit is not None:
        pairs = pairs[:limit]
    _status("counter", items=len(counts))
    return pairs


def diff(a, b):
    """A unified diff of two texts (not paths), as `difflib.unified_diff` writes it."""
    import difflib

    old, new = _lines(_text("diff", "a", a)), _lines(_text("diff", "b", b))
    lines = list(difflib.unified_diff(old, new, "a", "b", lineterm=""))
    body = lines[2:]
    added = sum(1 for line in body if line.startswith("+"))
    removed = sum(1 for line in body if line.startswith("-"))
    _status("diff", added=added, removed=removed)
    return "\n".join(lines)


def tree(path=".", max_depth=3, show_hidden=False):
    """A directory tree like the `tree` command, `max_depth` levels deep, without following
    symlinks."""
    root = _path("tree", path)
    max_depth = _count("tree", "max_depth", max_depth, 1)
    if not os.path.isdir(root):
        import errno

        if os.path.lexists(root):
            raise NotADirectoryError(errno.ENOTDIR, "tree: Not a directory", root)
        raise FileNotFoundError(errno.ENOENT, "tree: No such file or directory", root)
    lines = [root]

    def walk(directory, prefix, depth):
        try:
            with os.scandir(directory) as listing:
                entries = sorted(listing, key=lambda entry: os.fsencode(entry.name))
        except OSError:
            return  # unreadable: shown, but not entered
        if not show_hidden:
            entries = [entry for entry in entries if not entry.name.startswith(".")]
        for index, entry in enumerate(entries):
            last = index == len(entries) - 1
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            lines.append(prefix + ("└── " if last else "├── ") + entry.name + ("/" if is_dir else ""))
            if is_dir and depth < max_depth:
                walk(entry.path, prefix + ("    " if last else "│   "), depth + 1)

    walk(root, "", 1)
    _status("tree", path=root, entries=len(lines) - 1)
    return "\n".join(lines)


def env(key=None, value=None):
    """No arguments: all environment variables; a key: its value (or None); a key and a
    value: sets it in this process."""
    if key is None:
        if value is not None:
            raise TypeError("env: a value needs a key")
        _status("env")
        return dict(os.environ)
    _text("env", "key", key)
    if not key or "=" in key or "\0" in key:
        raise ValueError("env: invalid variable name %r" % key)
    if value is None:
        _status("env", key=key)
        return os.environ.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    _text("env", "value", value)
    os.environ[key] = value
    _status("env", key=key)
    return None


def _read_artifact(path):
    """A spilled output's bytes: a regular file, never through a link a cell planted in the
    artifact directory (nor a FIFO that would block the cell)."""
    import errno
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "it is a link, and outputs are plain files") from None
        raise
    with open(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file, and outputs are plain files")
        return file.read()


def output(*ids):
    """The full text of spilled outputs (the `artifact_path` of a truncated cell result), by
    id or `artifact://<id>`; several ids are joined with newlines."""
    import errno

    if not ids:
        raise TypeError("output: give at least one output id")
    names = []
    for spilled in ids:
        if isinstance(spilled, int) and not isinstance(spilled, bool):
            spilled = str(spilled)
        _text("output", "id", spilled)
        # `artifact://<id>` is the reference hosts hold for spilled output (ARTIFACT_SCHEME in
        # cellvisor_ipc::env).
        name = spilled
        if name.startswith("artifact://"):
            name = name[len("artifact://") :]
        if not name or "/" in name or "\\" in name or ".." in name:
            raise ValueError("output: invalid output id %r" % spilled)
        names.append(name)
    directory = os.environ.get(ARTIFACT_DIR_VAR, "")
    texts, total = [], 0
    for name in names:
        try:
            if not directory:
                raise FileNotFoundError(errno.ENOENT, "no artifact directory")
            data = _read_artifact(os.path.join(directory, name + ".txt"))
        except FileNotFoundError:
            raise FileNotFoundError(
                errno.ENOENT, "output: unknown output id %r" % name
            ) from None
        except OSError as error:
            raise _os_error("output", error, name) from None
        total += len(data)
        texts.append(data.decode("utf-8", "replace"))
    _status("output", ids=names, bytes=total)
    return "\n".join(texts)


# --- display ---------------------------------------------------------------------------


def _json_or_none(value):
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return None


def _safe_repr(value):
    try:
        return repr(value)
    except Exception as error:  # a broken __repr__ must not break display()
        return "<%s object (repr failed: %s)>" % (_type_name(value), error)


_RICH_REPRS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
)


def _base64(data):
    import base64

    return base64.b64encode(bytes(data)).decode("ascii")


def _rich_bundle(value):
    """What the value's `_repr_*_` methods give, binary data as base64."""
    bundle = {}
    method = getattr(type(value), "_repr_mimebundle_", None)
    if method is not None:
        try:
            try:
                result = value._repr_mimebundle_(include=None, exclude=None)
            except TypeError:
                result = value._repr_mimebundle_()
            if isinstance(result, tuple):
                result = result[0]
            if isinstance(result, dict):
                bundle.update(result)
        except Exception:
            pass
    for name, mime in _RICH_REPRS:
        if mime in bundle or getattr(type(value), name, None) is None:
            continue
        try:
            data = getattr(value, name)()
        except Exception:
            continue
        if isinstance(data, tuple):
            data = data[0]
        if data is not None:
            bundle[mime] = data
    for mime, data in bundle.items():
        if isinstance(data, (bytes, bytearray, memoryview)):
            bundle[mime] = _base64(data)
    try:
        figure = _figure_png(value)
    except Exception:
        figure = None  # a figure that cannot render still has its text
    if figure is not None:
        bundle["image/png"] = figure
    return bundle


def _bundle(value, rich_only=False, text=None):
    """The MIME bundle of `value`, always with `text/plain`; with `rich_only`, None when it
    has nothing richer than its text (scalars, tuples, objects without rich reprs)."""
    if isinstance(value, (dict, list)) or (isinstance(value, tuple) and not rich_only):
        as_json = _json_or_none(value)
        bundle = {} if as_json is None else {"application/json": as_json}
    else:
        bundle = _rich_bundle(value)
    bundle = {str(key): data for key, data in bundle.items() if _json_or_none(data) is not None}
    if rich_only and not any(key != "text/plain" for key in bundle):
        return None
    if "text/plain" not in bundle:
        if text is None:
            text = value if isinstance(value, str) else _safe_repr(value)
        bundle["text/plain"] = text
    return bundle


def send_bundle(bundle, display_id=None, update=False):
    """Sends a MIME bundle as it is (binary data as base64, what is not JSON left out). A
    `display_id` names the display (IPython's transient `display_id`) under DISPLAY_MIME;
    with `update`, the bundle replaces that display's data where hosts keep it."""
    if not isinstance(bundle, dict):
        raise TypeError("a display bundle must be a dict of MIME type to data, not %s"
                        % _type_name(bundle))
    clean = {}
    for mime, data in bundle.items():
        if isinstance(data, (bytes, bytearray, memoryview)):
            data = _base64(data)
        if _json_or_none(data) is not None:
            clean[str(mime)] = data
    if display_id is not None:
        clean[DISPLAY_MIME] = {"display_id": str(display_id), "update": bool(update)}
    _host.flush()
    _host.send_event({"type": "display", "id": _host.cell_id(), "bundle": clean})


def clear_output(wait=False):
    """Clears what the running cell has shown (IPython's `clear_output`): a notebook empties
    the cell's output, a JSON-RPC result keeps only what comes after. With `wait`, the
    clear happens when the next output arrives (a progress line redrawn without flicker)."""
    _host.flush()
    _host.send_event({"type": "display", "id": _host.cell_id(),
                      "bundle": {CLEAR_MIME: {"wait": bool(wait)}}})


def display(*values, **options):
    """Shows values as rich output of the running cell (MIME bundles). Where the cells run
    in IPython's shell, a value that is not a dict, list, tuple or figure is shown by
    IPython's `display` (its formatters, `_ipython_display_`, `display_id=`); a string is
    shown as its text in both."""
    shell = _ipython_shell()
    handle = None
    for value in values:
        figure = _figure_class()
        ours = isinstance(value, (dict, list, tuple, str)) or (
            figure is not None and isinstance(value, figure))
        if shell is not None and (options or not ours):  # `display_id=` is IPython's
            from IPython.display import display as ipython_display

            handle = ipython_display(value, **options)
            continue
        if shell is not None:
            shell.display_pub.publish(_bundle(value))  # caught by %%capture too
            continue
        _host.flush()
        _host.send_event({"type": "display", "id": _host.cell_id(), "bundle": _bundle(value)})
    return handle


def _ipython_shell():
    """IPython's shell where the cells run in it (cellvisor_shell), else None."""
    shells = sys.modules.get("cellvisor_shell")
    return shells.active() if shells is not None else None


# Exact built-in types whose values have no form richer than their text.
_PLAIN_TYPES = frozenset((int, float, complex, bool, str, bytes, bytearray, range, set,
                          frozenset, type(None)))


def show_trailing(value, text=None):
    """Sends the cell's trailing value as a bundle when it has a rich form, so hosts that
    render JSON, HTML or images get it. Returns whether that bundle stands for the value's
    text too: a value with a rich repr (HTML, Markdown, an image, ...) is one bundle, as in
    Jupyter, and its `text/plain` is not printed beside it; a JSON value (a dict or list) is
    printed as well, its bundle only adding structure. `text` is the value's pretty text,
    the bundle's `text/plain` unless a repr method gives one.

    Before either, the value's whole bundle goes out under VALUE_MIME, which the host keeps
    for Jupyter's `execute_result` alone (other hosts read the text and display as ever)."""
    if type(value) in _PLAIN_TYPES:
        send_value({"text/plain": text})
        return False  # the common case, without looking for `_repr_*_` methods
    if _is_pyplot_figure(value):
        return False  # sent with the cell's other open figures; once is enough
    bundle = _bundle(value, rich_only=True, text=text)
    if bundle is None or len(json.dumps(bundle)) > TRAILING_BUNDLE_LIMIT:
        send_value({"text/plain": text})
        return False
    send_value(bundle)
    _host.send_event({"type": "display", "id": _host.cell_id(), "bundle": bundle})
    return any(mime not in ("text/plain", "application/json") for mime in bundle)


# Whether the host asked for each trailing value's bundle (send_values): off until then, as
# it costs every cell with a value a marker and an event, which only Jupyter's gateway reads.
_values_wanted = False


def send_values(wanted=True):
    """Asks this worker to send each cell's trailing value as its bundle from now on (the
    gateway does, for Jupyter's `execute_result`); it lasts as long as the worker."""
    global _values_wanted
    _values_wanted = bool(wanted)


def send_value(bundle):
    """Tells the host which bundle is the cell's trailing value (see `show_trailing`), if it
    asked for them (send_values)."""
    if not _values_wanted or bundle.get("text/plain") is None:
        return
    _host.send_event({"type": "display", "id": _host.cell_id(), "bundle": {VALUE_MIME: bundle}})


# --- IPython ---------------------------------------------------------------------------
# In cellvisor_notebook, loaded with the first cell.


def get_ipython():
    """The IPython-like shell of this worker (see cellvisor_notebook)."""
    return _host.import_beside("cellvisor_notebook").get_ipython()


def _patch_ipython_display(module):
    _host.import_beside("cellvisor_notebook").patch_ipython_display(module)


# --- matplotlib ------------------------------------------------------------------------


class _PostImportHook:
    """A `sys.meta_path` finder that lets the real finders find a module we adapt and then
    patches it right after it runs: `matplotlib.pyplot.show` sends the figures as PNG (even
    in the first cell, without importing matplotlib before a cell does), and IPython's
    display functions send displays."""

    def find_spec(self, fullname, path, target=None):
        patch = _POST_IMPORT_PATCHES.get(fullname)
        if patch is None:
            return None
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None or getattr(spec, "origin", None) == "cellvisor":
            return spec  # cellvisor's own IPython (cellvisor_ipython_shim) sends its displays

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        try:
            loader.exec_module = exec_and_patch
        except (AttributeError, TypeError):
            pass  # a loader that refuses attributes: figures still come at cell end
        return spec


def _patch_pyplot(pyplot):
    original = getattr(pyplot, "show", None)

    def show(*args, **kwargs):
        """Sends every open figure as an image/png display and closes it (cellvisor)."""
        send_figures()

    show.__wrapped__ = original
    pyplot.show = show


def _patch_getipython(module):
    """`from IPython import get_ipython` gives this worker's shell (the emulation's, where
    IPython's own does not run the cells), not None: IPython's code then finds a shell."""
    original = module.get_ipython

    def get_ipython_():
        """The worker's shell (cellvisor)."""
        shell = original()
        return shell if shell is not None else get_ipython()

    get_ipython_.__wrapped__ = original
    module.get_ipython = get_ipython_


_POST_IMPORT_PATCHES = {
    "matplotlib.pyplot": _patch_pyplot,
    "IPython.core.display_functions": _patch_ipython_display,
    "IPython.core.getipython": _patch_getipython,
}


def _figure_class():
    return getattr(sys.modules.get("matplotlib.figure"), "Figure", None)


def _is_pyplot_figure(value):
    """A figure pyplot manages (and so sends at cell end)."""
    figure_class = _figure_class()
    if figure_class is None or not isinstance(value, figure_class):
        return False
    return getattr(getattr(value, "canvas", None), "manager", None) is not None


def _figure_png(value):
    """A matplotlib Figure's PNG as base64, or None for anything else."""
    figure_class = _figure_class()
    if figure_class is None or not isinstance(value, figure_class):
        return None
    import io

    buffer = io.BytesIO()
    value.savefig(buffer, format="png", bbox_inches="tight")
    return _base64(buffer.getvalue())


def send_figures():
    """Sends each open pyplot figure as a PNG display and closes it. Called on `plt.show()`
    and at the end of every cell; does nothing unless a cell imported pyplot."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    try:
        numbers = list(pyplot.get_fignums())
    except Exception:
        return
    for number in numbers:
        figure = None
        try:
            figure = pyplot.figure(number)
            bundle = {"image/png": _figure_png(figure), "text/plain": _safe_repr(figure)}
            _host.flush()
            _host.send_event({"type": "display", "id": _host.cell_id(), "bundle": bundle})
        except Exception as error:
            sys.stderr.write("cellvisor: cannot render figure %s: %s: %s\n"
                             % (number, _type_name(error), error))
        finally:
            try:
                pyplot.close(figure if figure is not None else number)
            except Exception:
                pass


# --- host tools ------------------------------------------------------------------------


class ToolError(RuntimeError):
    """A host tool failed, or does not exist: the message is the host's."""


class UnknownToolError(ToolError, AttributeError):
    """`tool.<name>` for a tool the host did not declare; an AttributeError too, so
    `hasattr(tool, name)` works."""


# Shown as plain `ToolError` in tracebacks and summaries, like the builtin it is.
ToolError.__module__ = UnknownToolError.__module__ = "builtins"

_declared = {}
# A tool whose name is not an identifier (`list-dir`) is also reachable by its identifier
# (`tool.list_dir`), the name its TypeScript declaration uses.
_by_identifier = {}


def begin_cell(tools):
    """The tools the host declared for the cell about to run: `ALL_TOOLS` and `tool.<name>`
    follow them."""
    import re

    _declared.clear()
    _by_identifier.clear()
    listed = []
    for info in tools or ():
        if not isinstance(info, dict) or not isinstance(info.get("name"), str):
            continue
        entry = {
            "name": info["name"],
            "description": str(info.get("description") or ""),
            "declaration": str(info.get("declaration") or ""),
            "input_schema": info.get("input_schema") if info.get("input_schema") is not None else {},
        }
        _declared[entry["name"]] = entry
        listed.append(entry)
    for entry in listed:
        declared_as = re.match(r"declare function ([A-Za-z0-9_]+)\(", entry["declaration"])
        if declared_as and declared_as.group(1) not in _declared:
            _by_identifier.setdefault(declared_as.group(1), entry["name"])
    builtins.ALL_TOOLS = listed


class _Tool:
    """One host tool: call it with keyword arguments or one dict."""

    def __init__(self, name):
        self.__name__ = self.name = name
        self.__doc__ = _declared.get(name, {}).get("description")

    def __call__(self, *args, **kwargs):
        if len(args) > 1 or (args and not isinstance(args[0], dict)):
            raise TypeError(
                "tool.%s takes keyword arguments or one dict of arguments" % self.name
            )
        arguments = dict(args[0]) if args else {}
        arguments.update(kwargs)
        if self.name not in _declared:
            raise UnknownToolError(_unknown_message(self.name))
        try:
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TypeError("tool.%s: arguments must be JSON: %s" % (self.name, error)) from None
        ok, value = _host.call_tool(self.name, arguments)
        if not ok:
            raise ToolError("tool.%s: %s" % (self.name, value))
        return value

    def __repr__(self):
        return "<tool %s>" % self.name


def _unknown_message(name):
    if _declared:
        return "no tool named %r; declared tools: %s" % (name, ", ".join(sorted(_declared)))
    return "no tool named %r; the host declared no tools for this cell" % name


class _Tools:
    """`tool.<name>(...)` (or `tool["name"](...)`) calls the host's tool synchronously and
    returns its JSON result parsed; a failure raises ToolError."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self[name]

    def __getitem__(self, name):
        name = _by_identifier.get(name, name)
        if name == "tool_search" and _declared and name not in _declared:
            return _tool_search
        if name not in _declared:
            raise UnknownToolError(_unknown_message(name))
        return _Tool(name)

    def __dir__(self):
        return sorted(_declared)

    def __repr__(self):
        return "<host tools: %s>" % (", ".join(sorted(_declared)) or "none")


_TOOLS = _Tools()


def _tool_search(*args, **kwargs):
    """`tools.tool_search(query=..., limit=None)` (or one dict): the declared tools ranked for
    the query, exact identifiers first, as {"tools": [{"name", "description"}]}."""
    arguments = {}
    if len(args) == 1 and isinstance(args[0], dict):
        arguments.update(args[0])
    elif len(args) == 1:
        arguments["query"] = args[0]
    elif args:
        raise TypeError("tool_search takes a query (and a limit), or one dict")
    arguments.update(kwargs)
    if not isinstance(arguments.get("query"), str):
        raise ValueError("query must not be empty")
    limit = arguments.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))):
        raise ValueError("limit must be greater than zero")
    ok, found = _host.call_tool("tool_search", {"query": arguments["query"], "limit": limit})
    if not ok:
        raise ValueError(found)
    return found


# --- code mode -------------------------------------------------------------------------
#
# The helpers of the code-mode script API, synchronous as in JavaScript and Lua: text,
# image, audio, notify, store/load (JSON per session on disk, the same files the other
# languages use) and exit.

STORE_DIR_VAR = "CELLVISOR_STORE_DIR"
MAX_STORE_KEY = 128
IMAGE_DETAILS = ("auto", "low", "high", "original")
IMAGE_DETAIL_MIME = "application/x-cellvisor-image-detail"
CODE_MODE_HELPERS = ("text", "image", "audio", "notify", "store", "load", "exit",
                     "yield_control")


def _as_text(value):
    """Strings as they are, anything else as compact JSON (its repr when not JSON)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return _safe_repr(value)


def text(value):
    """Adds `value` to the output: strings as they are, anything else as JSON."""
    out = _as_text(value)
    sys.stdout.write(out if out.endswith("\n") else out + "\n")


def _data_url(helper, kind, example, value):
    """The MIME type and base64 data of a `data:<kind>/...;base64,` URL, or of an MCP content
    block ({"type": "image", "data", "mimeType"}) so a tool's image can be forwarded."""
    import re

    if (isinstance(value, dict) and value.get("type") == kind
            and isinstance(value.get("data"), str)
            and str(value.get("mimeType", "")).startswith(kind + "/")):
        return value["mimeType"], "".join(value["data"].split())
    match = None
    if isinstance(value, str):
        match = re.match(r"^data:(%s/[A-Za-z0-9.+-]+);base64,([A-Za-z0-9+/\s]*=*)$" % kind, value)
    if match is None:
        shown = json.dumps(value[:40]) if isinstance(value, str) else _type_name(value)
        raise TypeError('%s: expected a data URL like "%s", got %s' % (helper, example, shown))
    return match.group(1), "".join(match.group(2).split())


def _send_bundle(bundle):
    _host.flush()
    _host.send_event({"type": "display", "id": _host.cell_id(), "bundle": bundle})


def image(data_url, detail=None):
    """Shows an image given as a base64 `data:image/...` URL; `detail` (auto, low, high,
    original) rides along for hosts that pass it to a model."""
    mime, data = _data_url("image", "image", "data:image/png;base64,iVBOR...", data_url)
    if detail is not None and detail not in IMAGE_DETAILS:
        raise ValueError("image: detail must be one of %s, got %r" % (", ".join(IMAGE_DETAILS), detail))
    bundle = {mime: data, "text/plain": "<image %s>" % mime}
    if detail is not None:
        bundle[IMAGE_DETAIL_MIME] = detail
    _send_bundle(bundle)


def audio(data_url):
    """Plays back an audio clip given as a base64 `data:audio/...` URL."""
    mime, data = _data_url("audio", "audio", "data:audio/wav;base64,UklGR...", data_url)
    _send_bundle({mime: data, "text/plain": "<audio %s>" % mime})


def yield_control():
    """Returns the request now with the output so far (status "running"); the cell goes on
    and the host collects the rest with `wait`."""
    _host.yield_control()


def notify(value):
    """Sends a progress note to the host at once (a status event), while the cell runs."""
    message = _as_text(value)
    if not message.strip():
        raise ValueError("notify: the message must not be empty")
    _host.flush()
    _status("notify", message=message)


def _check_store_key(helper, key):
    _text(helper, "key", key)
    valid = (0 < len(key) <= MAX_STORE_KEY and not key.startswith(".")
             and all(c.isascii() and (c.isalnum() or c in "_-.") for c in key))
    if not valid:
        raise ValueError("%s: invalid key %s: use 1 to %d characters from A-Z a-z 0-9 _ - . "
                         "(not starting with a dot)" % (helper, json.dumps(key), MAX_STORE_KEY))


def _check_storable(value, path, seen):
    """Refuses what JSON cannot hold, naming where it sits (`value['a'][2] is a function`)."""
    where = "the value" if not path else "value" + path

    def refuse(what):
        raise TypeError("store: %s is %s, which JSON cannot hold" % (where, what))

    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            refuse(repr(value))
        return
    if callable(value):
        refuse("a class" if isinstance(value, type) else "a function")
    if isinstance(value, (list, tuple, dict)):
        if id(value) in seen:
            refuse("a cycle (it contains itself)")
        seen.add(id(value))
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise TypeError("store: %s has a key of type %s; JSON keys are strings"
                                    % (where, _type_name(key)))
                _check_storable(item, "%s[%r]" % (path, key), seen)
        else:
            for index, item in enumerate(value):
                _check_storable(item, "%s[%d]" % (path, index), seen)
        seen.discard(id(value))
        return
    refuse("a %s" % _type_name(value))


def store(key, value):
    """Keeps `value` (JSON) under `key` for later cells of this session, in any language;
    written atomically, so it survives crashes, resets and daemon restarts."""
    _check_store_key("store", key)
    _check_storable(value, "", set())
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    directory = os.environ.get(STORE_DIR_VAR, "")
    if not directory:
        raise RuntimeError("store: this worker has no store directory (%s is not set)" % STORE_DIR_VAR)
    temp = os.path.join(directory, ".%s.json.%d.tmp" % (key, os.getpid()))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, os.path.join(directory, key + ".json"))
    except OSError as error:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise OSError(error.errno, "store: cannot write key %r in %s: %s"
                      % (key, directory, error.strerror)) from None
    _status("store", key=key, bytes=len(data))


def load(key):
    """The value stored under `key` in this session, or None when there is none."""
    _check_store_key("load", key)
    directory = os.environ.get(STORE_DIR_VAR, "")
    data = None
    if directory:
        try:
            with open(os.path.join(directory, key + ".json"), "rb") as file:
                data = file.read()
        except FileNotFoundError:
            data = None
        except OSError as error:
            raise _os_error("load", error, key) from None
    _status("load", key=key, found=data is not None)
    if data is None:
        return None
    try:
        return json.loads(data, parse_float=_finite_float)
    except ValueError as error:
        raise ValueError("load: the stored value of %r is not valid JSON (%s)" % (key, error)) from None


def _finite_float(text):
    """A stored number as a float, refused beyond a double (as JavaScript and Lua refuse it),
    not read as `inf`."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number out of range: beyond what a Python float holds")
    return value


def exit(code=None):
    """Ends the cell as code mode's exit() does: see cellvisor_exit."""
    _host.import_beside("cellvisor_exit").begin(code)
