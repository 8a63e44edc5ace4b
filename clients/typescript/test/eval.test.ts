// The client against the real daemon: cells in the three languages with their events
// iterated, host tools, a background cell, an AbortSignal, typed errors, and the session
// methods.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  Cellvisor,
  CellvisorError,
  ConnectionError,
  InvalidParamsError,
  MethodNotFoundError,
  RequestRefusedError,
  type EvalEvent,
  type Method,
} from "cellvisor";
import { TestDaemon } from "./daemon.js";

let daemon: TestDaemon;
let cv: Cellvisor;

before(async () => {
  daemon = await TestDaemon.start();
  cv = await Cellvisor.connect({ socket: daemon.socket });
});

after(async () => {
  cv?.disconnect();
  await daemon?.stop();
});

test("initialize tells the daemon's pid and languages", () => {
  assert.equal(cv.server.pid, daemon.pid);
  assert.deepEqual([...cv.server.languages].sort(), ["js", "lua", "py"]);
  assert.equal(cv.autostarted, false);
});

test("cells in py, js and lua stream their events, then the result; state persists", async () => {
  const call = cv.eval({
    session: "langs",
    cells: [
      { language: "py", code: "x = 41\nprint(x + 1)", title: "python" },
      { language: "js", code: "text(6 * 7)" },
      { language: "lua", code: "print(40 + 2)" },
    ],
  });
  const events: EvalEvent[] = [];
  for await (const event of call) events.push(event);
  const result = await call;
  assert.equal(result.is_error, false);
  assert.deepEqual(
    result.cells.map((cell) => [cell.language, cell.status, cell.output]),
    [
      ["py", "complete", "42\n"],
      ["js", "complete", "42\n"],
      ["lua", "complete", "42\n"],
    ],
  );
  assert.deepEqual(result.summary.languages, ["py", "js", "lua"]);
  const started = events.filter((e) => e.event === "cell_started");
  assert.deepEqual(
    started.map((e) => [e.index, e.language, e.title]),
    [
      [0, "py", "python"],
      [1, "js", null],
      [2, "lua", null],
    ],
  );
  for (const index of [0, 1, 2]) {
    const output = events
      .filter((e) => e.event === "output" && e.index === index)
      .map((e) => (e.event === "output" ? e.text : ""))
      .join("");
    assert.equal(output, "42\n", `cell ${index}'s output events`);
    const last = events.filter((e) => e.index === index).at(-1);
    assert.deepEqual(last, { event: "cell_done", index, status: "complete" });
  }
  const again = await cv.eval({ session: "langs", cells: [{ language: "py", code: "x + 1" }] });
  assert.equal(again.cells[0]?.output, "42\n", "the Python state survived the request");
});

test("events iterated after the result arrived are all there", async () => {
  const call = cv.eval({ session: "late", cells: [{ language: "js", code: 'text("a"); text("b")' }] });
  const result = await call;
  const seen: string[] = [];
  for await (const event of call) seen.push(event.event);
  assert.equal(result.cells[0]?.output, "a\nb\n");
  assert.equal(seen[0], "cell_started");
  assert.equal(seen.at(-1), "cell_done");
  assert.ok(seen.includes("output"));
  assert.throws(() => call[Symbol.asyncIterator](), /iterated once/);
});

test("tool handlers answer the cells' calls in every language, and a throw is the cell's error", async () => {
  const calls: unknown[] = [];
  const add = {
    name: "add",
    description: "Adds two numbers",
    inputSchema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } } },
    handler: async (args: { a: number; b: number }) => {
      calls.push(args);
      return args.a + args.b;
    },
  };
  const broken = {
    name: "list-dir",
    handler: () => {
      throw new Error("no such directory: /nowhere");
    },
  };
  const result = await cv.eval({
    session: "tools",
    tools: [add, broken],
    cells: [
      { language: "js", code: "text(await tool.add({a: 2, b: 3}))" },
      { language: "py", code: "print(tool.add(a=20, b=22))" },
      { language: "lua", code: "print(tool.add{a = 1, b = 1})" },
      { language: "js", code: "await tools.list_dir({path: '/nowhere'})" },
    ],
  });
  assert.deepEqual(
    result.cells.slice(0, 3).map((cell) => cell.output.trim()),
    ["5", "42", "2"],
  );
  assert.deepEqual(calls, [
    { a: 2, b: 3 },
    { a: 20, b: 22 },
    { a: 1, b: 1 },
  ]);
  const failed = result.cells[3];
  assert.equal(failed?.status, "error");
  assert.match(failed?.output ?? "", /no such directory: \/nowhere/);
});

test("a background cell is collected with wait, its events streaming with the wait", async () => {
  const first = await cv.eval({
    session: "bg",
    cells: [
      {
        language: "py",
        yield_time_ms: 300,
        code: "import time\nprint('a', flush=True)\ntime.sleep(3)\nprint('b')",
      },
    ],
  });
  const cell = first.cells[0];
  assert.equal(cell?.status, "running");
  assert.equal(cell?.output, "a\n");
  const status = await cv.status();
  const row = status.find((r) => r.session === "bg");
  assert.equal(row?.cell_id, cell?.cell_id);
  assert.equal(row?.background, true);
  const wait = cv.wait({ session: "bg", cellId: cell?.cell_id ?? 0, yieldTimeMs: 20_000 });
  const outputs: string[] = [];
  for await (const event of wait) if (event.event === "output") outputs.push(event.text);
  const done = await wait;
  assert.equal(done.status, "complete");
  assert.equal(done.output, "b\n");
  assert.deepEqual(outputs, ["b\n"]);
});

