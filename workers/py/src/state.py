"""cellvisor's Python state: the cells' names written into a snapshot payload and read back.

The runner imports this module (written beside it as `cellvisor_state`) on the first state
task only, and calls `run(command, namespace)`; the answer is the report the shim turns into
the worker's `State` frame.

Payload (the first `len` bytes of the snapshot file; the runtime's trailer follows them):
  MAGIC, then records, each: u32 LE header length, the header (UTF-8 JSON), the header's
  `buffers` (raw bytes, in order) and its `inband` bytes; a header length of 0 ends it.
  A header is {"name", "how", ...}:
    "module": `module` is re-imported under `name` (`import numpy as np`).
    "source": the inband bytes are the source text of a function or class (`defines` is
              the name it defines), compiled as `filename` with its first line at `line`.
    "pickle": the inband bytes are a pickle (protocol 5) whose out-of-band buffers are
              `buffers` (lengths); `code` marks a function or class pickled by value, whose
              functions are then bound to the cells' namespace.
Records come in the order they must be restored: modules, then functions and classes, then
values (a value may refer to a class by reference: `__main__.Point`). Each name is pickled on
its own so one bad name never spoils the others; two names sharing one object come back as
two objects.
"""

import builtins
import io
import json
import linecache
import os
import pickle
import struct
import sys
import types

MAGIC = b"CVPYSTATE\x01"
_LENGTH = struct.Struct("<I")
# Names the runner itself puts into the namespace (`!cmd`'s exit code).
RUNNER_NAMES = frozenset({"_exit_code"})
# How a restored function's or class's source is named in tracebacks and linecache.
RESTORED_FILE = "<restored %s>"
_MISSING = object()


class TooBig(Exception):
    """The payload passed its cap; `written` is how far it got."""

    def __init__(self, written):
        Exception.__init__(self, written)
        self.written = written


class BadPayload(Exception):
    """The payload is not one this module wrote."""


def run(command, namespace):
    """Carries out one state command of the shim; returns its report."""
    kind = command.get("type")
    try:
        if kind == "snapshot":
            return save(namespace, str(command["path"]), int(command["max_bytes"]))
        if kind == "restore":
            return load(namespace, str(command["path"]), int(command["len"]),
                        bool(command.get("replace")))
        return {"names": list_names(namespace)}
    except TooBig as too_big:
        return {"too_big": too_big.written}
    except BadPayload as error:
        return {"failed": "the snapshot cannot be read: %s" % error}
    except OSError as error:
        return {"failed": "cannot use the snapshot file: %s" % error}


def user_names(namespace):
    """The names the cells made: not dunder names, not builtins re-exported, not the runner's
    (nor the history's: `In`, `Out`, `_`, `_5`, `_i5`, ...)."""
    names = []
    notebook = sys.modules.get("cellvisor_notebook")
    shells = sys.modules.get("cellvisor_shell")
    hidden = shells.hidden_names() if shells is not None else {}
    for name, value in list(namespace.items()):
        if not isinstance(name, str) or (name.startswith("__") and name.endswith("__")):
            continue
        if name in RUNNER_NAMES or getattr(builtins, name, _MISSING) is value:
            continue
        if hidden.get(name, _MISSING) is value:
            continue  # IPython's shell put it there (`get_ipython`, `exit`, `_dh`, ...)
        if notebook is not None and notebook.is_history_name(name):
            continue
        names.append(name)
    return names


# ---- how each name is kept ------------------------------------------------------------------


def _by_value_library():
    """cloudpickle or dill, whichever the session's interpreter has (None: neither)."""
    for name in ("cloudpickle", "dill"):
        try:
            return __import__(name)
        except Exception:
            continue
    return None


def _is_cell_code(value):
    """A function or class defined by a cell (not imported from a module)."""
    if isinstance(value, (types.FunctionType, type)):
        return getattr(value, "__module__", None) == "__main__"
    return False


