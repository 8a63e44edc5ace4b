"""The display objects of cellvisor's `IPython` shim (see cellvisor_ipython_shim): `HTML`,
`Markdown`, `Math`, `Latex`, `Pretty`, `SVG`, `JSON`, `Javascript` and `Image`, as
`IPython.core.display` defines them: the same constructors (data, url or filename), the
same `_repr_*_` methods and the same errors, so code written for IPython shows the same
bundles. Their classes say `IPython.core.display`, as IPython's do (their reprs, and where
pickle looks for them).
"""

import json
import os
import sys
import warnings
from binascii import b2a_base64
from os.path import splitext

_MODULE = "IPython.core.display"
# Imported where used (copy, html, pathlib, struct): the shim's first import stays cheap.


def _path_text(data):
    """`data` as text when it is a `pathlib` path (a module no cell imported holds none)."""
    pathlib = sys.modules.get("pathlib")
    return str(data) if pathlib is not None and isinstance(data, pathlib.PurePath) else data


def _deepcopy(value):
    import copy

    return copy.deepcopy(value)


def _safe_exists(path):
    """`os.path.exists` that never raises (a data string is no path)."""
    try:
        return os.path.exists(path)
    except Exception:
        return False


class DisplayObject:
    """An object that wraps data to be displayed."""

    _read_flags = "r"
    _show_mem_addr = False
    metadata = None

    def __init__(self, data=None, url=None, filename=None, metadata=None):
        data = _path_text(data)
        if data is not None and isinstance(data, str):
            if data.startswith("http") and url is None:
                url, filename, data = data, None, None
            elif _safe_exists(data) and filename is None:
                url, filename, data = None, data, None
        self.url = url
        self.filename = filename
        # url and filename first: subclasses' data setters read them.
        self.data = data
        if metadata is not None:
            self.metadata = metadata
        elif self.metadata is None:
            self.metadata = {}
        self.reload()
        self._check_data()

    def __repr__(self):
        if self._show_mem_addr:
            return object.__repr__(self)
        cls = self.__class__
        return "<%s.%s object>" % (cls.__module__, cls.__name__)

    def _check_data(self):
        """Overridden where the data has a type to check."""

    def _data_and_metadata(self):
        if self.metadata:
            return self.data, _deepcopy(self.metadata)
        return self.data

    def reload(self):
        """Reloads the data from the file or the URL."""
        if self.filename is not None:
            encoding = None if "b" in self._read_flags else "utf-8"
            with open(self.filename, self._read_flags, encoding=encoding) as file:
                self.data = file.read()
        elif self.url is not None:
            from urllib.request import urlopen

            response = urlopen(self.url)
            data = response.read()
            encoding = None
            for part in response.headers.get("content-type", "").split(";"):
                part = part.strip()
                if part.startswith("charset"):
                    encoding = part.split("=")[-1].strip()
                    break
            if "gzip" in response.headers.get("content-encoding", ""):
                import gzip
                from io import BytesIO

                with gzip.open(BytesIO(data), "rt", encoding=encoding or "utf-8") as file:
                    encoding, data = None, file.read()
            self.data = data.decode(encoding, "replace") if encoding else data


class TextDisplayObject(DisplayObject):
    """A display object whose data is text."""

    def _check_data(self):
        if self.data is not None and not isinstance(self.data, str):
            raise TypeError("%s expects text, not %r" % (self.__class__.__name__, self.data))


class Pretty(TextDisplayObject):
    """Text shown as the plain text of a display."""

    def _repr_pretty_(self, pp, cycle):
        return pp.text(self.data)


class HTML(TextDisplayObject):
    """HTML shown as `text/html`."""

    def __init__(self, data=None, url=None, filename=None, metadata=None):
        if data and data[:10].lower().startswith("<iframe ") \
                and data[-10:].lower().endswith("</iframe>"):
            warnings.warn("Consider using IPython.display.IFrame instead")
        super().__init__(data=data, url=url, filename=filename, metadata=metadata)

    def _repr_html_(self):
        return self._data_and_metadata()

    def __html__(self):
        """Tells HTML-aware libraries (MarkupSafe, ...) that this needs no escaping."""
        return self._repr_html_()


class Markdown(TextDisplayObject):
    """Markdown shown as `text/markdown`."""

    def _repr_markdown_(self):
        return self._data_and_metadata()


