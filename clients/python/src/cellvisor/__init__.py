"""The Python client of the cellvisor daemon (standard library only).

`Client` (sync) and `AsyncClient` (asyncio) speak the daemon's JSON-RPC (docs/protocol.md)
on its Unix socket or its network listener's WebSocket (docs/network.md), with a method per
daemon method, streamed `eval/event`s (a callback, or an iterator from `eval_stream`), host
tools answered by callbacks (`Tool`), background cells (`yield_time_ms`, then `wait`) and
errors raised as typed exceptions carrying the JSON-RPC code::

    from cellvisor import Client

    with Client.connect(autostart=True) as cv:
        result = cv.eval([{"language": "py", "code": "x = 41"},
                          {"language": "py", "code": "print(x + 1)"}], session="demo")
        print(result["cells"][1]["output"])  # 42
"""

from .aio import AsyncClient, AsyncEvalStream
from .client import Client, EvalStream
from .daemon import Daemon, Started, default_socket
from .errors import (CellvisorError, ConnectError, ConnectionClosed, ConnectionSilent, DaemonNotRunning, Draining,
                     Forbidden, InternalError, InvalidParams, InvalidRequest, LeasedElsewhere, MethodNotFound, ParseError,
                     ProtocolError, ProtocolMismatch, QuotaExceeded, Refused, ResponseTimeout, RpcError, SessionUnknown,
                     ShuttingDown, StartError, Unresponsive, WrongSession)
from .wire import LANGUAGES, Tool

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "AsyncEvalStream", "CellvisorError", "Client", "ConnectError", "ConnectionClosed",
    "ConnectionSilent", "Daemon",
    "DaemonNotRunning", "Draining", "EvalStream", "Forbidden", "InternalError", "InvalidParams", "InvalidRequest",
    "LANGUAGES", "LeasedElsewhere", "MethodNotFound", "ParseError", "ProtocolError", "ProtocolMismatch", "QuotaExceeded",
    "Refused", "ResponseTimeout", "RpcError", "SessionUnknown", "ShuttingDown", "StartError", "Started",
    "Tool", "Unresponsive", "WrongSession", "default_socket", "print_event",
]

from .cli import print_event  # noqa: E402
