"""What a notebook kernel does around each cell, as IPython does it: the execution count,
the input and output history (`In`, `Out`, `_`, `__`, `___`, `_N`, `_i`, `_ii`, `_iii`,
`_iN`, `_ih`, `_oh`, `_dh`), the trailing value's text (IPython's pretty printing, by
`cellvisor_pretty`) and the first look at a cell's IPython syntax (`!cmd`, `%magic`,
`obj?`, automagic), which loads `cellvisor_ipython` only for a cell that has some.

The runner calls `begin_cell` before it compiles a cell and `trailing` with the cell's
value. Importing this module costs a few hundred microseconds and imports nothing else.
"""

import builtins
import sys

# IPython's output cache: past this many entries in `Out`, the oldest fifth is dropped.
CACHE_SIZE = 1000
# Names IPython's history puts in the namespace besides `_N` and `_iN`; state snapshots
# and `%who` leave them out.
HISTORY_NAMES = frozenset(("In", "Out", "_ih", "_oh", "_dh", "_", "__", "___", "_i", "_ii",
                           "_iii"))
# Line magics that run without `%` in a one-line cell (IPython's automagic), unless a name
# in the namespace or builtins shadows them; `cellvisor_ipython` has a method for each.
AUTOMAGIC = frozenset((
    "cd", "pwd", "ls", "ll", "lf", "lk", "ldir", "lx", "mkdir", "rmdir", "mv", "rm", "cp",
    "cat", "env", "who", "time", "timeit", "pip", "run", "matplotlib", "history", "hist",
    "lsmagic", "magic", "xmode", "load_ext", "prun", "debug", "pdb", "pinfo", "pinfo2",
    "psearch", "automagic",
))


def is_history_name(name):
    """Whether `name` is one the history sets (`In`, `_5`, `_i5`, `__`, ...)."""
    if name in HISTORY_NAMES:
        return True
    digits = name[2:] if name.startswith("_i") else name[1:]
    return name.startswith("_") and digits.isdigit() and digits.isascii()


