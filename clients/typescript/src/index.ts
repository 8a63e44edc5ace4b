/**
 * cellvisor for TypeScript hosts: persistent Python, JavaScript and Lua cells run by the
 * cellvisor daemon, reached over its Unix socket (no dependency) or its network listener.
 */

export { Cellvisor, DEFAULT_HEALTH_TIMEOUT, healthTimeout } from "./client.js";
export {
  ANSWER_MARGIN,
  answerDeadline,
  DEFAULT_CELL_TIMEOUT,
  DEFAULT_RETRIES,
  DEFAULT_RETRY_WITHIN,
  DEFAULT_SILENT_AFTER,
} from "./retry.js";
export type { CellTarget, ConnectOptions, EvalOptions, HostTool, SessionTarget } from "./client.js";
export { Call } from "./call.js";
export { defaultSocketPath, logPath } from "./autostart.js";
export type { StartOptions } from "./autostart.js";
export {
  CellvisorError,
  ConnectionError,
  ConnectionSilentError,
  DaemonStartError,
  DrainingError,
  errorFromRpc,
  ForbiddenError,
  InternalError,
  InvalidParamsError,
  InvalidRequestError,
  LeasedElsewhereError,
  MethodNotFoundError,
  ParseError,
  ProtocolMismatchError,
  QuotaExceededError,
  RequestRefusedError,
  ResponseTimeoutError,
  SessionUnknownError,
  ShuttingDownError,
  UnresponsiveError,
  WrongSessionError,
} from "./errors.js";
export { checkEvalToolInput, EVAL_TOOL_INPUT_SCHEMA, evalTool, evalToolOutput } from "./eval_tool.js";
export type { EvalToolCell, EvalToolContent, EvalToolInput, EvalToolOptions, EvalToolOutput } from "./eval_tool.js";
export {
  cellHeader,
  display,
  failedLine,
  humanBytes,
  outOfMemoryNote,
  placeholder,
  renderCell,
  renderResult,
  truncationNote,
} from "./render.js";
export type { Shown } from "./render.js";
export * from "./protocol.js";
