// evalTool(): the anchors' `eval` input run through the daemon, rendered as the anchors' tool
// and cellvisor's own text hosts render it: `[i/n] title` headers, `(no output)`, the failing
// cell's status and the line naming it. The same cells through `cellvisor mcp` give the same
// text, so the adapter and the Rust renderer cannot drift apart.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import {
  display,
  Cellvisor,
  checkEvalToolInput,
  evalTool,
  evalToolOutput,
  humanBytes,
  type EvalResult,
  type EvalToolInput,
} from "cellvisor";
import { cellvisorBin, TestDaemon } from "./daemon.js";

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

const INPUT: EvalToolInput = {
  cells: [
    { language: "py", code: "x = 41", title: "setup" },
    { language: "py", code: "print(x + 1)", title: "answer" },
    { language: "py", code: "raise ValueError('no data')", title: "load" },
    { language: "js", code: "text('never')" },
  ],
};

/** `text` with every cell's duration as `T`: two runs of the same cells take their own time. */
function sameDurations(text: string): string {
  return text.replace(/\((complete in|error after|cancelled after) [0-9.]+ m?s\)/g, "($1 T)");
}

test("a multi-cell call with an error renders as the anchor's tool does", async () => {
  const output = await evalTool(cv, INPUT, { session: "tool" });
  assert.equal(output.isError, true);
  const failing = output.details.cells[2]?.cell_id;
  assert.equal(
    sameDurations(output.text),
    [
      "[1/4] setup",
      "(no output)",
      "(complete in T)",
      "[2/4] answer",
      "42",
      "(complete in T)",
      "[3/4] load",
      "Traceback (most recent call last):",
      `  File "<cell ${failing}>", line 1, in <module>`,
      "    raise ValueError('no data')",
      "ValueError: no data",
      "(error after T)",
      "[4/4] js",
      "(skipped: an earlier cell failed)",
      'cell 3 of 4 ("load") failed with an error; the cell after it was skipped',
    ].join("\n"),
  );
  assert.deepEqual(output.content, [{ type: "text", text: output.text }]);
  assert.deepEqual(output.details.languages, ["py", "js"]);
  assert.deepEqual(output.details.failedCell, { index: 2, title: "load", status: "error" });
});

test("a lone quiet cell says (no output); a picture is (no text output) and an image block", async () => {
  const quiet = await evalTool(cv, { cells: [{ language: "lua", code: "local y = 1" }] }, { session: "tool2" });
  assert.equal(sameDurations(quiet.text), "(no output)\n(complete in T)");
  assert.equal(quiet.isError, false);
  const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
  const picture = await evalTool(
    cv,
    { cells: [{ language: "js", code: `image("data:image/png;base64,${png}")`, title: "dot" }] },
    { session: "tool2" },
  );
  assert.equal(sameDurations(picture.text), "(no text output)\n(complete in T)");
  assert.deepEqual(picture.content[1], { type: "image", data: png, mimeType: "image/png" });
  assert.equal(picture.details.images, 1);
});

test("bad input is refused with what is allowed, before anything runs", () => {
  assert.throws(() => checkEvalToolInput({ cells: [] }), /at least one cell/);
  assert.throws(() => checkEvalToolInput({ cells: [{ language: "rb", code: "1" }] }), /cells\[0\]\.language is "rb"; allowed: "py", "js", "lua"/);
  assert.throws(() => checkEvalToolInput({ cells: [{ language: "py", code: "1", timeout: 0 }] }), /1 to 600/);
  assert.throws(() => checkEvalToolInput({ cells: [{ language: "py", code: "1", lang: "x" }] }), /unknown field lang/);
});

test("a background cell says how to collect it", () => {
  const result: EvalResult = {
    is_error: false,
    node: "",
    summary: { languages: ["py"], json_outputs: 0, images: 0, status_events: 0 },
    cells: [
      {
        index: 0,
        cell_id: 12,
        title: null,
        language: "py",
        exit_code: 0,
        status: "running",
        output: "a\n",
        duration_ms: 300,
        displays: [],
        status_events: [],
        truncation: { truncated: true, total_bytes: 90000, total_lines: 4, artifact_path: "/run/a/s-py-1-1.txt" },
        notice: "the session was reset",
        node: "",
      },
    ],
  };
  assert.equal(
    evalToolOutput(result).text,
    "(the session was reset)\na\n(output truncated: 90000 bytes, 4 lines in all; the whole output is in /run/a/s-py-1-1.txt (artifact://s-py-1-1))\n" +
      "(still running in the background after 300 ms as cell 12: call `wait` with cell_id 12 for the rest, or `terminate` to stop it)",
  );
});

