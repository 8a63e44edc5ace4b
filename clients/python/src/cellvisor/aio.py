"""The asyncio client: the sync `Client`'s shape with coroutines. One task reads the
connection and routes what comes: answers to the requests awaiting them (several may be in
flight on one connection, e.g. an `interrupt` while an `eval` runs), `eval/event`s to their
request's callback or stream, `tool/call`s to their request's tools (sync or async
functions, each call a task of its own)."""

from __future__ import annotations

import asyncio
import collections
import inspect
import json
import time
from typing import (Any, AsyncIterator, Awaitable, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Set, Tuple,
                    Union)

from . import daemon as daemons
from . import files
from . import wire
from .aio_transport import AsyncTransport, open_unix, open_websocket
from .errors import (ConnectError, ConnectionClosed, ConnectionSilent, DaemonNotRunning, LeasedElsewhere,
                     ProtocolError, ResponseTimeout, RpcError, Unresponsive, rpc_error)
from .websocket import read_token
from .wire import Cell, CellResult, EvalResult, Event, EventHandler, ToolHandler, Tools

_UNSET: Any = object()
_Handlers = Tuple[Optional[EventHandler], Mapping[str, ToolHandler]]


class AsyncClient:
    """One connection, made by `await AsyncClient.connect(...)` (the arguments of
    `Client.connect`). `timeout` bounds the wait for each answer unless a call gives its own
    `response_timeout`; `session` binds a WebSocket connection and is the default session.
    `eval` survives a fleet's faults as `Client.eval` does: sent again with its request_id
    after a lost or silent connection (`silent_after`, a `connect` argument), an answer past
    its deadline, or `LEASED_ELSEWHERE`."""

    def __init__(self, transport: AsyncTransport, timeout: Optional[float] = None,
                 session: Optional[str] = None) -> None:
        self.transport = transport
        transport.waiting = self._waiting
        self.timeout = timeout
        self.session = session
        #: The daemon `connect(autostart=True)` started (None: one was already running).
        self.started: Optional[daemons.Started] = None
        self.next_id = 1
        self._pending: Dict[int, "asyncio.Future[Dict[str, Any]]"] = {}
        self._handlers: Dict[Any, _Handlers] = {}
        self._tasks: Set["asyncio.Future[Any]"] = set()
        self._broken: Optional[BaseException] = None
        self._reader = asyncio.ensure_future(self._read_loop())
        #: How `connect` made the transport, to make another after a lost connection
        #: (None: a client built on a transport of the caller's).
        self._open: Optional[Callable[[], Awaitable[AsyncTransport]]] = None
        #: How many times `eval` is sent again, with the same request_id, after a lost or
        #: silent connection, an answer past its deadline or `LEASED_ELSEWHERE` (0: never).
        self.retries = wire.RETRIES
        #: Seconds to go on connecting again after a loss (a router answers 503 while a
        #: dead or paused node's lease runs out) before the loss is raised.
        self.retry_within = wire.RETRY_WITHIN

    def _waiting(self) -> bool:
        """Whether a request awaits its answer (the transport counts silence only then)."""
        return any(not future.done() for future in self._pending.values())

    @classmethod
    async def connect(cls, socket: Optional[str] = None, url: Optional[str] = None, token: Optional[str] = None,
                      autostart: bool = False, *, token_file: Optional[str] = None, cafile: Optional[str] = None,
                      session: Optional[str] = None, timeout: Optional[float] = None,
                      program: Optional[str] = None, config: Optional[str] = None, log: Optional[str] = None,
                      start_within: float = daemons.START_WITHIN,
                      health_timeout: Optional[float] = None,
                      silent_after: Optional[float] = wire.SILENT_AFTER) -> "AsyncClient":
        """As `Client.connect`: the WebSocket at `url`, else the Unix `socket` (default:
        `default_socket()`), starting a daemon there first with `autostart`; the daemon must
        answer `initialize` within `health_timeout` (else `Unresponsive`). On a WebSocket, a
        connection on which nothing came for `silent_after` seconds while an answer was
        awaited (pinged halfway; default `wire.SILENT_AFTER`; None: never) is given up
        (`ConnectionSilent`), and `eval` sends its request again."""
        within = daemons.health_timeout(health_timeout)
        if url is not None:
            token, source = read_token(token, token_file)
            client = cls(await open_websocket(url, token, source, cafile, session, timeout, silent_after), timeout,
                         session)
            client._open = lambda: open_websocket(url, token, source, cafile, session, timeout, silent_after)
            return await client._healthy(within, url)
        path = socket or daemons.default_socket()
        try:
            client = cls(await open_unix(path, timeout), timeout, session)
            client._open = lambda: open_unix(path, timeout)
            return await client._healthy(within, path)
        except DaemonNotRunning:
            if not autostart:
                raise
        started = daemons.start(path, program, config, log)
        deadline = time.monotonic() + start_within
        while True:
            try:
                client = cls(await open_unix(path, timeout), timeout, session)
            except DaemonNotRunning:
                daemons.check_start(started, deadline, start_within)
                await asyncio.sleep(0.02)
                continue
            client.started = started
            client._open = lambda: open_unix(path, timeout)
            return await client._healthy(within, path)

    async def _healthy(self, within: float, where: str) -> "AsyncClient":
        """This client once the daemon answered `initialize` within `within` seconds (a
        refusal counts); else closed, and `Unresponsive`."""
        try:
            await self.call(wire.INITIALIZE, response_timeout=within)
        except ResponseTimeout:
            await self.close()
            raise Unresponsive(daemons.unresponsive_message(where, within)) from None
        except RpcError:
            pass
        return self

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connection (the daemon's `close` method is `close_session`)."""
        await self.transport.close()
        self._reader.cancel()
        for task in list(self._tasks):
            task.cancel()
        try:
            await self._reader
        except (asyncio.CancelledError, Exception):
            pass

    # -- requests and answers ------------------------------------------------------------

    async def send(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
                   on_event: Optional[EventHandler] = None,
                   tools: Optional[Mapping[str, ToolHandler]] = None) -> int:
        """Writes a request; returns its id for `result`. `on_event` (a function or a
        coroutine function) gets each `eval/event` of this request, in order; `tools`
        answers its `tool/call`s."""
        if self._broken is not None:
            raise self._broken
        request_id = self.next_id
        self.next_id += 1
        self._pending[request_id] = asyncio.get_running_loop().create_future()
        if on_event is not None or tools:
            self._handlers[request_id] = (on_event, tools or {})
        try:
            await self.transport.send(wire.request(request_id, method, params))
        except BaseException:
            self._pending.pop(request_id, None)
            self._handlers.pop(request_id, None)
            raise
        return request_id

    async def result(self, request_id: int, *, response_timeout: Optional[float] = _UNSET) -> Any:
        """The answer to `request_id`: its result, or its error raised as an `RpcError` of
        the code's class. Past the timeout, `ResponseTimeout` (the request stays pending)."""
        future = self._pending.get(request_id)
        if future is None:
            raise ValueError(f"request {request_id} is not pending on this connection "
                             "(never sent, or its answer was taken already)")
        timeout = self.timeout if response_timeout is _UNSET else response_timeout
        try:
            message = await asyncio.wait_for(asyncio.shield(future), timeout)
        except asyncio.TimeoutError:
            raise ResponseTimeout(f"no answer to request {request_id} within {timeout} s", request_id) from None
        self._pending.pop(request_id, None)
        self._handlers.pop(request_id, None)
        if "error" in message:
            raise rpc_error(message["error"])
        return message.get("result")

    async def call(self, method: str, params: Optional[Mapping[str, Any]] = None,
                   on_event: Optional[EventHandler] = None, tools: Optional[Mapping[str, ToolHandler]] = None, *,
                   response_timeout: Optional[float] = _UNSET) -> Any:
        """A request and its result: `send` then `result`."""
        request_id = await self.send(method, params, on_event=on_event, tools=tools)
        return await self.result(request_id, response_timeout=response_timeout)

    async def _read_loop(self) -> None:
        error: Optional[BaseException] = None
        try:
            while True:
                raw = await self.transport.receive()
                if raw is None:
                    break
                try:
                    message = json.loads(raw)
                except ValueError as bad:
                    raise ProtocolError(f"the daemon sent a message that is not JSON: {bad}") from None
                if not isinstance(message, dict):
                    raise ProtocolError(f"the daemon sent a message that is not a JSON object: {message!r:.200}")
                method = message.get("method")
                if method is None:
                    future = self._pending.get(message.get("id"))  # type: ignore[arg-type]
                    if future is not None and not future.done():
                        future.set_result(message)
                elif method == wire.EVAL_EVENT:
                    params = message.get("params") or {}
                    handlers = self._handlers.get(params.get("request_id"))
                    if handlers is not None and handlers[0] is not None:
                        outcome = handlers[0](params)
                        if inspect.isawaitable(outcome):
                            await outcome
                elif method == wire.TOOL_CALL and "id" in message:
                    task = asyncio.ensure_future(self._answer_tool_call(message))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        except asyncio.CancelledError:
            error = ConnectionClosed(f"the connection to {self.transport.where} was closed by this client")
            raise
        except ConnectionSilent as silent:
            error = silent
        except (OSError, ConnectionError) as cause:
            error = ConnectionClosed(f"the daemon closed the connection ({self.transport.where}): {cause}")
        except Exception as cause:  # a bad message, or a callback that raised: every waiter hears it
            error = cause
        finally:
            self._broken = error or ConnectionClosed(f"the daemon closed the connection ({self.transport.where})")
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(self._broken)
                    future.exception()  # retrieved: no "never retrieved" warning when nobody waits

    async def _answer_tool_call(self, message: Dict[str, Any]) -> None:
        owner, name, arguments = wire.tool_call_target(message)
        tools = self._handlers.get(owner, (None, {}))[1]
        function = tools.get(name) if name is not None else None
        try:
            if function is None:
                raise LookupError(wire.missing_tool(name, tools))
            value = function(arguments)
            if inspect.isawaitable(value):
                value = await value
            answer = wire.tool_result(message["id"], value)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the tool's failure is the cell's to handle
            answer = wire.tool_error(message["id"], str(error) or type(error).__name__)
        try:
            await self.transport.send(answer)
        except (OSError, ConnectionError):
            pass  # the connection is gone; the reader reports it

    # -- the daemon's methods ------------------------------------------------------------

    def _session(self, session: Optional[str]) -> Optional[str]:
        return self.session if session is None else session

    async def initialize(self) -> Dict[str, Any]:
        return await self.call(wire.INITIALIZE)  # type: ignore[no-any-return]

    async def eval(self, cells: Union[str, Cell, Sequence[Cell]], *, session: Optional[str] = None,
                   language: Optional[str] = None, tools: Optional[Tools] = None,
                   on_event: Optional[EventHandler] = None, response_timeout: Optional[float] = _UNSET,
                   **options: Any) -> EvalResult:
        """As `Client.eval`: a fresh request_id unless given; sent again with the same
        request_id on a new connection, at most `retries` times, when the connection is lost
        or silent, when `LEASED_ELSEWHERE` says another node holds the session (after its
        `retry_after_ms`, at most 5 s), and, with no timeout given here or to the client,
        when no answer came by its deadline (`wire.answer_deadline`). `on_event` and the
        tools' functions may be coroutine functions."""
        params, handlers = wire.eval_params(cells, session=self._session(session), language=language, tools=tools,
                                            options=options)
        params = wire.with_request_id(params)
        derived = response_timeout is _UNSET and self.timeout is None
        if derived:
            response_timeout = wire.answer_deadline(params)
        attempt = 0
        while True:
            try:
                return await self.call(wire.EVAL, params, on_event, handlers,  # type: ignore[no-any-return]
                                       response_timeout=response_timeout)
            except (ConnectionClosed, BrokenPipeError, ConnectionResetError) as lost:
                attempt = await self._reconnect_after_loss(attempt, lost)
            except LeasedElsewhere as moved:
                data = moved.data if isinstance(moved.data, dict) else {}
                wait = min(float(data.get("retry_after_ms") or 100) / 1000, 5.0)
                attempt = await self._reconnect_after_loss(attempt, moved, wait)
            except ResponseTimeout as late:
                if not derived:
                    raise
                attempt = await self._reconnect_after_loss(attempt, late)

    async def _reconnect_after_loss(self, attempt: int, lost: BaseException, wait: Optional[float] = None) -> int:
        """After a lost connection (or an answer that says to go elsewhere): connects again
        as `connect` did, after `wait` seconds (default: a little longer each attempt),
        trying for `retry_within` seconds, and answers the attempts used; raises the loss
        once `retries` are spent, when no connection was made in time, or when this client
        (built on a transport of the caller's) cannot connect again."""
        if self._open is None or attempt >= self.retries:
            raise lost
        attempt += 1
        await asyncio.sleep(wire.backoff(attempt, 1.0) if wait is None else wait)
        deadline = time.monotonic() + self.retry_within
        tries = 0
        while True:
            try:
                transport = await self._open()
                break
            except (ConnectError, OSError):
                tries += 1
                if time.monotonic() >= deadline:
                    raise lost from None
                await asyncio.sleep(wire.backoff(tries, 1.0))
        await self.transport.close()
        self._reader.cancel()
        try:
            await self._reader
        except (asyncio.CancelledError, Exception):
            pass
        self.transport = transport
        transport.waiting = self._waiting
        self._broken = None
        self._pending.clear()
        self._handlers.clear()
        self._reader = asyncio.ensure_future(self._read_loop())
        return attempt

    async def eval_stream(self, cells: Union[str, Cell, Sequence[Cell]], *, session: Optional[str] = None,
                          language: Optional[str] = None, tools: Optional[Tools] = None,
                          response_timeout: Optional[float] = _UNSET, **options: Any) -> "AsyncEvalStream":
        """Sends an `eval`; `async for event in stream` yields its events, then
        `stream.result` (or `await stream.finish()`) is its result."""
        params, handlers = wire.eval_params(cells, session=self._session(session), language=language, tools=tools,
                                            options=options)
        stream = AsyncEvalStream(self, response_timeout)
        stream.request_id = await self.send(wire.EVAL, params, on_event=stream._push, tools=handlers)
        return stream

    async def cell(self, session: str, language: str, code: str, on_event: Optional[EventHandler] = None,
                   **cell_options: Any) -> CellResult:
        cell = wire.one_cell(code, language, cell_options)
        return (await self.call(wire.EVAL, {"session": session, "cells": [cell]}, on_event))["cells"][0]  # type: ignore

    async def wait(self, cell_id: int, *, session: Optional[str] = None, cwd: Optional[str] = None, yield_time_ms: Optional[int] = None,
                   max_tokens: Optional[int] = None, events: Optional[str] = None,
                   on_event: Optional[EventHandler] = None,
                   response_timeout: Optional[float] = _UNSET) -> CellResult:
        params = wire.drop_none({"session": self._session(session), "cwd": cwd, "cell_id": cell_id,
                                 "yield_time_ms": yield_time_ms, "max_tokens": max_tokens, "events": events})
        return await self.call("wait", params, on_event, response_timeout=response_timeout)  # type: ignore

    async def terminate(self, cell_id: int, *, session: Optional[str] = None, cwd: Optional[str] = None) -> CellResult:
        return await self.call("terminate", wire.drop_none({"session": self._session(session), "cwd": cwd, "cell_id": cell_id}))  # type: ignore[no-any-return]

    async def interrupt(self, session: Optional[str] = None, language: Optional[str] = None, cwd: Optional[str] = None) -> Dict[str, Any]:
        return await self.call("interrupt", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language}))  # type: ignore[no-any-return]

    async def reset(self, session: Optional[str] = None, language: Optional[str] = None, cwd: Optional[str] = None) -> Dict[str, Any]:
        return await self.call("reset", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language}))  # type: ignore[no-any-return]

    async def close_session(self, session: Optional[str] = None, language: Optional[str] = None, cwd: Optional[str] = None,
                            keep_workspace: Optional[bool] = None) -> Dict[str, Any]:
        return await self.call("close", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language,  # type: ignore[no-any-return]
                                                        "keep_workspace": keep_workspace}))

    async def upload(self, path: str, data: bytes, *, session: Optional[str] = None) -> None:
        """Puts `data` into the session's workspace at `path`, replacing a file there."""
        for params in files.write_params(self._session(session), path, data):
            await self.call(wire.FILES_WRITE, params)

    async def download(self, path: str, *, session: Optional[str] = None) -> bytes:
        """The bytes of the file `path` in the session's workspace."""
        out = bytearray()
        while True:
            part = await self.call(wire.FILES_READ, files.read_params(self._session(session), path, len(out)))
            chunk = files.part_bytes(part)
            out += chunk
            if part.get("eof") or not chunk:
                return bytes(out)

    async def list(self, path: str = "", *, session: Optional[str] = None, recursive: bool = False) -> List[Dict[str, Any]]:
        """The entries of a directory of the session's workspace (the workspace by default)."""
        result = await self.call(wire.FILES_LIST, wire.drop_none({"session": self._session(session), "path": path,
                                                               "recursive": recursive}))
        return list(result["entries"])

    async def status(self) -> List[Dict[str, Any]]:
        return await self.call(wire.STATUS)  # type: ignore[no-any-return]

    async def checkpoint(self, name: str, *, session: Optional[str] = None,
                         language: Optional[str] = None, cwd: Optional[str] = None) -> List[Dict[str, Any]]:
        return await self.call("checkpoint", wire.drop_none({"session": self._session(session), "cwd": cwd,  # type: ignore[no-any-return]
                                                             "language": language, "name": name}))

    async def restore(self, name: str, *, session: Optional[str] = None,
                      language: Optional[str] = None, cwd: Optional[str] = None) -> List[Dict[str, Any]]:
        return await self.call("restore", wire.drop_none({"session": self._session(session), "cwd": cwd,  # type: ignore[no-any-return]
                                                          "language": language, "name": name}))

    async def checkpoints(self, session: Optional[str] = None, cwd: Optional[str] = None) -> List[Dict[str, Any]]:
        return await self.call("checkpoints", wire.drop_none({"session": self._session(session), "cwd": cwd}))  # type: ignore

    async def names(self, language: str, session: Optional[str] = None, cwd: Optional[str] = None) -> Dict[str, Any]:
        return await self.call("names", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language}))  # type: ignore[no-any-return]

    async def drain(self, wait: Optional[bool] = None, timeout_ms: Optional[int] = None) -> Dict[str, Any]:
        return await self.call("drain", wire.drop_none({"wait": wait, "timeout_ms": timeout_ms}))  # type: ignore

    async def undrain(self) -> Dict[str, Any]:
        return await self.call("undrain")  # type: ignore[no-any-return]

    async def shutdown(self) -> Dict[str, Any]:
        return await self.call("shutdown")  # type: ignore[no-any-return]

    async def config_reload(self) -> Dict[str, Any]:
        return await self.call("config/reload")  # type: ignore[no-any-return]


