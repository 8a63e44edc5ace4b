/**
 * Errors as classes, so a host can `catch (e) { if (e instanceof DrainingError) ... }` instead
 * of comparing numbers: one subclass of {@link CellvisorError} per documented JSON-RPC code,
 * and {@link ConnectionError} for what never reached the daemon or never came back.
 */

import { ErrorCodes, type JsonValue } from "./protocol.js";

/** An error answer of the daemon, carrying its JSON-RPC `code` (and `data`, when it sent some). */
export class CellvisorError extends Error {
  /** The JSON-RPC error code. */
  readonly code: number;
  /** The error's `data` (e.g. `{node, retry_after_ms}` for {@link LeasedElsewhereError}). */
  readonly data: JsonValue | undefined;

  constructor(message: string, code: number, data?: JsonValue) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.data = data;
  }
}

/** -32700: the daemon could not read a line as JSON. */
export class ParseError extends CellvisorError {}
/** -32600: not a JSON-RPC 2.0 request, or a line over 16 MiB. */
export class InvalidRequestError extends CellvisorError {}
/** -32601: the daemon has no such method. */
export class MethodNotFoundError extends CellvisorError {}
/** -32602: the params do not fit the method; the message names the field. */
export class InvalidParamsError extends CellvisorError {}
/** -32603: the daemon failed on its side. */
export class InternalError extends CellvisorError {}
/** -32001: the request was refused (bad session name, missing cwd, empty cells, ...). */
export class RequestRefusedError extends CellvisorError {}
/** -32002: the daemon is shutting down. */
export class ShuttingDownError extends CellvisorError {}
/** -32003: the daemon drains and does not hold the session: send it to another node. */
export class DrainingError extends CellvisorError {}
/** -32004: the connection is bound to another session (`Cellvisor-Session`). */
export class WrongSessionError extends CellvisorError {}
/** -32005: another node holds the session's lease (`data.node`, `data.retry_after_ms`). */
export class LeasedElsewhereError extends CellvisorError {}
/** -32006: `resume` of a session that is neither live nor saved. */
export class SessionUnknownError extends CellvisorError {}
/** -32007: the daemon speaks another protocol version than this client (`data` names both). */
export class ProtocolMismatchError extends CellvisorError {}
/** -32008: the caller's tenant is at one of its quotas (`data.quota`, `data.tenant`, `data.limit`). */
export class QuotaExceededError extends CellvisorError {}
/** -32009: the caller's tenant lacks the right the method needs (`data.right`, `data.tenant`). */
export class ForbiddenError extends CellvisorError {}

/** The class of each documented code. */
const CLASSES: ReadonlyMap<number, new (message: string, code: number, data?: JsonValue) => CellvisorError> =
  new Map<number, new (message: string, code: number, data?: JsonValue) => CellvisorError>([
    [ErrorCodes.PARSE_ERROR, ParseError],
    [ErrorCodes.INVALID_REQUEST, InvalidRequestError],
    [ErrorCodes.METHOD_NOT_FOUND, MethodNotFoundError],
    [ErrorCodes.INVALID_PARAMS, InvalidParamsError],
    [ErrorCodes.INTERNAL_ERROR, InternalError],
    [ErrorCodes.REQUEST_REFUSED, RequestRefusedError],
    [ErrorCodes.SHUTTING_DOWN, ShuttingDownError],
    [ErrorCodes.DRAINING, DrainingError],
    [ErrorCodes.WRONG_SESSION, WrongSessionError],
    [ErrorCodes.LEASED_ELSEWHERE, LeasedElsewhereError],
    [ErrorCodes.SESSION_UNKNOWN, SessionUnknownError],
    [ErrorCodes.PROTOCOL_MISMATCH, ProtocolMismatchError],
    [ErrorCodes.QUOTA_EXCEEDED, QuotaExceededError],
    [ErrorCodes.FORBIDDEN, ForbiddenError],
  ]);

/** The typed error for an error object the daemon answered with (a code it does not document: the base class). */
export function errorFromRpc(error: { code: number; message: string; data?: JsonValue }): CellvisorError {
  const Class = CLASSES.get(error.code) ?? CellvisorError;
  return new Class(error.message, error.code, error.data);
}

/**
 * The daemon could not be reached, started, or understood, or the connection ended before
 * the answer: nothing the daemon said, so no JSON-RPC code.
 */
export class ConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** Something accepted the connection but did not answer `initialize` within the health bound (a hung or stopped daemon, or another program on the socket). */
export class UnresponsiveError extends ConnectionError {}

/** `autostart` could not start a daemon, or it did not listen in time (the message names its log). */
export class DaemonStartError extends ConnectionError {}

/**
 * Nothing came on a WebSocket for `silentAfter` seconds while an answer was awaited, not even
 * the pong to a ping: its daemon (or the node behind a router) is stopped or cut off. `eval`
 * sends its request again, with its `request_id`, on a new connection.
 */
export class ConnectionSilentError extends ConnectionError {}

/** No answer to an `eval` by its deadline (its cells' timeouts plus a margin); `eval` sends it again with its `request_id`. */
export class ResponseTimeoutError extends ConnectionError {}