class Inputs:
    """`In` (and `_ih`): the inputs by execution count, `In[0]` empty, as IPython's list, but
    keeping only the last CACHE_SIZE cells' text (older ones read as ""), so a session that
    runs a million cells holds no more than one that ran a thousand."""

    def __init__(self):
        self._kept = [""]
        self._first = 0  # the execution count of _kept[0]

    def append(self, text):
        self._kept.append(text)
        if len(self._kept) > CACHE_SIZE:
            drop = max(len(self._kept) // 5, 1)
            del self._kept[:drop]
            self._first += drop

    def last(self, count):
        """The last `count` inputs, "" for those before the first, without `__getitem__`'s
        work for each (a cull keeps far more than `count`)."""
        kept = self._kept[-count:]
        return [""] * (count - len(kept)) + kept if len(kept) < count else kept

    def dropped_before(self):
        """The first execution count whose text is still kept."""
        return self._first

    def __len__(self):
        return self._first + len(self._kept)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = index.__index__()
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("list index out of range")
        return self._kept[index - self._first] if index >= self._first else ""

    def __iter__(self):
        for index in range(len(self)):
            yield self[index]

    def __eq__(self, other):
        return list(self) == list(other) if isinstance(other, (list, Inputs)) else NotImplemented

    def __repr__(self):
        return repr(list(self))


class History:
    """The session's inputs and outputs, numbered by the execution count."""

    def __init__(self):
        self.count = 0  # the number of the running (or last) cell
        self.raw = Inputs()  # In[0] is empty, as in IPython
        self.parsed = Inputs()
        self.outputs = {}  # Out
        self.reprs = {}  # Out's text, for %history -o
        self.dirs = None  # _dh
        self.automagic = True
        self._unders = (None, None, None)  # what we last set `_`, `__`, `___` to

    def install(self, namespace):
        """Puts In, Out and the directory history in the namespace where they are missing
        (the first cell, or after a restore replaced the namespace)."""
        if self.dirs is None:
            import os

            self.dirs = [os.getcwd()]
        for name, value in (("In", self.parsed), ("_ih", self.parsed), ("Out", self.outputs),
                            ("_oh", self.outputs), ("_dh", self.dirs)):
            if name not in namespace:
                namespace[name] = value

    def begin(self, raw, parsed, namespace):
        """Stores cell `count`'s input and sets `_i`, `_ii`, `_iii` and `_i<count>`."""
        self.install(namespace)
        raw, parsed = raw.rstrip("\n"), parsed.rstrip("\n")
        kept_from = self.raw.dropped_before()
        self.raw.append(raw)
        self.parsed.append(parsed)
        previous = self.raw.last(4)[:-1]
        namespace["_i"], namespace["_ii"], namespace["_iii"] = previous[2], previous[1], previous[0]
        namespace["_i%d" % self.count] = raw
        for number in range(kept_from, self.raw.dropped_before()):
            namespace.pop("_i%d" % number, None)  # as Out's culled `_N`

    def record(self, value, namespace):
        """Cell `count` showed `value`: Out, `_`, `__`, `___` and `_<count>` hold it. As in
        IPython, showing `Out` itself records nothing (Out would hold itself, and `_`,
        `__`, `___` would move on to it)."""
        if value is self.outputs:
            return
        if len(self.outputs) >= CACHE_SIZE:
            self._cull(namespace)
        # As IPython: `_` and friends stay as a cell set them, and builtins' `_` wins.
        ours = all(namespace.get(name) is mine
                   for name, mine in zip(("_", "__", "___"), self._unders) if name in namespace)
        self._unders = (value, self._unders[0], self._unders[1])
        if "_" not in builtins.__dict__ and ours:
            namespace["_"], namespace["__"], namespace["___"] = self._unders
        namespace["_%d" % self.count] = value
        self.outputs[self.count] = value

    def _cull(self, namespace):
        count = max(int(len(self.outputs) * 0.2), 2)
        sys.stderr.write("Output cache limit (currently %d entries) hit.\n"
                         "Flushing oldest %d entries.\n" % (len(self.outputs), count))
        for number in sorted(self.outputs)[:count]:
            namespace.pop("_%d" % number, None)
            self.outputs.pop(number, None)
            self.reprs.pop(number, None)


history = History()
events = None  # get_ipython().events, once an extension asked for it
_info = None  # what pre_run_cell callbacks got, for post_run_cell


def _cell_info(raw):
    import types

    return types.SimpleNamespace(raw_cell=raw, store_history=True, silent=False,
                                 shell_futures=True, cell_id=None)


def begin_cell(cell_id, source, namespace):
    """The cell's Python source (IPython syntax rewritten), its input recorded under the
    next execution count; a startup module (cell 0) and a blank cell count nothing, as in
    IPython."""
    global _info
    if cell_id == 0 or not source.strip():
        return without_ipython_syntax(source, namespace)
    end_cell()  # callbacks a cell ended by exit() left
    history.count += 1
    try:
        parsed = without_ipython_syntax(source, namespace)
    except BaseException:
        history.begin(source, source, namespace)
        raise
    history.begin(source, parsed, namespace)
    if events is not None:
        _info = _cell_info(source)
        events.trigger("pre_execute")
        events.trigger("pre_run_cell", _info)
    return parsed


def end_cell(value_follows=False):
    """Runs the extensions' post_execute and post_run_cell callbacks, if any; when the
    cell's value is still to be shown, `trailing` runs them after it, as IPython does."""
    global _info
    if events is None or _info is None or value_follows:
        return
    import types

    error = sys.exc_info()[1]
    result = types.SimpleNamespace(info=_info, execution_count=history.count, result=None,
                                   error_before_exec=None, error_in_exec=error,
                                   success=error is None)
    _info = None
    events.trigger("post_execute")
    events.trigger("post_run_cell", result)


def trailing(cell_id, value, namespace):
    """The text to print for the cell's value (None: its rich bundle stands for it), after
    sending that bundle and recording the value in the history."""
    try:
        if cell_id != 0:
            history.record(value, namespace)
        try:
            text = _plain_text(value)
            if text is None:
                text = _beside("cellvisor_pretty").text(value)
        except Exception:
            if _prelude().show_trailing(value):
                return None  # its rich form stands for it, as its text cannot
            raise
        if cell_id != 0:
            history.reprs[history.count] = text
        if _prelude().show_trailing(value, text):
            return None
        return text + "\n"
    finally:
        end_cell()


_SCALARS = frozenset((int, float, complex, bool, str, bytes, type(None)))


def _plain_text(value, width=79):
    """The value's repr when IPython's pretty text is that repr, without loading the
    printer: a scalar, or a list, tuple or dict of scalars (not a set: IPython sorts those)
    whose repr fits in a line."""
    kind = type(value)
    if kind in _SCALARS:
        return repr(value)
    if kind not in (list, tuple, dict) or len(value) > width // 2:
        return None
    items = list(value.items()) if kind is dict else value
    for item in items:
        if kind is dict:
            if type(item[0]) not in _SCALARS or type(item[1]) not in _SCALARS:
                return None
        elif type(item) not in _SCALARS:
            return None
    text = repr(value)
    return text if len(text) <= width and "\n" not in text else None


# --- IPython syntax ------------------------------------------------------------------------


def get_ipython():
    """The shell of this worker: IPython's own where the cells run in it (cellvisor_shell),
    else the IPython-like one (`system`, `getoutput`, `run_line_magic`, `run_cell_magic`,
    `user_ns`, `user_global_ns`, `display_pub`; cellvisor_ipython, loaded on first use)."""
    shells = sys.modules.get("cellvisor_shell")
    if shells is not None and shells.active() is not None:
        return shells.active()
    return ipython().shell(_prelude().send_bundle)


def ipython():
    """The IPython compatibility module, imported from beside the runner on first use."""
    return _beside("cellvisor_ipython")


def without_ipython_syntax(source, namespace=None):
    """The cell with its `!cmd`, `%magic`, `x = !cmd`, `obj?` and automagic lines rewritten
    into calls on get_ipython(). A cheap first look decides whether the IPython module is
    needed at all."""
    if _automagic(source, namespace):
        module = ipython()
        return module.transform_cell("%" + source.lstrip())
    if "!" not in source and "%" not in source and "?" not in source:
        return source
    for line in source.splitlines():
        stripped = line.strip()
        if stripped[:1] in ("!", "%", "?") or stripped.endswith("?") or "=!" in line \
                or "= !" in line or "=%" in line or "= %" in line:
            module = ipython()
            return module.transform_cell(source) if module.needs_transform(source) else source
    return source


def _automagic(source, namespace):
    """Whether a one-line cell starts with a magic's name, with no `%` (IPython's automagic:
    not when a name in the namespace or builtins shadows it, nor for `ls = 1` or `ls, x =`)."""
    stripped = source.strip()
    if namespace is None or not history.automagic or "\n" in stripped \
            or stripped.endswith("?"):
        return False
    end = 0
    while end < len(stripped) and (stripped[end].isalnum() or stripped[end] in "_.*"):
        end += 1
    name = stripped[:end]  # IPython's `ifun`: a dotted name is not a magic
    if name not in AUTOMAGIC or name in namespace or hasattr(builtins, name):
        return False
    return stripped[end:].lstrip()[:1] not in ("=", ",")


def ends_with_semicolon(source, last):
    """Whether the cell's last statement (an expression node) is followed by `;`."""
    if ";" not in source:
        return False
    lines = source.splitlines()
    if last.end_lineno is None or last.end_lineno > len(lines):
        return False
    line = lines[last.end_lineno - 1].encode("utf-8")  # offsets count UTF-8 bytes
    rest = line[last.end_col_offset:].decode("utf-8", "replace").lstrip()
    return rest.startswith(";")


def patch_ipython_display(module):
    """IPython's `display()` and `publish_display_data()` (when a cell imports IPython) send
    cellvisor displays instead of printing reprs outside a kernel. Not where the cells run
    in IPython's own shell: its display publisher is cellvisor's already."""
    shells = sys.modules.get("cellvisor_shell")
    if shells is not None and shells.wanted() != "builtin" and \
            (shells.active() is not None or shells.making()):
        return
    prelude = _prelude()

    def display_(*objs, include=None, exclude=None, metadata=None, transient=None,
                 display_id=None, raw=False, clear=False, **kwargs):
        """Shows objects as rich output of the running cell (cellvisor)."""
        for obj in objs:
            if raw:
                prelude.send_bundle(obj)
            else:
                prelude.display(obj)

    def publish_display_data(data, metadata=None, source=None, *, transient=None, **kwargs):
        """Sends a MIME bundle as a display of the running cell (cellvisor)."""
        prelude.send_bundle(data)

    def clear_output(wait=False):
        """Clears the running cell's output so far (cellvisor; `wait`: at the next output)."""
        prelude.clear_output(wait)

    module.display = display_
    module.publish_display_data = publish_display_data
    module.clear_output = clear_output


def _prelude():
    return sys.modules["cellvisor_prelude"]


def _beside(name):
    """Our module `name`, imported from beside the runner on first use."""
    module = sys.modules.get(name)
    return module if module is not None else _prelude()._host.import_beside(name)
