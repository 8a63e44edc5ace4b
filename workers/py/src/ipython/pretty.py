"""The text of a cell's trailing value as IPython shows it (`type(1)` is `int`, sets sorted,
lists and dicts past 79 columns one item a line, `<list_iterator at 0x...>`), by `text`.

Scalars are their repr. Anything else goes through this module's printer: IPython's
algorithm (`IPython.lib.pretty`: groups that break outermost first, 1000 items at most per
container) and its printers for the built-in types, so their text is IPython's.
`IPython.lib.pretty` itself prints when a cell imported it already (its `for_type`
printers then apply) and for a `_repr_pretty_` method when IPython is installed: importing
IPython costs 0.1 s or more, so built-in values never do. Without IPython, `_repr_pretty_`
gets this printer, which has the same methods. Importing this module imports nothing.
"""

import sys

MAX_WIDTH = 79
MAX_SEQ_LENGTH = 1000

# Exact types whose text is their repr in IPython too.
_SCALARS = frozenset((int, float, complex, bool, str, bytes, type(None)))
_ipython = None  # IPython.lib.pretty, False when it cannot be imported


class _UseIPython(Exception):
    """Raised by the printer on meeting a `_repr_pretty_` while IPython is importable."""


def text(value):
    """The text IPython shows for `value` as a cell's result (without a final newline)."""
    if type(value) in _SCALARS:
        return repr(value)
    loaded = sys.modules.get("IPython.lib.pretty")
    if loaded is not None and hasattr(loaded, "pretty"):
        return loaded.pretty(value, max_width=MAX_WIDTH, max_seq_length=MAX_SEQ_LENGTH)
    try:
        return pretty(value, defer=_ipython is not False)
    except _UseIPython:
        module = _import_ipython()
        if module is None:
            return pretty(value)
        return module.pretty(value, max_width=MAX_WIDTH, max_seq_length=MAX_SEQ_LENGTH)


def _import_ipython():
    global _ipython
    if _ipython is None:
        try:
            import IPython.lib.pretty as module

            _ipython = module if hasattr(module, "pretty") else False
        except Exception:  # not installed, or broken: the built-in printer does it all
            _ipython = False
    return _ipython or None


def pretty(value, max_width=MAX_WIDTH, max_seq_length=MAX_SEQ_LENGTH, defer=False):
    """`value` pretty-printed by this module's printer; with `defer`, raises _UseIPython
    at the first `_repr_pretty_` method instead of calling it."""
    import io

    stream = io.StringIO()
    printer = Printer(stream, max_width, max_seq_length, defer)
    printer.pretty(value)
    printer.flush()
    return stream.getvalue()


# --- the layout algorithm ----------------------------------------------------------------


class _Text:
    __slots__ = ("parts", "width")

    def __init__(self):
        self.parts = []
        self.width = 0

    def output(self, stream, output_width):
        for part in self.parts:
            stream.write(part)
        return output_width + self.width


class _Breakable:
    __slots__ = ("sep", "width", "printer", "indentation", "group")

    def __init__(self, sep, width, printer):
        self.sep = sep
        self.width = width
        self.printer = printer
        self.indentation = printer.indentation
        self.group = printer.group_stack[-1]
        self.group.breakables.append(self)

    def output(self, stream, output_width):
        self.group.breakables.popleft()
        if self.group.want_break:
            stream.write(self.printer.newline)
            stream.write(" " * self.indentation)
            return self.indentation
        if not self.group.breakables:
            self.printer.group_queue.remove(self.group)
        stream.write(self.sep)
        return output_width + self.width


class _Group:
    __slots__ = ("depth", "breakables", "want_break")

    def __init__(self, depth):
        self.depth = depth
        self.breakables = _deque()
        self.want_break = False


class _GroupQueue:
    """Open groups by depth; `deq` picks the group to break next, outermost first (with
    IPython's choice among groups of one depth, so that the layout is the same)."""

    def __init__(self, group):
        self.queue = []
        self.enq(group)

    def enq(self, group):
        while group.depth > len(self.queue) - 1:
            self.queue.append([])
        self.queue[group.depth].append(group)

    def deq(self):
        for stack in self.queue:
            for index, group in enumerate(reversed(stack)):
                if group.breakables:
                    del stack[index]
                    group.want_break = True
                    return group
            for group in stack:
                group.want_break = True
            del stack[:]
        return None

    def remove(self, group):
        try:
            self.queue[group.depth].remove(group)
        except ValueError:
            pass


