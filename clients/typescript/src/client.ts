/**
 * The host's handle on a daemon: `Cellvisor.connect()` reaches one (its Unix socket, starting
 * it when asked, or its network listener), then one method per protocol method, with the
 * conveniences a TypeScript host expects: camelCase options, tools answered by handlers,
 * an `AbortSignal` that interrupts the running cell, typed errors.
 */

import { randomBytes } from "node:crypto";
import { connectOrStart, defaultSocketPath, type StartOptions } from "./autostart.js";
import { Call } from "./call.js";
import { RpcConnection, type RequestHooks } from "./connection.js";
import { ConnectionError, UnresponsiveError } from "./errors.js";
import { answerDeadline, DEFAULT_RETRIES, DEFAULT_RETRY_WITHIN, retryWaitMs, sleep, withDeadline } from "./retry.js";
import {
  FILE_CHUNK_BYTES,
  PROTOCOL_VERSION,
  type CellResult,
  type CellSpec,
  type EvalParams,
  type EvalResult,
  type EventsChoice,
  type FileEntry,
  type InitializeResult,
  type JsonValue,
  type Language,
  type Method,
  type Params,
  type Results,
  type SandboxRequest,
  type SessionsCount,
  type SessionStatus,
} from "./protocol.js";
import { connectUnix, connectWebSocket, readSetting, type Transport } from "./transport.js";

/** How to reach the daemon. */
export interface ConnectOptions extends StartOptions {
  /** Its Unix socket (default: `$CELLVISOR_SOCKET`, else the CLI's default path). */
  socket?: string;
  /** Its network listener instead, `ws://` or `wss://` (default: `$CELLVISOR_CONNECT` when no `socket` is given). Needs the `ws` package. */
  url?: string;
  /** The listener's bearer token. */
  token?: string;
  /** A file whose first line is the token (default: `$CELLVISOR_TOKEN_FILE`). */
  tokenFile?: string;
  /** PEM certificates to trust for `wss://`, as text. */
  ca?: string;
  /** A PEM file to trust for `wss://` (default: `$CELLVISOR_TLS_CA`). */
  caFile?: string;
  /** Binds a `url` connection to one session (`Cellvisor-Session`), for a router. */
  session?: string;
  /** Start `cellvisor serve` on the socket when nobody listens there, as `cellvisor eval` does. */
  autostart?: boolean;
  /**
   * Seconds the daemon has to answer `initialize` on the new connection (default:
   * `$CELLVISOR_HEALTH_TIMEOUT`, else 10); past it, {@link UnresponsiveError}. Only the first
   * answer is bounded: a cell may run as long as its own timeout.
   */
  healthTimeout?: number;
  /**
   * How many times an `eval` is sent again, with its `requestId`, after a lost or silent
   * connection, an answer past its deadline ({@link answerDeadline}, over a `url`) or a
   * `LEASED_ELSEWHERE` refusal (after its `retry_after_ms`, at most 5 s) (default
   * {@link DEFAULT_RETRIES}; 0: never).
   */
  retries?: number;
  /** Seconds to go on connecting again after a loss before it is thrown (default {@link DEFAULT_RETRY_WITHIN}): a router answers 503 while a dead or paused node's lease runs out. */
  retryWithin?: number;
  /**
   * On a `url`: seconds after which a connection on which nothing came while an answer was
   * awaited (pinged halfway; a live daemon answers pings while its cell runs) is given up,
   * {@link ConnectionSilentError}, and an `eval` sent again (default
   * {@link DEFAULT_SILENT_AFTER}; `null`: never).
   */
  silentAfter?: number | null;
}

/** The health handshake's bound when neither the option nor `$CELLVISOR_HEALTH_TIMEOUT` says. */
export const DEFAULT_HEALTH_TIMEOUT = 10;