class Math(TextDisplayObject):
    """A LaTeX formula shown as `text/latex`, in display style."""

    def _repr_latex_(self):
        text = r"$\displaystyle %s$" % self.data.strip("$")
        return (text, _deepcopy(self.metadata)) if self.metadata else text


class Latex(TextDisplayObject):
    """LaTeX shown as `text/latex` as given."""

    def _repr_latex_(self):
        return self._data_and_metadata()


class SVG(DisplayObject):
    """An SVG image shown as `image/svg+xml` (its `<svg>` element, headers left out)."""

    _read_flags = "rb"
    _data = None

    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, svg):
        if svg is None:
            self._data = None
            return
        from xml.dom import minidom

        found = minidom.parseString(svg).getElementsByTagName("svg")
        if found:
            svg = found[0].toxml()
        self._data = svg.decode("utf-8") if isinstance(svg, bytes) else svg

    def _repr_svg_(self):
        return self._data_and_metadata()


class JSON(DisplayObject):
    """A dict or list shown as `application/json` (not an already serialised string)."""

    _data = None

    def __init__(self, data=None, url=None, filename=None, expanded=False, metadata=None,
                 root="root", **kwargs):
        self.metadata = {"expanded": expanded, "root": root}
        if metadata:
            self.metadata.update(metadata)
        if kwargs:
            self.metadata.update(kwargs)
        super().__init__(data=data, url=url, filename=filename)

    def _check_data(self):
        if self.data is not None and not isinstance(self.data, (dict, list)):
            raise TypeError("%s expects JSONable dict or list, not %r"
                            % (self.__class__.__name__, self.data))

    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, data):
        data = _path_text(data)
        if isinstance(data, str):
            if self.filename is None and self.url is None:
                warnings.warn("JSON expects JSONable dict or list, not JSON strings")
            data = json.loads(data)
        self._data = data

    def _data_and_metadata(self):
        return self.data, self.metadata

    def _repr_json_(self):
        return self._data_and_metadata()


_CSS = """var link = document.createElement("link");
\tlink.rel = "stylesheet";
\tlink.type = "text/css";
\tlink.href = "%s";
\tdocument.head.appendChild(link);
"""
_LIB_START = """new Promise(function(resolve, reject) {
\tvar script = document.createElement("script");
\tscript.onload = resolve;
\tscript.onerror = reject;
\tscript.src = "%s";
\tdocument.head.appendChild(script);
}).then(() => {
"""
_LIB_END = """
});"""


class Javascript(TextDisplayObject):
    """JavaScript shown as `application/javascript`, after the libraries and CSS given."""

    def __init__(self, data=None, url=None, filename=None, lib=None, css=None):
        lib = [lib] if isinstance(lib, str) else [] if lib is None else lib
        css = [css] if isinstance(css, str) else [] if css is None else css
        if not isinstance(lib, (list, tuple)):
            raise TypeError("expected sequence, got: %r" % lib)
        if not isinstance(css, (list, tuple)):
            raise TypeError("expected sequence, got: %r" % css)
        self.lib = lib
        self.css = css
        super().__init__(data=data, url=url, filename=filename)

    def _repr_javascript_(self):
        text = "".join(_CSS % c for c in self.css) + "".join(_LIB_START % l for l in self.lib)
        return text + self.data + _LIB_END * len(self.lib)


_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8"


def _pngxy(data):
    """(width, height) from a PNG's header."""
    import struct

    ihdr = data.index(b"IHDR")
    return struct.unpack(">ii", data[ihdr + 4:ihdr + 12])


def _jpegxy(data):
    """(width, height) from a JPEG's start-of-frame block."""
    import struct

    index = 4
    while True:
        index += struct.unpack(">H", data[index:index + 2])[0]
        if data[index:index + 2] == b"\xff\xc0":
            break
        index += 2
    height, width = struct.unpack(">HH", data[index + 5:index + 9])
    return width, height


def _gifxy(data):
    """(width, height) from a GIF's header."""
    import struct

    return struct.unpack("<HH", data[6:10])


