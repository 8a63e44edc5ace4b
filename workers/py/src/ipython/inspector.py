"""IPython's help: `obj?` (and `%pinfo obj`) prints an object's signature, docstring, file
and type, `obj??` (`%pinfo2`) its source as well, and `np.*cos*?` (`%psearch`) lists the
names a wildcard pattern matches. The fields, their order and their layout are IPython's
(`IPython.core.oinspect`), found with `inspect`, so they are the same with IPython
installed or not (without IPython's colours: hosts get text). Loaded by the first help
request of a session.
"""

import builtins
import os
import re
import sys
import types

STRING_MAX = 200  # `String form` past this is cut in the middle for `obj?`
_OBJECT_INIT_DOC = object.__init__.__doc__
_BUILTIN_TYPE_DOCS = set()
inspect = None  # the module, imported by the first help request (it costs milliseconds)


def _load():
    global inspect
    if inspect is None:
        import inspect as module

        _BUILTIN_TYPE_DOCS.update(module.getdoc(t) for t in (
            types.ModuleType, types.MethodType, types.FunctionType, property))
        inspect = module
_NAME = re.compile(r"^%{0,2}[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[-?\d+\])*$")


class _Found:
    def __init__(self, obj=None, found=False, namespace="", ismagic=False, isalias=False):
        self.obj, self.found, self.namespace = obj, found, namespace
        self.ismagic, self.isalias = ismagic, isalias


def pinfo(shell, line, detail=0):
    """Prints what IPython's `obj?` (`detail` 0) or `obj??` (1) prints."""
    _load()
    prefix, marks, name, trailing = re.match(r"(pinfo )?(\?*)(.*?)(\??$)", line.strip()).groups()
    if prefix or marks or trailing:
        detail = 1
    if "*" in name:
        return psearch(shell, name)
    found = _find(shell, name)
    if not found.found:
        print("Object `%s` not found." % name)
        return None
    print(_format(_fields(found, name, detail)))
    return None


def _find(shell, name):
    """The object `name` stands for: a dotted (or indexed) name in the cells' namespace or
    builtins, else a magic or a shell alias of that name."""
    name = name.strip()
    if not _NAME.match(name):
        return _Found()
    if not name.startswith("%"):
        parts = re.findall(r"[A-Za-z_]\w*|\[-?\d+\]", name)
        for space, namespace in (("Interactive", shell.user_ns),
                                 ("Python builtin", builtins.__dict__)):
            if parts[0] not in namespace:
                continue
            obj = namespace[parts[0]]
            try:
                for part in parts[1:]:
                    obj = obj[int(part[1:-1])] if part.startswith("[") else getattr(obj, part)
            except Exception:
                return _Found()
            return _Found(obj, True, space)
    bare = name.lstrip("%")
    kinds = ("cell",) if name.startswith("%%") else ("line", "cell")
    for kind in kinds:
        method = shell._magic_method(kind, bare)
        if method is not None:
            alias = sys.modules["cellvisor_magics"].ALIASES.get(bare) if kind == "line" else None
            if alias is not None:
                return _Found("<alias %s for %r>" % (bare, alias), True, "IPython internal",
                              ismagic=True, isalias=True)
            return _Found(method, True, "IPython internal", ismagic=True)
    return _Found()


def _getdoc(obj):
    try:
        doc = obj.getdoc()
    except Exception:
        pass
    else:
        if isinstance(doc, str):
            return inspect.cleandoc(doc)
    try:
        return inspect.getdoc(obj)
    except Exception:
        return None


def _signature(obj, name):
    """IPython's rendering of the call signature: one parameter a line past 75 columns."""
    if not callable(obj):
        return None
    try:
        sig = inspect.signature(obj)
    except Exception:
        return None
    result, pos_only, kw_only = [], False, True
    for param in sig.parameters.values():
        if param.kind == param.POSITIONAL_ONLY:
            pos_only = True
        elif pos_only:
            result.append("/")
            pos_only = False
        if param.kind == param.VAR_POSITIONAL:
            kw_only = False
        elif param.kind == param.KEYWORD_ONLY and kw_only:
            result.append("*")
            kw_only = False
        result.append(str(param))
    if pos_only:
        result.append("/")
    if len(name) + sum(len(r) + 2 for r in result) > 75:
        rendered = "%s(\n%s)" % (name, "".join("    %s,\n" % r for r in result))
    else:
        rendered = "%s(%s)" % (name, ", ".join(result))
    if sig.return_annotation is not inspect.Signature.empty:
        rendered += " -> %s" % inspect.formatannotation(sig.return_annotation)
    return rendered


