"""The sync client: one connection to a daemon, a method for each daemon method, streamed
events by callback or iterator, host tools answered by callbacks (docs/protocol.md).

Requests are answered by their id; in between come the `eval/event` notifications of running
cells and the daemon's `tool/call` requests, each routed to the request it belongs to. One
thread at a time reads the connection: another thread may send (an `interrupt` while a cell
runs) and wait for its own answer, which the reading thread hands over."""

from __future__ import annotations

import collections
import json
import threading
import time
from typing import Any, Callable, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Union

from . import daemon as daemons
from . import files
from . import wire
from .errors import (ConnectError, ConnectionClosed, ConnectionSilent, DaemonNotRunning, LeasedElsewhere,
                     ProtocolError, ResponseTimeout, RpcError, Unresponsive, rpc_error)
from .transport import UnixTransport, WebSocketTransport
from .websocket import read_token
from .wire import Cell, CellResult, EvalResult, Event, EventHandler, ToolHandler, Tools

_UNSET: Any = object()
_decode = json.JSONDecoder().decode
_Handlers = Tuple[Optional[EventHandler], Mapping[str, ToolHandler]]


class Client:
    """One connection: to the Unix socket at `socket`, or to the WebSocket at `url`
    (`ws://HOST:PORT` or `wss://HOST:PORT`, path `/v1/rpc` unless given) with the bearer
    `token` (or the one in `token_file`), trusting the PEM certificates in `cafile` for wss
    (else the system's), bound to `session` when given (the daemon then refuses any other,
    and methods given no session use it). `timeout` (seconds; None waits for ever) bounds the
    wait for each answer unless a call gives its own `response_timeout`. On a WebSocket, a
    connection on which nothing came for `silent_after` seconds (default
    `wire.SILENT_AFTER`; None: never) is given up (`ConnectionSilent`), and `eval` sends
    its request again. Prefer `Client.connect`, which finds the default socket and can
    start a daemon."""

    def __init__(self, socket: Optional[str] = None, timeout: Optional[float] = None, *, url: Optional[str] = None,
                 token: Optional[str] = None, token_file: Optional[str] = None, cafile: Optional[str] = None,
                 session: Optional[str] = None, silent_after: Optional[float] = wire.SILENT_AFTER) -> None:
        if (socket is None) == (url is None):
            raise ValueError("give the daemon's socket path or its url, one of them")
        self.transport: Union[UnixTransport, WebSocketTransport]
        if url is None:
            assert socket is not None
            path = socket
            self._open: Callable[[], Union[UnixTransport, WebSocketTransport]] = \
                lambda: UnixTransport(path, timeout)
        else:
            token, source = read_token(token, token_file)
            self._open = lambda: WebSocketTransport(url, token, source, cafile, session, timeout, silent_after)
        self.transport = self._open()
        #: How many times `eval` is sent again, with the same request_id, after a lost or
        #: silent connection, an answer past its deadline or `LEASED_ELSEWHERE` (0: never).
        self.retries = wire.RETRIES
        #: Seconds to go on connecting again after a loss (a router answers 503 while a
        #: dead or paused node's lease runs out) before the loss is raised.
        self.retry_within = wire.RETRY_WITHIN
        self.timeout = timeout
        self.session = session
        #: The daemon `connect(autostart=True)` started (None: one was already running).
        self.started: Optional[daemons.Started] = None
        self.next_id = 1
        self._write = threading.Lock()
        self._cond = threading.Condition()
        self._reading = False
        self._pending: Set[Any] = set()
        self._answers: Dict[Any, Dict[str, Any]] = {}
        self._handlers: Dict[Any, _Handlers] = {}
        self._broken: Optional[BaseException] = None

    @classmethod
    def connect(cls, socket: Optional[str] = None, url: Optional[str] = None, token: Optional[str] = None,
                autostart: bool = False, *, token_file: Optional[str] = None, cafile: Optional[str] = None,
                session: Optional[str] = None, timeout: Optional[float] = None, program: Optional[str] = None,
                config: Optional[str] = None, log: Optional[str] = None,
                start_within: float = daemons.START_WITHIN, health_timeout: Optional[float] = None) -> "Client":
        """A connection to the daemon at `url`, else on `socket` (default: as cellvisor
        computes it, `default_socket()`). With `autostart`, a socket nobody listens on gets a
        daemon first, started as the CLI does: `program serve --socket SOCKET [--config
        config]` in a session of its own, its output appended to `log` (default: the socket's
        name with `.log`); `program` defaults to $CELLVISOR_BIN, then `cellvisor` on PATH.
        The daemon must answer `initialize` within `health_timeout` seconds (default
        $CELLVISOR_HEALTH_TIMEOUT, else 10), else `Unresponsive`: a silent daemon never hangs
        the caller, while a cell may still run for as long as its own timeout."""
        within = daemons.health_timeout(health_timeout)
        if url is not None:
            return cls(url=url, token=token, token_file=token_file, cafile=cafile, session=session,
                       timeout=timeout)._healthy(within)
        path = socket or daemons.default_socket()
        try:
            return cls(path, timeout, session=session)._healthy(within)
        except DaemonNotRunning:
            if not autostart:
                raise
        started = daemons.start(path, program, config, log)
        deadline = time.monotonic() + start_within
        while True:
            try:
                client = cls(path, timeout, session=session)
            except DaemonNotRunning:
                daemons.check_start(started, deadline, start_within)
                time.sleep(0.02)
                continue
            client.started = started
            return client._healthy(within)

    def _healthy(self, within: float) -> "Client":
        """This client once the daemon answered `initialize` within `within` seconds (a
        refusal counts: the daemon is alive); else closed, and `Unresponsive`."""
        try:
            self.call(wire.INITIALIZE, response_timeout=within)
        except ResponseTimeout:
            self.close()
            raise Unresponsive(daemons.unresponsive_message(self.transport.where, within)) from None
        except RpcError:
            pass
        return self

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection (the daemon's `close` method is `close_session`)."""
        self.transport.close()

    # -- requests and answers ------------------------------------------------------------

    def send(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
             on_event: Optional[EventHandler] = None, tools: Optional[Mapping[str, ToolHandler]] = None) -> int:
        """Writes a request without waiting for its answer (see `result`); returns its id.
        `on_event` gets the params of each `eval/event` of this request; `tools` (name ->
        function of the arguments) answers each of its `tool/call`s."""
        with self._write:
            request_id = self.next_id
            self.next_id += 1
            self._pending.add(request_id)  # set and dict updates are atomic: no lock needed
            if on_event is not None or tools:
                self._handlers[request_id] = (on_event, tools or {})
            try:
                self.transport.send(wire.request(request_id, method, params))
            except BaseException:
                self._pending.discard(request_id)
                self._handlers.pop(request_id, None)
                raise
        return request_id

    def result(self, request_id: int, *, response_timeout: Optional[float] = _UNSET) -> Any:
        """Reads until the answer to `request_id` and returns its result, or raises its error
        as an `RpcError` of the code's class. Past the timeout, `ResponseTimeout`: the request
        is still pending and a later `result` may take its answer."""
        message = self._await(request_id, response_timeout, None)
        assert message is not None
        return self._finish(request_id, message)

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None,
             on_event: Optional[EventHandler] = None, tools: Optional[Mapping[str, ToolHandler]] = None, *,
             response_timeout: Optional[float] = _UNSET) -> Any:
        """A request and its result: `send` then `result`."""
        return self.result(self.send(method, params, on_event=on_event, tools=tools),
                           response_timeout=response_timeout)

    def _finish(self, request_id: Any, message: Dict[str, Any]) -> Any:
        self._pending.discard(request_id)
        self._handlers.pop(request_id, None)
        if "error" in message:
            raise rpc_error(message["error"])
        return message.get("result")

    def _await(self, request_id: Any, response_timeout: Optional[float],
               until: Optional[Callable[[], bool]]) -> Optional[Dict[str, Any]]:
        """The answer to `request_id` (reading the connection, or taking it from the thread
        that reads); None when `until()` turned true first."""
        timeout = self.timeout if response_timeout is _UNSET else response_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if request_id in self._answers:
                    return self._answers.pop(request_id)
                if self._broken is not None:
                    raise self._broken
                if request_id not in self._pending:
                    raise ValueError(f"request {request_id} is not pending on this connection "
                                     "(never sent, or its answer was taken already)")
                if until is not None and until():
                    return None
                if not self._reading:
                    self._reading = True
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ResponseTimeout(f"no answer to request {request_id} within {timeout} s", request_id)
                self._cond.wait(0.05 if until is not None else left)
        try:
            return self._read(request_id, deadline, timeout, until)
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()

    def _read(self, request_id: Any, deadline: Optional[float], timeout: Optional[float],
              until: Optional[Callable[[], bool]]) -> Optional[Dict[str, Any]]:
        receive, decode, handlers = self.transport.receive, _decode, self._handlers
        left = None
        while True:
            if until is not None and until():
                return None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ResponseTimeout(f"no answer to request {request_id} within {timeout} s", request_id)
            cause: Optional[OSError] = None
            try:
                raw = receive(left)
            except TimeoutError:
                raise ResponseTimeout(f"no answer to request {request_id} within {timeout} s", request_id) from None
            except OSError as error:
                raw, cause = None, error
            if raw is None:
                with self._cond:
                    self._broken = cause if isinstance(cause, ConnectionSilent) else ConnectionClosed(
                        f"the daemon closed the connection ({self.transport.where})" + (f": {cause}" if cause else ""))
                    raise self._broken
            try:
                message = decode(raw.decode())
                method = message.get("method")
            except (ValueError, AttributeError) as error:
                raise ProtocolError(f"the daemon sent a message that is not a JSON object: {error}") from None
            if method is None:
                answered = message.get("id")
                if answered == request_id:
                    return message  # type: ignore[no-any-return]
                with self._cond:
                    if answered in self._pending:
                        self._answers[answered] = message
                        self._cond.notify_all()
            elif method == wire.EVAL_EVENT:
                params = message.get("params") or {}
                handler = handlers.get(params.get("request_id"))
                if handler is not None and handler[0] is not None:
                    handler[0](params)
            elif method == wire.TOOL_CALL and "id" in message:
                self._answer_tool_call(message)

    def _answer_tool_call(self, message: Dict[str, Any]) -> None:
        owner, name, arguments = wire.tool_call_target(message)
        tools = self._handlers.get(owner, (None, {}))[1]
        function = tools.get(name) if name is not None else None
        try:
            if function is None:
                raise LookupError(wire.missing_tool(name, tools))
            answer = wire.tool_result(message["id"], function(arguments))
        except Exception as error:  # the tool's failure is the cell's to handle
            answer = wire.tool_error(message["id"], str(error) or type(error).__name__)
        with self._write:
            self.transport.send(answer)

    # -- the daemon's methods ------------------------------------------------------------

    def _session(self, session: Optional[str]) -> Optional[str]:
        return self.session if session is None else session

    def initialize(self) -> Dict[str, Any]:
        """`{protocol_version, server_version, languages, pid, node, draining}`."""
        return self.call(wire.INITIALIZE)  # type: ignore[no-any-return]

    def eval(self, cells: Union[str, Cell, Sequence[Cell]], *, session: Optional[str] = None,
             language: Optional[str] = None, tools: Optional[Tools] = None, on_event: Optional[EventHandler] = None,
             response_timeout: Optional[float] = _UNSET, **options: Any) -> EvalResult:
        """Runs `cells` (a list of `{language, code, ...}`, one such cell, or a code string
        of `language`) in `session` and returns the request's result. `tools` are offered
        to the cells and answered here; `on_event` gets each streamed event. `options` are
        the request's other fields: cwd, virtual_env, env, fresh, sandbox, timeout (the
        cells' own, in seconds), reset, events (which notifications the daemon streams),
        request_id (default: a fresh one). The request is sent again with the same
        request_id on a new connection, at most `retries` times, when the connection is
        lost or silent, when `LEASED_ELSEWHERE` says another node holds the session (a
        router sends the new connection there), and, with no timeout given here or to the
        client, when no answer came by its deadline (`wire.answer_deadline`: the cells'
        timeouts plus a margin): the daemon runs an id once, and a retry gets its answer."""
        params, handlers = wire.eval_params(cells, session=self._session(session), language=language, tools=tools,
                                            options=options)
        params = wire.with_request_id(params)
        derived = response_timeout is _UNSET and self.timeout is None
        if derived:
            response_timeout = wire.answer_deadline(params)
        attempt = 0
        while True:
            try:
                return self.call(wire.EVAL, params, on_event, handlers, response_timeout=response_timeout)  # type: ignore
            except (ConnectionClosed, BrokenPipeError, ConnectionResetError) as lost:
                attempt = self._reconnect_after_loss(attempt, lost)
            except LeasedElsewhere as moved:
                data = moved.data if isinstance(moved.data, dict) else {}
                wait = min(float(data.get("retry_after_ms") or 100) / 1000, 5.0)
                attempt = self._reconnect_after_loss(attempt, moved, wait)
            except ResponseTimeout as late:
                if not derived:
                    raise
                attempt = self._reconnect_after_loss(attempt, late)

    def _reconnect_after_loss(self, attempt: int, lost: BaseException, wait: Optional[float] = None) -> int:
        """After a lost connection (or an answer that says to go elsewhere): connects again
        as this client first did, after `wait` seconds (default: a little longer each
        attempt), trying for `retry_within` seconds, and answers the attempts used;
        re-raises the loss once `retries` are spent or no connection was made in time."""
        if attempt >= self.retries:
            raise lost
        attempt += 1
        time.sleep(wire.backoff(attempt, 1.0) if wait is None else wait)
        deadline = time.monotonic() + self.retry_within
        tries = 0
        while True:
            try:
                transport = self._open()
                break
            except (ConnectError, OSError):
                tries += 1
                if time.monotonic() >= deadline:
                    raise lost from None
                time.sleep(wire.backoff(tries, 1.0))
        with self._write, self._cond:
            self.transport.close()
            self.transport = transport
            self._broken = None
            self._answers.clear()
            self._pending.clear()
            self._handlers.clear()
        return attempt

    def eval_stream(self, cells: Union[str, Cell, Sequence[Cell]], *, session: Optional[str] = None,
                    language: Optional[str] = None, tools: Optional[Tools] = None,
                    response_timeout: Optional[float] = _UNSET, **options: Any) -> "EvalStream":
        """Sends an `eval` and returns its events as an iterator (`EvalStream`), the result
        in its `result` once iterated."""
        params, handlers = wire.eval_params(cells, session=self._session(session), language=language, tools=tools,
                                            options=options)
        events: Deque[Event] = collections.deque()
        request_id = self.send(wire.EVAL, params, on_event=events.append, tools=handlers)
        return EvalStream(self, request_id, events, response_timeout)

    def cell(self, session: str, language: str, code: str, on_event: Optional[EventHandler] = None,
             **cell_options: Any) -> CellResult:
        """Runs one cell and returns its result; `cell_options`: title, timeout, reset,
        yield_time_ms."""
        cell = wire.one_cell(code, language, cell_options)
        return self.call(wire.EVAL, {"session": session, "cells": [cell]}, on_event)["cells"][0]  # type: ignore

    def send_cell(self, session: str, language: str, code: str) -> int:
        """Starts one cell without waiting; returns the request id (see `result`)."""
        return self.send(wire.EVAL, {"session": session, "cells": [{"language": language, "code": code}]})

    def wait(self, cell_id: int, *, session: Optional[str] = None, cwd: Optional[str] = None, yield_time_ms: Optional[int] = None,
             max_tokens: Optional[int] = None, events: Optional[str] = None,
             on_event: Optional[EventHandler] = None,
             response_timeout: Optional[float] = _UNSET) -> CellResult:
        """Watches a background cell: its final result, or `running` with the output since
        the last look once `yield_time_ms` (daemon default 10000) has passed."""
        params = wire.drop_none({"session": self._session(session), "cwd": cwd, "cell_id": cell_id,
                                 "yield_time_ms": yield_time_ms, "max_tokens": max_tokens, "events": events})
        return self.call("wait", params, on_event, response_timeout=response_timeout)  # type: ignore

    def terminate(self, cell_id: int, *, session: Optional[str] = None, cwd: Optional[str] = None) -> CellResult:
        """Stops a background cell; its final result (usually `cancelled`)."""
        return self.call("terminate", wire.drop_none({"session": self._session(session), "cwd": cwd, "cell_id": cell_id}))  # type: ignore[no-any-return]

    def interrupt(self, session: Optional[str] = None, language: Optional[str] = None, cwd: Optional[str] = None) -> Dict[str, Any]:
        """Interrupts the session's running cells (of `language` only, when given): `{sessions}`."""
        return self.call("interrupt", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language}))  # type: ignore[no-any-return]

    def reset(self, session: Optional[str] = None, language: Optional[str] = None, cwd: Optional[str] = None) -> Dict[str, Any]:
        """Replaces the session's workers (its state is gone): `{sessions}`."""
        return self.call("reset", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language}))  # type: ignore[no-any-return]

    def close_session(self, session: Optional[str] = None, language: Optional[str] = None, cwd: Optional[str] = None,
                      keep_workspace: Optional[bool] = None) -> Dict[str, Any]:
        """The daemon's `close`: stops the session's workers and removes its workspace unless
        `keep_workspace`: `{sessions}`."""
        return self.call("close", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language,  # type: ignore[no-any-return]
                                                  "keep_workspace": keep_workspace}))

    def upload(self, path: str, data: bytes, *, session: Optional[str] = None) -> None:
        """Puts `data` into the session's workspace at `path` (relative to it), replacing a
        file there; its missing directories are made."""
        for params in files.write_params(self._session(session), path, data):
            self.call(wire.FILES_WRITE, params)

    def download(self, path: str, *, session: Optional[str] = None) -> bytes:
        """The bytes of the file `path` in the session's workspace."""
        out = bytearray()
        while True:
            part = self.call(wire.FILES_READ, files.read_params(self._session(session), path, len(out)))
            chunk = files.part_bytes(part)
            out += chunk
            if part.get("eof") or not chunk:
                return bytes(out)

    def list(self, path: str = "", *, session: Optional[str] = None, recursive: bool = False) -> List[Dict[str, Any]]:
        """The entries (`{path, kind, size, modified}`) of a directory of the session's
        workspace (the workspace itself by default)."""
        result = self.call(wire.FILES_LIST, wire.drop_none({"session": self._session(session), "path": path,
                                                         "recursive": recursive}))
        return list(result["entries"])

    def status(self) -> List[Dict[str, Any]]:
        """One row per live session and language."""
        return self.call(wire.STATUS)  # type: ignore[no-any-return]

    def checkpoint(self, name: str, *, session: Optional[str] = None,
                   language: Optional[str] = None, cwd: Optional[str] = None) -> List[Dict[str, Any]]:
        """Saves the namespace as the named checkpoint."""
        return self.call("checkpoint", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language,  # type: ignore[no-any-return]
                                                       "name": name}))

    def restore(self, name: str, *, session: Optional[str] = None,
                language: Optional[str] = None, cwd: Optional[str] = None) -> List[Dict[str, Any]]:
        """Replaces the namespace by the named checkpoint's."""
        return self.call("restore", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language,  # type: ignore[no-any-return]
                                                    "name": name}))

    def checkpoints(self, session: Optional[str] = None, cwd: Optional[str] = None) -> List[Dict[str, Any]]:
        return self.call("checkpoints", wire.drop_none({"session": self._session(session), "cwd": cwd}))  # type: ignore

    def names(self, language: str, session: Optional[str] = None, cwd: Optional[str] = None) -> Dict[str, Any]:
        """The namespace's user names, and whether a snapshot keeps each."""
        return self.call("names", wire.drop_none({"session": self._session(session), "cwd": cwd, "language": language}))  # type: ignore[no-any-return]

    def drain(self, wait: Optional[bool] = None, timeout_ms: Optional[int] = None) -> Dict[str, Any]:
        """Takes no new session from now on (with `wait`, answers once none is live)."""
        return self.call("drain", wire.drop_none({"wait": wait, "timeout_ms": timeout_ms}))  # type: ignore

    def undrain(self) -> Dict[str, Any]:
        return self.call("undrain")  # type: ignore[no-any-return]

    def shutdown(self) -> Dict[str, Any]:
        """Asks the daemon to stop its workers and exit: `{stopping: true}`."""
        return self.call("shutdown")  # type: ignore[no-any-return]

    def config_reload(self) -> Dict[str, Any]:
        """The daemon's `config/reload`: re-reads its config file."""
        return self.call("config/reload")  # type: ignore[no-any-return]


class EvalStream:
    """An `eval` in flight: iterating it yields each `eval/event` (params) as it arrives,
    answering tool calls meanwhile; once iterated, `result` holds the request's result (an
    error answer raises from the iteration)."""

    def __init__(self, client: Client, request_id: int, events: Deque[Event],
                 response_timeout: Optional[float]) -> None:
        self.client = client
        self.request_id = request_id
        self._events = events
        self._timeout = response_timeout
        self._done = False
        self._result: Optional[EvalResult] = None

    def __iter__(self) -> Iterator[Event]:
        events = self._events
        while True:
            while events:
                yield events.popleft()
            if self._done:
                return
            message = self.client._await(self.request_id, self._timeout, lambda: bool(events))
            if message is not None:
                self._done = True
                self._result = self.client._finish(self.request_id, message)

    def finish(self) -> EvalResult:
        """Reads the rest of the events (dropped) and returns the result."""
        for _ in self:
            pass
        assert self._result is not None
        return self._result

    @property
    def result(self) -> EvalResult:
        if not self._done or self._result is None:
            raise RuntimeError("the eval is still running: iterate the stream (or call finish()) first")
        return self._result