def _unsaveable(value):
    """Why a value of a kind that never pickles cannot be saved, or None."""
    if isinstance(value, (types.GeneratorType, types.AsyncGeneratorType)):
        return "generators cannot be saved"
    if isinstance(value, types.CoroutineType):
        return "coroutines cannot be saved"
    if isinstance(value, io.IOBase) and not isinstance(value, (io.BytesIO, io.StringIO)):
        return "open files cannot be saved"
    socket = sys.modules.get("socket")
    if socket is not None and isinstance(value, socket.socket):
        return "socket objects cannot be saved"
    threading = sys.modules.get("threading")
    if threading is not None and isinstance(value, threading.Thread):
        return "threads cannot be saved"
    kind = type(value)
    if kind.__module__ == "_thread" and "lock" in kind.__name__.lower():
        return "locks cannot be saved"
    return None


def _plan(namespace, library):
    """(modules, code, values, skipped): the user names in restore order, and those that
    cannot be saved with the reason."""
    modules, code, values, skipped = [], [], [], []
    for name in user_names(namespace):
        value = namespace[name]
        if isinstance(value, types.ModuleType):
            why = _module_unsaveable(value)
            if why:
                skipped.append({"name": name, "why": why})
            else:
                modules.append(name)
        elif _is_cell_code(value):
            why = None if library is not None else _source_unsaveable(value)
            if why:
                skipped.append({"name": name, "why": why})
            else:
                code.append(name)
        else:
            why = _unsaveable(value)
            if why:
                skipped.append({"name": name, "why": why})
            else:
                values.append(name)
    return modules, code, values, skipped


def _module_unsaveable(module):
    name = getattr(module, "__name__", None)
    if not isinstance(name, str) or sys.modules.get(name) is not module:
        return "a module made at run time cannot be imported again"
    if getattr(module, "__spec__", None) is None and name != "__main__":
        return "a module made at run time cannot be imported again"
    return None


# ---- source text ----------------------------------------------------------------------------


def _source_unsaveable(value):
    try:
        _source_of(value)
    except _NoSource as why:
        return str(why)
    return None


class _NoSource(Exception):
    """Why a function or class cannot be kept by its source text."""


def _source_of(value):
    """(source, filename, first line, name it defines) of a cell's function or class."""
    if isinstance(value, type):
        return _class_source(value)
    if value.__closure__:
        raise _NoSource("a function that uses variables of an enclosing function cannot be "
                        "saved without cloudpickle or dill")
    import inspect
    import textwrap

    try:
        lines, first = inspect.getsourcelines(value)
    except (OSError, TypeError):
        raise _NoSource("its source text is no longer kept") from None
    source = textwrap.dedent("".join(lines))
    filename = value.__code__.co_filename
    if value.__name__ != "<lambda>":
        return source, filename, first, value.__name__
    return _lambda_source(source), filename, first, "<lambda>"


def _lambda_source(block):
    import ast

    try:
        tree = ast.parse(block)
    except SyntaxError:
        raise _NoSource("its source text cannot be told apart from its line") from None
    found = [node for node in ast.walk(tree) if isinstance(node, ast.Lambda) and node.lineno == 1]
    if len(found) != 1:
        raise _NoSource("a lambda that shares its line with another cannot be saved by "
                        "source text (cloudpickle or dill would save it)")
    return ast.get_source_segment(block, found[0])


def _cell_files():
    """The kept cell sources in linecache, newest first."""
    def order(filename):
        number = filename[6:-1].split(" ")[0]
        return (not filename.startswith("<restored"), int(number) if number.isdigit() else -1)
    files = [f for f in list(linecache.cache) if isinstance(f, str) and f.endswith(">")
             and (f.startswith("<cell ") or f.startswith("<restored <cell "))]
    return sorted(files, key=lambda f: order(f.replace("<restored ", "", 1)), reverse=True)


