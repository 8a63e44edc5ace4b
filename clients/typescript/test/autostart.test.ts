// autostart: with nobody on the socket, connect starts `cellvisor serve` as the CLI does (log
// next to the socket), a second client finds it running, and the test shuts it down and
// proves it and its workers gone.
import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import { after, test } from "node:test";
import { Cellvisor, ConnectionError, DaemonStartError, defaultSocketPath, logPath } from "cellvisor";
import { alive, cellvisorBin, sleep, World } from "./daemon.js";

const world = new World();
let daemonPid: number | undefined;

after(async () => {
  // Whatever happened above, the daemon this file started does not outlive it.
  if (daemonPid !== undefined && alive(daemonPid)) process.kill(daemonPid, "SIGKILL");
  try {
    await world.assertNoProcessesLeft();
  } finally {
    world.remove();
  }
});

test("the default socket and log are the CLI's", () => {
  assert.equal(defaultSocketPath({ XDG_RUNTIME_DIR: "/run/user/7" }), "/run/user/7/cellvisor/daemon.sock");
  assert.equal(defaultSocketPath({ CELLVISOR_SOCKET: "/x/s.sock", XDG_RUNTIME_DIR: "/r" }), "/x/s.sock");
  assert.match(defaultSocketPath({}), /\/cellvisor-\d+\/daemon\.sock$/);
  assert.equal(logPath("/run/user/7/cellvisor/daemon.sock"), "/run/user/7/cellvisor/daemon.log");
  assert.equal(logPath("/tmp/d/test"), "/tmp/d/test.log");
});

test("without autostart, a missing daemon is a ConnectionError that says how to start one", async () => {
  const socket = join(world.runtimeDir, "nobody", "daemon.sock");
  await assert.rejects(Cellvisor.connect({ socket }), (error: unknown) => {
    assert.ok(error instanceof ConnectionError);
    assert.match(error.message, /no daemon listens on .*nobody\/daemon\.sock.*autostart/);
    return true;
  });
});

test("a program that cannot run is a DaemonStartError naming it", async () => {
  const socket = join(world.runtimeDir, "broken", "daemon.sock");
  await assert.rejects(
    Cellvisor.connect({ socket, autostart: true, program: join(world.dir, "no-such-cellvisor") }),
    (error: unknown) => {
      assert.ok(error instanceof DaemonStartError, String(error));
      assert.match(error.message, /no-such-cellvisor/);
      return true;
    },
  );
});

test("autostart starts a daemon on the default socket, which the next client reuses, until shutdown", async () => {
  // The daemon inherits this process's environment, as the CLI's does: the world's runtime
  // directory (so the default socket is in it, and its processes are found) and config.
  Object.assign(process.env, world.env());
  delete process.env.CELLVISOR_SOCKET;
  const socket = defaultSocketPath();
  assert.equal(socket, join(world.runtimeDir, "cellvisor", "daemon.sock"));
  assert.equal(existsSync(socket), false);

  const cv = await Cellvisor.connect({ autostart: true, program: cellvisorBin(), config: world.configPath });
  daemonPid = cv.server.pid;
  assert.equal(cv.autostarted, true);
  assert.ok(alive(daemonPid), "the daemon runs");
  assert.ok(existsSync(logPath(socket)), "its log is next to the socket");
  assert.equal(statSync(join(world.runtimeDir, "cellvisor")).mode & 0o777, 0o700);
  const result = await cv.eval({ session: "auto", cells: [{ language: "py", code: "n = 6 * 7\nprint(n)" }] });
  assert.equal(result.cells[0]?.output, "42\n");
  cv.disconnect();

  const again = await Cellvisor.connect({ autostart: true, program: cellvisorBin() });
  assert.equal(again.autostarted, false, "a daemon listens: nothing new is started");
  assert.equal(again.server.pid, daemonPid);
  const kept = await again.eval({ session: "auto", cells: [{ language: "py", code: "print(n)" }] });
  assert.equal(kept.cells[0]?.output, "42\n", "the session outlived the first client");

  assert.deepEqual(await again.shutdown(), { stopping: true });
  again.disconnect();
  const deadline = Date.now() + 15_000;
  while (alive(daemonPid) && Date.now() < deadline) await sleep(50);
  assert.equal(alive(daemonPid), false, "the autostarted daemon exited on shutdown");
  await world.assertNoProcessesLeft();
  assert.equal(existsSync(socket), false, "its socket is gone");
});
