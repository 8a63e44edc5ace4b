// A fleet's faults as the client sees them (docs/fleet.md, "The clients' retries"), against
// real daemons:
// - `LEASED_ELSEWHERE`: two nodes share a snapshot directory with file leases; node-a holds the
//   session, node-b refuses it naming node-a. The client waits the refusal's `retry_after_ms`
//   and sends the request again with its id; once node-a stopped (its session saved, its lease
//   released), node-b restores the session and answers.
// - a silent connection: a SIGSTOPped daemon on the network accepts bytes and answers none;
//   the client pings, gives up after `silentAfter`, connects again until the daemon is
//   continued, and the cell runs once.
// (A connection cut mid-answer is once.test.ts's.)
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  ANSWER_MARGIN,
  answerDeadline,
  Cellvisor,
  ConnectionSilentError,
  DEFAULT_CELL_TIMEOUT,
  DEFAULT_RETRIES,
  DEFAULT_RETRY_WITHIN,
  DEFAULT_SILENT_AFTER,
  LeasedElsewhereError,
} from "cellvisor";
import { freePort, listening, SHORT_INTERVALS, TestDaemon, type World } from "./daemon.js";

const TOKEN = "test-token-0123456789abcdef";

/** Wraps the client's way of connecting again, calling `before` first each time; answers how many times it ran. */
function onReconnect(cv: Cellvisor, before: () => Promise<void> | void): { count: number } {
  const seen = { count: 0 };
  const inner = cv as unknown as { reopen: () => Promise<unknown> };
  const reopen = inner.reopen;
  inner.reopen = async () => {
    seen.count += 1;
    await before();
    return reopen();
  };
  return seen;
}

function nodeConfig(node: string, shared: string): string {
  return (
    `${SHORT_INTERVALS}[daemon]\nnode = "${node}"\n[snapshots]\nwhen = "every-cell"\n` +
    `dir = ${JSON.stringify(join(shared, "snapshots"))}\nkey-file = ${JSON.stringify(join(shared, "fleet.key"))}\n` +
    `[fleet]\nleases = true\nlease-ttl = "5s"\n`
  );
}

test("a LEASED_ELSEWHERE refusal is retried after retry_after_ms and answered once the session moved", async () => {
  const shared = mkdtempSync(join(tmpdir(), "cellvisor-ts-fleet-"));
  writeFileSync(join(shared, "fleet.key"), Buffer.alloc(32, 0x5a));
  chmodSync(join(shared, "fleet.key"), 0o400);
  const nodes: TestDaemon[] = [];
  const clients: Cellvisor[] = [];
  try {
    const a = await TestDaemon.start(nodeConfig("node-a", shared));
    nodes.push(a);
    const b = await TestDaemon.start(nodeConfig("node-b", shared));
    nodes.push(b);
    const onA = await Cellvisor.connect({ socket: a.socket });
    clients.push(onA);
    const first = await onA.eval({ session: "moving-ts", cells: [{ language: "py", code: "x = 41" }] });
    assert.equal(first.node, "node-a");
    onA.disconnect();

    const noRetry = await Cellvisor.connect({ socket: b.socket, retries: 0 });
    clients.push(noRetry);
    await assert.rejects(noRetry.eval({ session: "moving-ts", cells: [{ language: "py", code: "x + 1" }] }), (error: unknown) => {
      assert.ok(error instanceof LeasedElsewhereError, String(error));
      const data = error.data as { node?: string; retry_after_ms?: number };
      assert.equal(data.node, "node-a");
      assert.ok((data.retry_after_ms ?? 0) > 0 && (data.retry_after_ms ?? 0) <= 5000, JSON.stringify(data));
      return true;
    });

    const cv = await Cellvisor.connect({ socket: b.socket, retries: 10 });
    clients.push(cv);
    // The refusal came; node-a stops now (its lease released), so the next try moves.
    const reopened = onReconnect(cv, async () => {
      if (nodes.includes(a)) {
        nodes.splice(nodes.indexOf(a), 1);
        await a.stop();
      }
    });
    const result = await cv.eval({ session: "moving-ts", cells: [{ language: "py", code: "x + 1" }] });
    assert.ok(reopened.count >= 1, "the client never sent the request again");
    const cell = result.cells[0];
    assert.equal(cell?.status, "complete", JSON.stringify(result));
    assert.equal(cell?.output.trim(), "42");
    assert.equal(result.node, "node-b");
    assert.equal((cell?.state as { from?: { node?: string } } | undefined)?.from?.node, "node-a", JSON.stringify(result));
  } finally {
    for (const cv of clients) cv.disconnect();
    for (const node of nodes) await node.stop();
    rmSync(shared, { recursive: true, force: true });
  }
});

