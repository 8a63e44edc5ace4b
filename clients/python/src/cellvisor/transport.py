"""The sync client's two ways to the daemon, each moving whole JSON-RPC messages: its Unix
socket (one message per line) and its network listener's WebSocket (one message per text
frame, TLS for wss). A read that times out keeps what it had, so the connection stays usable."""

from __future__ import annotations

import collections
import errno
import socket as socketlib
import ssl
import time
from typing import Deque, Optional

from . import websocket as ws
from .errors import ConnectError, ConnectionSilent, DaemonNotRunning, ProtocolError
from .wire import MAX_MESSAGE_BYTES

_CHUNK = 1 << 16
_UNSET = object()


def not_running(path: str, error: OSError) -> ConnectError:
    """The error for a socket nobody answers on: not running, or not reachable."""
    if isinstance(error, (FileNotFoundError, ConnectionRefusedError)):
        return DaemonNotRunning(f"no cellvisor daemon listens on {path} ({error.strerror or error}): start one "
                                "with `cellvisor serve`, or connect with autostart=True")
    if error.errno == errno.ENAMETOOLONG or "too long" in str(error):
        return ConnectError(f"cannot use the socket path {path}: it is too long for a Unix socket")
    return ConnectError(f"cannot reach the cellvisor daemon at {path}: {error}")


class _Stream:
    """A connected socket read in chunks into a decoder, with the read timeout set only when
    it changes (a system call saved per read)."""

    def __init__(self, sock: socketlib.socket) -> None:
        self.sock = sock
        self._timeout: object = _UNSET

    def read(self, timeout: Optional[float]) -> bytes:
        if timeout != self._timeout:
            self.sock.settimeout(timeout)
            self._timeout = timeout
        try:
            return self.sock.recv(_CHUNK)
        except socketlib.timeout:
            raise TimeoutError("no message from the daemon in time") from None

    def write(self, data: bytes) -> None:
        if self._timeout is _UNSET:
            self.sock.settimeout(None)
            self._timeout = None
        self.sock.sendall(data)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class UnixTransport:
    """Newline-delimited JSON-RPC on the daemon's Unix socket. A read splits every line it
    brought at once (a warm cell's events and answer usually come in one read)."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        sock = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except socketlib.timeout:
            sock.close()
            raise ConnectError(f"the cellvisor daemon at {path} did not accept the connection in time") from None
        except OSError as error:
            sock.close()
            raise not_running(path, error) from None
        except ValueError as error:  # e.g. a NUL in the path
            sock.close()
            raise ConnectError(f"cannot use the socket path {path!r}: {error}") from None
        self.stream = _Stream(sock)
        self.stream._timeout = timeout
        self.ready: Deque[bytes] = collections.deque()
        self.partial = bytearray()  # the start of a line whose end has not come yet
        self.where = path

    def send(self, text: str) -> None:
        self.stream.write(text.encode() + b"\n")

    def receive(self, timeout: Optional[float]) -> Optional[bytes]:
        """The next message, None once the daemon has closed the connection."""
        if self.ready:
            return self.ready.popleft()
        partial = self.partial
        while True:
            chunk = self.stream.read(timeout)
            if not chunk:
                return None
            end = chunk.find(b"\n")
            if end < 0:
                partial += chunk
                if len(partial) > MAX_MESSAGE_BYTES:
                    raise ProtocolError(f"the daemon sent a line over {MAX_MESSAGE_BYTES} bytes")
                continue
            if partial:
                partial += chunk[:end]
                first = bytes(partial)
                partial.clear()
            else:
                first = chunk[:end]
            if end + 1 < len(chunk):
                lines = chunk[end + 1:].split(b"\n")
                partial += lines.pop()
                self.ready.extend(lines)
            return first

    def close(self) -> None:
        self.stream.close()


def tls_context(cafile: Optional[str]) -> ssl.SSLContext:
    """Trusts the PEM certificates in `cafile`, else the system's."""
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as error:
        raise ConnectError(f"cannot load the CA certificates {cafile}: {error}") from None


def tls_failure(url: ws.Url, error: Exception) -> ConnectError:
    return ConnectError(f"TLS with the daemon at {url.text} failed: {error} (trust its certificate's CA with cafile=)")


