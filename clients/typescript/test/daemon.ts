// A real daemon for a test file, as tests/common does for the Rust tests: `cellvisor serve`
// ($CELLVISOR_BIN, else the workspace's debug build) on a socket in a temp dir, with a config
// file of the test's own (short intervals) and a private runtime directory by which every
// process it starts is found; stopped by its pid at the end, and its processes proven gone.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** The intervals the Rust end-to-end tests run under (tests/common SHORT_INTERVALS). */
export const SHORT_INTERVALS = `[sessions]
heartbeat-interval = "200ms"
heartbeat-timeout = "1s"
sweep-interval = "200ms"
idle-timeout = "0s"
interrupt-grace = "1s"
shutdown-grace = "500ms"
`;

/** The cellvisor binary the tests drive. */
export function cellvisorBin(): string {
  const given = process.env.CELLVISOR_BIN;
  if (given) return given;
  const built = fileURLToPath(new URL("../../../../target/debug/cellvisor", import.meta.url));
  if (existsSync(built)) return built;
  throw new Error("set CELLVISOR_BIN to a cellvisor binary (cargo build -p cellvisor-cli builds target/debug/cellvisor)");
}

/** A test's private world: a temp dir with run/, work/, state/ and config.toml. */
export class World {
  readonly dir = mkdtempSync(join(tmpdir(), "cellvisor-ts-"));

  constructor(config = SHORT_INTERVALS) {
    for (const sub of ["run", "work", "state", "config-home"]) mkdirSync(join(this.dir, sub), { recursive: true });
    writeFileSync(this.configPath, config);
  }

  get runtimeDir(): string {
    return join(this.dir, "run");
  }
  get workDir(): string {
    return join(this.dir, "work");
  }
  get configPath(): string {
    return join(this.dir, "config.toml");
  }

  /** The environment of this world's daemons: the runtime directory is the marker that finds their processes. */
  env(): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      XDG_RUNTIME_DIR: this.runtimeDir,
      XDG_STATE_HOME: join(this.dir, "state"),
      XDG_CONFIG_HOME: join(this.dir, "config-home"),
      CELLVISOR_CONFIG: this.configPath,
    };
    delete env.CELLVISOR_SOCKET;
    delete env.CELLVISOR_CONNECT;
    return env;
  }

  /** Live (not zombie) processes whose environment carries this world's runtime directory. */
  processes(): number[] {
    const marker = `XDG_RUNTIME_DIR=${this.runtimeDir}`;
    const found: number[] = [];
    for (const entry of readdirSync("/proc")) {
      const pid = Number(entry);
      if (!Number.isInteger(pid) || pid === process.pid) continue;
      try {
        const environ = readFileSync(`/proc/${pid}/environ`, "latin1").split("\0");
        if (!environ.includes(marker)) continue;
        const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
        if (!stat.includes(") Z ")) found.push(pid);
      } catch {
        // Gone meanwhile, or not ours to read.
      }
    }
    return found;
  }

  /** Waits until none of this world's processes is left; kills (by pid) and reports any that are. */
  async assertNoProcessesLeft(withinMs = 10_000): Promise<void> {
    const deadline = Date.now() + withinMs;
    let left = this.processes();
    while (left.length > 0 && Date.now() < deadline) {
      await sleep(50);
      left = this.processes();
    }
    for (const pid of left) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    if (left.length > 0) throw new Error(`processes left behind: ${left.join(", ")}`);
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether something answers on the Unix socket `path`. */
export function listens(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ path });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Whether process `pid` is alive (a zombie counts as gone). */
export function alive(pid: number): boolean {
  try {
    return !readFileSync(`/proc/${pid}/stat`, "latin1").includes(") Z ");
  } catch {
    return false;
  }
}

/** A daemon in the foreground, started by the test and stopped by its pid. */
export class TestDaemon {
  readonly socket: string;
  private readonly child: ChildProcess;

  private constructor(
    readonly world: World,
    child: ChildProcess,
    socket: string,
  ) {
    this.child = child;
    this.socket = socket;
  }

  /**
   * `cellvisor serve --socket <world>/run/cellvisor/test.sock` with `config` (default: the
   * short intervals), or the config a function writes once the world exists.
   */
  static async start(config: string | ((world: World) => string) = SHORT_INTERVALS): Promise<TestDaemon> {
    const world = new World();
    writeFileSync(world.configPath, typeof config === "string" ? config : config(world));
    const socket = join(world.runtimeDir, "cellvisor", "test.sock");
    const child = spawn(cellvisorBin(), ["serve", "--socket", socket], {
      cwd: world.workDir,
      env: world.env(),
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => (stderr = (stderr + chunk).slice(-4000)));
    const daemon = new TestDaemon(world, child, socket);
    const deadline = Date.now() + 15_000;
    while (!(await listens(socket))) {
      if (child.exitCode !== null || Date.now() > deadline) {
        await daemon.stop();
        throw new Error(`the daemon never listened on ${socket}: ${stderr}`);
      }
      await sleep(20);
    }
    return daemon;
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  /** SIGTERM to the daemon's pid, its exit awaited, its workers proven gone, the world removed. */
  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise<void>((resolve) => this.child.once("exit", () => resolve()));
      this.child.kill("SIGTERM");
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([
        exited.then(() => false),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), 15_000))),
      ]);
      clearTimeout(timer);
      if (timedOut) {
        this.child.kill("SIGKILL");
        await exited;
      }
    }
    try {
      await this.world.assertNoProcessesLeft();
    } finally {
      this.world.remove();
    }
  }
}

/** A TCP port free on loopback now, for a daemon's network listener. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolve(typeof address === "object" && address ? address.port : 0));
    });
  });
}

/** Waits until the network listener accepts connections (it binds after the socket). */
export async function listening(port: number): Promise<void> {
  const deadline = Date.now() + 15_000;
  for (;;) {
    const up = await new Promise<boolean>((resolve) => {
      const socket = connect({ port, host: "127.0.0.1" });
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (up) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on 127.0.0.1:${port}`);
    await sleep(20);
  }
}