class _Within:
    """A context manager calling `enter` and `leave` (contextlib costs a millisecond)."""

    def __init__(self, enter, leave):
        self.enter, self.leave = enter, leave

    def __enter__(self):
        self.enter()

    def __exit__(self, *exc_info):
        self.leave()


class Printer:
    """IPython's RepresentationPrinter: what `_repr_pretty_(p, cycle)` methods receive."""

    def __init__(self, output, max_width=MAX_WIDTH, max_seq_length=MAX_SEQ_LENGTH, defer=False):
        _load()
        self.output = output
        self.max_width = max_width
        self.newline = "\n"
        self.max_seq_length = max_seq_length
        self.verbose = False
        self.output_width = 0
        self.buffer_width = 0
        self.buffer = _deque()
        root = _Group(0)
        self.group_stack = [root]
        self.group_queue = _GroupQueue(root)
        self.indentation = 0
        self.stack = []
        self._defer = defer

    def _break_one_group(self, group):
        while group.breakables:
            item = self.buffer.popleft()
            self.output_width = item.output(self.output, self.output_width)
            self.buffer_width -= item.width
        while self.buffer and isinstance(self.buffer[0], _Text):
            item = self.buffer.popleft()
            self.output_width = item.output(self.output, self.output_width)
            self.buffer_width -= item.width

    def _break_outer_groups(self):
        while self.max_width < self.output_width + self.buffer_width:
            group = self.group_queue.deq()
            if not group:
                return
            self._break_one_group(group)

    def text(self, obj):
        """Adds literal text."""
        width = len(obj)
        if self.buffer:
            last = self.buffer[-1]
            if not isinstance(last, _Text):
                last = _Text()
                self.buffer.append(last)
            last.parts.append(obj)
            last.width += width
            self.buffer_width += width
            self._break_outer_groups()
        else:
            self.output.write(obj)
            self.output_width += width

    def breakable(self, sep=" "):
        """A place to break the line; `sep` when it does not break."""
        group = self.group_stack[-1]
        if group.want_break:
            self.flush()
            self.output.write(self.newline)
            self.output.write(" " * self.indentation)
            self.output_width = self.indentation
            self.buffer_width = 0
        else:
            self.buffer.append(_Breakable(sep, len(sep), self))
            self.buffer_width += len(sep)
            self._break_outer_groups()

    def break_(self):
        """A line break, keeping the indentation."""
        group = self.group_queue.deq()
        if group:
            self._break_one_group(group)
        self.flush()
        self.output.write(self.newline)
        self.output.write(" " * self.indentation)
        self.output_width = self.indentation
        self.buffer_width = 0

    def begin_group(self, indent=0, open=""):
        if open:
            self.text(open)
        group = _Group(self.group_stack[-1].depth + 1)
        self.group_stack.append(group)
        self.group_queue.enq(group)
        self.indentation += indent

    def end_group(self, dedent=0, close=""):
        self.indentation -= dedent
        group = self.group_stack.pop()
        if not group.breakables:
            self.group_queue.remove(group)
        if close:
            self.text(close)

    def group(self, indent=0, open="", close=""):
        """`begin_group` and `end_group` as a context manager."""
        return _Within(lambda: self.begin_group(indent, open),
                       lambda: self.end_group(indent, close))

    def indent(self, indent):
        """More indentation within a context manager."""

        def change(by):
            self.indentation += by

        return _Within(lambda: change(indent), lambda: change(-indent))

    def _enumerate(self, seq):
        """`enumerate`, ending with `, ...` after `max_seq_length` items."""
        for index, item in enumerate(seq):
            if self.max_seq_length and index >= self.max_seq_length:
                self.text(",")
                self.breakable()
                self.text("...")
                return
            yield index, item

    def flush(self):
        for item in self.buffer:
            self.output_width += item.output(self.output, self.output_width)
        self.buffer.clear()
        self.buffer_width = 0

    def pretty(self, obj):
        """Prints `obj` with the printer for its type."""
        obj_id = id(obj)
        cycle = obj_id in self.stack
        self.stack.append(obj_id)
        self.begin_group()
        try:
            if obj_id in _SINGLETON_IDS:
                return _repr_pprint(obj, self, cycle)
            cls = _safe_getattr(obj, "__class__", None) or type(obj)
            for base in _mro(cls):
                printer = _TYPE_PRINTERS.get(base)
                if printer is None:
                    printer = _BY_NAME.get((_safe_getattr(base, "__module__", None),
                                            _safe_getattr(base, "__name__", None)))
                if printer is not None:
                    return printer(obj, self, cycle)
                if "_repr_pretty_" in base.__dict__:
                    method = base._repr_pretty_
                    if callable(method):
                        if self._defer and base not in _OWN_HELPERS:
                            raise _UseIPython()
                        return method(obj, self, cycle)
                if base is not object and "__repr__" in base.__dict__ \
                        and callable(_safe_getattr(base, "__repr__", None)):
                    return _repr_pprint(obj, self, cycle)
            return _default_pprint(obj, self, cycle)
        finally:
            self.end_group()
            self.stack.pop()


