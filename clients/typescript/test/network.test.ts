// The daemon's network listener (docs/network.md) through the `ws` package: a url and a
// token reach the same protocol as the socket, tools and events included; a refused token
// and a connection bound to another session are errors that say so.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Cellvisor, ConnectionError, ForbiddenError, QuotaExceededError, WrongSessionError } from "cellvisor";
import { freePort, listening, SHORT_INTERVALS, TestDaemon, type World } from "./daemon.js";

const TOKEN = "test-token-0123456789abcdef";
let daemon: TestDaemon;
let url: string;
let tokenFile: string;

before(async () => {
  const port = await freePort();
  daemon = await TestDaemon.start(listenerConfig(port));
  tokenFile = join(daemon.world.dir, "token");
  await listening(port);
  url = `ws://127.0.0.1:${port}`;
});

after(async () => {
  await daemon?.stop();
});

/**
 * A listener config for `port` with the test's token file written into the world. These tests
 * are of the client's protocol: the daemon keeps its sessions at isolation level none on
 * purpose (as root, a daemon on the network would give them uids of their own, which the
 * Rust suite's tests/uids.rs and network tests cover).
 */
function listenerConfig(port: number, extra = ""): (world: World) => string {
  return (world) => {
    const file = join(world.dir, "token");
    writeFileSync(file, `${TOKEN}\n`);
    return `${SHORT_INTERVALS}[isolation]\nlevel = "none"\n[daemon]\nlisten = ["tcp://127.0.0.1:${port}"]\ntoken-file = ${JSON.stringify(file)}\n${extra}`;
  };
}

test("a url and a token file reach the daemon: events and tools as on the socket", async () => {
  const cv = await Cellvisor.connect({ url, tokenFile });
  try {
    assert.equal(cv.server.pid, daemon.pid);
    const call = cv.eval({
      session: "remote",
      tools: [{ name: "twice", handler: (args: { n: number }) => args.n * 2 }],
      cells: [{ language: "py", code: "print(tool.twice(n=21))" }],
    });
    const kinds: string[] = [];
    for await (const event of call) kinds.push(event.event);
    const result = await call;
    assert.equal(result.cells[0]?.output, "42\n");
    // The tool's call is a status event (issue 42), then its output.
    assert.deepEqual(kinds, ["cell_started", "status", "output", "cell_done"]);
  } finally {
    cv.disconnect();
  }
});

test("upload, list and download a session's workspace files over the network", async () => {
  const cv = await Cellvisor.connect({ url, tokenFile });
  try {
    // 9 MB: two files/write parts and two files/read parts.
    const data = new Uint8Array(9 * 1024 * 1024).map((_, i) => (i * 31) & 0xff);
    await cv.upload("ts-files", "in/data.bin", data);
    const seen = await cv.eval({
      session: "ts-files",
      cells: [{ language: "py", code: "import os\nprint(os.path.getsize('in/data.bin'))\n_ = open('out.txt', 'w').write('from a cell')" }],
    });
    assert.equal(seen.cells[0]?.output, `${data.length}\n`);
    const entries = await cv.list("ts-files", { recursive: true });
    assert.deepEqual(entries.map((e) => e.path), ["in", "in/data.bin", "out.txt"]);
    assert.equal(Buffer.from(await cv.download("ts-files", "out.txt")).toString(), "from a cell");
    assert.ok(Buffer.from(await cv.download("ts-files", "in/data.bin")).equals(Buffer.from(data)));
    await assert.rejects(cv.download("ts-files", "/etc/hostname"), /it is absolute/);
    await cv.close({ session: "ts-files", keepWorkspace: true });
    assert.equal((await cv.list("ts-files")).length, 2, "kept");
    await cv.close({ session: "ts-files" });
    assert.deepEqual(await cv.list("ts-files"), [], "removed");
  } finally {
    cv.disconnect();
  }
});