def _unwrapped(obj):
    for _ in range(100):
        wrapped = getattr(obj, "__wrapped__", None) if not isinstance(obj, type) else None
        if wrapped is None or not callable(wrapped):
            return obj
        obj = wrapped
    return obj


def _file(obj):
    """Where `obj` (or its class) is defined: `<cell N>` for a cell's code."""
    obj = _unwrapped(obj)
    for target in (obj, getattr(obj, "__class__", None)):
        try:
            name = inspect.getsourcefile(target) or inspect.getfile(target)
        except (TypeError, OSError):
            continue
        if name.startswith("<"):
            return name
        return os.path.normcase(os.path.abspath(name))
    return None


def _source(obj):
    obj = _unwrapped(obj)
    try:
        return inspect.getsource(obj)
    except TypeError:
        try:
            return inspect.getsource(obj.__class__)
        except (OSError, TypeError):
            return None
    except OSError:
        return None


def _source_has_doc(source, doc):
    import ast
    import textwrap

    try:
        (node,) = ast.parse(textwrap.dedent(source)).body
        return ast.get_docstring(node) == doc
    except Exception:
        return False


def _simple_callable(obj):
    return inspect.isfunction(obj) or inspect.ismethod(obj) or \
        isinstance(obj, (types.BuiltinFunctionType, type(str.upper), type(all)))


def _fields(found, name, detail):
    """The (title, text) pairs IPython shows for the object, in its order."""
    obj = found.obj
    info = {}
    if found.isalias:
        return [("Repr", obj)]
    doc = _getdoc(obj)
    doc = "<no docstring>" if doc is None else doc
    info["type_name"] = ("Magic function" if found.ismagic else type(obj).__name__)
    try:
        text = str(obj)
        if not detail and len(text) > STRING_MAX:
            half = (STRING_MAX - 5) // 2
            text = text[:half] + " <...> " + text[-half:]
            text = ("\n" + " " * len("string_form")).join(q.strip() for q in text.split("\n"))
        info["string_form"] = text
    except Exception:
        pass
    try:
        info["length"] = str(len(obj))
    except Exception:
        pass
    filename = _file(obj)
    binary = filename is None or filename.endswith((".so", ".dll", ".pyd"))
    if filename is not None:
        home = os.path.expanduser("~")
        info["file"] = "~" + filename[len(home):] if home != "~" and \
            filename.startswith(home + os.sep) else filename
    if detail:
        import linecache

        linecache.checkcache()
        if isinstance(obj, property) or not binary:
            source = _source(obj)
            info["source"] = source.rstrip() if source is not None else None
    if doc and not _source_has_doc(info.get("source"), doc):
        info["docstring"] = doc
    if inspect.isclass(obj):
        info["isclass"] = True
        init_def = _signature(obj, name)
        init = getattr(obj, "__init__", None)
        if init is not None:
            init_def = init_def or _signature(init, name)
            init_doc = _getdoc(init)
            if init_doc and init_doc != _OBJECT_INIT_DOC:
                info["init_docstring"] = init_doc
        if init_def:
            info["init_definition"] = init_def
        try:
            names = [sub.__name__ for sub in type.__subclasses__(obj)]
        except TypeError:
            names = []
        info["subclasses"] = ", ".join(names if len(names) < 10 else names[:10] + ["..."])
    else:
        definition = _signature(obj, name)
        if definition:
            info["definition"] = definition
        if doc:
            class_doc = _getdoc(getattr(obj, "__class__", None))
            if class_doc and class_doc not in _BUILTIN_TYPE_DOCS and doc != class_doc:
                info["class_docstring"] = class_doc
        init_doc = _getdoc(getattr(obj, "__init__", None))
        if init_doc and init_doc != _OBJECT_INIT_DOC:
            info["init_docstring"] = init_doc
        if hasattr(obj, "__call__") and not _simple_callable(obj):
            call_def = _signature(obj.__call__, name)
            if call_def and call_def != info.get("definition"):
                info["call_def"] = call_def
            call_doc = _getdoc(obj.__call__)
            if call_doc and call_doc != type.__call__.__doc__ and \
                    call_doc != types.FunctionType.__call__.__doc__:
                info["call_docstring"] = call_doc
    return _layout(info, found, obj, detail)