test("terminate stops a background cell; interrupt, reset and close answer their counts", async () => {
  const first = await cv.eval({
    session: "stop",
    cells: [{ language: "py", yield_time_ms: 200, code: "import time\nwhile True: time.sleep(0.05)" }],
  });
  const cellId = first.cells[0]?.cell_id ?? 0;
  const ended = await cv.terminate({ session: "stop", cellId });
  assert.equal(ended.status, "cancelled");
  await cv.eval({ session: "stop", cells: [{ language: "py", code: "y = 5" }] });
  assert.deepEqual(await cv.interrupt({ session: "stop", language: "py" }), { sessions: 0 });
  assert.deepEqual(await cv.reset({ session: "stop", language: "py" }), { sessions: 1 });
  const gone = await cv.eval({ session: "stop", cells: [{ language: "py", code: "y" }] });
  assert.equal(gone.cells[0]?.status, "error", "reset threw the state away");
  assert.match(gone.cells[0]?.output ?? "", /NameError/);
  assert.deepEqual(await cv.close({ session: "stop" }), { sessions: 1 });
  assert.equal((await cv.status()).some((row) => row.session === "stop"), false);
});

test("an AbortSignal interrupts a busy loop; the session keeps its state", async () => {
  await cv.eval({ session: "abort", cells: [{ language: "py", code: "kept = 'still here'" }] });
  const controller = new AbortController();
  const call = cv.eval({
    session: "abort",
    signal: controller.signal,
    cells: [
      { language: "py", code: "while True: pass", title: "spin", timeout: 120 },
      { language: "py", code: "print('never')" },
    ],
  });
  for await (const event of call) {
    if (event.event === "cell_started") setTimeout(() => controller.abort(), 300);
  }
  const result = await call;
  assert.equal(result.is_error, true);
  assert.equal(result.cells[0]?.status, "cancelled");
  assert.doesNotMatch(result.cells[0]?.output ?? "", /timed out/, "the abort, not the timeout, ended it");
  assert.equal(result.cells[1]?.status, "skipped");
  assert.deepEqual(result.failed_cell, { index: 0, title: "spin", status: "cancelled" });
  const after = await cv.eval({ session: "abort", cells: [{ language: "py", code: "print(kept)" }] });
  assert.equal(after.cells[0]?.output, "still here\n");
});

test("a signal aborted before the call rejects with its reason and sends nothing", async () => {
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(
    cv.eval({ session: "never", signal: controller.signal, cells: [{ language: "py", code: "1" }] }),
    { name: "AbortError" },
  );
  assert.equal((await cv.status()).some((row) => row.session === "never"), false);
});

test("bad requests reject with typed errors carrying the JSON-RPC code", async () => {
  await assert.rejects(cv.eval({ session: "s", cells: [] }), (error: unknown) => {
    assert.ok(error instanceof RequestRefusedError, String(error));
    assert.equal(error.code, -32001);
    assert.match(error.message, /cell/);
    return true;
  });
  await assert.rejects(cv.eval({ session: "no spaces allowed", cells: [{ language: "py", code: "1" }] }), RequestRefusedError);
  await assert.rejects(cv.request("eval", { session: "s" } as never), (error: unknown) => {
    assert.ok(error instanceof InvalidParamsError);
    assert.equal(error.code, -32602);
    assert.match(error.message, /cells/);
    return true;
  });
  await assert.rejects(cv.request("nope" as Method, {} as never), (error: unknown) => {
    assert.ok(error instanceof MethodNotFoundError);
    assert.ok(error instanceof CellvisorError);
    assert.equal(error.code, -32601);
    return true;
  });
  await assert.rejects(cv.wait({ session: "s", cellId: 12345 }), CellvisorError);
  // The connection is still usable after the refusals.
  const ok = await cv.eval({ session: "s", cells: [{ language: "lua", code: "return 1" }] });
  assert.equal(ok.is_error, false);
});

test("disconnecting mid-eval rejects it; the daemon interrupts the cell and the session lives on", async () => {
  const other = await Cellvisor.connect({ socket: daemon.socket });
  await other.eval({ session: "drop", cells: [{ language: "py", code: "z = 3" }] });
  const call = other.eval({ session: "drop", cells: [{ language: "py", code: "while True: pass", timeout: 120 }] });
  for await (const event of call) if (event.event === "cell_started") break;
  other.disconnect();
  await assert.rejects(call, ConnectionError);
  const after = await cv.eval({ session: "drop", cells: [{ language: "py", code: "print(z)" }] });
  assert.equal(after.cells[0]?.output, "3\n");
});

test("events: none sends no notifications and output only the output, the result the same", async () => {
  for (const [events, expected] of [
    ["none", []],
    ["output", ["output"]],
    ["all", ["cell_started", "output", "cell_done"]],
  ] as const) {
    const call = cv.eval({ session: "quiet", events, cells: [{ language: "js", code: "text(1)" }] });
    const seen: string[] = [];
    for await (const event of call) seen.push(event.event);
    assert.deepEqual(seen, expected, events);
    assert.equal((await call).cells[0]?.output, "1\n");
  }
});
