/**
 * Where the daemon listens by default, and starting one when none does, as `cellvisor eval`
 * does (`Client::connect_or_start` in the Rust client): `cellvisor serve --socket PATH`,
 * detached in its own session, its output appended to the log next to the socket, then the
 * socket polled until it answers.
 */

import { spawn } from "node:child_process";
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { bundledProgram } from "./bundled.js";
import { DaemonStartError } from "./errors.js";
import { connectUnix, type Transport } from "./transport.js";

/** How long a freshly started daemon may take to listen (the CLI's bound). */
const START_TIMEOUT_MS = 15_000;

/**
 * The socket the CLI uses: `$CELLVISOR_SOCKET`, else `daemon.sock` in the runtime directory
 * (`$XDG_RUNTIME_DIR/cellvisor`, or `<tmp>/cellvisor-<uid>`). A socket set in the config
 * file (`[daemon] socket`) is not read here: pass it as `socket`.
 */
export function defaultSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.CELLVISOR_SOCKET) return env.CELLVISOR_SOCKET;
  const runtime = env.XDG_RUNTIME_DIR
    ? join(env.XDG_RUNTIME_DIR, "cellvisor")
    : join(tmpdir(), `cellvisor-${process.getuid?.() ?? 0}`);
  return join(runtime, "daemon.sock");
}

/** The daemon's log: next to its socket, its extension `log` (`daemon.sock` -> `daemon.log`). */
export function logPath(socket: string): string {
  const name = basename(socket);
  const dot = name.lastIndexOf(".");
  const stem = dot > 0 ? name.slice(0, dot) : name;
  return join(dirname(socket), `${stem}.log`);
}

/** What to start, and how. */
export interface StartOptions {
  /**
   * The cellvisor executable (default: `$CELLVISOR_BIN`, else the one of the installed
   * platform package `@cellvisor/<platform>-<arch>`, else `cellvisor` on `PATH`).
   */
  program?: string;
  /** A config file for the daemon (`--config`); without it the daemon finds its own. */
  config?: string;
  /** Where its output goes (default: {@link logPath} of the socket). */
  log?: string;
}

/** Why a connect failed in a way that means "nobody listens here". */
function nobodyListens(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return code === "ENOENT" || code === "ECONNREFUSED";
}

/** The socket's directory, made private as the daemon makes it (0700, ours; an open one tightened unless sticky). */
function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const meta = statSync(dir);
  if (!meta.isDirectory()) throw new DaemonStartError(`${dir} exists and is not a directory`);
  const uid = process.getuid?.();
  if (uid !== undefined && meta.uid !== uid) {
    throw new DaemonStartError(`${dir} belongs to uid ${meta.uid}, not to us (uid ${uid}); refusing to use it`);
  }
  const othersWrite = (meta.mode & 0o022) !== 0;
  const sticky = (meta.mode & 0o1000) !== 0;
  if (othersWrite && !sticky) chmodSync(dir, 0o700);
}

/** The last lines of the daemon's log, for an error saying why it did not start. */
function logTail(log: string): string {
  try {
    const lines = readFileSync(log, "utf8").trimEnd().split("\n");
    return lines.slice(-5).join("\n");
  } catch {
    return "";
  }
}

/**
 * Connects to `socket`, starting a daemon first when nobody listens there. Answers the
 * connection and whether this call started the daemon.
 */
export async function connectOrStart(
  socket: string,
  options: StartOptions = {},
): Promise<{ transport: Transport; started: boolean }> {
  try {
    return { transport: await connectUnix(socket), started: false };
  } catch (error) {
    if (!nobodyListens(error)) throw error;
  }
  const program = options.program ?? process.env.CELLVISOR_BIN ?? bundledProgram() ?? "cellvisor";
  const log = options.log ?? logPath(socket);
  ensurePrivateDir(dirname(socket));
  const logFd = openSync(log, "a", 0o600);
  const args = ["serve", "--socket", socket, ...(options.config === undefined ? [] : ["--config", options.config])];
  let exited: string | undefined;
  try {
    // detached: its own session (setsid), so it outlives this process as the CLI's does.
    const child = spawn(program, args, { detached: true, stdio: ["ignore", logFd, logFd] });
    child.once("error", (error) => (exited = `cannot run ${program}: ${error.message}`));
    child.once("exit", (code, signal) => (exited = `it exited (${signal ?? `status ${code}`})`));
    child.unref();
  } finally {
    closeSync(logFd);
  }
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    try {
      return { transport: await connectUnix(socket), started: true };
    } catch (error) {
      // Another host may have started one at the same moment: its socket serves us as well,
      // so an exit of ours is only reported once nobody listens.
      if (!nobodyListens(error)) throw error;
      if (exited !== undefined) {
        const tail = logTail(log);
        throw new DaemonStartError(
          `the daemon did not start: ${exited}; see ${log}${tail ? `:\n${tail}` : ""}`,
        );
      }
      if (Date.now() >= deadline) {
        throw new DaemonStartError(
          `the daemon did not listen on ${socket} within ${START_TIMEOUT_MS / 1000}s (${(error as Error).message}); see ${log}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}