test("a cell memory ended names the limit and the figures", () => {
  const cell = {
    index: 0,
    cell_id: 3,
    title: null,
    language: "lua" as const,
    exit_code: 1,
    status: "error" as const,
    output: "not enough memory\n",
    duration_ms: 5,
    displays: [],
    status_events: [],
    truncation: { truncated: false, total_bytes: 18, total_lines: 1, artifact_path: null },
    notice: null,
    out_of_memory: { limit: "lua_heap" as const, limit_bytes: 32 << 20, used_bytes: (32 << 20) - 100 },
    node: "",
  };
  const result: EvalResult = {
    is_error: true,
    node: "",
    cells: [cell],
    failed_cell: { index: 0, title: null, status: "error" },
    summary: { languages: ["lua"], json_outputs: 0, images: 0, status_events: 0 },
  };
  assert.equal(
    evalToolOutput(result).text,
    "not enough memory\n(out of memory: 32 MiB limit ([lua] memory-limit), 32 MiB used)\n(error after 5 ms)",
  );
  assert.equal(humanBytes(1023), "1023 bytes");
  assert.equal(humanBytes(1536 << 20), "1.5 GiB");
  assert.equal(humanBytes(530 * 1024 * 1024 + 200 * 1024), "530.2 MiB");
});

/** The text blocks `cellvisor mcp` answers a `tools/call` of `eval` with, joined. */
async function mcpText(input: EvalToolInput): Promise<string> {
  const child = spawn(cellvisorBin(), ["mcp"], {
    cwd: daemon.world.workDir,
    env: daemon.world.env(),
    stdio: ["pipe", "pipe", "ignore"],
  });
  const lines = createInterface({ input: child.stdout });
  const answers = new Map<number, (message: { result?: { content: { type: string; text?: string }[] } }) => void>();
  lines.on("line", (line) => {
    const message = JSON.parse(line);
    answers.get(message.id)?.(message);
  });
  const call = (id: number, method: string, params: unknown) =>
    new Promise<{ result?: { content: { type: string; text?: string }[] } }>((resolve) => {
      answers.set(id, resolve);
      child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  try {
    await call(1, "initialize", {
      protocolVersion: "2025-06-18",
      capabilities: {},
      clientInfo: { name: "cellvisor-ts-test", version: "0" },
    });
    child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
    const answer = await call(2, "tools/call", { name: "eval", arguments: input });
    const blocks = answer.result?.content ?? [];
    return blocks
      .filter((block) => block.type === "text")
      .map((block) => block.text ?? "")
      .join("")
      .trimEnd();
  } finally {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.stdin.end();
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

test("the same cells through cellvisor mcp give the same text", async () => {
  const ours = await evalTool(cv, INPUT, { session: "parity" });
  const theirs = await mcpText(INPUT);
  const sameIds = (text: string) => sameDurations(text.replace(/<cell \d+>/g, "<cell N>"));
  assert.equal(sameIds(ours.text), sameIds(theirs));
});

test("text forms rank as the anchors rank them: Markdown, then plain text, then HTML", () => {
  assert.deepEqual(display({ "text/plain": "plain-form", "text/html": "<i>html-form</i>" }), { kind: "text", text: "plain-form" });
  assert.deepEqual(display({ "text/markdown": "*md-form*", "text/plain": "plain-form", "text/html": "<i>html-form</i>" }), {
    kind: "text",
    text: "*md-form*",
  });
  assert.deepEqual(display({ "text/html": "<p>html-form</p>" }), { kind: "text", text: "html-form" });
  // A default repr says nothing the HTML would not.
  assert.deepEqual(display({ "text/plain": "<__main__.Page at 0x7f00>", "text/html": "<p>html-form</p>" }), {
    kind: "text",
    text: "html-form",
  });
});
