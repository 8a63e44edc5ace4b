/**
 * The daemon's JSON-RPC wire types (docs/protocol.md), field for field as the daemon sends
 * them (snake_case). `test/golden` types every line of the protocol's golden fixtures
 * (`supervisor/tests/golden/jsonrpc.jsonl`) as these types at build time, so a change on the
 * wire that these types do not follow fails `npm run build`.
 */

/** The protocol version this client speaks; `initialize` answers the daemon's. */
export const PROTOCOL_VERSION = 1 as const;

/** Any JSON value. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** A JSON object. */
export type JsonObject = { [key: string]: JsonValue };

/** A cell's language. */
export type Language = "py" | "js" | "lua";

/** How a cell ended (`running`: it went on in the background). */
export type CellStatus = "complete" | "error" | "cancelled" | "skipped" | "running";

/** A JSON-RPC id: the client's numbers, the daemon's `tool/call` strings. */
export type RequestId = number | string;

/** One cell of an `eval` request. */
export interface CellSpec {
  language: Language;
  code: string;
  title?: string | null;
  /** Seconds (default 30, clamped by the daemon). */
  timeout?: number | null;
  /** Restart this language's worker before the cell. */
  reset?: boolean;
  /** Return after this many ms with the cell `running` and let it go on in the background. */
  yield_time_ms?: number;
}

/** A host tool as the daemon takes it. */
export interface ToolSpec {
  name: string;
  description?: string;
  input_schema?: JsonValue;
}

/** Sandbox settings a request may tighten (docs/sandbox.md). */
export interface SandboxRequest {
  enabled?: boolean | null;
  required?: boolean | null;
  read?: string[] | null;
  write?: string[] | null;
  network?: string | null;
  network_namespace?: boolean | null;
  confine_unix_connect?: boolean | null;
}

/** `eval` params. */
export interface EvalParams {
  session?: string;
  cwd?: string | null;
  cells: CellSpec[];
  tools?: ToolSpec[];
  virtual_env?: string;
  env?: { [name: string]: string };
  fresh?: boolean;
  sandbox?: SandboxRequest;
  resume?: boolean;
  timeout?: number;
  reset?: boolean;
  /** Which `eval/event` notifications to send (default `"all"`). */
  events?: EventsChoice;
  /** The client's name for this request (1-128 printable ASCII characters, no spaces): a retry with the same id gets the first run's result and runs nothing. */
  request_id?: string;
}

/** Which notifications an `eval` or `wait` sends: all, only `output` and `display`, or none. */
export type EventsChoice = "all" | "output" | "none";

/** Params of the methods that name a session and maybe one language of it. */
export interface SessionParams {
  session: string;
  /** Under `sessions.key = "session+cwd"`, the directory of the pair addressed; ignored otherwise. */
  cwd?: string;
  language?: Language | null;
  /** `close` only: keep the session's workspace (its files) instead of removing it. */
  keep_workspace?: boolean;
}

/** How a file's bytes travel in JSON. */
export type FileEncoding = "text" | "base64";

/** One entry of a `files/list` answer. */
export interface FileEntry {
  /** The path relative to the session's workspace. */
  path: string;
  /** `file`, `dir`, `link` or `other`. */
  kind: string;
  size: number;
  /** Last modification, in seconds since the epoch. */
  modified: number;
}

/** `files/list` params. */
export interface FilesListParams {
  session?: string;
  path?: string;
  recursive?: boolean;
  limit?: number;
}

/** `files/read` params. */
export interface FilesReadParams {
  session?: string;
  path: string;
  offset?: number;
  length?: number;
  encoding?: FileEncoding;
}

/** `files/read` result. */
export interface FilesReadResult {
  data: string;
  encoding: FileEncoding;
  offset: number;
  length: number;
  size: number;
  eof: boolean;
}

/** `files/write` params: without `offset` the file is replaced. */
export interface FilesWriteParams {
  session?: string;
  path: string;
  data: string;
  encoding?: FileEncoding;
  offset?: number;
}

/** `files/delete` params. */
export interface FilesDeleteParams {
  session?: string;
  path: string;
  recursive?: boolean;
}

/** The most bytes one `files/write` carries and one `files/read` returns. */
export const FILE_CHUNK_BYTES = 8 * 1024 * 1024;

/** `wait` params. */
export interface WaitParams {
  session: string;
  /** Under `sessions.key = "session+cwd"`, the directory of the pair addressed; ignored otherwise. */
  cwd?: string;
  cell_id: number;
  yield_time_ms?: number | null;
  max_tokens?: number | null;
  events?: EventsChoice;
}

/** `terminate` params. */
export interface TerminateParams {
  session: string;
  /** Under `sessions.key = "session+cwd"`, the directory of the pair addressed; ignored otherwise. */
  cwd?: string;
  cell_id: number;
}