/** The health bound in seconds: the option, else `$CELLVISOR_HEALTH_TIMEOUT`, else the default. */
export function healthTimeout(given?: number): number {
  const env = process.env.CELLVISOR_HEALTH_TIMEOUT;
  const chosen = given ?? (env ? Number(env) : DEFAULT_HEALTH_TIMEOUT);
  if (!Number.isFinite(chosen) || chosen <= 0 || chosen > 3600) {
    throw new RangeError(
      `the health timeout must be a number of seconds from 0 to 3600, got ${String(given ?? env)} (healthTimeout or CELLVISOR_HEALTH_TIMEOUT, default ${DEFAULT_HEALTH_TIMEOUT})`,
    );
  }
  return chosen;
}

/** A tool the cells may call (`await tool.add({a: 2})` in JS, `tool.add(a=2)` in Python); `handler` runs it here. */
export interface HostTool<Args = any> {
  name: string;
  description?: string;
  /** JSON Schema of the arguments (default `{"type": "object"}`). */
  inputSchema?: JsonValue;
  /** Its value (JSON) goes back to the cell; a throw becomes the cell's exception with its message. */
  handler: (args: Args, call: { name: string }) => unknown;
}

/** An `eval`: the cells, and the request's settings. */
export interface EvalOptions {
  /** The session (default `"default"`): state persists per (session, language). */
  session?: string;
  cells: CellSpec[];
  tools?: HostTool[];
  /** Aborting interrupts the running cell; the result still comes, that cell `cancelled`. */
  signal?: AbortSignal;
  /** The cells' directory (default: this process's, on a socket; none over a url). `null`: none. */
  cwd?: string | null;
  /** The Python environment to run in (the caller's `VIRTUAL_ENV`). */
  virtualEnv?: string;
  /** The environment the cells should see (filtered by the daemon's `[env]` rules). */
  env?: { [name: string]: string };
  /** Run on new workers thrown away afterwards. */
  fresh?: boolean;
  sandbox?: SandboxRequest;
  /** Resume the session from its snapshot; refused if it is neither live nor saved. */
  resume?: boolean;
  /** Seconds, for every cell that sets none. */
  timeout?: number;
  /** Restart the first cell's worker first. */
  reset?: boolean;
  /** Which events the daemon sends (default all): `"output"` only output and displays, `"none"` none. */
  events?: EventsChoice;
  /**
   * This request's name (1-128 printable ASCII characters, no spaces; default: a fresh
   * random one). The daemon runs an id once: when the connection is lost before the answer,
   * the client connects again and sends the request with the same id, and gets the first
   * run's answer (`replayed: true`) instead of running the cells twice.
   */
  requestId?: string;
}

/** A session, and maybe one language of it. */
export interface SessionTarget {
  session: string;
  language?: Language;
  /** Under `sessions.key = "session+cwd"`, the directory of the pair (default: every pair, or the only one). */
  cwd?: string;
  /** `close` only: keep the session's workspace (its files) instead of removing it. */
  keepWorkspace?: boolean;
}

/** A background cell. */
export interface CellTarget {
  session: string;
  cellId: number;
  /** Under `sessions.key = "session+cwd"`, the directory of the pair the cell runs in. */
  cwd?: string;
}

/** A client of one daemon connection. */
export class Cellvisor {
  /** Connects again as `connect` did (after a lost connection); set by `connect`. */
  private reopen: (() => Promise<RpcConnection>) | undefined;
  private retries = DEFAULT_RETRIES;
  private retryWithin = DEFAULT_RETRY_WITHIN;
  private disconnected = false;

  private constructor(
    private rpc: RpcConnection,
    /** What the daemon said of itself (`initialize`): version, languages, pid, node. */
    readonly server: InitializeResult,
    /** Whether `connect` started the daemon (it then outlives this client, as the CLI's does; `shutdown()` stops it). */
    readonly autostarted: boolean,
    private readonly remote: boolean,
  ) {}

