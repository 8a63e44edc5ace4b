/**
 * The two ways to the daemon, behind one small interface: its Unix socket (one JSON message a
 * line; node:net, no dependency) and its network listener (one message a WebSocket text frame,
 * through the optional `ws` package, since Node 20 has no WebSocket that sends headers).
 */

import { readFileSync } from "node:fs";
import { createConnection, type Socket } from "node:net";
import { ConnectionError, ConnectionSilentError } from "./errors.js";
import { DEFAULT_SILENT_AFTER } from "./retry.js";

/** A connection carrying whole JSON-RPC messages, as text. */
export interface Transport {
  /** Sends one message (without its line end). */
  send(message: string): void;
  /** Ends the connection; `onClose` follows. */
  close(): void;
  /** Called with each message that arrives. */
  onMessage: (message: string) => void;
  /** Called once when the connection ends, with why when it broke. */
  onClose: (error?: Error) => void;
  /** What the transport is connected to, for error messages. */
  readonly describe: string;
  /** Whether an answer is awaited (set by the connection): a WebSocket counts silence only then. */
  waiting?: () => boolean;
}

/** A daemon's Unix socket. */
class UnixTransport implements Transport {
  onMessage: (message: string) => void = () => {};
  onClose: (error?: Error) => void = () => {};
  readonly describe: string;
  private buffered = "";
  private closed = false;

  constructor(
    private readonly socket: Socket,
    path: string,
  ) {
    this.describe = `the daemon's socket ${path}`;
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => this.receive(chunk));
    socket.on("error", (error) => this.end(error));
    socket.on("close", () => this.end());
  }

  send(message: string): void {
    if (!this.closed) this.socket.write(message + "\n");
  }

  close(): void {
    this.socket.end();
    this.socket.destroySoon();
  }

  private receive(chunk: string): void {
    // Search only the new text for line ends, and cut the buffer once per chunk: a long line
    // arriving in many chunks costs its length, not its length squared.
    const searchFrom = this.buffered.length;
    this.buffered += chunk;
    let start = 0;
    let end = this.buffered.indexOf("\n", searchFrom);
    while (end >= 0) {
      const line = this.buffered.slice(start, end);
      start = end + 1;
      if (line.trim() !== "") this.onMessage(line);
      end = this.buffered.indexOf("\n", start);
    }
    if (start > 0) this.buffered = this.buffered.slice(start);
  }

  private end(error?: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose(error);
  }
}

/** Connects to the daemon's Unix socket at `path`; rejects with the socket error (its `code`: ENOENT, ECONNREFUSED, ...). */
export function connectUnix(path: string): Promise<Transport> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ path });
    const failed = (error: Error) => reject(error);
    socket.once("error", failed);
    socket.once("connect", () => {
      socket.off("error", failed);
      resolve(new UnixTransport(socket, path));
    });
  });
}

/** How to reach a daemon's network listener. */
export interface RemoteOptions {
  /** `ws://HOST:PORT` or `wss://HOST:PORT` (path `/v1/rpc` unless the URL names one). */
  url: string;
  /** The bearer token. */
  token: string;
  /** PEM certificates to trust for `wss://` instead of the system's (a self-signed daemon's). */
  ca?: string;
  /** Binds the connection to this session (`Cellvisor-Session`), for a router. */
  session?: string;
  /**
   * Seconds after which a connection on which nothing came while an answer was awaited (not
   * even the pong to the ping sent halfway) is given up ({@link ConnectionSilentError}); the
   * upgrade gets as long. `null`: never.
   */
  silentAfter?: number | null;
}

/** The few members of the `ws` package's WebSocket this client uses. */
interface WsSocket {
  on(event: "open", listener: () => void): void;
  on(event: "message", listener: (data: unknown, isBinary: boolean) => void): void;
  on(event: "error", listener: (error: Error) => void): void;
  on(event: "close", listener: (code: number, reason: unknown) => void): void;
  on(event: "unexpected-response", listener: (request: unknown, response: { statusCode?: number }) => void): void;
  on(event: "ping" | "pong", listener: () => void): void;
  send(data: string): void;
  ping(): void;
  close(): void;
  terminate(): void;
}

type WsConstructor = new (
  url: string,
  options: { headers: Record<string, string>; ca?: string; maxPayload?: number; handshakeTimeout?: number },
) => WsSocket;

/** The URL as the CLI reads `--connect`: ws or wss only, `/v1/rpc` unless a path is given. */
export function rpcUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConnectionError(`${url} is not a URL; give ws://HOST:PORT or wss://HOST:PORT`);
  }
  if (parsed.protocol !== "ws:" && parsed.protocol !== "wss:") {
    throw new ConnectionError(
      `${url}: the daemon's listener is reached over ws:// or wss:// (not ${parsed.protocol.replace(/:$/, "")}://)`,
    );
  }
  if (parsed.pathname === "" || parsed.pathname === "/") parsed.pathname = "/v1/rpc";
  return parsed.toString();
}