/** `checkpoint` and `restore` params. */
export interface CheckpointParams {
  session: string;
  /** Under `sessions.key = "session+cwd"`, the directory of the pair addressed; ignored otherwise. */
  cwd?: string;
  language?: Language | null;
  name: string;
}

/** `drain` params. */
export interface DrainParams {
  wait?: boolean;
  timeout_ms?: number | null;
}

/** Params of the methods that take none. */
export type NoParams = { [key: string]: never };

/** Every method's params. */
export interface Params {
  initialize: NoParams;
  eval: EvalParams;
  wait: WaitParams;
  terminate: TerminateParams;
  interrupt: SessionParams;
  reset: SessionParams;
  close: SessionParams;
  status: NoParams;
  checkpoint: CheckpointParams;
  restore: CheckpointParams;
  checkpoints: { session: string; cwd?: string };
  names: { session: string; cwd?: string; language: Language };
  shutdown: NoParams;
  "config/reload": NoParams;
  drain: DrainParams;
  undrain: NoParams;
  "files/list": FilesListParams;
  "files/read": FilesReadParams;
  "files/write": FilesWriteParams;
  "files/delete": FilesDeleteParams;
}

/** A method the daemon answers. */
export type Method = keyof Params;

/** `initialize` result. */
export interface InitializeResult {
  protocol_version: number;
  server_version: string;
  languages: Language[];
  pid: number;
  node: string;
  draining: boolean;
}

/** Whether a cell's output was cut, and where the whole of it is. */
export interface Truncation {
  truncated: boolean;
  total_bytes: number;
  total_lines: number;
  artifact_path: string | null;
  artifact_error?: string;
}

/** A MIME bundle a cell displayed (`{"image/png": base64, "text/plain": ...}`). */
export type DisplayBundle = { [mime: string]: JsonValue };

/** What a snapshot restore brought back. */
export interface StateLedger {
  restored: string[];
  skipped: { name: string; why: string }[];
  from: {
    taken_at: string;
    reason: string;
    cells_since: number;
    checkpoint?: string;
    node?: string;
  };
  /** The workspace's files the restore changed (a daemon-made workspace only). */
  files?: { restored: string[]; added: string[]; removed: string[] };
}

/** What a cell used, measured on its worker's process tree. */
export interface CellUsage {
  cpu_ms: number;
  peak_rss_bytes: number;
  wall_ms: number;
  output_bytes: number;
  /** The cell's processes its worker saw (at its end, ended with it, or collected as orphans); absent when the worker was lost. */
  processes_seen?: number;
}

/** The memory limit a cell ran into. */
export type MemoryLimit = "max_rss" | "js_heap" | "lua_heap" | "kernel_oom";

/** Why memory ended a cell, with the figures. */
export interface OutOfMemory {
  limit: MemoryLimit;
  limit_bytes: number;
  used_bytes: number;
}

/** One cell's result. */
export interface CellResult {
  index: number;
  cell_id: number;
  title: string | null;
  language: Language;
  exit_code: number;
  status: CellStatus;
  output: string;
  duration_ms: number;
  displays: DisplayBundle[];
  status_events: JsonValue[];
  truncation: Truncation;
  notice: string | null;
  state?: StateLedger;
  processes_ended?: number;
  usage?: CellUsage;
  out_of_memory?: OutOfMemory;
  /** Under `every-cell` snapshots: whether this cell's state was saved before its answer, and why not. */
  saved?: { saved: boolean; why?: string };
  node: string;
}

/** The first cell of a request that failed or was cancelled. */
export interface FailedCell {
  index: number;
  title: string | null;
  status: CellStatus;
}

/** Totals over a request's cells. */
export interface EvalSummary {
  languages: Language[];
  json_outputs: number;
  images: number;
  status_events: number;
}

/** `eval` result. */
export interface EvalResult {
  is_error: boolean;
  cells: CellResult[];
  node: string;
  failed_cell?: FailedCell;
  summary: EvalSummary;
  /** True when this is the remembered answer of an earlier run of the same `request_id`: nothing ran again. */
  replayed?: boolean;
  /** The first this many cells are answers of an earlier run of the same `request_id` that stopped partway (its node died): they were not run again, the rest ran now. */
  replayed_cells?: number;
}

/** What the kernel enforces of a sandboxed session. */
export type SandboxFeature = "files" | "tcp" | "scopes" | "network-namespace" | "unix-connect";

/** A session's sandbox, as `status` reports it. */
export interface SandboxStatus {
  landlock_abi: number;
  enforced: SandboxFeature[];
  network: string;
  warning?: string;
}

/** A session's state. */
export type SessionState = "starting" | "idle" | "busy" | "failed" | "stopping";

/** One row of `status`: one session in one language. */
export interface SessionStatus {
  session: string;
  language: Language;
  pid: number | null;
  engine: string | null;
  state: SessionState;
  cells_run: number;
  restarts: number;
  idle_ms: number;
  queued: number;
  rss_bytes: number | null;
  cpu_percent: number | null;
  cell_id?: number;
  background?: boolean;
  observed?: boolean;
  reason?: string;
  sandbox?: SandboxStatus;
  node: string;
}

