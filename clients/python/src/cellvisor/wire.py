"""What the sync and asyncio clients share, free of any I/O: the types of the protocol's
messages, the params of each daemon method, host tools and their answers, and the splitting
of the Unix socket's byte stream into lines (docs/protocol.md)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union, get_args

from . import _generated as protocol

#: The largest line or WebSocket message taken from the daemon (results can be large).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024

#: The languages the daemon runs.
LANGUAGES: Tuple[str, ...] = get_args(protocol.Language)

#: The protocol version this client speaks (the daemon's `initialize` answers its own).
PROTOCOL_VERSION = protocol.PROTOCOL_VERSION

#: The methods of the daemon (`INITIALIZE`, `EVAL`, ..., `FILES_LIST`), its notification
#: `EVAL_EVENT` and its request `TOOL_CALL`, by their wire names (generated from the schema).
INITIALIZE = protocol.INITIALIZE
EVAL = protocol.EVAL
STATUS = protocol.STATUS
FILES_LIST = protocol.FILES_LIST
FILES_READ = protocol.FILES_READ
FILES_WRITE = protocol.FILES_WRITE
EVAL_EVENT = protocol.EVAL_EVENT
TOOL_CALL = protocol.TOOL_CALL

#: A JSON value as the daemon sends it.
Json = Any
#: An `eval/event` notification's params: `{request_id, event, index, ...}`.
Event = Dict[str, Any]
#: A cell's result (`eval`'s cells, `wait`, `terminate`): `{cell_id, status, output, ...}`.
CellResult = protocol.CellResult
#: An `eval` result: `{is_error, cells, node, failed_cell?, summary}`.
EvalResult = protocol.EvalResult
#: A cell of an `eval` request: `{language, code, title?, timeout?, reset?, yield_time_ms?}`.
Cell = protocol.CellSpec
#: What handles one `eval/event` (sync client: a function; asyncio client: may be async).
EventHandler = Callable[[Event], Any]
#: A host tool's function: takes the call's arguments, returns any JSON (asyncio: may be async).
ToolHandler = Callable[[Json], Any]


@dataclass(frozen=True)
class Tool:
    """A host tool an `eval` offers its cells: declared to the daemon by `name`,
    `description` and `input_schema` (JSON Schema), run by `handler` on the host when a cell
    calls it. What `handler` returns goes back to the cell; what it raises becomes the cell's
    exception, with the exception's text as message."""

    name: str
    handler: ToolHandler
    description: Optional[str] = None
    input_schema: Optional[Dict[str, Any]] = None

    def declaration(self) -> Dict[str, Any]:
        declared: Dict[str, Any] = {"name": self.name}
        if self.description is not None:
            declared["description"] = self.description
        if self.input_schema is not None:
            declared["input_schema"] = self.input_schema
        return declared


#: Tools as `eval` takes them: `Tool`s, or a mapping of names to functions (declared by name).
Tools = Union[Sequence[Tool], Mapping[str, ToolHandler]]


def split_tools(tools: Optional[Tools]) -> Tuple[Optional[List[Dict[str, Any]]], Dict[str, ToolHandler]]:
    """The declarations to send and the handlers to answer with."""
    if tools is None:
        return None, {}
    if isinstance(tools, Mapping):
        tools = [Tool(name, handler) for name, handler in tools.items()]
    declared, handlers = [], {}
    for tool in tools:
        if not isinstance(tool, Tool):
            raise TypeError(f"a tool must be a cellvisor.Tool (or give a mapping of names to functions), not {tool!r}")
        if tool.name in handlers:
            raise ValueError(f"tool {tool.name!r} is declared twice: tool names are unique in a request")
        declared.append(tool.declaration())
        handlers[tool.name] = tool.handler
    return declared, handlers


def cells_of(cells: Union[str, Cell, Sequence[Cell]], language: Optional[str]) -> List[Cell]:
    """`eval`'s cells from what a caller wrote: one code string (then `language` says which
    language), one cell, or a list of cells."""
    if isinstance(cells, str):
        if language is None:
            raise ValueError("eval of a code string needs language= (one of py, js, lua)")
        return [{"language": language, "code": cells}]
    if isinstance(cells, Mapping):
        return [dict(cells)]
    listed = [dict(cell) for cell in cells]
    if not listed:
        raise ValueError("eval needs at least one cell")
    return listed


def drop_none(params: Dict[str, Any]) -> Dict[str, Any]:
    """The params without the fields left unset (the daemon then applies its defaults)."""
    return {key: value for key, value in params.items() if value is not None}