test("a stopped daemon is silence: the client gives up, connects again, and the cell runs once", async () => {
  const port = await freePort();
  const daemon = await TestDaemon.start((world: World) => {
    const file = join(world.dir, "token");
    writeFileSync(file, `${TOKEN}\n`);
    return `${SHORT_INTERVALS}[isolation]\nlevel = "none"\n[daemon]\nlisten = ["tcp://127.0.0.1:${port}"]\ntoken-file = ${JSON.stringify(file)}\n`;
  });
  const url = `ws://127.0.0.1:${port}`;
  const clients: Cellvisor[] = [];
  try {
    await listening(port);
    const noRetry = await Cellvisor.connect({ url, token: TOKEN, silentAfter: 1, retries: 0 });
    clients.push(noRetry);
    const cv = await Cellvisor.connect({ url, token: TOKEN, silentAfter: 1, retries: 10 });
    clients.push(cv);
    // A long quiet cell on a live daemon is not silence: the daemon answers the pings.
    const quiet = await cv.eval({
      session: "paused-ts",
      cells: [{ language: "py", code: "import time\ntime.sleep(3)\nran = []\nprint('slept')" }],
    });
    assert.equal(quiet.cells[0]?.output, "slept\n");

    process.kill(daemon.pid, "SIGSTOP");
    await assert.rejects(
      noRetry.eval({ session: "paused-ts", requestId: "never-answered-ts", cells: [{ language: "py", code: "1" }] }),
      (error: unknown) => error instanceof ConnectionSilentError,
    );

    // Sent while the daemon is stopped: the connection goes silent, and the client goes on
    // connecting again (each upgrade unanswered) until the daemon answers, then sends the
    // request again with its id.
    let retried!: () => void;
    const retriedOnce = new Promise<void>((resolve) => (retried = resolve));
    onReconnect(cv, () => retried());
    const answer = cv.eval({
      session: "paused-ts",
      requestId: "sent-while-stopped-ts",
      cells: [{ language: "py", code: "ran.append('retried')\nprint(ran.count('retried'))" }],
    });
    answer.catch(() => {});
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = await Promise.race([
      retriedOnce.then(() => true),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 60_000))),
    ]);
    clearTimeout(timer);
    assert.ok(gaveUp, "the client never gave up on the silent connection");
    process.kill(daemon.pid, "SIGCONT");
    const result = await answer;
    assert.equal(result.cells[0]?.status, "complete", JSON.stringify(result));
    assert.equal(result.cells[0]?.output, "1\n", JSON.stringify(result));

    const check = await Cellvisor.connect({ url, token: TOKEN });
    clients.push(check);
    const count = await check.eval({ session: "paused-ts", cells: [{ language: "py", code: "print(ran.count('retried'))" }] });
    assert.equal(count.cells[0]?.output, "1\n", "the cell ran once");
  } finally {
    try {
      process.kill(daemon.pid, "SIGCONT");
    } catch {
      // Gone already.
    }
    for (const cv of clients) cv.disconnect();
    await daemon.stop();
  }
});

test("the answer deadline and the waits before a retry are the Python clients'", () => {
  assert.equal(answerDeadline({ cells: [{ language: "py", code: "1" }] }), DEFAULT_CELL_TIMEOUT + ANSWER_MARGIN);
  assert.equal(
    answerDeadline({ timeout: 5, cells: [{ language: "py", code: "1" }, { language: "py", code: "2", timeout: 2 }] }),
    5 + 2 + ANSWER_MARGIN,
  );
  assert.equal(DEFAULT_RETRIES, 3);
  assert.equal(DEFAULT_RETRY_WITHIN, 30);
  assert.equal(DEFAULT_SILENT_AFTER, 10);
});