class AsyncEvalStream:
    """An `eval` in flight: `async for` yields each event as it arrives; then `result`
    holds the request's result (an error answer raises from the iteration)."""

    def __init__(self, client: AsyncClient, response_timeout: Optional[float]) -> None:
        self.client = client
        self.request_id = 0
        self._events: Deque[Event] = collections.deque()
        self._wake = asyncio.Event()
        timeout = client.timeout if response_timeout is _UNSET else response_timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self._done = False
        self._result: Optional[EvalResult] = None

    def _push(self, event: Event) -> None:
        self._events.append(event)
        self._wake.set()

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        while True:
            if self._events:
                return self._events.popleft()
            if self._done:
                raise StopAsyncIteration
            future = self.client._pending.get(self.request_id)
            if future is None or future.done():
                self._done = True
                self._result = await self.client.result(self.request_id, response_timeout=None)
                continue
            self._wake.clear()
            waker = asyncio.ensure_future(self._wake.wait())
            left = None if self._deadline is None else max(self._deadline - time.monotonic(), 0.0)
            watched: Set["asyncio.Future[Any]"] = {waker, future}
            done, _ = await asyncio.wait(watched, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            waker.cancel()
            if not done:
                raise ResponseTimeout(f"no answer to request {self.request_id} in time", self.request_id)

    async def finish(self) -> EvalResult:
        """Reads the rest of the events (dropped) and returns the result."""
        async for _ in self:
            pass
        assert self._result is not None
        return self._result

    @property
    def result(self) -> EvalResult:
        if not self._done or self._result is None:
            raise RuntimeError("the eval is still running: iterate the stream (or await finish()) first")
        return self._result
