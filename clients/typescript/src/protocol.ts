/**
 * The daemon's JSON-RPC wire types (docs/protocol.md), field for field as the daemon sends
 * them (snake_case): generated from the Rust types (`generated/protocol.ts`, by
 * `scripts/gen-clients` from `clients/schema/protocol.json`), and the message shapes around them. `test/golden` types every line of the protocol's golden fixtures
 * (`supervisor/tests/golden/jsonrpc.jsonl`) as these types at build time, so a change on the
 * wire that these types do not follow fails `npm run build`.
 */

import type * as G from "./generated/protocol.js";
import type { JsonValue } from "./generated/protocol.js";

export { PROTOCOL_VERSION, ErrorCodes, Methods } from "./generated/protocol.js";
export type {
  JsonValue,
  Language,
  CellStatus,
  CellSpec,
  ToolSpec,
  SandboxRequest,
  SessionParams,
  FileEntry,
  FilesListParams,
  FilesReadParams,
  FilesReadResult,
  FilesWriteParams,
  FilesDeleteParams,
  WaitParams,
  TerminateParams,
  CheckpointParams,
  DrainParams,
  InitializeResult,
  Truncation,
  StateLedger,
  CellUsage,
  MemoryLimit,
  OutOfMemory,
  CellResult,
  FailedCell,
  EvalSummary,
  EvalResult,
  SandboxStatus,
  SessionState,
  SessionStatus,
  CheckpointInfo,
  DrainResult,
  ToolCallParams,
  Params,
  Results,
} from "./generated/protocol.js";

/** A JSON object. */
export type JsonObject = { [key: string]: JsonValue };

/** A JSON-RPC id: the client's numbers, the daemon's `tool/call` strings. */
export type RequestId = number | string;

/** `eval` params. */
export type EvalParams = G.EvalRequest;

/** Which notifications an `eval` or `wait` sends: all, only `output` and `display`, or none. */
export type EventsChoice = G.Events;

/** How a file's bytes travel in JSON. */
export type FileEncoding = G.Encoding;

/** The most bytes one `files/write` carries and one `files/read` returns. */
export const FILE_CHUNK_BYTES = 8 * 1024 * 1024;

/** Params of the methods that take none. */
export type NoParams = Record<string, never>;

/** A method the daemon answers. */
export type Method = keyof G.Params;

/** A MIME bundle a cell displayed (`{"image/png": base64, "text/plain": ...}`). */
export type DisplayBundle = { [mime: string]: JsonValue };

/** What the kernel enforces of a sandboxed session. */
export type SandboxFeature = G.Feature;

/** How many sessions an `interrupt`, `reset` or `close` touched. */
export type SessionsCount = G.SessionsReached;

/** An `eval/event` notification's event, without its `request_id` (a value's bundle is the
 * Jupyter gateway's alone: clients never receive it). */
export type EvalEvent = Exclude<G.CellEvent, { event: "value" }>;

/** The name of an event. */
export type EvalEventName = EvalEvent["event"];

/** `eval/event` params: the event and the id of the request (`eval` or `wait`) it belongs to. */
export type EvalEventParams = EvalEvent & { request_id: RequestId };

/** A code of {@link ErrorCodes}. */
export type ErrorCode = (typeof G.ErrorCodes)[keyof typeof G.ErrorCodes];

/** A request line. */
export interface RequestMessage<M extends Method = Method> {
  jsonrpc: "2.0";
  id: RequestId;
  method: M;
  params: G.Params[M];
}

/** A successful response line. */
export interface ResultMessage<M extends Method = Method> {
  jsonrpc: "2.0";
  id: RequestId;
  result: G.Results[M];
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
  params: G.ToolCallParams;
}

/** The client's answer to a `tool/call`: a result handed to the cell, or an error it raises. */
export type ToolCallAnswerMessage =
  | { jsonrpc: "2.0"; id: string; result: JsonValue }
  | { jsonrpc: "2.0"; id: string; error: { code: number; message: string } };
