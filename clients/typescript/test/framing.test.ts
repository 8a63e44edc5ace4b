// The socket framing against a scripted peer (what the real daemon does not do on demand):
// a line cut anywhere, inside a multi-byte character included; several messages in one write;
// answers out of order; a daemon of another protocol version; a connection that drops.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { Cellvisor, ConnectionError } from "cellvisor";

const dir = mkdtempSync(join(tmpdir(), "cellvisor-ts-framing-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const INIT = (version: number) => ({
  protocol_version: version,
  server_version: "0.0.0",
  languages: ["py", "js", "lua"],
  pid: 1,
  node: "nœud-α",
  draining: false,
});

/** A peer on a socket that answers each request line with `reply(request, socket)`. */
async function peer(name: string, reply: (request: { id: number; method: string; params: unknown }, socket: Socket) => void): Promise<{ path: string; server: Server }> {
  const path = join(dir, name);
  const server = createServer((socket) => {
    let buffered = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      buffered += chunk;
      for (let end = buffered.indexOf("\n"); end >= 0; end = buffered.indexOf("\n")) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 1);
        reply(JSON.parse(line), socket);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return { path, server };
}

/** Writes `text` as UTF-8 in pieces of `size` bytes, a character's bytes split where they fall. */
async function writeInPieces(socket: Socket, text: string, size: number): Promise<void> {
  const bytes = Buffer.from(text, "utf8");
  for (let at = 0; at < bytes.length; at += size) {
    socket.write(bytes.subarray(at, at + size));
    await new Promise((resolve) => setImmediate(resolve));
  }
}

test("lines cut anywhere, bundled, and answered out of order arrive whole and matched", async () => {
  const { path, server } = await peer("chunks.sock", (request, socket) => {
    const line = (message: unknown) => JSON.stringify(message) + "\n";
    if (request.method === "initialize") {
      void writeInPieces(socket, line({ jsonrpc: "2.0", id: request.id, result: INIT(1) }), 3);
    } else if (request.method === "status") {
      // Answered only after the eval that follows it.
      setTimeout(() => socket.write(line({ jsonrpc: "2.0", id: request.id, result: [] })), 50);
    } else if (request.method === "eval") {
      const event = (text: string) => line({ jsonrpc: "2.0", method: "eval/event", params: { request_id: request.id, event: "output", index: 0, stream: "stdout", text } });
      const result = { is_error: false, cells: [], node: "", summary: { languages: [], json_outputs: 0, images: 0, status_events: 0 } };
      void writeInPieces(socket, event("héllo ✓\n") + event("🦀\n") + line({ jsonrpc: "2.0", id: request.id, result }), 5);
    }
  });
  try {
    const cv = await Cellvisor.connect({ socket: path });
    assert.equal(cv.server.node, "nœud-α");
    const status = cv.status();
    const call = cv.eval({ cells: [{ language: "py", code: "" }] });
    const texts: string[] = [];
    for await (const event of call) if (event.event === "output") texts.push(event.text);
    assert.deepEqual(texts, ["héllo ✓\n", "🦀\n"]);
    assert.equal((await call).is_error, false);
    assert.deepEqual(await status, []);
    cv.disconnect();
    await assert.rejects(cv.status(), ConnectionError);
  } finally {
    server.close();
  }
});

test("a daemon of another protocol version is refused, naming both", async () => {
  const { path, server } = await peer("version.sock", (request, socket) => {
    socket.write(JSON.stringify({ jsonrpc: "2.0", id: request.id, result: INIT(2) }) + "\n");
  });
  try {
    await assert.rejects(Cellvisor.connect({ socket: path }), /protocol 2 and this client 1/);
  } finally {
    server.close();
  }
});

test("a connection that drops rejects what is in flight with a ConnectionError", async () => {
  const { path, server } = await peer("drop.sock", (request, socket) => {
    if (request.method === "initialize") socket.write(JSON.stringify({ jsonrpc: "2.0", id: request.id, result: INIT(1) }) + "\n");
    else socket.destroy();
  });
  try {
    const cv = await Cellvisor.connect({ socket: path });
    const call = cv.eval({ cells: [{ language: "py", code: "" }] });
    await assert.rejects(call, (error: unknown) => {
      assert.ok(error instanceof ConnectionError);
      assert.match(error.message, /closed the connection/);
      return true;
    });
    await assert.rejects(
      (async () => {
        for await (const _ of call);
      })(),
      ConnectionError,
      "the iterator throws the failure too",
    );
  } finally {
    server.close();
  }
});
