"""The client side of RFC 6455, free of I/O, for the daemon's `GET /v1/rpc` (docs/network.md):
the URL's parts, the upgrade request and the check of its answer, masked frames out and
frames in. The sync and asyncio transports only move the bytes."""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from .errors import ConnectError, ProtocolError
from .wire import MAX_MESSAGE_BYTES

_ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA
_CONTINUATION = 0x0
#: The most bytes of an HTTP answer's head (status line and headers) read before giving up.
MAX_HEAD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Url:
    """A daemon's WebSocket address: `ws://HOST[:PORT][/PATH]` or `wss://...`, the path
    `/v1/rpc` and the port 80 (ws) or 443 (wss) unless given."""

    text: str
    secure: bool
    host: str
    port: int
    target: str

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.secure else 80
        return host if self.port == default else f"{host}:{self.port}"


def parse_url(url: str) -> Url:
    """The parts of `url`, or a `ConnectError` saying what is wrong with it."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in ("ws", "wss"):
        raise ConnectError(f"bad daemon URL {url!r}: the scheme must be ws or wss (wss://HOST:PORT)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ConnectError(f"bad daemon URL {url!r}: {error}") from None
    if not parts.hostname:
        raise ConnectError(f"bad daemon URL {url!r}: it names no host (wss://HOST:PORT)")
    secure = scheme.lower() == "wss"
    target = parts.path or "/v1/rpc"
    if parts.query:
        target += "?" + parts.query
    return Url(url, secure, parts.hostname, port if port is not None else (443 if secure else 80), target)


def handshake(url: Url, token: Optional[str], session: Optional[str]) -> Tuple[bytes, str]:
    """The upgrade request's bytes and the key its answer must echo (hashed)."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {url.target} HTTP/1.1",
        f"Host: {url.host_header}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    if session is not None:
        lines.append(f"Cellvisor-Session: {session}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode(), key


@dataclass
class Answer:
    """The HTTP answer to the upgrade request: its status, headers (lower-case names) and
    how many body bytes follow the head (`Content-Length`, None when not given)."""

    status: int
    reason: str
    headers: Dict[str, str]

    @property
    def body_length(self) -> Optional[int]:
        try:
            return int(self.headers["content-length"])
        except (KeyError, ValueError):
            return None


def parse_answer(head: bytes, url: Url) -> Answer:
    """The answer's status and headers from its head (the bytes before the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/") or not status_line[1].isdigit():
        raise ConnectError(f"the WebSocket handshake with {url.text} failed: the answer is not HTTP "
                           f"({lines[0][:80]!r})")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return Answer(int(status_line[1]), status_line[2] if len(status_line) > 2 else "", headers)


def check_answer(answer: Answer, body: bytes, key: str, url: Url, token: Optional[str], token_source: str) -> None:
    """Raises `ConnectError` naming what to fix unless `answer` accepts the upgrade."""
    if answer.status == 401:
        if token is None:
            raise ConnectError(f"the daemon at {url.text} requires a token (401) and no token was given "
                               "(token= or token_file=)")
        raise ConnectError(f"the daemon at {url.text} refused the token from {token_source} (401): "
                           "it is not the daemon's token")
    if answer.status != 101:
        text = body.decode(errors="replace").strip()
        raise ConnectError(f"the daemon at {url.text} refused the connection: {answer.status} {text}".rstrip())
    expected = base64.b64encode(hashlib.sha1(key.encode() + _ACCEPT_GUID).digest()).decode()
    if answer.headers.get("sec-websocket-accept") != expected:
        raise ConnectError(f"the WebSocket handshake with {url.text} failed: the answer's "
                           "Sec-WebSocket-Accept does not match the key sent")
    if answer.headers.get("upgrade", "").lower() != "websocket":
        raise ConnectError(f"the WebSocket handshake with {url.text} failed: the answer upgrades to "
                           f"{answer.headers.get('upgrade')!r}, not websocket")


def _mask(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    if n == 0:
        return b""
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(stream, "little")).to_bytes(n, "little")


def frame(opcode: int, payload: bytes) -> bytes:
    """One final frame from the client: masked, as RFC 6455 requires of clients."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | opcode, 0x80 | n))
    elif n < 1 << 16:
        head = bytes((0x80 | opcode, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + n.to_bytes(8, "big")
    key = os.urandom(4)
    return head + key + _mask(payload, key)


def close_frame(code: int = 1000) -> bytes:
    return frame(CLOSE, code.to_bytes(2, "big"))


class FrameDecoder:
    """Frames from the daemon's bytes: `pop()` gives each whole message (fragments joined)
    and each control frame as (opcode, payload), or None until more bytes have come."""

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.data = bytearray()
        self.limit = limit
        self._opcode: Optional[int] = None
        self._parts: List[bytes] = []
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        self.data += chunk

    def _frame(self) -> Optional[Tuple[bool, int, bytes]]:
        data = self.data
        if len(data) < 2:
            return None
        first, second = data[0], data[1]
        if first & 0x70:
            raise ProtocolError("the daemon sent a WebSocket frame with reserved bits set (no extension was agreed)")
        length, pos = second & 0x7F, 2
        if length == 126:
            if len(data) < 4:
                return None
            length, pos = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            if len(data) < 10:
                return None
            length, pos = int.from_bytes(data[2:10], "big"), 10
        if length > self.limit:
            raise ProtocolError(f"the daemon sent a WebSocket frame of {length} bytes, over {self.limit}")
        key = None
        if second & 0x80:
            if len(data) < pos + 4:
                return None
            key, pos = bytes(data[pos:pos + 4]), pos + 4
        if len(data) < pos + length:
            return None
        payload = bytes(data[pos:pos + length])
        del data[:pos + length]
        if key is not None:
            payload = _mask(payload, key)
        return bool(first & 0x80), first & 0x0F, payload

    def pop(self) -> Optional[Tuple[int, bytes]]:
        while True:
            got = self._frame()
            if got is None:
                return None
            fin, opcode, payload = got
            if opcode >= 0x8:
                if not fin or len(payload) > 125:
                    raise ProtocolError("the daemon sent a fragmented or over-long WebSocket control frame")
                return opcode, payload
            if opcode == _CONTINUATION:
                if self._opcode is None:
                    raise ProtocolError("the daemon sent a WebSocket continuation frame with no message begun")
            elif opcode in (TEXT, BINARY):
                if self._opcode is not None:
                    raise ProtocolError("the daemon began a WebSocket message inside another one")
                self._opcode, self._parts, self._size = opcode, [], 0
            else:
                raise ProtocolError(f"the daemon sent a WebSocket frame of unknown opcode {opcode}")
            self._parts.append(payload)
            self._size += len(payload)
            if self._size > self.limit:
                raise ProtocolError(f"the daemon sent a WebSocket message over {self.limit} bytes")
            if fin:
                message = self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)
                opcode, self._opcode, self._parts = self._opcode, None, []
                return opcode, message


def read_token(token: Optional[str], token_file: Optional[str]) -> Tuple[Optional[str], str]:
    """The bearer token to send and where it came from (for the messages)."""
    if token is not None or token_file is None:
        return token, "token="
    try:
        with open(token_file) as f:
            text = f.read().strip()
    except OSError as error:
        raise ConnectError(f"cannot read the token file {token_file}: {error}") from None
    if not text:
        raise ConnectError(f"the token file {token_file} is empty")
    return text.splitlines()[0].strip(), f"token_file {token_file}"