def _class_source(cls):
    """A cell's class statement: found in the cell its methods come from, else in the newest
    kept cell that defines a class of that name at its top level."""
    import ast

    name = cls.__name__
    if cls.__qualname__ != name:
        raise _NoSource("a class defined inside a function cannot be saved by source text")
    files = _cell_files()
    for attribute in vars(cls).values():
        code = getattr(getattr(attribute, "__func__", attribute), "__code__", None)
        if code is not None and code.co_filename in files:
            files.remove(code.co_filename)
            files.insert(0, code.co_filename)
            break
    for filename in files:
        text = "".join(linecache.cache[filename][2])
        if ("class " + name) not in text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = text.splitlines(True)[first - 1:node.end_lineno]
                return "".join(lines), filename, first, name
    raise _NoSource("its source text is no longer kept")


def _define_from_source(source, filename, first, defines, namespace):
    """Runs a function's or class's source in the namespace; returns what it defined, kept
    in linecache under a restored name so tracebacks (and the next snapshot) find it."""
    restored = filename if filename.startswith("<restored ") else RESTORED_FILE % filename
    padded = "\n" * (first - 1) + source
    linecache.cache[restored] = (len(padded), None, padded.splitlines(True), restored)
    if defines == "<lambda>":
        return eval(compile(source, restored, "eval"), namespace)
    scratch = {}
    exec(compile(padded, restored, "exec"), namespace, scratch)
    return scratch[defines]


# ---- writing ------------------------------------------------------------------------------


class _Counted:
    """The payload file, counting what goes in and refusing to pass the cap."""

    def __init__(self, file, cap):
        self.file, self.cap, self.written = file, cap, len(MAGIC)
        file.write(MAGIC)

    def reserve(self, size):
        if self.written + size > self.cap:
            raise TooBig(self.written + size)

    def write(self, data):
        size = memoryview(data).nbytes
        self.reserve(size)
        self.file.write(data)
        self.written += size


class _InbandSink(io.RawIOBase):
    """Where a pickle's in-band bytes collect, counted against the payload's room."""

    def __init__(self, payload):
        self.payload, self.chunks, self.size = payload, [], 0

    def writable(self):
        return True

    def write(self, data):
        size = memoryview(data).nbytes
        self.size += size
        self.payload.reserve(self.size)
        self.chunks.append(bytes(data))
        return size


def _pickle_value(value, payload, pickler_class):
    """Pickles one value: in-band bytes and the out-of-band buffers (never copied)."""
    sink = _InbandSink(payload)
    buffers = []
    room = [sink.size]

    def keep_out_of_band(buffer):
        raw = buffer.raw()
        room[0] += raw.nbytes
        payload.reserve(sink.size + room[0])
        buffers.append(raw)
        return False

    pickler_class(sink, protocol=5, buffer_callback=keep_out_of_band).dump(value)
    return b"".join(sink.chunks), buffers


def _write_record(payload, header, inband, buffers=()):
    header = dict(header, inband=len(inband), buffers=[b.nbytes for b in buffers])
    encoded = json.dumps(header).encode("utf-8")
    payload.reserve(_LENGTH.size + len(encoded) + len(inband) + sum(b.nbytes for b in buffers))
    payload.write(_LENGTH.pack(len(encoded)))
    payload.write(encoded)
    for buffer in buffers:
        payload.write(buffer)
    payload.write(inband)


def _value_pickler(library, namespace):
    """The pickler of values: with cloudpickle, one that keeps a cell's function or class
    that the namespace holds under its own name by reference, so a value that uses it shares
    it after a restore (and `isinstance` holds); plain pickle does that already."""
    base = getattr(library, "CloudPickler", None) if library is not None else None
    if base is None or not hasattr(base, "reducer_override"):
        return pickle.Pickler

    class ValuePickler(base):
        def reducer_override(self, obj):
            if _is_cell_code(obj) and namespace.get(getattr(obj, "__name__", "")) is obj:
                return NotImplemented
            return base.reducer_override(self, obj)

    return ValuePickler


