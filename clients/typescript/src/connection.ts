/**
 * JSON-RPC over a {@link Transport}: numbered requests, their answers matched by id (they may
 * come back in any order), `eval/event` notifications routed to the request they name, and
 * the daemon's own `tool/call` requests answered by the handlers of the `eval` that declared
 * the tools.
 */

import { ConnectionError, ConnectionSilentError, errorFromRpc } from "./errors.js";
import type {
  EvalEvent,
  EvalEventParams,
  JsonValue,
  Method,
  Params,
  RequestId,
  Results,
  ToolCallParams,
} from "./protocol.js";
import type { Transport } from "./transport.js";

/** What a request in flight wants to hear besides its answer. */
export interface RequestHooks {
  /** Each `eval/event` of this request, in order, all before the answer. */
  onEvent?: (event: EvalEvent) => void;
  /** Runs a `tool/call` of this request; its value goes back to the cell, a throw becomes the cell's exception. */
  onToolCall?: (name: string, args: JsonValue) => Promise<JsonValue>;
}

interface Pending extends RequestHooks {
  resolve: (result: unknown) => void;
  reject: (error: Error) => void;
}

/** The error code of a tool call the host failed (JSON-RPC's server-error range). */
const TOOL_FAILED = -32000;

/** One JSON-RPC connection to a daemon. */
export class RpcConnection {
  private nextId = 1;
  private readonly pending = new Map<RequestId, Pending>();
  private closedBy: Error | undefined;

  constructor(private readonly transport: Transport) {
    transport.onMessage = (message) => this.receive(message);
    transport.onClose = (error) => this.closed(error);
    transport.waiting = () => this.pending.size > 0;
  }

  /** Whether the connection has ended. */
  get isClosed(): boolean {
    return this.closedBy !== undefined;
  }

  /** Sends `method` and resolves with its result, or rejects with its typed error. */
  request<M extends Method>(method: M, params: Params[M], hooks: RequestHooks = {}): {
    id: number;
    result: Promise<Results[M]>;
  } {
    const id = this.nextId++;
    const result = new Promise<Results[M]>((resolve, reject) => {
      if (this.closedBy) {
        reject(this.closedBy);
        return;
      }
      this.pending.set(id, { ...hooks, resolve: resolve as (result: unknown) => void, reject });
      this.transport.send(JSON.stringify({ jsonrpc: "2.0", id, method, params }));
    });
    return { id, result };
  }

  /** Ends the connection; requests still in flight reject. */
  close(): void {
    this.closed(new Error("the client disconnected"));
    this.transport.close();
  }

  private receive(line: string): void {
    let message: { [key: string]: JsonValue | undefined };
    try {
      const parsed: unknown = JSON.parse(line);
      if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) throw new Error("not an object");
      message = parsed as { [key: string]: JsonValue | undefined };
    } catch (error) {
      this.fail(
        new ConnectionError(
          `${this.transport.describe} sent a line that is not a JSON-RPC message (${(error as Error).message}): ${line.slice(0, 200)}`,
        ),
      );
      return;
    }
    if (typeof message.method === "string") {
      this.notification(message.method, message.id, message.params);
      return;
    }
    const id = message.id;
    if (typeof id !== "number" && typeof id !== "string") return;
    const pending = this.pending.get(id);
    if (!pending) return;
    this.pending.delete(id);
    const error = message.error;
    if (error !== undefined && error !== null && typeof error === "object" && !Array.isArray(error)) {
      pending.reject(
        errorFromRpc({
          code: typeof error.code === "number" ? error.code : 0,
          message: typeof error.message === "string" ? error.message : JSON.stringify(error),
          ...(error.data === undefined ? {} : { data: error.data }),
        }),
      );
    } else {
      pending.resolve(message.result ?? null);
    }
  }

  private notification(method: string, id: JsonValue | undefined, params: JsonValue | undefined): void {
    if (method === "eval/event") {
      const { request_id, ...event } = (params ?? {}) as unknown as EvalEventParams;
      this.pending.get(request_id)?.onEvent?.(event as EvalEvent);
    } else if (method === "tool/call" && typeof id === "string") {
      void this.toolCall(id, (params ?? {}) as unknown as ToolCallParams);
    } else if (typeof id === "string" || typeof id === "number") {
      this.answer(id, undefined, { code: -32601, message: `method not found: ${method}` });
    }
  }

  private async toolCall(id: string, params: ToolCallParams): Promise<void> {
    const handler = this.pending.get(params.request_id)?.onToolCall;
    if (!handler) {
      this.answer(id, undefined, {
        code: TOOL_FAILED,
        message: `no request ${String(params.request_id)} of this client declared tool ${params.name}`,
      });
      return;
    }
    try {
      this.answer(id, await handler(params.name, params.arguments));
    } catch (error) {
      this.answer(id, undefined, {
        code: TOOL_FAILED,
        message: error instanceof Error ? error.message : String(error),
      });
    }
  }

  private answer(id: RequestId, result: JsonValue | undefined, error?: { code: number; message: string }): void {
    if (this.closedBy) return;
    const message = error ? { jsonrpc: "2.0", id, error } : { jsonrpc: "2.0", id, result: result ?? null };
    this.transport.send(JSON.stringify(message));
  }

  private fail(error: Error): void {
    this.closed(error);
    this.transport.close();
  }

  private closed(error?: Error): void {
    if (this.closedBy) return;
    this.closedBy =
      error instanceof ConnectionSilentError
        ? error
        : new ConnectionError(
            error
              ? `the connection to ${this.transport.describe} ended: ${error.message}`
              : `${this.transport.describe} closed the connection`,
            { cause: error },
          );
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const request of pending) request.reject(this.closedBy);
  }
}