def request(request_id: int, method: str, params: Optional[Mapping[str, Any]]) -> str:
    """One JSON-RPC request as text."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})


def tool_call_target(message: Dict[str, Any]) -> Tuple[Any, Optional[str], Json]:
    """(the eval's request id, the tool's name, its arguments) of a `tool/call`."""
    params = message.get("params")
    if not isinstance(params, dict):
        params = {}
    return params.get("request_id"), params.get("name"), params.get("arguments")


def tool_result(call_id: Any, result: Json) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": call_id, "result": result})


def tool_error(call_id: Any, message: str) -> str:
    """The answer that fails a tool call: the cell raises with `message`."""
    return json.dumps({"jsonrpc": "2.0", "id": call_id, "error": {"code": -32000, "message": message}})


def missing_tool(name: Optional[str], handlers: Mapping[str, ToolHandler]) -> str:
    offered = ", ".join(sorted(handlers)) or "none"
    return f"this host has no tool {name!r} for this request (it offers: {offered})"


class LineBuffer:
    """Splits the Unix socket's bytes into lines; a partial line waits for the rest, so a read
    that times out loses nothing."""

    __slots__ = ("data", "limit")

    def __init__(self, limit: int = MAX_MESSAGE_BYTES) -> None:
        self.data = bytearray()
        self.limit = limit

    def feed(self, chunk: bytes) -> None:
        self.data += chunk

    def pop(self) -> Optional[bytes]:
        """The next whole line (without its newline), or None until one has arrived."""
        end = self.data.find(b"\n")
        if end < 0:
            if len(self.data) > self.limit:
                from .errors import ProtocolError

                raise ProtocolError(f"the daemon sent a line over {self.limit} bytes")
            return None
        line = bytes(self.data[:end])
        del self.data[:end + 1]
        return line


def eval_params(cells: Union[str, Cell, Sequence[Cell]], *, session: Optional[str], language: Optional[str],
                tools: Optional[Tools], options: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, ToolHandler]]:
    """`eval`'s params and the handlers of the tools it declares. `options` are the
    request's other fields (cwd, virtual_env, env, fresh, sandbox, timeout, reset); unset
    ones (None) are left to the daemon."""
    declared, handlers = split_tools(tools)
    params = drop_none({"session": session, "cells": cells_of(cells, language), "tools": declared, **options})
    return params, handlers


def with_request_id(params: Dict[str, Any]) -> Dict[str, Any]:
    """`eval` params with a `request_id`: the caller's, or a fresh one (128 random bits in
    hex). The daemon runs an id once, so a retry after a lost connection is safe."""
    if params.get("request_id") is None:
        params["request_id"] = secrets.token_hex(16)
    return params


#: How many times `eval` is sent again (with its request_id) after a lost connection.
RETRIES = 3
#: Seconds a client goes on trying to connect again after a loss before it gives up: a
#: fleet's router answers 503 until a dead or paused node's lease runs out.
RETRY_WITHIN = 30.0
#: The daemon's default cell timeout (`cells.default-timeout`), assumed for a cell that
#: names none when the answer deadline is derived.
DEFAULT_CELL_TIMEOUT = 30.0
#: Seconds an answer may take beyond its cells' timeouts (the save, its commit, a queue).
ANSWER_MARGIN = 15.0
#: A WebSocket on which nothing arrived for this many seconds (not even the pong to the
#: ping sent halfway) is silent: its daemon is stopped or gone.
SILENT_AFTER = 10.0


def answer_deadline(params: Mapping[str, Any]) -> float:
    """Seconds to wait for an `eval`'s answer when the caller set no timeout: each cell's
    timeout (its own, the request's, else the daemon's default) plus `ANSWER_MARGIN`. Past
    it the answer is lost, and the client sends the request again with its request_id."""
    request_timeout = params.get("timeout")
    total = 0.0
    for cell in params.get("cells") or []:
        own = cell.get("timeout") if isinstance(cell, Mapping) else None
        total += float(own or request_timeout or DEFAULT_CELL_TIMEOUT)
    return total + ANSWER_MARGIN


def backoff(attempt: int, cap: float = 6.4) -> float:
    """Seconds to wait before retry `attempt` (from 1): 0.1, 0.2, 0.4, ..., at most `cap`."""
    return min(0.1 * 2 ** min(max(attempt - 1, 0), 6), cap)


def one_cell(code: str, language: str, options: Mapping[str, Any]) -> Cell:
    """A cell of `language` with its own fields (title, timeout, reset, yield_time_ms)."""
    if language not in LANGUAGES:
        raise ValueError(f"language {language!r} is not one of {', '.join(LANGUAGES)}")
    return drop_none({"language": language, "code": code, **options})