def _why_not(error):
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def save(namespace, path, max_bytes):
    """Writes the user names into `path`; the report lists what was kept and skipped."""
    library = _by_value_library()
    modules, code, values, skipped = _plan(namespace, library)
    saved = []
    with open(path, "wb") as file:
        payload = _Counted(file, max_bytes)
        for name in modules:
            _write_record(payload, {"name": name, "how": "module",
                                    "module": namespace[name].__name__}, b"")
            saved.append(name + " (module)")
        value_pickler = _value_pickler(library, namespace)
        for name in code + values:
            value = namespace[name]
            try:
                if name in code and library is None:
                    source, filename, first, defines = _source_of(value)
                    header = {"name": name, "how": "source", "filename": filename,
                              "line": first, "defines": defines}
                    inband, buffers = source.encode("utf-8"), ()
                elif name in code:
                    inband, buffers = library.dumps(value, protocol=5), ()
                    header = {"name": name, "how": "pickle", "code": True}
                else:
                    inband, buffers = _pickle_value(value, payload, value_pickler)
                    header = {"name": name, "how": "pickle"}
            except TooBig:
                raise
            except _NoSource as why:
                skipped.append({"name": name, "why": str(why)})
                continue
            except Exception as error:
                skipped.append({"name": name, "why": _why_not(error)})
                continue
            _write_record(payload, header, inband, buffers)
            saved.append(name)
        payload.write(_LENGTH.pack(0))
    return {"saved": saved, "skipped": skipped}


# ---- reading ------------------------------------------------------------------------------


class _Bounded:
    """The payload's first `length` bytes, read exactly: the trailer after them is not ours."""

    def __init__(self, file, length):
        self.file, self.left = file, length

    def read_into(self, size):
        if size > self.left:
            raise BadPayload("it ends in the middle of a name")
        data = bytearray(size)
        view, done = memoryview(data), 0
        while done < size:
            got = self.file.readinto(view[done:])
            if not got:
                raise BadPayload("the file is shorter than its payload")
            done += got
        self.left -= size
        return data

    def skip(self, size):
        if size > self.left:
            raise BadPayload("it ends in the middle of a name")
        self.file.seek(size, os.SEEK_CUR)
        self.left -= size
        return None


def _records(reader, bodies=True):
    """(header, buffers, inband) of each record, until the end mark; without `bodies` the
    buffers and inband bytes are passed over (None), to check the payload's shape."""
    take = reader.read_into if bodies else reader.skip
    if bytes(reader.read_into(len(MAGIC))) != MAGIC:
        raise BadPayload("it was not written by cellvisor's Python worker")
    while True:
        (size,) = _LENGTH.unpack(reader.read_into(_LENGTH.size))
        if size == 0:
            return
        try:
            header = json.loads(bytes(reader.read_into(size)).decode("utf-8"))
            name, how = str(header["name"]), str(header["how"])
            lengths = [int(n) for n in header.get("buffers", [])]
            inband_size = int(header.get("inband", 0))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise BadPayload("a record's header is damaged") from None
        if min(lengths + [inband_size, 0]) < 0:
            raise BadPayload("a record's header is damaged")
        buffers = [take(n) for n in lengths]
        inband = take(inband_size)
        yield dict(header, name=name, how=how), buffers, bytes(inband) if bodies else None


def _rebind(value, namespace):
    """A function restored by value, rebuilt over the namespace as its globals (by value it
    came with a copy of the globals it read); a class gets its methods rebuilt so."""
    if isinstance(value, types.FunctionType):
        if value.__globals__ is namespace:
            return value
        fresh = types.FunctionType(value.__code__, namespace, value.__name__,
                                   value.__defaults__, value.__closure__)
        fresh.__kwdefaults__ = value.__kwdefaults__
        fresh.__dict__.update(value.__dict__)
        for attribute in ("__qualname__", "__doc__", "__module__", "__annotations__"):
            try:
                setattr(fresh, attribute, getattr(value, attribute))
            except (AttributeError, TypeError):
                pass
        return fresh
    if isinstance(value, type):
        for key, member in list(vars(value).items()):
            if isinstance(member, types.FunctionType):
                rebuilt = _rebind(member, namespace)
            elif isinstance(member, (staticmethod, classmethod)):
                rebuilt = type(member)(_rebind(member.__func__, namespace))
            elif isinstance(member, property):
                rebuilt = property(*(_rebind(f, namespace) if f else None
                                     for f in (member.fget, member.fset, member.fdel)),
                                   member.__doc__)
            else:
                continue
            try:
                setattr(value, key, rebuilt)
            except (AttributeError, TypeError):
                pass
    return value


