"""cellvisor's `IPython` package for an interpreter without IPython, so code written for
IPython keeps working: `IPython`, `IPython.display`, `IPython.core`, `IPython.core.display`,
`IPython.core.display_functions` and `IPython.core.getipython`, with IPython's `display`
(`raw`, `include`, `exclude`, `display_id` and its `DisplayHandle`, `clear`),
`update_display`, `publish_display_data`, `clear_output`, the display objects of
cellvisor_ipython_objects, and `get_ipython()` answering the emulation's shell.

Reachable only through cellvisor_shell's finder, which sits last on `sys.meta_path`: a real
IPython, installed from the start or later, is always found first. Which shell runs the
cells is decided before the finder is there. Metadata (`metadata=`, a repr's second item)
is accepted and not sent: cellvisor's bundles carry data alone.
"""

import importlib.machinery
import os
import sys
from binascii import b2a_hex

import cellvisor_ipython_objects as _objects  # beside this module, as it was imported
from cellvisor_ipython_objects import (  # noqa: F401 - the names IPython.display has
    HTML, JSON, SVG, DisplayObject, Image, Javascript, Latex, Markdown, Math, Pretty,
    TextDisplayObject)

ORIGIN = "cellvisor"  # the specs' origin, which tells the shim from a real IPython
# IPython's formatters in its order, after `_repr_mimebundle_`, `text/plain` last here.
_FORMATTERS = (("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"),
               ("image/svg+xml", "_repr_svg_"), ("image/png", "_repr_png_"),
               ("application/pdf", "_repr_pdf_"), ("image/jpeg", "_repr_jpeg_"),
               ("text/latex", "_repr_latex_"), ("application/json", "_repr_json_"),
               ("application/javascript", "_repr_javascript_"))


def _prelude():
    return sys.modules["cellvisor_prelude"]


def get_ipython():
    """The worker's shell (cellvisor's IPython emulation; see `cellvisor_ipython`)."""
    return sys.modules["cellvisor_notebook"].get_ipython()


def _new_id():
    """A new random display id, as IPython makes them."""
    return b2a_hex(os.urandom(16)).decode("ascii")


def publish_display_data(data, metadata=None, source=None, *, transient=None, **kwargs):
    """Sends the MIME bundle `data` as a display of the running cell (`transient` may name
    its `display_id`; `update=True` replaces that display's data)."""
    get_ipython().display_pub.publish(data=data, metadata=metadata, transient=transient,
                                      **kwargs)


def _method(obj, name):
    """`obj`'s repr method `name`, as IPython looks for it (never a class's)."""
    if isinstance(obj, type):  # inspect.isclass, without importing inspect
        return None
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def _call(method, *args, **kwargs):
    """The method's data (a `(data, metadata)` pair's data), or None; errors are printed
    with their traceback, as IPython's formatters do, and the display goes on without."""
    try:
        data = method(*args, **kwargs)
    except NotImplementedError:
        return None
    except Exception:
        import traceback

        traceback.print_exc()
        return None
    if isinstance(data, tuple) and len(data) == 2:
        data = data[0]
    return data


def format_display_data(obj, include=None, exclude=None):
    """The MIME bundle IPython's display formatter makes of `obj` (empty when its
    `_ipython_display_` showed it): `_repr_mimebundle_`, then each `_repr_*_` method for
    the types the bundle lacks, then `text/plain` as IPython pretty-prints it."""
    display_method = _method(obj, "_ipython_display_")
    if display_method is not None:
        display_method()
        return {}
    wanted = (lambda mime: (not include or mime in include)
              and (not exclude or mime not in exclude))
    bundle = {}
    mimebundle = _method(obj, "_repr_mimebundle_")
    if mimebundle is not None:
        data = _call(mimebundle, include=include, exclude=exclude)
        if isinstance(data, dict):
            bundle.update((mime, value) for mime, value in data.items() if wanted(mime))
    for mime, name in _FORMATTERS:
        method = _method(obj, name) if mime not in bundle and wanted(mime) else None
        data = _call(method) if method is not None else None
        if data is not None:
            bundle[mime] = data
    if "text/plain" not in bundle and wanted("text/plain"):
        bundle["text/plain"] = _pretty_text(obj)
    return bundle


def _pretty_text(obj):
    """`obj`'s text as IPython pretty-prints it (`_repr_pretty_` included)."""
    try:
        return _prelude()._host.import_beside("cellvisor_pretty").text(obj)
    except Exception:
        import traceback

        traceback.print_exc()
        return object.__repr__(obj)