  /** Connects (and starts a daemon, with `autostart`), then checks the daemon speaks this client's protocol. */
  static async connect(options: ConnectOptions = {}): Promise<Cellvisor> {
    const within = healthTimeout(options.healthTimeout);
    const url = options.url ?? (options.socket === undefined ? process.env.CELLVISOR_CONNECT || undefined : undefined);
    let transport: Transport;
    let started = false;
    if (url !== undefined) {
      if (options.autostart) throw new ConnectionError("autostart starts a daemon on a socket; a url names one that runs elsewhere");
      const tokenFile = options.tokenFile ?? process.env.CELLVISOR_TOKEN_FILE;
      const token = options.token ?? (tokenFile ? readSetting(tokenFile, "token").split("\n")[0]?.trim() : undefined);
      if (!token) throw new ConnectionError(`${url} needs a token: give token or tokenFile (or $CELLVISOR_TOKEN_FILE)`);
      const caFile = options.caFile ?? process.env.CELLVISOR_TLS_CA;
      const ca = options.ca ?? (caFile ? readSetting(caFile, "CA certificate") : undefined);
      transport = await connectWebSocket({
        url,
        token,
        ...(ca === undefined ? {} : { ca }),
        ...(options.session === undefined ? {} : { session: options.session }),
        ...(options.silentAfter === undefined ? {} : { silentAfter: options.silentAfter }),
      });
    } else {
      const socket = options.socket ?? defaultSocketPath();
      if (options.autostart) {
        ({ transport, started } = await connectOrStart(socket, options));
      } else {
        transport = await connectUnix(socket).catch((error: Error & { code?: string }) => {
          const nobody = error.code === "ENOENT" || error.code === "ECONNREFUSED";
          throw new ConnectionError(
            nobody
              ? `no daemon listens on ${socket} (${error.message}); start one with \`cellvisor serve\`, or connect with autostart: true`
              : `cannot connect to ${socket}: ${error.message}`,
            { cause: error },
          );
        });
      }
    }
    const rpc = new RpcConnection(transport);
    const where = url ?? options.socket ?? defaultSocketPath();
    let timer: NodeJS.Timeout | undefined;
    const silent = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new UnresponsiveError(
              `the cellvisor daemon at ${where} accepted the connection but did not answer \`initialize\` within ${within} s: ` +
                "the process holding it may be stopped or hung. `cellvisor eval` replaces it when it can prove it is that " +
                "socket's cellvisor daemon; otherwise stop that process (or remove the socket if nothing should listen " +
                "there), or use another socket; CELLVISOR_HEALTH_TIMEOUT sets the wait in seconds",
            ),
          ),
        within * 1000,
      );
    });
    const server = await Promise.race([rpc.request("initialize", {}).result, silent])
      .catch((error: Error) => {
        rpc.close();
        throw error;
      })
      .finally(() => clearTimeout(timer));
    if (server.protocol_version !== PROTOCOL_VERSION) {
      rpc.close();
      throw new ConnectionError(
        `the daemon speaks protocol ${server.protocol_version} and this client ${PROTOCOL_VERSION}: use the client of its release (${server.server_version})`,
      );
    }
    const client = new Cellvisor(rpc, server, started, url !== undefined);
    client.retries = options.retries ?? DEFAULT_RETRIES;
    client.retryWithin = options.retryWithin ?? DEFAULT_RETRY_WITHIN;
    const again: ConnectOptions = { ...options, autostart: false };
    if (url !== undefined) again.url = url;
    else again.socket = options.socket ?? defaultSocketPath();
    client.reopen = async () => (await Cellvisor.connect(again)).rpc;
    return client;
  }

  /**
   * Sends `params` as an `eval`; when the connection is lost or silent, the answer is past
   * its deadline, or `LEASED_ELSEWHERE` says another node holds the session, waits (the
   * refusal's `retry_after_ms`, else a backoff), connects again and sends it once more (same
   * `request_id`), at most `retries` times.
   */
  private async evalOnce(params: EvalParams, hooks: RequestHooks): Promise<EvalResult> {
    // Over a url only: a router may lose an answer, while on the Unix socket a lost daemon
    // closes the connection and a cell may run as long as the daemon allows.
    const deadline = this.remote ? answerDeadline(params) : undefined;
    const requestId = params.request_id ?? "";
    for (let attempt = 0; ; ) {
      const rpc = this.rpc;
      try {
        const answer = rpc.request("eval", params, hooks).result;
        return await (deadline === undefined ? answer : withDeadline(answer, deadline, requestId));
      } catch (error) {
        const wait = retryWaitMs(error, attempt + 1);
        if (wait === undefined || this.disconnected || !this.reopen || attempt >= this.retries) throw error;
        attempt += 1;
        await sleep(wait);
        await this.reconnect(error);
        if (this.rpc !== rpc) rpc.close();
      }
    }
  }

  /** Connects again as `connect` did, trying for `retryWithin` seconds; past them throws `lost`. */
  private async reconnect(lost: unknown): Promise<void> {
    const reopen = this.reopen;
    if (!reopen) throw lost;
    const until = Date.now() + this.retryWithin * 1000;
    for (let tries = 1; ; tries += 1) {
      if (this.disconnected) throw lost;
      try {
        this.rpc = await reopen();
        return;
      } catch {
        if (Date.now() >= until) throw lost;
        await sleep(Math.min(100 * 2 ** Math.min(tries - 1, 6), 1_000));
      }
    }
  }

  /**
   * Runs cells. The answer is awaitable for the {@link EvalResult} and async-iterable for the
   * request's events (`cell_started`, `output`, `display`, `status`, `cell_done`).
   */
  eval(options: EvalOptions): Call<EvalResult> {
    const session = options.session ?? "default";
    const tools = new Map<string, HostTool>();
    for (const tool of options.tools ?? []) {
      if (typeof tool.handler !== "function") throw new TypeError(`tool ${tool.name} has no handler function`);
      tools.set(tool.name, tool);
    }
    const params: EvalParams = { session, cells: options.cells };
    const cwd = options.cwd === undefined ? (this.remote ? null : process.cwd()) : options.cwd;
    if (cwd !== null) params.cwd = cwd;
    if (tools.size > 0) {
      params.tools = [...tools.values()].map((tool) => ({
        name: tool.name,
        description: tool.description ?? "",
        input_schema: tool.inputSchema ?? { type: "object" },
      }));
    }
    if (options.virtualEnv !== undefined) params.virtual_env = options.virtualEnv;
    if (options.env !== undefined) params.env = options.env;
    if (options.fresh !== undefined) params.fresh = options.fresh;
    if (options.sandbox !== undefined) params.sandbox = options.sandbox;
    if (options.resume !== undefined) params.resume = options.resume;
    if (options.timeout !== undefined) params.timeout = options.timeout;
    if (options.reset !== undefined) params.reset = options.reset;
    if (options.events !== undefined) params.events = options.events;
    params.request_id = options.requestId ?? randomBytes(16).toString("hex");
    const signal = options.signal;
    return new Call<EvalResult>(async (push) => {
      signal?.throwIfAborted();
      // Interrupt only while one of this request's cells runs: before it starts or between
      // cells, the session may be running another request's cell.
      let running: Language | undefined;
      let abortWanted = false;
      const interrupt = () => {
        if (running === undefined) return;
        const language = running;
        running = undefined;
        void this.rpc.request("interrupt", { session, language }).result.catch(() => {});
      };
      const onAbort = () => {
        abortWanted = true;
        interrupt();
      };
      const result = this.evalOnce(params, {
        onEvent: (event) => {
          if (event.event === "cell_started") {
            running = event.language;
            if (abortWanted) interrupt();
          } else if (event.event === "cell_done") {
            running = undefined;
          }
          push(event);
        },
        onToolCall: async (name, args) => {
          const tool = tools.get(name);
          if (!tool) throw new Error(`no tool ${name} was declared`);
          return ((await tool.handler(args, { name })) ?? null) as JsonValue;
        },
      });
      signal?.addEventListener("abort", onAbort, { once: true });
      try {
        return await result;
      } finally {
        signal?.removeEventListener("abort", onAbort);
      }
    });
  }

  /**
   * Watches a background cell for `yieldTimeMs` (default 10 s): its output since the last
   * look (`running`), or its final result as soon as it ends. Its events stream meanwhile.
   */
  wait(options: CellTarget & { yieldTimeMs?: number; maxTokens?: number; events?: EventsChoice }): Call<CellResult> {
    const params: Params["wait"] = { session: options.session, cell_id: options.cellId };
    if (options.cwd !== undefined) params.cwd = options.cwd;
    if (options.yieldTimeMs !== undefined) params.yield_time_ms = options.yieldTimeMs;
    if (options.maxTokens !== undefined) params.max_tokens = options.maxTokens;
    if (options.events !== undefined) params.events = options.events;
    return new Call<CellResult>((push) => this.rpc.request("wait", params, { onEvent: push }).result);
  }

  /** Stops a background cell (interrupt, grace, kill) and answers its final result. */
  terminate(options: CellTarget): Promise<CellResult> {
    const params: Params["terminate"] = { session: options.session, cell_id: options.cellId };
    if (options.cwd !== undefined) params.cwd = options.cwd;
    return this.request("terminate", params);
  }

  /** Interrupts the running cell of a session (of one language, or all). */
  interrupt(target: SessionTarget): Promise<SessionsCount> {
    return this.request("interrupt", sessionParams(target));
  }

  /** Replaces a session's workers with fresh ones: its state is gone. */
  reset(target: SessionTarget): Promise<SessionsCount> {
    return this.request("reset", sessionParams(target));
  }

  /** Closes a session's workers. (The connection ends with {@link Cellvisor.disconnect}.) */
  close(target: SessionTarget): Promise<SessionsCount> {
    return this.request("close", sessionParams(target));
  }

  /**
   * Puts `data` into the session's workspace at `path` (relative to it), replacing a file
   * there; its missing directories are made. A large file goes in parts.
   */
  async upload(session: string, path: string, data: Uint8Array | string): Promise<void> {
    const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data);
    let offset = 0;
    do {
      const part = bytes.subarray(offset, offset + FILE_CHUNK_BYTES);
      const params: Params["files/write"] = { session, path, data: part.toString("base64"), encoding: "base64" };
      if (offset > 0) params.offset = offset;
      await this.request("files/write", params);
      offset += part.length;
    } while (offset < bytes.length);
  }

  /** The bytes of the file `path` in the session's workspace. */
  async download(session: string, path: string): Promise<Uint8Array> {
    const parts: Buffer[] = [];
    let offset = 0;
    for (;;) {
      const part = await this.request("files/read", { session, path, offset, encoding: "base64" });
      const bytes = Buffer.from(part.data, "base64");
      parts.push(bytes);
      offset += bytes.length;
      if (part.eof || bytes.length === 0) return new Uint8Array(Buffer.concat(parts));
    }
  }

  /** The entries of a directory of the session's workspace (the workspace itself by default). */
  async list(session: string, options: { path?: string; recursive?: boolean } = {}): Promise<FileEntry[]> {
    const params: Params["files/list"] = { session, path: options.path ?? "" };
    if (options.recursive !== undefined) params.recursive = options.recursive;
    return (await this.request("files/list", params)).entries;
  }

  /** The live sessions: pid, state, memory, CPU, cells, ... */
  status(): Promise<SessionStatus[]> {
    return this.request("status", {});
  }

  /** Stops the daemon and every worker. */
  shutdown(): Promise<Results["shutdown"]> {
    return this.request("shutdown", {});
  }

  /** Any method, as the protocol names it (`checkpoint`, `drain`, ...). */
  request<M extends Method>(method: M, params: Params[M]): Promise<Results[M]> {
    return this.rpc.request(method, params).result;
  }

  /** Ends the connection (an `eval` still running is interrupted by the daemon). */
  disconnect(): void {
    this.disconnected = true;
    this.rpc.close();
  }
}

function sessionParams(target: SessionTarget): Params["interrupt"] {
  const params: Params["interrupt"] = { session: target.session };
  if (target.language !== undefined) params.language = target.language;
  if (target.cwd !== undefined) params.cwd = target.cwd;
  if (target.keepWorkspace !== undefined) params.keep_workspace = target.keepWorkspace;
  return params;
}