/** How many sessions an `interrupt`, `reset` or `close` touched. */
export interface SessionsCount {
  sessions: number;
}

/** A checkpoint, as `checkpoint` and `checkpoints` list it. */
export interface CheckpointInfo {
  session: string;
  language: Language;
  name: string;
  bytes: number;
  taken_at: string;
  /** What `checkpoint` recorded of the session's workspace (a daemon-made one only). */
  workspace?: {
    files: number;
    bytes: number;
    new_bytes: number;
    skipped?: { name: string; why: string }[];
  };
}

/** `drain` and `undrain` result. */
export interface DrainResult {
  draining: boolean;
  live: number;
  node: string;
}

/** Every method's result. */
export interface Results {
  initialize: InitializeResult;
  eval: EvalResult;
  wait: CellResult;
  terminate: CellResult;
  interrupt: SessionsCount;
  reset: SessionsCount;
  close: SessionsCount;
  status: SessionStatus[];
  checkpoint: CheckpointInfo[];
  restore: { language: Language; ledger: StateLedger }[];
  checkpoints: CheckpointInfo[];
  names: {
    session: string;
    language: Language;
    names: { name: string; kind: string; size_bytes: number | null; saveable: boolean; note: string | null }[];
  };
  shutdown: { stopping: boolean };
  "config/reload": { reloaded: boolean; changes: string[] };
  drain: DrainResult;
  undrain: DrainResult;
  "files/list": { entries: FileEntry[]; truncated: boolean };
  "files/read": FilesReadResult;
  "files/write": { path: string; written: number; size: number };
  "files/delete": { path: string; bytes: number; files: number };
}

/** An `eval/event` notification's event, without its `request_id`. */
export type EvalEvent =
  | { event: "cell_started"; index: number; language: Language; title: string | null }
  | { event: "output"; index: number; stream: "stdout" | "stderr"; text: string }
  | { event: "display"; index: number; bundle: DisplayBundle }
  | { event: "status"; index: number; status: JsonValue }
  | { event: "cell_done"; index: number; status: CellStatus };

/** The name of an event. */
export type EvalEventName = EvalEvent["event"];

/** `eval/event` params: the event and the id of the request (`eval` or `wait`) it belongs to. */
export type EvalEventParams = EvalEvent & { request_id: RequestId };

/** `tool/call` params: run `name` for the request `request_id`. */
export interface ToolCallParams {
  request_id: RequestId;
  name: string;
  arguments: JsonValue;
}

/** The JSON-RPC error codes the daemon answers with (docs/protocol.md, docs/fleet.md). */
export const ErrorCodes = {
  PARSE_ERROR: -32700,
  INVALID_REQUEST: -32600,
  METHOD_NOT_FOUND: -32601,
  INVALID_PARAMS: -32602,
  INTERNAL_ERROR: -32603,
  REQUEST_REFUSED: -32001,
  SHUTTING_DOWN: -32002,
  DRAINING: -32003,
  WRONG_SESSION: -32004,
  LEASED_ELSEWHERE: -32005,
  SESSION_UNKNOWN: -32006,
  PROTOCOL_MISMATCH: -32007,
  QUOTA_EXCEEDED: -32008,
  FORBIDDEN: -32009,
} as const;

/** A code of {@link ErrorCodes}. */
export type ErrorCode = (typeof ErrorCodes)[keyof typeof ErrorCodes];

/** A request line. */
export interface RequestMessage<M extends Method = Method> {
  jsonrpc: "2.0";
  id: RequestId;
  method: M;
  params: Params[M];
}

/** A successful response line. */
export interface ResultMessage<M extends Method = Method> {
  jsonrpc: "2.0";
  id: RequestId;
  result: Results[M];
}

/** The daemon's error object. */
export interface ErrorObject {
  code: ErrorCode;
  message: string;
  data?: JsonValue;
}

/** An error response line (`id` null when the request's could not be read). */
export interface ErrorMessage {
  jsonrpc: "2.0";
  id: RequestId | null;
  error: ErrorObject;
}

/** An `eval/event` notification line. */
export interface EvalEventMessage<E extends EvalEventName = EvalEventName> {
  jsonrpc: "2.0";
  method: "eval/event";
  params: Extract<EvalEvent, { event: E }> & { request_id: RequestId };
}

/** The daemon's `tool/call` request line. */
export interface ToolCallMessage {
  jsonrpc: "2.0";
  id: string;
  method: "tool/call";
  params: ToolCallParams;
}

/** The client's answer to a `tool/call`: a result handed to the cell, or an error it raises. */
export type ToolCallAnswerMessage =
  | { jsonrpc: "2.0"; id: string; result: JsonValue }
  | { jsonrpc: "2.0"; id: string; error: { code: number; message: string } };
