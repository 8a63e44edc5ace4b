"""The exceptions of the client: one base class, and one class per JSON-RPC error code the
daemon answers with (docs/protocol.md "Errors"), so a host can catch exactly the refusal it
can handle (e.g. `Draining` to retry on another node) and still read the code."""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

from . import _generated as codes


class CellvisorError(Exception):
    """Anything this client raises on its own account (a refused request, an unreachable
    daemon, a daemon that would not start, a response that did not come in time)."""


class RpcError(CellvisorError, RuntimeError):
    """The daemon answered a request with a JSON-RPC error: `code` and `message` as sent,
    `data` when the error carried any. Subclasses name the codes of the protocol."""

    #: The JSON-RPC code this class stands for (None: any code without a class of its own).
    CODE: Optional[int] = None

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


class ParseError(RpcError):
    """-32700: the daemon could not parse the line as JSON."""

    CODE = codes.PARSE_ERROR


class InvalidRequest(RpcError):
    """-32600: not a JSON-RPC 2.0 request, or a message over 16 MiB."""

    CODE = codes.INVALID_REQUEST


class MethodNotFound(RpcError):
    """-32601: the daemon has no such method."""

    CODE = codes.METHOD_NOT_FOUND


class InvalidParams(RpcError):
    """-32602: the params do not fit the method; the message names the field."""

    CODE = codes.INVALID_PARAMS


class InternalError(RpcError):
    """-32603: the daemon failed on its side."""

    CODE = codes.INTERNAL_ERROR


class Refused(RpcError):
    """-32001: the request was refused (bad session name, missing cwd, empty cells, ...)."""

    CODE = codes.REQUEST_REFUSED


class ShuttingDown(RpcError):
    """-32002: the daemon is shutting down."""

    CODE = codes.SHUTTING_DOWN


class Draining(RpcError):
    """-32003: the daemon drains and does not hold the session: send it to another node."""

    CODE = codes.DRAINING


class WrongSession(RpcError):
    """-32004: the connection is bound to another session (its `Cellvisor-Session`)."""

    CODE = codes.WRONG_SESSION


class LeasedElsewhere(RpcError):
    """-32005: another node of the fleet holds the session's lease: `data["node"]` names it and
    `data["retry_after_ms"]` says when its lease runs out unless that node renews it."""

    CODE = codes.LEASED_ELSEWHERE


class SessionUnknown(RpcError):
    """-32006: `resume` of a session that is neither live on the node nor saved."""

    CODE = codes.SESSION_UNKNOWN


class ProtocolMismatch(RpcError):
    """-32007: the daemon speaks another protocol version than this client (a daemon left
    running across an upgrade); `data` names both versions."""

    CODE = codes.PROTOCOL_MISMATCH


class QuotaExceeded(RpcError):
    """-32008: the caller's tenant is at one of its quotas: `data["quota"]` names it,
    `data["tenant"]` the tenant and `data["limit"]` its value."""

    CODE = codes.QUOTA_EXCEEDED


class Forbidden(RpcError):
    """-32009: the caller's tenant lacks the right the method needs: `data["right"]` names it
    (`cells` or `operate`), `data["tenant"]` the tenant."""

    CODE = codes.FORBIDDEN


_BY_CODE: Dict[int, Type[RpcError]] = {
    cls.CODE: cls
    for cls in (ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError, Refused, ShuttingDown,
                Draining, WrongSession, LeasedElsewhere, SessionUnknown, ProtocolMismatch, QuotaExceeded, Forbidden)
    if cls.CODE is not None
}


def rpc_error(error: Any) -> RpcError:
    """The exception for a response's `error` member, of the class its code names."""
    if not isinstance(error, dict):
        return RpcError(codes.INTERNAL_ERROR, f"the daemon sent a malformed error: {error!r}")
    code = error.get("code")
    message = error.get("message")
    if not isinstance(code, int):
        return RpcError(codes.INTERNAL_ERROR, f"the daemon sent an error without an integer code: {error!r}")
    cls = _BY_CODE.get(code, RpcError)
    return cls(code, message if isinstance(message, str) else str(message), error.get("data"))


class ConnectError(CellvisorError, ConnectionError):
    """The daemon could not be reached, or refused the connection; the message says which of
    the socket, the URL, the token, TLS or the host was wrong."""


class ConnectionClosed(CellvisorError, ConnectionError):
    """The daemon closed the connection before answering a request."""


class ConnectionSilent(ConnectionClosed):
    """Nothing came on the connection for `silent_after` seconds, not even the answer to a
    ping: its daemon (or the node behind a router) is stopped or cut off. `eval` sends its
    request again, with its request_id, on a new connection."""


class ProtocolError(CellvisorError):
    """The daemon sent something this client cannot read (not JSON, a bad WebSocket frame)."""


class StartError(CellvisorError):
    """`autostart` could not start a daemon, or the one it started never listened."""


class ResponseTimeout(CellvisorError, TimeoutError):
    """No answer within the client's timeout. The request may still run in the daemon;
    `request_id` names it, and `Client.result(request_id)` goes on waiting for it."""

    def __init__(self, message: str, request_id: Optional[int] = None) -> None:
        super().__init__(message)
        self.request_id = request_id


class Unresponsive(ConnectError):
    """Something accepted the connection but did not answer `initialize` within the health
    bound (`health_timeout`, $CELLVISOR_HEALTH_TIMEOUT, default 10 s): a hung or stopped
    daemon, or another program on the socket. The message says what to do."""


class DaemonNotRunning(ConnectError):
    """No daemon listens on the socket (it does not exist, or refuses): start one, or connect
    with `autostart=True`."""