def _safe_getattr(obj, name, default=None):
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


def _mro(cls):
    return getattr(cls, "__mro__", None) or (cls,)


# --- printers of the built-in types ---------------------------------------------------------


class _Raw:
    """Text printed as it is."""

    def __init__(self, value):
        self.value = value

    def _repr_pretty_(self, p, cycle):
        p.text(self.value)


class _Call:
    """`name(arg, ..., key=value)`, wrapped like a call."""

    def __init__(self, name, *args, **kwargs):
        self.name, self.args, self.kwargs = name, args, kwargs

    def _repr_pretty_(self, p, cycle):
        started = [False]

        def item():
            if started[0]:
                p.text(",")
                p.breakable()
            started[0] = True

        prefix = self.name + "("
        with p.group(len(prefix), prefix, ")"):
            for arg in self.args:
                item()
                p.pretty(arg)
            for name, arg in self.kwargs.items():
                item()
                with p.group(len(name) + 1, name + "="):
                    p.pretty(arg)


class _RawString:
    """A string with an `r` prefix."""

    def __init__(self, value):
        self.value = value

    def _repr_pretty_(self, p, cycle):
        shown = repr(self.value)
        prefix = "r"
        if shown[:1] in "uU":
            shown, prefix = shown[1:], "ur"
        p.text(prefix + shown.replace("\\\\", "\\"))


class _ReFlags:
    def __init__(self, value):
        self.value = value

    def _repr_pretty_(self, p, cycle):
        import re

        done = False
        for flag in ("IGNORECASE", "LOCALE", "MULTILINE", "DOTALL", "UNICODE", "VERBOSE",
                     "DEBUG"):
            if self.value & getattr(re, flag):
                if done:
                    p.text("|")
                p.text("re." + flag)
                done = True


_OWN_HELPERS = (_Raw, _Call, _RawString, _ReFlags)


def _repr_pprint(obj, p, cycle):
    lines = repr(obj).splitlines()
    with p.group():
        for index, line in enumerate(lines):
            if index:
                p.break_()
            p.text(line)


def _default_pprint(obj, p, cycle):
    cls = _safe_getattr(obj, "__class__", None) or type(obj)
    if _safe_getattr(cls, "__repr__", None) is not object.__repr__:
        return _repr_pprint(obj, p, cycle)
    p.begin_group(1, "<")
    p.pretty(cls)
    p.text(" at 0x%x" % id(obj))
    if cycle:
        p.text(" ...")
    p.end_group(1, ">")


def _sequence(start, end):
    def printer(obj, p, cycle):
        if cycle:
            return p.text(start + "..." + end)
        p.begin_group(len(start), start)
        for index, item in p._enumerate(obj):
            if index:
                p.text(",")
                p.breakable()
            p.pretty(item)
        if len(obj) == 1 and isinstance(obj, tuple):
            p.text(",")
        p.end_group(len(start), end)

    return printer


def _sorted(items):
    items = list(items)
    try:
        return sorted(items)
    except Exception:
        try:
            return sorted(items, key=str)
        except Exception:
            return items


def _set(start, end):
    def printer(obj, p, cycle):
        if cycle:
            return p.text(start + "..." + end)
        if len(obj) == 0:
            return p.text(type(obj).__name__ + "()")
        p.begin_group(len(start), start)
        many = p.max_seq_length and len(obj) >= p.max_seq_length
        for index, item in p._enumerate(obj if many else _sorted(obj)):
            if index:
                p.text(",")
                p.breakable()
            p.pretty(item)
        p.end_group(len(start), end)

    return printer


def _mapping(start, end):
    def printer(obj, p, cycle):
        if cycle:
            return p.text("{...}")
        p.begin_group(len(start), start)
        for index, key in p._enumerate(obj.keys()):
            if index:
                p.text(",")
                p.breakable()
            p.pretty(key)
            p.text(": ")
            p.pretty(obj[key])
        p.end_group(len(start), end)

    return printer