test("a wrong token is refused with a ConnectionError saying so", async () => {
  await assert.rejects(Cellvisor.connect({ url, token: "not-the-token-0000000" }), (error: unknown) => {
    assert.ok(error instanceof ConnectionError);
    assert.match(error.message, /refused the token \(401\)/);
    return true;
  });
  await assert.rejects(Cellvisor.connect({ url: url.replace("ws:", "http:"), token: TOKEN }), /ws:\/\/ or wss:\/\//);
});

test("a connection bound to a session refuses another one with WrongSessionError (-32004)", async () => {
  const cv = await Cellvisor.connect({ url, token: TOKEN, session: "mine" });
  try {
    const own = await cv.eval({ session: "mine", cells: [{ language: "lua", code: "print(1)" }] });
    assert.equal(own.cells[0]?.output, "1\n");
    await assert.rejects(cv.eval({ session: "theirs", cells: [{ language: "lua", code: "print(2)" }] }), (error: unknown) => {
      assert.ok(error instanceof WrongSessionError);
      assert.equal(error.code, -32004);
      return true;
    });
  } finally {
    cv.disconnect();
  }
});

test("a tenant's refusals are typed: ForbiddenError without a right, QuotaExceededError at a quota", async () => {
  const port = await freePort();
  const ALPHA = "alpha-token-0123456789abcdef";
  const tenants = await TestDaemon.start((world) => {
    writeFileSync(join(world.dir, "alpha.token"), `${ALPHA}\n`);
    const file = join(world.dir, "tenants.toml");
    writeFileSync(file, '[[tenants]]\nname = "alpha"\ntoken-file = "alpha.token"\nrights = ["cells"]\nmax-sessions = 1\n');
    return `${SHORT_INTERVALS}[daemon]\nlisten = ["tcp://127.0.0.1:${port}"]\ntenants-file = ${JSON.stringify(file)}\n`;
  });
  try {
    await listening(port);
    const cv = await Cellvisor.connect({ url: `ws://127.0.0.1:${port}`, token: ALPHA });
    try {
      await assert.rejects(cv.request("drain", {}), (error: unknown) => {
        assert.ok(error instanceof ForbiddenError);
        assert.equal(error.code, -32009);
        assert.deepEqual(error.data, { right: "operate", tenant: "alpha" });
        return true;
      });
      const first = await cv.eval({ session: "first", cells: [{ language: "lua", code: "print(1)" }] });
      assert.equal(first.cells[0]?.output, "1\n");
      await assert.rejects(cv.eval({ session: "second", cells: [{ language: "lua", code: "print(2)" }] }), (error: unknown) => {
        assert.ok(error instanceof QuotaExceededError);
        assert.equal(error.code, -32008);
        return true;
      });
    } finally {
      cv.disconnect();
    }
  } finally {
    await tenants.stop();
  }
});

/** Whether openssl can make the self-signed certificate of the TLS test. */
const openssl = spawnSync("openssl", ["version"]).status === 0;

test("wss:// with the daemon's self-signed certificate trusted by caFile; untrusted, a ConnectionError", { skip: !openssl && "no openssl to make a certificate" }, async () => {
  const port = await freePort();
  const tls = await TestDaemon.start((world) => {
    const cert = join(world.dir, "cert.pem");
    const key = join(world.dir, "key.pem");
    const made = spawnSync("openssl", [
      "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
      "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
      "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
    ]);
    assert.equal(made.status, 0, String(made.stderr));
    return listenerConfig(port, `tls-cert = ${JSON.stringify(cert)}\ntls-key = ${JSON.stringify(key)}\n`)(world);
  });
  try {
    await listening(port);
    const secure = `wss://127.0.0.1:${port}`;
    const caFile = join(tls.world.dir, "cert.pem");
    const cv = await Cellvisor.connect({ url: secure, token: TOKEN, caFile });
    try {
      const result = await cv.eval({ session: "tls", cells: [{ language: "js", code: "text('over tls')" }] });
      assert.equal(result.cells[0]?.output, "over tls\n");
    } finally {
      cv.disconnect();
    }
    await assert.rejects(Cellvisor.connect({ url: secure, token: TOKEN }), (error: unknown) => {
      assert.ok(error instanceof ConnectionError);
      assert.match(error.message, /cannot reach wss:\/\/127\.0\.0\.1:\d+\/v1\/rpc: .*certificate/);
      return true;
    });
  } finally {
    await tls.stop();
  }
});
