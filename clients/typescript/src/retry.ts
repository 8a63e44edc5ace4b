/**
 * When an `eval` is sent again, as plain data and small functions: the same defaults as the
 * Python clients (docs/fleet.md, "The clients' retries"). A retry carries the request's
 * `request_id`, so the daemon runs it once and a retry gets the first run's answer.
 */

import { ConnectionError, LeasedElsewhereError, ResponseTimeoutError } from "./errors.js";
import type { EvalParams, JsonValue } from "./protocol.js";

/** How many times an `eval` is sent again after a lost or silent connection, an answer past its deadline or `LEASED_ELSEWHERE`, unless `retries` says. */
export const DEFAULT_RETRIES = 3;
/** Seconds to go on connecting again after a loss (a router answers 503 while a dead or paused node's lease runs out), unless `retryWithin` says. */
export const DEFAULT_RETRY_WITHIN = 30;
/** Seconds after which a WebSocket on which nothing came while an answer was awaited (not even the pong to the ping sent halfway) is given up, unless `silentAfter` says. */
export const DEFAULT_SILENT_AFTER = 10;
/** The daemon's default cell timeout (`cells.default-timeout`), assumed for a cell that names none. */
export const DEFAULT_CELL_TIMEOUT = 30;
/** Seconds an answer may take beyond its cells' timeouts (the save, its commit, a queue). */
export const ANSWER_MARGIN = 15;
/** The longest wait a `LEASED_ELSEWHERE` refusal's `retry_after_ms` is taken for. */
const MAX_LEASE_WAIT_MS = 5_000;

/**
 * Seconds to wait for an `eval`'s answer: each cell's timeout (its own, the request's, else
 * the daemon's default) plus {@link ANSWER_MARGIN}. Past it the answer is lost, and the
 * client sends the request again with its `request_id`.
 */
export function answerDeadline(params: Pick<EvalParams, "cells" | "timeout">): number {
  let total = 0;
  for (const cell of params.cells) total += cell.timeout ?? params.timeout ?? DEFAULT_CELL_TIMEOUT;
  return total + ANSWER_MARGIN;
}

/** Milliseconds before retry `attempt` (from 1): 100, 200, 400, ..., at most `capMs`. */
export function backoffMs(attempt: number, capMs = 6_400): number {
  return Math.min(100 * 2 ** Math.min(Math.max(attempt - 1, 0), 6), capMs);
}

/**
 * How long to wait before sending an `eval` again after `error`, or `undefined` when the
 * error is not one to retry (the daemon's refusal, a cell's failure): a `LEASED_ELSEWHERE`
 * refusal's `retry_after_ms` (at most 5 s; 100 ms when it names none), else a backoff.
 */
export function retryWaitMs(error: unknown, attempt: number): number | undefined {
  if (error instanceof LeasedElsewhereError) {
    const data = error.data as { [key: string]: JsonValue } | undefined;
    const after = typeof data?.retry_after_ms === "number" ? data.retry_after_ms : 0;
    return Math.min(after > 0 ? after : 100, MAX_LEASE_WAIT_MS);
  }
  if (error instanceof ConnectionError) return backoffMs(attempt, 1_000);
  return undefined;
}

/** `answer`, or a {@link ResponseTimeoutError} once `seconds` have passed without it. */
export function withDeadline<T>(answer: Promise<T>, seconds: number, requestId: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new ResponseTimeoutError(
            `no answer to eval ${requestId} within ${seconds} s (its cells' timeouts plus ${ANSWER_MARGIN} s)`,
          ),
        ),
      seconds * 1000,
    );
  });
  return Promise.race([answer, late]).finally(() => clearTimeout(timer));
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
