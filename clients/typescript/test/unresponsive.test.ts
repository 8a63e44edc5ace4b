// A daemon that accepts and never answers never hangs the client (issue 42 item 3): connect's
// health handshake (`initialize` within healthTimeout) rejects with UnresponsiveError, saying
// what it tried and what to do; a cell may still run longer than that bound.
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { join } from "node:path";
import { after, test } from "node:test";
import { Cellvisor, UnresponsiveError } from "cellvisor";
import { alive, cellvisorBin, World } from "./daemon.js";

const world = new World();
let daemonPid: number | undefined;

after(async () => {
  if (daemonPid !== undefined && alive(daemonPid)) {
    process.kill(daemonPid, "SIGCONT");
    process.kill(daemonPid, "SIGKILL");
  }
  try {
    await world.assertNoProcessesLeft();
  } finally {
    world.remove();
  }
});

test("a listener that never answers is an UnresponsiveError within the bound", async () => {
  const socket = join(world.runtimeDir, "silent.sock");
  const held: Socket[] = [];
  const server = createServer((connection) => held.push(connection));
  await new Promise<void>((done) => server.listen(socket, done));
  try {
    const started = Date.now();
    await assert.rejects(Cellvisor.connect({ socket, healthTimeout: 1 }), (error: unknown) => {
      assert.ok(error instanceof UnresponsiveError, String(error));
      assert.match(error.message, /silent\.sock accepted the connection but did not answer `initialize` within 1 s/);
      assert.match(error.message, /CELLVISOR_HEALTH_TIMEOUT/);
      return true;
    });
    assert.ok(Date.now() - started < 30_000);
  } finally {
    for (const connection of held) connection.destroy();
    server.close();
  }
});

test("a stopped daemon is an UnresponsiveError; a cell longer than the bound is not cut", async () => {
  Object.assign(process.env, world.env());
  const socket = join(world.runtimeDir, "cellvisor", "stopped.sock");
  const client = await Cellvisor.connect({ socket, autostart: true, program: cellvisorBin(), healthTimeout: 2 });
  daemonPid = client.server.pid;
  const slow = "local t = os.time() + 3 while os.time() < t do end print('late')";
  const result = await client.eval({ session: "long", cells: [{ language: "lua", code: slow }] });
  assert.equal(result.cells[0]?.output, "late\n");
  process.kill(daemonPid, "SIGSTOP");
  try {
    await assert.rejects(Cellvisor.connect({ socket, healthTimeout: 2 }), UnresponsiveError);
  } finally {
    process.kill(daemonPid, "SIGCONT");
  }
  await client.shutdown();
  client.disconnect();
});