class Image(DisplayObject):
    """A PNG, JPEG or GIF image from data, a file or a URL: embedded as base64 (`image/png`,
    `image/jpeg`, `image/gif`), or with `url=` and no `embed`, an `<img>` tag."""

    _read_flags = "rb"
    _FMT_JPEG = "jpeg"
    _FMT_PNG = "png"
    _FMT_GIF = "gif"
    _ACCEPTABLE_EMBEDDINGS = [_FMT_JPEG, _FMT_PNG, _FMT_GIF]
    _MIMETYPES = {_FMT_PNG: "image/png", _FMT_JPEG: "image/jpeg", _FMT_GIF: "image/gif"}

    def __init__(self, data=None, url=None, filename=None, format=None, embed=None,
                 width=None, height=None, retina=False, unconfined=False, metadata=None,
                 alt=None):
        data = _path_text(data)
        if filename is not None:
            ext = self._find_ext(filename)
        elif url is not None:
            ext = self._find_ext(url)
        elif data is None:
            raise ValueError("No image data found. Expecting filename, url, or data.")
        elif isinstance(data, str) and (data.startswith("http") or _safe_exists(data)):
            ext = self._find_ext(data)
        else:
            ext = None
        if format is None:
            if ext is not None:
                format = {"jpg": self._FMT_JPEG, "jpeg": self._FMT_JPEG, "png": self._FMT_PNG,
                          "gif": self._FMT_GIF}.get(ext, ext.lower())
            elif isinstance(data, bytes) and data[:2] == _JPEG:
                format = self._FMT_JPEG
        if format is None:
            format = self._FMT_PNG
        if format.lower() == "jpg":
            format = self._FMT_JPEG
        self.format = format.lower()
        self.embed = embed if embed is not None else (url is None)
        if self.embed and self.format not in self._ACCEPTABLE_EMBEDDINGS:
            raise ValueError("Cannot embed the '%s' image format" % (self.format))
        if self.embed:
            self._mimetype = self._MIMETYPES.get(self.format)
        self.width = width
        self.height = height
        self.retina = retina
        self.unconfined = unconfined
        self.alt = alt
        super().__init__(data=data, url=url, filename=filename, metadata=metadata)
        if self.width is None and self.metadata.get("width", {}):
            self.width = metadata["width"]
        if self.height is None and self.metadata.get("height", {}):
            self.height = metadata["height"]
        if self.alt is None and self.metadata.get("alt", {}):
            self.alt = metadata["alt"]
        if retina:
            self._retina_shape()

    def _retina_shape(self):
        """Half the image's measured width and height (embedded images only)."""
        if not self.embed:
            return
        measure = {self._FMT_PNG: _pngxy, self._FMT_JPEG: _jpegxy,
                   self._FMT_GIF: _gifxy}.get(self.format)
        if measure is not None:
            width, height = measure(self.data)
            self.width, self.height = width // 2, height // 2

    def reload(self):
        """Reloads the data from the file or URL (embedded images only)."""
        if self.embed:
            super().reload()
            if self.retina:
                self._retina_shape()

    def _repr_html_(self):
        if self.embed:
            return None
        import html

        width = ' width="%d"' % self.width if self.width else ""
        height = ' height="%d"' % self.height if self.height else ""
        klass = ' class="unconfined"' if self.unconfined else ""
        alt = ' alt="%s"' % html.escape(self.alt) if self.alt else ""
        return '<img src="{url}"{width}{height}{klass}{alt}/>'.format(
            url=self.url, width=width, height=height, klass=klass, alt=alt)

    def _repr_mimebundle_(self, include=None, exclude=None):
        if not self.embed:
            return {"text/html": self._repr_html_()}
        data, metadata = self._data_and_metadata(always_both=True)
        if metadata:
            metadata = {self._mimetype: metadata}
        return {self._mimetype: data}, metadata

    def _data_and_metadata(self, always_both=False):
        try:
            b64_data = b2a_base64(self.data, newline=False).decode("ascii")
        except TypeError as error:
            raise FileNotFoundError("No such file or directory: '%s'" % (self.data)) from error
        metadata = dict(self.metadata) if self.metadata else {}
        for key, value in (("width", self.width), ("height", self.height),
                           ("unconfined", self.unconfined), ("alt", self.alt)):
            if value:
                metadata[key] = value
        if metadata or always_both:
            return b64_data, metadata
        return b64_data

    def _repr_png_(self):
        if self.embed and self.format == self._FMT_PNG:
            return self._data_and_metadata()
        return None

    def _repr_jpeg_(self):
        if self.embed and self.format == self._FMT_JPEG:
            return self._data_and_metadata()
        return None

    def _find_ext(self, name):
        base, ext = splitext(name)
        return ext[1:].lower() if ext else base


__all__ = ["DisplayObject", "TextDisplayObject", "Pretty", "HTML", "Markdown", "Math",
           "Latex", "SVG", "JSON", "Javascript", "Image"]

for _name in __all__:
    globals()[_name].__module__ = _MODULE