def display(*objs, include=None, exclude=None, metadata=None, transient=None,
            display_id=None, raw=False, clear=False, **kwargs):
    """Shows `objs` as displays of the running cell, as IPython's `display`: each object's
    MIME bundle (with `raw=True`, each object is a bundle, shown as given); `display_id`
    (True for a new one) names the display for later updates and returns its
    DisplayHandle, otherwise None; `clear` clears the cell's output first (at the next
    output, as `clear_output(wait=True)`)."""
    transient = {} if transient is None else transient
    if display_id:
        if display_id is True:
            display_id = _new_id()
        transient["display_id"] = display_id
    if kwargs.get("update") and "display_id" not in transient:
        raise TypeError("display_id required for update_display")
    if transient:
        kwargs["transient"] = transient
    if not objs and display_id:
        objs, raw = [{}], True  # a display to fill in later
    if clear:
        clear_output(wait=True)
    for obj in objs:
        if raw:
            publish_display_data(data=obj, metadata=metadata, **kwargs)
            continue
        bundle = format_display_data(obj, include=include, exclude=exclude)
        if bundle:
            publish_display_data(data=bundle, metadata=metadata, **kwargs)
    if display_id:
        return DisplayHandle(display_id)
    return None


def update_display(obj, *, display_id, **kwargs):
    """Replaces the data of the display named `display_id` with `obj`'s."""
    kwargs["update"] = True
    display(obj, display_id=display_id, **kwargs)


class DisplayHandle:
    """A display that can be shown again (`display`) and replaced (`update`) later."""

    def __init__(self, display_id=None):
        self.display_id = _new_id() if display_id is None else display_id

    def __repr__(self):
        return "<%s display_id=%s>" % (self.__class__.__name__, self.display_id)

    def display(self, obj, **kwargs):
        """Shows `obj` as a new output under this display's id."""
        display(obj, display_id=self.display_id, **kwargs)

    def update(self, obj, **kwargs):
        """Replaces this display's data with `obj`'s, wherever it is shown."""
        update_display(obj, display_id=self.display_id, **kwargs)


def clear_output(wait=False):
    """Clears the running cell's output so far (with `wait`: when the next output comes)."""
    get_ipython().display_pub.clear_output(wait)


for _function in (display, update_display, publish_display_data, clear_output, get_ipython,
                  format_display_data):
    _function.__module__ = "IPython.core.display_functions"
DisplayHandle.__module__ = "IPython.core.display_functions"

_DISPLAY_NAMES = ("display", "update_display", "publish_display_data", "clear_output",
                  "DisplayHandle", "format_display_data") + tuple(_objects.__all__)
# The shim's modules: whether each is a package, and the names it holds.
MODULES = {
    "IPython": (True, ("get_ipython", "display")),
    "IPython.display": (False, _DISPLAY_NAMES),
    "IPython.core": (True, ()),
    "IPython.core.display": (False, _DISPLAY_NAMES),
    "IPython.core.display_functions": (False, _DISPLAY_NAMES[:6]),
    "IPython.core.getipython": (False, ("get_ipython",)),
}


class _Loader:
    """Fills each of the shim's modules with its names from this module."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        is_package, names = MODULES[module.__name__]
        for name in names:
            setattr(module, name, globals()[name])
        module.__cellvisor_shim__ = True
        if module.__name__ == "IPython":
            module.__doc__ = ("cellvisor's IPython shim: this interpreter has no IPython. "
                              "IPython.display and get_ipython() work; `%pip install "
                              "ipython` brings the real one.")


def find_spec(fullname):
    """The spec of the shim's module `fullname`, or None for a module it does not have."""
    if fullname not in MODULES:
        return None
    return importlib.machinery.ModuleSpec(fullname, _Loader(), origin=ORIGIN,
                                          is_package=MODULES[fullname][0])


def forget_if_shadowed():
    """When a real IPython can be imported now (installed since the shim was imported),
    drops the shim's modules, so the next `import IPython` gets the real one. Objects made
    from the shim's classes meanwhile go on working."""
    if not getattr(sys.modules.get("IPython"), "__cellvisor_shim__", False):
        return False
    importlib.invalidate_caches()
    if sys.modules["cellvisor_shell"].real_ipython_spec() is None:
        return False
    for name in MODULES:
        if getattr(sys.modules.get(name), "__cellvisor_shim__", False):
            del sys.modules[name]
    return True