def _restore_one(header, buffers, inband, namespace):
    """The value of one record (raises on failure)."""
    how = header["how"]
    if how == "module":
        import importlib

        return importlib.import_module(str(header["module"]))
    if how == "source":
        return _define_from_source(inband.decode("utf-8"), str(header["filename"]),
                                   max(1, int(header["line"])), str(header["defines"]),
                                   namespace)
    if how == "pickle":
        value = pickle.loads(inband, buffers=buffers)
        return _rebind(value, namespace) if header.get("code") else value
    raise BadPayload("a record of an unknown kind (%s)" % how)


def load(namespace, path, length, replace):
    """Reads the user names back from the first `length` bytes of `path`."""
    restored, skipped, deferred = [], [], []
    with open(path, "rb") as file:
        # The whole payload's shape first: one that is not ours changes nothing.
        for _ in _records(_Bounded(file, length), bodies=False):
            pass
        file.seek(0)
        if replace:
            for name in user_names(namespace):
                del namespace[name]
        for header, buffers, inband in _records(_Bounded(file, length)):
            name = header["name"]
            try:
                namespace[name] = _restore_one(header, buffers, inband, namespace)
            except BadPayload:
                raise
            except Exception as error:
                if header["how"] == "source" and isinstance(error, NameError):
                    deferred.append((header, buffers, inband, error))
                    continue
                skipped.append({"name": name, "why": "not restored: " + _why_not(error)})
                continue
            restored.append(name + " (module)" if header["how"] == "module" else name)
    # A function or class whose statement needs a name restored after it (a decorator, a
    # base class) gets a second try once the others are in.
    for header, buffers, inband, error in deferred:
        try:
            namespace[header["name"]] = _restore_one(header, buffers, inband, namespace)
            restored.append(header["name"])
        except Exception as error:
            skipped.append({"name": header["name"], "why": "not restored: " + _why_not(error)})
    return {"restored": restored, "skipped": skipped}


# ---- listing ------------------------------------------------------------------------------


class _NullSink(io.RawIOBase):
    def writable(self):
        return True

    def write(self, data):
        return memoryview(data).nbytes


def _size_of(value):
    """Bytes the value holds: NumPy's and pandas' own measures, else sys.getsizeof."""
    module = type(value).__module__ or ""
    try:
        if module.startswith("pandas") and hasattr(value, "memory_usage"):
            usage = value.memory_usage(deep=True)
            return int(usage.sum() if hasattr(usage, "sum") else usage)
        if module.startswith("numpy") and hasattr(value, "nbytes"):
            return int(value.nbytes)
        if isinstance(value, types.ModuleType):
            return None
        return int(sys.getsizeof(value))
    except Exception:
        return None


def _kind_of(value):
    if isinstance(value, type):
        return "class"
    return type(value).__name__


def list_names(namespace):
    """Each user name with its type, size and whether (and how) a snapshot would keep it."""
    library = _by_value_library()
    modules, code, values, skipped = _plan(namespace, library)
    reasons = {entry["name"]: entry["why"] for entry in skipped}
    value_pickler = _value_pickler(library, namespace)
    listed = []
    for name in user_names(namespace):
        value = namespace[name]
        note = reasons.get(name)
        if name in modules:
            note = "by import of " + value.__name__
        elif name in code:
            note = ("by value (%s)" % library.__name__) if library else "by source text"
        elif name in values:
            try:
                value_pickler(_NullSink(), protocol=5, buffer_callback=lambda b: False).dump(value)
            except Exception as error:
                note = _why_not(error)
        listed.append({"name": name, "kind": _kind_of(value), "size_bytes": _size_of(value),
                       "saveable": name not in reasons and (name not in values or note is None),
                       "note": note})
    return listed