def _super_pprint(obj, p, cycle):
    p.begin_group(8, "<super: ")
    p.pretty(obj.__thisclass__)
    p.text(",")
    p.breakable()
    p.pretty(obj.__self__)
    p.end_group(8, ">")


def _re_pattern_pprint(obj, p, cycle):
    if obj.flags:
        p.pretty(_Call("re.compile", _RawString(obj.pattern), _ReFlags(obj.flags)))
    else:
        p.pretty(_Call("re.compile", _RawString(obj.pattern)))


def _type_pprint(obj, p, cycle):
    if [m for m in _mro(type(obj)) if "__repr__" in vars(m)][:1] != [type]:
        return _repr_pprint(obj, p, cycle)
    module = _safe_getattr(obj, "__module__", None)
    try:
        name = obj.__qualname__
        if not isinstance(name, str):
            raise TypeError("__qualname__ is not a string")
    except Exception:
        name = obj.__name__
        if not isinstance(name, str):
            name = "<unknown type>"
    p.text(name if module in (None, "__builtin__", "builtins", "exceptions")
           else module + "." + name)


def _function_pprint(obj, p, cycle):
    from inspect import signature

    name = _safe_getattr(obj, "__qualname__", obj.__name__)
    module = obj.__module__
    if module and module not in ("__builtin__", "builtins", "exceptions"):
        name = module + "." + name
    try:
        shown = name + str(signature(obj))
    except ValueError:
        shown = name
    p.text("<function %s>" % shown)


def _exception_pprint(obj, p, cycle):
    name = getattr(obj.__class__, "__qualname__", obj.__class__.__name__)
    if obj.__class__.__module__ not in ("exceptions", "builtins"):
        name = "%s.%s" % (obj.__class__.__module__, name)
    p.pretty(_Call(name, *getattr(obj, "args", ())))


def _call_like(arguments):
    """A printer showing `Type(*args, **kwargs)` with `arguments(obj)` -> (args, kwargs),
    and `Type(...)` in a cycle."""

    def printer(obj, p, cycle):
        name = obj.__class__.__name__
        if cycle:
            return p.pretty(_Call(name, _Raw("...")))
        args, kwargs = arguments(obj)
        p.pretty(_Call(name, *args, **kwargs))

    return printer


_deque = None  # collections.deque, once loaded
_SINGLETON_IDS = frozenset(map(id, (None, True, False, Ellipsis, NotImplemented)))
_TYPE_PRINTERS = {}
# Printers of types found by (module, name), so that their modules need not be imported.
_BY_NAME = {
    ("collections", "defaultdict"): _call_like(lambda o: ((o.default_factory, dict(o)), {})),
    ("collections", "OrderedDict"): _call_like(lambda o: ([list(o.items())] if o else [], {})),
    ("collections", "deque"): _call_like(
        lambda o: ([list(o)], {} if o.maxlen is None else {"maxlen": o.maxlen})),
    ("collections", "Counter"): _call_like(lambda o: ([dict(o.most_common())] if o else [], {})),
    ("collections", "UserList"): _call_like(lambda o: ([o.data], {})),
    ("re", "Pattern"): _re_pattern_pprint,
    ("datetime", "datetime"): _repr_pprint,
    ("datetime", "timedelta"): _repr_pprint,
}


def _load():
    """Fills the table of printers by type, on the printer's first use."""
    global _deque
    if _TYPE_PRINTERS:
        return
    import os
    import types
    from collections import deque as _deque

    _TYPE_PRINTERS.update({
        int: _repr_pprint,
        float: _repr_pprint,
        str: _repr_pprint,
        bytes: _repr_pprint,
        range: _repr_pprint,
        slice: _repr_pprint,
        tuple: _sequence("(", ")"),
        list: _sequence("[", "]"),
        dict: _mapping("{", "}"),
        set: _set("{", "}"),
        frozenset: _set("frozenset({", "})"),
        super: _super_pprint,
        type: _type_pprint,
        types.FunctionType: _function_pprint,
        types.BuiltinFunctionType: _function_pprint,
        types.MethodType: _repr_pprint,
        types.SimpleNamespace: lambda obj, p, cycle: p.pretty(
            _Call("namespace", _Raw("...")) if cycle else _Call("namespace", **obj.__dict__)),
        types.MappingProxyType: _mapping("mappingproxy({", "})"),
        BaseException: _exception_pprint,
    })
    if type(os.environ) is not dict:
        _TYPE_PRINTERS[type(os.environ)] = _mapping("environ{", "}")