async function loadWs(): Promise<WsConstructor> {
  try {
    const module = (await import("ws" as string)) as { WebSocket?: WsConstructor; default?: WsConstructor };
    const Ws = module.WebSocket ?? module.default;
    if (Ws) return Ws;
  } catch {
    // Reported below.
  }
  throw new ConnectionError(
    "connecting to a url needs the `ws` package (an optional peer dependency): npm install ws",
  );
}

/**
 * A daemon's WebSocket listener. While an answer is awaited, a connection quiet for half of
 * `silentAfter` seconds is pinged, and one on which nothing (not even the pong) came for all
 * of it is given up: a stopped node accepts bytes and answers none, which only a deadline
 * tells from a long cell (a live daemon answers pings while its cell runs).
 */
class WsTransport implements Transport {
  onMessage: (message: string) => void = () => {};
  onClose: (error?: Error) => void = () => {};
  waiting: () => boolean = () => true;
  private closed = false;
  private heard = Date.now();
  private pinged = false;
  private readonly watch: NodeJS.Timeout | undefined;

  constructor(
    private readonly socket: WsSocket,
    readonly describe: string,
    silentAfter: number | null,
  ) {
    const heard = () => {
      this.heard = Date.now();
      this.pinged = false;
    };
    socket.on("message", (data, isBinary) => {
      heard();
      if (!isBinary) this.onMessage(String(data));
    });
    socket.on("ping", heard);
    socket.on("pong", heard);
    socket.on("error", (error) => this.end(error));
    socket.on("close", () => this.end());
    if (silentAfter !== null) {
      const limitMs = silentAfter * 1000;
      this.watch = setInterval(() => this.check(limitMs), Math.max(Math.min(limitMs / 4, 1000), 10));
      this.watch.unref();
    }
  }

  private check(limitMs: number): void {
    const now = Date.now();
    if (!this.waiting()) {
      // Silence is counted while an answer is awaited only.
      this.heard = now;
      this.pinged = false;
      return;
    }
    const quiet = now - this.heard;
    if (quiet >= limitMs) {
      this.end(
        new ConnectionSilentError(
          `nothing came from ${this.describe} for ${limitMs / 1000} s, not even the answer to a ping: the daemon is stopped or cut off`,
        ),
      );
      this.socket.terminate();
    } else if (quiet >= limitMs / 2 && !this.pinged) {
      this.pinged = true;
      try {
        this.socket.ping();
      } catch {
        // Not open any more: its close event follows.
      }
    }
  }

  send(message: string): void {
    if (!this.closed) this.socket.send(message);
  }

  close(): void {
    clearInterval(this.watch);
    this.socket.close();
  }

  private end(error?: Error): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.watch);
    this.onClose(error);
  }
}

/** Opens the WebSocket of a daemon's network listener, with its token. */
export async function connectWebSocket(options: RemoteOptions): Promise<Transport> {
  const url = rpcUrl(options.url);
  const Ws = await loadWs();
  const headers: Record<string, string> = { Authorization: `Bearer ${options.token}` };
  if (options.session !== undefined) headers["Cellvisor-Session"] = options.session;
  const silentAfter = options.silentAfter === undefined ? DEFAULT_SILENT_AFTER : options.silentAfter;
  const socket = new Ws(url, {
    headers,
    maxPayload: 16 * 1024 * 1024,
    // A stopped node accepts the TCP connection and never answers the upgrade.
    handshakeTimeout: (silentAfter ?? 15) * 1000,
    ...(options.ca === undefined ? {} : { ca: options.ca }),
  });
  return new Promise((resolve, reject) => {
    let settled = false;
    const fail = (error: Error) => {
      if (settled) return;
      settled = true;
      reject(error);
    };
    socket.on("unexpected-response", (_request, response) => {
      const status = response.statusCode;
      socket.terminate();
      fail(
        new ConnectionError(
          status === 401
            ? `${url} refused the token (401): check the token the daemon's token-file holds`
            : `${url} answered HTTP ${status ?? "?"} instead of a WebSocket`,
        ),
      );
    });
    socket.on("error", (error) => fail(new ConnectionError(`cannot reach ${url}: ${error.message}`, { cause: error })));
    socket.on("open", () => {
      if (settled) return;
      settled = true;
      resolve(new WsTransport(socket, url, silentAfter));
    });
  });
}

/** Reads a PEM or token file, with an error naming it. */
export function readSetting(path: string, what: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (error) {
    throw new ConnectionError(`cannot read the ${what} file ${path}: ${(error as Error).message}`);
  }
}
