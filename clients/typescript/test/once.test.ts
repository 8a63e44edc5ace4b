// Requests that run once (docs/protocol.md, `request_id`): every `eval` carries a fresh id
// unless the caller names one; when the connection is lost after the request went out, the
// client connects again and sends it with the same id, and the daemon answers with the
// first run's result instead of running the cells again (a cell that appends to a file
// leaves one line). Driven through a proxy in front of the real daemon that cuts the first
// connection once the daemon answered something for the `eval` on it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Cellvisor, ConnectionError } from "cellvisor";
import { TestDaemon } from "./daemon.js";

let daemon: TestDaemon;

before(async () => {
  daemon = await TestDaemon.start();
});

after(async () => {
  await daemon?.stop();
});

/** A proxy to the daemon's socket that cuts its first `cuts` connections once the daemon sent anything after an `eval` on them (which the client never hears). */
class CuttingProxy {
  readonly evals: { [key: string]: unknown }[] = [];
  private connections = 0;
  private readonly server: Server;

  private constructor(
    readonly path: string,
    upstream: string,
    cuts: number,
  ) {
    this.server = createServer((client) => {
      const cut = this.connections < cuts;
      this.connections += 1;
      const daemonSide = createConnection({ path: upstream });
      let sent = false;
      let buffered = "";
      const end = (a: Socket, b: Socket) => {
        a.destroy();
        b.destroy();
      };
      client.on("data", (chunk) => {
        buffered += chunk.toString("utf8");
        let newline: number;
        while ((newline = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, newline);
          buffered = buffered.slice(newline + 1);
          const message = JSON.parse(line) as { method?: string; params?: { [key: string]: unknown } };
          if (message.method === "eval") {
            this.evals.push(message.params ?? {});
            sent = true; // before it goes: no answer to it slips through
          }
          daemonSide.write(line + "\n");
        }
      });
      daemonSide.on("data", (chunk) => {
        if (cut && sent) {
          end(client, daemonSide);
          return;
        }
        client.write(chunk);
      });
      client.on("error", () => end(client, daemonSide));
      daemonSide.on("error", () => end(client, daemonSide));
      client.on("close", () => daemonSide.destroy());
      daemonSide.on("close", () => client.destroy());
    });
  }

  static async start(path: string, upstream: string, cuts = 1): Promise<CuttingProxy> {
    const proxy = new CuttingProxy(path, upstream, cuts);
    await new Promise<void>((resolve) => proxy.server.listen(path, resolve));
    return proxy;
  }

  close(): void {
    this.server.close();
  }
}

function appending(file: string): string {
  return `import time\ntime.sleep(0.3)\nwith open(${JSON.stringify(file)}, 'a') as f:\n    f.write('ran\\n')\nprint(len(open(${JSON.stringify(file)}).readlines()))`;
}

test("a lost connection is retried with the same request id and the cell runs once", async () => {
  const proxy = await CuttingProxy.start(join(daemon.world.dir, "proxy.sock"), daemon.socket);
  const file = join(daemon.world.workDir, "appended.txt");
  const cv = await Cellvisor.connect({ socket: proxy.path });
  try {
    const result = await cv.eval({ session: "once-ts", cells: [{ language: "py", code: appending(file) }] });
    assert.equal(result.cells[0]?.status, "complete");
    assert.equal(result.cells[0]?.output, "1\n");
    assert.equal(result.replayed, true);
    assert.equal(proxy.evals.length, 2);
    const [first, retry] = proxy.evals;
    assert.equal(typeof first?.request_id, "string");
    assert.equal((first?.request_id as string).length, 32);
    assert.equal(retry?.request_id, first?.request_id);
    assert.equal(readFileSync(file, "utf8"), "ran\n", "the cell ran once");
    // The caller's own id is kept; the next request gets a new one.
    const mine = await cv.eval({ session: "once-ts", requestId: "caller-1", cells: [{ language: "py", code: "print('mine')" }] });
    const again = await cv.eval({ session: "once-ts", requestId: "caller-1", cells: [{ language: "py", code: "print('mine')" }] });
    const other = await cv.eval({ session: "once-ts", cells: [{ language: "py", code: "print('other')" }] });
    assert.equal(mine.cells[0]?.output, "mine\n");
    assert.equal(again.replayed, true);
    assert.equal(other.replayed, undefined);
    assert.equal(proxy.evals[2]?.request_id, "caller-1");
    assert.notEqual(proxy.evals[4]?.request_id, first?.request_id);
  } finally {
    cv.disconnect();
    proxy.close();
  }
});

test("retries are bounded and the loss is answered", async () => {
  const proxy = await CuttingProxy.start(join(daemon.world.dir, "proxy-bounded.sock"), daemon.socket, 100);
  const cv = await Cellvisor.connect({ socket: proxy.path, retries: 2 });
  try {
    await assert.rejects(
      cv.eval({ session: "once-bounded", cells: [{ language: "py", code: "x = 1" }] }),
      (error: unknown) => error instanceof ConnectionError,
    );
    assert.equal(proxy.evals.length, 3, "the first send and two retries");
    assert.equal(new Set(proxy.evals.map((p) => p.request_id)).size, 1);
  } finally {
    cv.disconnect();
    proxy.close();
  }
});