class WebSocketTransport:
    """JSON-RPC on the daemon's `/v1/rpc` WebSocket, one message per text frame, with the
    bearer `token` and, when given, bound to `session` (`Cellvisor-Session`). While waiting
    for a message it pings once nothing came for half of `silent_after` seconds, and raises
    `ConnectionSilent` once nothing (not even the pong) came for all of it: a stopped node
    accepts bytes and answers none, which only a deadline tells from a long cell."""

    def __init__(self, url: str, token: Optional[str], token_source: str, cafile: Optional[str],
                 session: Optional[str], timeout: Optional[float], silent_after: Optional[float] = None) -> None:
        self.url = ws.parse_url(url)
        self.where = url
        self.frames = ws.FrameDecoder()
        self.closed = False
        self.silent_after = silent_after
        self.heard = time.monotonic()
        self.pinged = False
        # A stopped node accepts the TCP connection and never answers the upgrade.
        open_timeout = timeout if timeout is not None else (silent_after or 15.0)
        try:
            sock = socketlib.create_connection((self.url.host, self.url.port), timeout=open_timeout)
        except OSError as error:
            raise ConnectError(f"cannot reach the cellvisor daemon at {url}: {error}") from None
        try:
            sock.setsockopt(socketlib.IPPROTO_TCP, socketlib.TCP_NODELAY, 1)
            if self.url.secure:
                sock = tls_context(cafile).wrap_socket(sock, server_hostname=self.url.host)
            self.stream = _Stream(sock)
            self.stream._timeout = open_timeout
            self._handshake(token, token_source, session)
        except (ssl.SSLError, ssl.CertificateError) as error:
            sock.close()
            raise tls_failure(self.url, error) from None
        except (TimeoutError, OSError) as error:
            sock.close()
            if isinstance(error, ConnectError):
                raise
            raise ConnectError(f"cannot reach the cellvisor daemon at {url}: {error}") from None
        except BaseException:
            sock.close()
            raise

    def _handshake(self, token: Optional[str], token_source: str, session: Optional[str]) -> None:
        request, key = ws.handshake(self.url, token, session)
        self.stream.write(request)
        data = bytearray()
        while b"\r\n\r\n" not in data:
            if len(data) > ws.MAX_HEAD_BYTES:
                raise ConnectError(f"the WebSocket handshake with {self.url.text} failed: an over-long answer")
            chunk = self.stream.read(self.stream._timeout)  # type: ignore[arg-type]
            if not chunk:
                raise ConnectError(f"the WebSocket handshake with {self.url.text} failed: the connection "
                                   "closed before an answer")
            data += chunk
        head, _, rest = bytes(data).partition(b"\r\n\r\n")
        answer = ws.parse_answer(head, self.url)
        body = rest
        if answer.status != 101:
            wanted = min(answer.body_length or 0, ws.MAX_HEAD_BYTES)
            while len(body) < wanted:
                chunk = self.stream.read(self.stream._timeout)  # type: ignore[arg-type]
                if not chunk:
                    break
                body += chunk
        ws.check_answer(answer, body, key, self.url, token, token_source)
        self.frames.feed(rest)

    def send(self, text: str) -> None:
        self.stream.write(ws.frame(ws.TEXT, text.encode()))

    def receive(self, timeout: Optional[float]) -> Optional[bytes]:
        """The next text message, None once the connection is closed (pings answered)."""
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        self.heard, self.pinged = now, False  # silence is counted while waiting only
        while not self.closed:
            got = self.frames.pop()
            if got is None:
                chunk = self._read_alive(deadline)
                if not chunk:
                    self.closed = True
                    return None
                self.heard = time.monotonic()
                self.pinged = False
                self.frames.feed(chunk)
                continue
            opcode, payload = got
            if opcode == ws.TEXT:
                return payload
            if opcode == ws.PING:
                self.stream.write(ws.frame(ws.PONG, payload))
            elif opcode == ws.CLOSE:
                self.closed = True
                try:
                    self.stream.write(ws.frame(ws.CLOSE, payload[:2]))
                except OSError:
                    pass
                return None
            elif opcode != ws.PONG and opcode != ws.BINARY:
                raise ProtocolError(f"the daemon sent a WebSocket frame of opcode {opcode}")
        return None

    def _read_alive(self, deadline: Optional[float]) -> bytes:
        """The next bytes before `deadline` (else `TimeoutError`), pinging a quiet connection
        and giving up on a silent one (`ConnectionSilent`)."""
        if self.silent_after is None:
            return self.stream.read(None if deadline is None else max(deadline - time.monotonic(), 0.001))
        while True:
            now = time.monotonic()
            quiet = now - self.heard
            if quiet >= self.silent_after:
                raise ConnectionSilent(f"nothing came from {self.where} for {self.silent_after:g} s, not even the "
                                       "answer to a ping: the daemon is stopped or cut off")
            step = self.silent_after - quiet if self.pinged else self.silent_after / 2 - quiet
            left = None if deadline is None else deadline - now
            if left is not None and left <= step:
                return self.stream.read(max(left, 0.001))
            try:
                return self.stream.read(max(step, 0.001))
            except TimeoutError:
                if not self.pinged:
                    self.stream.write(ws.frame(ws.PING, b"alive?"))
                    self.pinged = True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.stream.write(ws.close_frame())
            except OSError:
                pass
        self.stream.close()