def _layout(info, found, obj, detail):
    def take(*pairs):
        return [(title, info[key]) for title, key in pairs if info.get(key) is not None]

    source = detail and info.get("source")
    if found.ismagic:
        return take(("Source", "source") if detail else ("Docstring", "docstring"),
                    ("File", "file"))
    if info.get("isclass") or _simple_callable(obj):
        return take(("Signature", "definition"), ("Init signature", "init_definition"),
                    ("Docstring", "docstring"),
                    ("Source", "source") if source else ("Init docstring", "init_docstring"),
                    ("File", "file"), ("Type", "type_name"), ("Subclasses", "subclasses"))
    fields = take(("Signature", "definition"), ("Call signature", "call_def"),
                  ("Type", "type_name"), ("String form", "string_form"))
    if found.namespace != "Interactive":
        fields += [("Namespace", found.namespace)]
    return fields + take(("Length", "length"), ("File", "file"),
                         ("Source", "source") if source else ("Docstring", "docstring"),
                         ("Class docstring", "class_docstring"),
                         ("Init docstring", "init_docstring"),
                         ("Call docstring", "call_docstring"))


def _format(fields):
    """IPython's layout: titles padded to the longest, a multi-line text on its own lines."""
    width = max(len(title) for title, _ in fields)
    lines = []
    for title, text in fields:
        text = text.strip("\n")
        lines.append("%s:%s%s%s" % (title, " " * (width - len(title)),
                                    "\n" if "\n" in text else " ", text))
    return "\n".join(lines)


# --- wildcard search ---------------------------------------------------------------------


def _type_names():
    return {name[:-4].lower(): getattr(types, name) for name in dir(types)
            if name.endswith("Type")}


def psearch(shell, line):
    """Prints the names matching a pattern like `np.*cos*` (`%psearch [-a] [-i|-c]
    [-e NAMESPACE] PATTERN [TYPE]`), sorted, one a line."""
    import getopt
    import shlex

    try:
        opts, args = getopt.getopt(shlex.split(line), "cias:e:l")
    except (getopt.GetoptError, ValueError) as error:
        raise sys.modules["cellvisor_ipython"].UsageError("%%psearch: %s" % error) from None
    options = dict(opts)
    if "-l" in options:
        print("\n".join(sorted(_type_names())))
        return
    if len(args) not in (1, 2):
        raise ValueError("invalid argument string for psearch: <%s>" % " ".join(args))
    pattern, kind = args[0], args[1] if len(args) == 2 else "all"
    ignore_case = "-i" in options
    show_all = "-a" in options
    excluded = {value for key, value in opts if key == "-e"}
    spaces = [("user_local", shell.user_ns), ("user_global", shell.user_ns),
              ("builtin", builtins.__dict__)]
    found, seen = set(), set()
    for space, namespace in spaces:
        if space in excluded or id(namespace) in seen:
            continue
        seen.add(id(namespace))
        found.update(_list_namespace(namespace, kind, pattern, ignore_case, show_all))
    if found:
        print("\n".join(sorted(found)))


def _filter(namespace, pattern, kind, ignore_case, show_all):
    regex = re.compile(pattern.replace("*", ".*").replace("?", ".") + "$",
                       re.IGNORECASE if ignore_case else 0)
    wanted = None if kind == "all" else _type_names().get(kind, False)
    return {key: obj for key, obj in namespace.items()
            if isinstance(key, str) and regex.match(key)
            and (show_all or key.startswith("__") or not key.startswith("_"))
            and (wanted is None or (wanted and isinstance(obj, wanted)))}


def _list_namespace(namespace, kind, pattern, ignore_case, show_all):
    first, _, rest = pattern.partition(".")
    if not rest:
        return _filter(namespace, first, kind, ignore_case, show_all)
    results = {}
    for name, obj in _filter(namespace, first, "all", ignore_case, show_all).items():
        attributes = {}
        try:
            words = set(dir(obj)) | set(dir(obj.__class__))
        except Exception:
            words = set()
        for word in words:
            try:
                attributes[word] = getattr(obj, word)
            except Exception:
                continue
        for inner, value in _list_namespace(attributes, kind, rest, ignore_case,
                                            show_all).items():
            results["%s.%s" % (name, inner)] = value
    return results
