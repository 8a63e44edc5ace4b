"""The asyncio client's two ways to the daemon (Unix socket lines, WebSocket text frames),
each moving whole JSON-RPC messages over asyncio streams. A WebSocket that goes quiet while
a request waits is pinged, and given up (`ConnectionSilent`) when not even the pong came:
a stopped node accepts bytes and answers none, which only a deadline tells from a long cell."""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Callable, Optional, Union

from . import websocket as ws
from .errors import ConnectError, ConnectionSilent, ProtocolError
from .transport import not_running, tls_context, tls_failure
from .wire import LineBuffer

_CHUNK = 1 << 16


class AsyncTransport:
    """Messages over an asyncio stream pair: lines (`frames` None) or WebSocket frames. On a
    WebSocket with `silent_after` seconds, silence is counted while `waiting()` (a request
    awaits its answer): pinged at half of it, `ConnectionSilent` at all of it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str,
                 frames: Optional[ws.FrameDecoder] = None, silent_after: Optional[float] = None) -> None:
        self.reader = reader
        self.writer = writer
        self.where = where
        self.frames = frames
        self.lines = LineBuffer()
        self.closed = False
        self.silent_after = silent_after
        #: Whether an answer is awaited (set by the client): silence counts only then.
        self.waiting: Callable[[], bool] = lambda: True
        self._lock = asyncio.Lock()
        self._read: "Optional[asyncio.Future[bytes]]" = None

    async def write(self, data: bytes) -> None:
        async with self._lock:  # one drain at a time (Python 3.9 refuses concurrent ones)
            self.writer.write(data)
            await self.writer.drain()

    async def send(self, text: str) -> None:
        if self.frames is None:
            await self.write(text.encode() + b"\n")
        else:
            await self.write(ws.frame(ws.TEXT, text.encode()))

    async def receive(self) -> Optional[Union[bytes, str]]:
        """The next message, None once the connection is closed."""
        if self.frames is None:
            while True:
                line = self.lines.pop()
                if line is not None:
                    return line
                chunk = await self.reader.read(_CHUNK)
                if not chunk:
                    return None
                self.lines.feed(chunk)
        while not self.closed:
            got = self.frames.pop()
            if got is None:
                chunk = await self._read_alive()
                if not chunk:
                    self.closed = True
                    return None
                self.frames.feed(chunk)
                continue
            opcode, payload = got
            if opcode == ws.TEXT:
                return payload
            if opcode == ws.PING:
                await self.write(ws.frame(ws.PONG, payload))
            elif opcode == ws.CLOSE:
                self.closed = True
                try:
                    await self.write(ws.frame(ws.CLOSE, payload[:2]))
                except (OSError, ConnectionError):
                    pass
                return None
            elif opcode not in (ws.PONG, ws.BINARY):
                raise ProtocolError(f"the daemon sent a WebSocket frame of opcode {opcode}")
        return None

    async def _read_alive(self) -> bytes:
        """The next bytes, pinging a connection quiet while an answer is awaited and giving
        up on a silent one (`ConnectionSilent`)."""
        if self.silent_after is None:
            return await self.reader.read(_CHUNK)
        heard, pinged = time.monotonic(), False
        while True:
            now = time.monotonic()
            if not self.waiting():
                heard, pinged = now, False  # silence is counted while waiting only
            quiet = now - heard
            if quiet >= self.silent_after:
                raise ConnectionSilent(f"nothing came from {self.where} for {self.silent_after:g} s, not even the "
                                       "answer to a ping: the daemon is stopped or cut off")
            step = self.silent_after - quiet if pinged else self.silent_after / 2 - quiet
            try:
                return await asyncio.wait_for(asyncio.shield(self._pending_read()), max(min(step, 1.0), 0.001))
            except asyncio.TimeoutError:
                if not pinged and time.monotonic() - heard >= self.silent_after / 2 and self.waiting():
                    await self.write(ws.frame(ws.PING, b"alive?"))
                    pinged = True

    def _pending_read(self) -> "asyncio.Future[bytes]":
        """The read in flight (one at a time: a timed-out wait leaves it running)."""
        if self._read is None or self._read.done():
            self._read = asyncio.ensure_future(self.reader.read(_CHUNK))
        return self._read

    async def close(self) -> None:
        if self._read is not None and not self._read.done():
            self._read.cancel()
        if self.frames is not None and not self.closed:
            self.closed = True
            try:
                self.writer.write(ws.close_frame())
            except (OSError, RuntimeError):
                pass
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (OSError, ConnectionError, ssl.SSLError):
            pass


async def open_unix(path: str, timeout: Optional[float]) -> AsyncTransport:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path, limit=_CHUNK), timeout)
    except asyncio.TimeoutError:
        raise ConnectError(f"the cellvisor daemon at {path} did not accept the connection in time") from None
    except OSError as error:
        raise not_running(path, error) from None
    except ValueError as error:
        raise ConnectError(f"cannot use the socket path {path!r}: {error}") from None
    return AsyncTransport(reader, writer, path)


async def open_websocket(url: str, token: Optional[str], token_source: str, cafile: Optional[str],
                         session: Optional[str], timeout: Optional[float],
                         silent_after: Optional[float] = None) -> AsyncTransport:
    parsed = ws.parse_url(url)
    context = tls_context(cafile) if parsed.secure else None
    # A stopped node accepts the TCP connection and never answers the upgrade.
    within = timeout if timeout is not None else (silent_after or 15.0)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            parsed.host, parsed.port, ssl=context, server_hostname=parsed.host if context else None), within)
    except (ssl.SSLError, ssl.CertificateError) as error:
        raise tls_failure(parsed, error) from None
    except (OSError, asyncio.TimeoutError) as error:
        raise ConnectError(f"cannot reach the cellvisor daemon at {url}: {error or 'timed out'}") from None
    transport = AsyncTransport(reader, writer, url, ws.FrameDecoder(), silent_after)
    try:
        await asyncio.wait_for(_handshake(transport, parsed, token, token_source, session), within)
    except asyncio.TimeoutError:
        await transport.close()
        raise ConnectError(f"the WebSocket handshake with {url} failed: no answer within {within} s") from None
    except BaseException:
        await transport.close()
        raise
    return transport


async def _handshake(transport: AsyncTransport, url: ws.Url, token: Optional[str], token_source: str,
                     session: Optional[str]) -> None:
    request, key = ws.handshake(url, token, session)
    await transport.write(request)
    data = bytearray()
    while b"\r\n\r\n" not in data:
        if len(data) > ws.MAX_HEAD_BYTES:
            raise ConnectError(f"the WebSocket handshake with {url.text} failed: an over-long answer")
        chunk = await transport.reader.read(_CHUNK)
        if not chunk:
            raise ConnectError(f"the WebSocket handshake with {url.text} failed: the connection closed before "
                               "an answer")
        data += chunk
    head, _, rest = bytes(data).partition(b"\r\n\r\n")
    answer = ws.parse_answer(head, url)
    body = rest
    if answer.status != 101:
        wanted = min(answer.body_length or 0, ws.MAX_HEAD_BYTES)
        while len(body) < wanted:
            chunk = await transport.reader.read(_CHUNK)
            if not chunk:
                break
            body += chunk
    ws.check_answer(answer, body, key, url, token, token_source)
    assert transport.frames is not None
    transport.frames.feed(rest)
