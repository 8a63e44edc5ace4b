// Node.js globals and built-in modules for cells: Buffer, process, global, require(), and the
// modules fs, fs/promises, path, os, child_process, buffer, crypto, url, util, events and
// process (with or without `node:`). Installed after web.js, with the same native functions.
// The module table is also what `import "node:fs"` loads (see modules.rs and node/mod.rs).
(function (native) {
  "use strict";
  const hidden = (target, name, value) =>
    Object.defineProperty(target, name, { value, writable: true, configurable: true, enumerable: false });
  const defineGlobal = (name, value) => hidden(globalThis, name, value);
  const { toBytes, utf8 } = native;

  // After exit(), code that still runs has no effects (see prelude.js).
  for (const name of ["fsWrite", "fsMkdir", "fsRm", "fsRmdir", "fsUnlink", "fsRename", "fsCopy", "fsSymlink", "fsChmod", "fsMkdtemp", "chdir", "spawnSync", "fetch"]) {
    const effect = native[name];
    native[name] = (...args) => {
      if (native.stopping()) throw new Error("exit() was called: the cell is ending");
      return effect(...args);
    };
  }

  // Node's names for the target the worker was built for; the machine facts are read when
  // `os` first asks (uname and the user database cost a worker start nothing then).
  const ARCH = { x86_64: "x64", aarch64: "arm64", x86: "ia32", arm: "arm", riscv64: "riscv64", s390x: "s390x", powerpc64: "ppc64" };
  const platform = native.platform;
  const arch = ARCH[native.arch] ?? native.arch;
  let machineFacts = null;
  const facts = () => (machineFacts ??= native.osInfo());

  // ---- Buffer -------------------------------------------------------------------------------

  const normalizeEncoding = (encoding) => {
    if (encoding === undefined || encoding === null) return "utf8";
    const lower = String(encoding).toLowerCase();
    return lower === "utf-8" ? "utf8" : lower;
  };
  const ENCODINGS = ["utf8", "hex", "base64", "base64url", "latin1", "binary", "ascii", "utf16le", "ucs2", "ucs-2", "utf-16le"];

  class Buffer extends Uint8Array {
    static from(value, encodingOrOffset, length) {
      if (typeof value === "string") {
        const encoding = normalizeEncoding(encodingOrOffset);
        return new Buffer(encoding === "utf8" ? utf8(value).buffer : native.bytesEncode(value, encoding));
      }
      if (value instanceof ArrayBuffer || (typeof SharedArrayBuffer === "function" && value instanceof SharedArrayBuffer)) {
        const offset = encodingOrOffset === undefined ? 0 : Number(encodingOrOffset);
        return new Buffer(value, offset, length === undefined ? value.byteLength - offset : Number(length));
      }
      if (ArrayBuffer.isView(value)) return Buffer.#copy(toBytes(value));
      if (Array.isArray(value)) return Buffer.#copy(Uint8Array.from(value, (n) => Number(n) & 255));
      if (value !== null && typeof value === "object") {
        if (value.type === "Buffer" && Array.isArray(value.data)) return Buffer.from(value.data);
        if (typeof value.length === "number") return Buffer.#copy(Uint8Array.from(Array.from(value), (n) => Number(n) & 255));
        const primitive = value.valueOf();
        if (primitive !== value) return Buffer.from(primitive, encodingOrOffset, length);
      }
      throw new TypeError(
        "Buffer.from: the first argument must be a string, an array, an ArrayBuffer, a TypedArray or a Buffer, " +
          `got ${value === null ? "null" : typeof value}`,
      );
    }
    static #copy(bytes) {
      const buffer = new Buffer(bytes.length);
      buffer.set(bytes);
      return buffer;
    }
    static alloc(size, fill, encoding) {
      const buffer = new Buffer(Buffer.#size(size));
      if (fill !== undefined && fill !== 0) buffer.fill(fill, 0, buffer.length, encoding);
      return buffer;
    }
    static allocUnsafe(size) {
      return new Buffer(Buffer.#size(size));
    }
    static allocUnsafeSlow(size) {
      return new Buffer(Buffer.#size(size));
    }
    static #size(size) {
      if (typeof size !== "number" || !(size >= 0) || !Number.isFinite(size)) {
        throw new RangeError(`The "size" argument must be a number >= 0, got ${String(size)}`);
      }
      return Math.floor(size);
    }
    static byteLength(value, encoding) {
      if (typeof value === "string") return Buffer.from(value, encoding).length;
      return toBytes(value, "Buffer.byteLength: value").byteLength;
    }
    static concat(list, totalLength) {
      if (!Array.isArray(list)) throw new TypeError("Buffer.concat: list must be an array of Buffers or Uint8Arrays");
      const total = totalLength ?? list.reduce((sum, item) => sum + item.length, 0);
      const out = Buffer.alloc(total);
      let offset = 0;
      for (const item of list) {
        if (offset >= total) break;
        const bytes = toBytes(item, "Buffer.concat: each item");
        out.set(bytes.subarray(0, Math.min(bytes.length, total - offset)), offset);
        offset += bytes.length;
      }
      return out;
    }
    static isBuffer(value) {
      return value instanceof Buffer;
    }
    static isEncoding(encoding) {
      return typeof encoding === "string" && ENCODINGS.includes(normalizeEncoding(encoding));
    }
    static compare(a, b) {
      return Buffer.prototype.compare.call(a, b);
    }
    toString(encoding, start = 0, end = this.length) {
      const view = this.subarray(Math.max(0, start), Math.min(this.length, end));
      const name = normalizeEncoding(encoding);
      return name === "utf8" ? native.utf8Decode(view, false, true) : native.bytesDecode(view, name);
    }
    toJSON() {
      return { type: "Buffer", data: Array.from(this) };
    }
    equals(other) {
      return this.compare(other) === 0;
    }
    compare(other) {
      const b = toBytes(other, "Buffer.compare: target");
      const length = Math.min(this.length, b.length);
      for (let i = 0; i < length; i++) if (this[i] !== b[i]) return this[i] < b[i] ? -1 : 1;
      return this.length === b.length ? 0 : this.length < b.length ? -1 : 1;
    }
    slice(start, end) {
      return this.subarray(start, end);
    }
    write(text, offset = 0, length = this.length - offset, encoding = "utf8") {
      if (typeof offset === "string") [encoding, offset, length] = [offset, 0, this.length];
      const bytes = Buffer.from(String(text), encoding);
      const count = Math.min(bytes.length, length, this.length - offset);
      this.set(bytes.subarray(0, count), offset);
      return count;
    }
    fill(value, offset = 0, end = this.length, encoding) {
      if (typeof offset === "string") [encoding, offset, end] = [offset, 0, this.length];
      if (typeof value !== "string") return super.fill(Number(value) & 255, offset, end);
      const pattern = Buffer.from(value, encoding);
      if (pattern.length === 0) return super.fill(0, offset, end);
      for (let i = offset; i < end; i++) this[i] = pattern[(i - offset) % pattern.length];
      return this;
    }
    copy(target, targetStart = 0, sourceStart = 0, sourceEnd = this.length) {
      const bytes = this.subarray(sourceStart, Math.min(sourceEnd, sourceStart + target.length - targetStart));
      target.set(bytes, targetStart);
      return bytes.length;
    }
    indexOf(value, byteOffset = 0, encoding) {
      if (typeof value === "number") return super.indexOf(value & 255, byteOffset);
      const needle = typeof value === "string" ? Buffer.from(value, encoding) : toBytes(value, "Buffer.indexOf: value");
      const start = byteOffset < 0 ? Math.max(0, this.length + byteOffset) : byteOffset;
      outer: for (let i = start; i <= this.length - needle.length; i++) {
        for (let j = 0; j < needle.length; j++) if (this[i + j] !== needle[j]) continue outer;
        return i;
      }
      return -1;
    }
    includes(value, byteOffset, encoding) {
      return this.indexOf(value, byteOffset, encoding) !== -1;
    }
  }
  // readUInt8 ... writeDoubleBE, on a DataView over the buffer's memory.
  const NUMBER_ACCESSORS = [
    ["UInt8", "Uint8", 1], ["Int8", "Int8", 1], ["UInt16", "Uint16", 2], ["Int16", "Int16", 2],
    ["UInt32", "Uint32", 4], ["Int32", "Int32", 4], ["Float", "Float32", 4], ["Double", "Float64", 8],
    ["BigUInt64", "BigUint64", 8], ["BigInt64", "BigInt64", 8],
  ];
  for (const [name, view, size] of NUMBER_ACCESSORS) {
    for (const [suffix, little] of size === 1 ? [["", false]] : [["LE", true], ["BE", false]]) {
      const dataView = (buffer, offset) => {
        if (!(offset >= 0 && offset + size <= buffer.length)) {
          throw new RangeError(`The value of "offset" is out of range: it must be >= 0 and <= ${buffer.length - size}, got ${offset}`);
        }
        return new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength);
      };
      hidden(Buffer.prototype, `read${name}${suffix}`, function (offset = 0) {
        return dataView(this, offset)[`get${view}`](offset, little);
      });
      hidden(Buffer.prototype, `write${name}${suffix}`, function (value, offset = 0) {
        dataView(this, offset)[`set${view}`](offset, value, little);
        return offset + size;
      });
    }
  }
  defineGlobal("Buffer", Buffer);
  defineGlobal("global", globalThis);

  // ---- process ------------------------------------------------------------------------------

  function checkEnvName(name) {
    if (name === "" || name.includes("=") || name.includes("\0")) {
      throw new TypeError(`process.env: invalid variable name ${JSON.stringify(name)}`);
    }
  }
  const env = new Proxy(Object.create(null), {
    get: (_, name) => (typeof name === "string" ? native.envGet(name) : undefined),
    set(_, name, value) {
      if (typeof name !== "string") return false;
      checkEnvName(name);
      const text = String(value);
      if (text.includes("\0")) throw new TypeError("process.env: values must not contain NUL");
      native.envSet(name, text);
      return true;
    },
    deleteProperty(_, name) {
      if (typeof name === "string" && name !== "" && !name.includes("=") && !name.includes("\0")) native.envSet(name, null);
      return true;
    },
    has: (_, name) => typeof name === "string" && native.envGet(name) !== undefined,
    ownKeys: () => Object.keys(native.envAll()),
    getOwnPropertyDescriptor(_, name) {
      const value = typeof name === "string" ? native.envGet(name) : undefined;
      return value === undefined ? undefined : { value, writable: true, enumerable: true, configurable: true };
    },
  });

  const exitCell = globalThis.exit;
  const started = performance.now();
  const stream = (fd) => ({
    fd,
    isTTY: false,
    write(chunk, encoding, callback) {
      const text = typeof chunk === "string" ? chunk : Buffer.from(toBytes(chunk, "write: chunk")).toString(typeof encoding === "string" ? encoding : "utf8");
      native.write(fd === 1 ? 0 : 1, text);
      const done = typeof encoding === "function" ? encoding : callback;
      if (typeof done === "function") queueMicrotask(done);
      return true;
    },
  });
  function hrtime(previous) {
    const now = performance.timeOrigin + performance.now();
    let seconds = Math.floor(now / 1000);
    let nanos = Math.round((now % 1000) * 1e6);
    if (previous) {
      seconds -= previous[0];
      nanos -= previous[1];
      if (nanos < 0) {
        seconds -= 1;
        nanos += 1e9;
      }
    }
    return [seconds, nanos];
  }
  hrtime.bigint = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));

  const process = {
    env,
    argv: [native.execPath],
    argv0: "cellvisor",
    execArgv: [],
    execPath: native.execPath,
    platform,
    arch,
    pid: native.pid,
    ppid: native.ppid,
    title: "cellvisor",
    versions: { quickjs: native.engineVersion },
    release: { name: "cellvisor" },
    exitCode: undefined,
    stdout: stream(1),
    stderr: stream(2),
    stdin: { fd: 0, isTTY: false },
    cwd: () => native.cwd(),
    chdir: (dir) => native.chdir(String(dir)),
    // Ends the cell successfully, like exit(): a worker serves many cells, so it is not ended.
    exit: () => exitCell(),
    hrtime,
    uptime: () => (performance.now() - started) / 1000,
    nextTick: (callback, ...args) => queueMicrotask(() => callback(...args)),
    emitWarning: (warning) => native.write(1, `Warning: ${warning instanceof Error ? warning.message : warning}\n`),
    umask: () => 0o022,
    getuid: () => facts().uid,
    getgid: () => facts().gid,
    on() {
      return process;
    },
    once() {
      return process;
    },
    off() {
      return process;
    },
    removeListener() {
      return process;
    },
    emit: () => false,
    listenerCount: () => 0,
  };
  defineGlobal("process", process);

  // ---- path (POSIX) ---------------------------------------------------------------------------

  function checkPath(value, name = "path") {
    if (typeof value !== "string") throw new TypeError(`The "${name}" argument must be of type string, got ${value === null ? "null" : typeof value}`);
    return value;
  }
  // Resolves `.` and `..` segments; `..` above the root of an absolute path is dropped.
  function normalizeSegments(path, absolute) {
    const out = [];
    for (const segment of path.split("/")) {
      if (segment === "" || segment === ".") continue;
      if (segment === "..") {
        if (out.length && out[out.length - 1] !== "..") out.pop();
        else if (!absolute) out.push("..");
      } else out.push(segment);
    }
    return out.join("/");
  }
  const path = {
    sep: "/",
    delimiter: ":",
    normalize(p) {
      checkPath(p);
      if (p === "") return ".";
      const absolute = p.startsWith("/");
      const trailing = p.endsWith("/");
      let out = normalizeSegments(p, absolute);
      if (out === "" && !absolute) out = ".";
      if (out !== "" && trailing) out += "/";
      return absolute ? `/${out}` : out;
    },
    join(...parts) {
      parts.forEach((part) => checkPath(part));
      const joined = parts.filter((part) => part !== "").join("/");
      return joined === "" ? "." : path.normalize(joined);
    },
    resolve(...parts) {
      let resolved = "";
      for (let i = parts.length - 1; i >= 0 && !resolved.startsWith("/"); i--) {
        const part = checkPath(parts[i]);
        if (part !== "") resolved = resolved === "" ? part : `${part}/${resolved}`;
      }
      if (!resolved.startsWith("/")) resolved = `${native.cwd()}/${resolved}`;
      const out = normalizeSegments(resolved, true);
      return `/${out}`;
    },
    isAbsolute: (p) => checkPath(p).startsWith("/"),
    relative(from, to) {
      const a = path.resolve(from).split("/").filter(Boolean);
      const b = path.resolve(to).split("/").filter(Boolean);
      let common = 0;
      while (common < a.length && common < b.length && a[common] === b[common]) common++;
      return [...a.slice(common).map(() => ".."), ...b.slice(common)].join("/");
    },
    dirname(p) {
      checkPath(p);
      if (p === "") return ".";
      const trimmed = p.replace(/\/+$/, "");
      if (trimmed === "") return "/";
      const index = trimmed.lastIndexOf("/");
      if (index === -1) return ".";
      const dir = trimmed.slice(0, index).replace(/\/+$/, "");
      return dir === "" ? "/" : dir;
    },
    basename(p, suffix) {
      checkPath(p);
      const trimmed = p.replace(/\/+$/, "");
      let base = trimmed.slice(trimmed.lastIndexOf("/") + 1);
      if (typeof suffix === "string" && suffix !== base && base.endsWith(suffix)) base = base.slice(0, base.length - suffix.length);
      return base;
    },
    extname(p) {
      const base = path.basename(p);
      const dot = base.lastIndexOf(".");
      return dot <= 0 ? "" : base.slice(dot);
    },
    parse(p) {
      checkPath(p);
      const root = p.startsWith("/") ? "/" : "";
      const base = path.basename(p);
      const ext = path.extname(p);
      let dir = path.dirname(p);
      if (dir === "." && !p.startsWith(".")) dir = "";
      return { root, dir, base, ext, name: ext ? base.slice(0, base.length - ext.length) : base };
    },
    format(parts) {
      const dir = parts.dir || parts.root || "";
      const base = parts.base || `${parts.name || ""}${parts.ext ? (parts.ext.startsWith(".") ? "" : ".") + parts.ext : ""}`;
      if (!dir) return base;
      return dir === parts.root ? `${dir}${base}` : `${dir}/${base}`;
    },
    toNamespacedPath: (p) => p,
  };
  path.posix = path;

  // ---- fs -------------------------------------------------------------------------------------

  // A path argument: a string, a Buffer or a file: URL.
  function pathArg(value, name = "path") {
    if (typeof value === "string") return value;
    if (value instanceof URL) {
      if (value.protocol !== "file:") throw new TypeError(`The "${name}" URL must be of scheme file, got ${value.protocol}`);
      return decodeURIComponent(value.pathname);
    }
    if (value instanceof Uint8Array) return native.utf8Decode(value, false, true);
    throw new TypeError(`The "${name}" argument must be a string, a Buffer or a file: URL, got ${value === null ? "null" : typeof value}`);
  }
  const encodingOf = (options) => (typeof options === "string" ? options : options && options.encoding) ?? null;

  class Stats {
    #kind;
    constructor(kind, numbers) {
      this.#kind = kind;
      [this.dev, this.ino, this.mode, this.nlink, this.uid, this.gid, this.rdev, this.size, this.blksize, this.blocks,
        this.atimeMs, this.mtimeMs, this.ctimeMs, this.birthtimeMs] = numbers;
      this.atime = new Date(this.atimeMs);
      this.mtime = new Date(this.mtimeMs);
      this.ctime = new Date(this.ctimeMs);
      this.birthtime = new Date(this.birthtimeMs);
    }
    isFile() { return this.#kind === "file"; }
    isDirectory() { return this.#kind === "directory"; }
    isSymbolicLink() { return this.#kind === "symlink"; }
    isFIFO() { return this.#kind === "fifo"; }
    isSocket() { return this.#kind === "socket"; }
    isBlockDevice() { return this.#kind === "block"; }
    isCharacterDevice() { return this.#kind === "character"; }
  }
  class Dirent {
    constructor(name, parentPath) {
      this.name = name;
      this.parentPath = parentPath;
      this.path = parentPath;
    }
  }
  for (const method of Object.getOwnPropertyNames(Stats.prototype).filter((name) => name.startsWith("is"))) {
    const kind = { isFile: "file", isDirectory: "directory", isSymbolicLink: "symlink", isFIFO: "fifo", isSocket: "socket", isBlockDevice: "block", isCharacterDevice: "character" }[method];
    hidden(Dirent.prototype, method, function () {
      return direntKinds.get(this) === kind;
    });
  }
  const direntKinds = new WeakMap();

  function stat(p, options, follow) {
    try {
      const [kind, numbers] = native.fsStat(pathArg(p), follow);
      const stats = new Stats(kind, numbers);
      if (options && options.bigint) throw new TypeError("fs.stat: bigint stats are not supported");
      return stats;
    } catch (error) {
      if (options && options.throwIfNoEntry === false && error.code === "ENOENT") return undefined;
      throw error;
    }
  }

  function readdir(p, options) {
    const dir = pathArg(p);
    const withTypes = Boolean(options && options.withFileTypes);
    const recursive = Boolean(options && options.recursive);
    const out = [];
    const walk = (current, prefix) => {
      const [names, kinds] = native.fsReaddir(current);
      names.forEach((name, i) => {
        const relative = prefix ? `${prefix}/${name}` : name;
        if (withTypes) {
          const entry = new Dirent(name, current);
          direntKinds.set(entry, kinds[i]);
          out.push(entry);
        } else out.push(relative);
        if (recursive && kinds[i] === "directory") walk(`${current}/${name}`, relative);
      });
    };
    walk(dir, "");
    const encoding = encodingOf(options);
    return encoding === "buffer" && !withTypes ? out.map((name) => Buffer.from(name)) : out;
  }

  function writeData(data, options) {
    if (typeof data === "string") {
      const encoding = normalizeEncoding(encodingOf(options));
      return encoding === "utf8" ? data.toWellFormed() : Buffer.from(data, encoding);
    }
    if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) return toBytes(data);
    throw new TypeError(`The "data" argument must be a string, a Buffer, a TypedArray or a DataView, got ${data === null ? "null" : typeof data}`);
  }

  function writeFile(p, data, options, appending) {
    const flag = (options && typeof options === "object" && options.flag) || (appending ? "a" : "w");
    if (!["w", "a", "wx", "ax", "w+", "a+"].includes(flag)) throw new TypeError(`fs: unsupported flag ${JSON.stringify(flag)} (supported: w, a, wx, ax)`);
    native.fsWrite(pathArg(p), writeData(data, options), flag.startsWith("a"), flag.includes("x"));
    if (options && typeof options === "object" && options.mode !== undefined) native.fsChmod(pathArg(p), Number(options.mode));
  }

  function readFile(p, options) {
    const encoding = encodingOf(options);
    const file = pathArg(p);
    if (encoding === null || encoding === "buffer") return new Buffer(native.fsRead(file));
    const name = normalizeEncoding(encoding);
    return name === "utf8" ? native.fsReadText(file) : new Buffer(native.fsRead(file)).toString(name);
  }

  const constants = { F_OK: 0, R_OK: 4, W_OK: 2, X_OK: 1, COPYFILE_EXCL: 1 };
  const sync = {
    readFileSync: readFile,
    writeFileSync: (p, data, options) => writeFile(p, data, options, false),
    appendFileSync: (p, data, options) => writeFile(p, data, options, true),
    existsSync: (p) => {
      try {
        return native.fsExists(pathArg(p));
      } catch (_) {
        return false;
      }
    },
    statSync: (p, options) => stat(p, options, true),
    lstatSync: (p, options) => stat(p, options, false),
    readdirSync: readdir,
    mkdirSync: (p, options) => {
      const recursive = Boolean(options && typeof options === "object" && options.recursive);
      const mode = typeof options === "number" ? options : (options && options.mode) ?? 0o777;
      return native.fsMkdir(pathArg(p), recursive, Number(mode));
    },
    rmSync: (p, options = {}) => native.fsRm(pathArg(p), Boolean(options.recursive), Boolean(options.force)),
    rmdirSync: (p, options = {}) => native.fsRmdir(pathArg(p), Boolean(options.recursive)),
    unlinkSync: (p) => native.fsUnlink(pathArg(p)),
    renameSync: (from, to) => native.fsRename(pathArg(from, "oldPath"), pathArg(to, "newPath")),
    copyFileSync: (from, to, mode = 0) => {
      if (mode & constants.COPYFILE_EXCL && native.fsExists(pathArg(to, "dest"))) {
        native.fsWrite(pathArg(to, "dest"), "", false, true); // fails with EEXIST, like Node
      }
      native.fsCopy(pathArg(from, "src"), pathArg(to, "dest"));
    },
    symlinkSync: (target, p) => native.fsSymlink(pathArg(target, "target"), pathArg(p)),
    readlinkSync: (p) => native.fsReadlink(pathArg(p)),
    realpathSync: (p) => native.fsRealpath(pathArg(p)),
    chmodSync: (p, mode) => native.fsChmod(pathArg(p), typeof mode === "string" ? parseInt(mode, 8) : Number(mode)),
    accessSync: (p, mode = constants.F_OK) => native.fsAccess(pathArg(p), Number(mode)),
    mkdtempSync: (prefix) => native.fsMkdtemp(pathArg(prefix, "prefix")),
  };
  sync.realpathSync.native = sync.realpathSync;

  // fs.promises and the callback forms run the synchronous operation: local file access is
  // quick, and a cell's event loop has one thread.
  const promises = { constants };
  const callbacks = {};
  for (const [name, operation] of Object.entries(sync)) {
    const base = name.slice(0, -4);
    if (base === "exists") continue;
    promises[base] = async (...args) => operation(...args);
    callbacks[base] = (...args) => {
      const callback = args.pop();
      if (typeof callback !== "function") throw new TypeError(`fs.${base}: the last argument must be a callback function`);
      queueMicrotask(() => {
        let result;
        try {
          result = operation(...args);
        } catch (error) {
          callback(error);
          return;
        }
        callback(null, result);
      });
    };
  }
  callbacks.exists = (p, callback) => queueMicrotask(() => callback(sync.existsSync(p)));
  const fs = { ...sync, ...callbacks, promises, constants, Stats, Dirent };

  // ---- os -------------------------------------------------------------------------------------

  const os = {
    EOL: "\n",
    devNull: "/dev/null",
    platform: () => platform,
    type: () => facts().sysname,
    release: () => facts().release,
    version: () => facts().version,
    arch: () => arch,
    machine: () => facts().machine,
    hostname: () => facts().hostname,
    homedir: () => native.envGet("HOME") ?? facts().userHome ?? "/",
    tmpdir: () => {
      const dir = native.envGet("TMPDIR") ?? native.envGet("TMP") ?? native.envGet("TEMP") ?? "/tmp";
      return dir.length > 1 ? dir.replace(/\/+$/, "") : dir;
    },
    totalmem: () => native.osInfo().totalmem,
    freemem: () => native.osInfo().freemem,
    uptime: () => native.osInfo().uptime,
    loadavg: () => native.osInfo().loadavg,
    availableParallelism: () => facts().cpus,
    cpus: () => Array.from({ length: facts().cpus }, () => ({ model: "", speed: 0, times: { user: 0, nice: 0, sys: 0, idle: 0, irq: 0 } })),
    endianness: () => "LE",
    networkInterfaces: () => ({}),
    userInfo: () => ({ uid: facts().uid, gid: facts().gid, username: facts().username ?? "", homedir: facts().userHome ?? "", shell: facts().userShell ?? null }),
    constants: { signals: {}, errno: {} },
  };

  // ---- child_process ----------------------------------------------------------------------------

  function spawnOptions(options = {}) {
    const out = {};
    if (options.cwd !== undefined) out.cwd = pathArg(options.cwd, "options.cwd");
    if (options.env !== undefined) out.env = Object.entries(options.env).filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)]);
    if (options.input !== undefined) out.input = typeof options.input === "string" ? utf8(options.input) : toBytes(options.input, "options.input");
    if (options.timeout !== undefined) out.timeout = Number(options.timeout);
    return out;
  }
  const stdioOf = (options, index) => {
    const stdio = options && options.stdio;
    return Array.isArray(stdio) ? stdio[index] ?? "pipe" : stdio ?? "pipe";
  };
  const asOutput = (bytes, encoding) => {
    const buffer = new Buffer(bytes);
    return encoding && encoding !== "buffer" ? buffer.toString(encoding) : buffer;
  };

  function spawnSync(command, args = [], options = {}) {
    if (!Array.isArray(args)) [options, args] = [args ?? {}, []];
    const file = options.shell ? (typeof options.shell === "string" ? options.shell : "/bin/sh") : String(command);
    const argv = options.shell ? ["-c", [command, ...args].join(" ")] : args.map(String);
    const result = native.spawnSync(file, argv, spawnOptions(options));
    const encoding = options.encoding;
    const stdout = asOutput(result.stdout, encoding);
    const stderr = asOutput(result.stderr, encoding);
    const out = { pid: result.pid, output: [null, stdout, stderr], stdout, stderr, status: result.status, signal: result.signal };
    if (result.error) {
      const error = new Error(`spawnSync ${file} ${result.error}`);
      Object.assign(error, { code: result.error, errno: result.error === "ETIMEDOUT" ? -110 : -2, syscall: `spawnSync ${file}`, path: file, spawnargs: argv });
      out.error = error;
    }
    return out;
  }

  // execSync/execFileSync: the output, or an Error with status, stdout and stderr. The child's
  // stderr goes to the cell's stderr unless `stdio` says otherwise, as in Node.
  function runChecked(description, file, args, options = {}) {
    const result = spawnSync(file, args, { ...options, encoding: "buffer" });
    const encoding = options.encoding;
    if (stdioOf(options, 2) === "inherit" || stdioOf(options, 2) === "pipe" && options.stdio === undefined) {
      if (result.stderr.length) native.write(1, result.stderr.toString());
    }
    if (stdioOf(options, 1) === "inherit" && result.stdout.length) native.write(0, result.stdout.toString());
    if (result.error) throw result.error;
    if (result.status !== 0) {
      const stderrText = result.stderr.toString();
      const error = new Error(`Command failed: ${description}${stderrText ? `\n${stderrText}` : ""}`);
      Object.assign(error, {
        status: result.status,
        signal: result.signal,
        pid: result.pid,
        stdout: asOutput(result.stdout, encoding),
        stderr: asOutput(result.stderr, encoding),
      });
      error.output = [null, error.stdout, error.stderr];
      throw error;
    }
    return stdioOf(options, 1) === "inherit" ? null : asOutput(result.stdout, encoding);
  }

  const execSync = (command, options = {}) =>
    runChecked(String(command), typeof options.shell === "string" ? options.shell : "/bin/sh", ["-c", String(command)], { ...options, shell: false });
  function execFileSync(file, args = [], options = {}) {
    if (!Array.isArray(args)) [options, args] = [args ?? {}, []];
    return runChecked([file, ...args].join(" "), String(file), args.map(String), options);
  }

  // exec/execFile: Node's callback forms (and their promisified `{stdout, stderr}`), called
  // back when the current job finishes. The command itself runs synchronously (a cell has one
  // thread): timers wait until it ends.
  function execResult(description, file, args, options = {}) {
    const result = spawnSync(file, args, { ...options, shell: false, encoding: "buffer" });
    const encoding = options.encoding ?? "utf8";
    const stdout = asOutput(result.stdout, encoding);
    const stderr = asOutput(result.stderr, encoding);
    if (result.error) return [Object.assign(result.error, { cmd: description, stdout, stderr }), stdout, stderr];
    if (result.status !== 0) {
      const error = new Error(`Command failed: ${description}\n${result.stderr.toString()}`);
      Object.assign(error, { code: result.status, killed: result.signal !== null, signal: result.signal, cmd: description, stdout, stderr });
      return [error, stdout, stderr];
    }
    return [null, stdout, stderr];
  }
  function callbackForm(run) {
    return (...args) => {
      const callback = typeof args[args.length - 1] === "function" ? args.pop() : () => {};
      queueMicrotask(() => callback(...run(...args)));
      return { pid: undefined, kill: () => false, on() { return this; } };
    };
  }
  const exec = callbackForm((command, options = {}) =>
    execResult(String(command), typeof options.shell === "string" ? options.shell : "/bin/sh", ["-c", String(command)], options),
  );
  const execFile = callbackForm((file, args = [], options = {}) => {
    if (!Array.isArray(args)) [options, args] = [args ?? {}, []];
    return execResult([file, ...args].join(" "), String(file), args.map(String), options);
  });
  const PROMISIFY_CUSTOM = Symbol.for("nodejs.util.promisify.custom");
  const promisifyChild = (form) => (...args) =>
    new Promise((resolve, reject) => {
      form(...args, (error, stdout, stderr) => (error ? reject(error) : resolve({ stdout, stderr })));
    });
  exec[PROMISIFY_CUSTOM] = promisifyChild(exec);
  execFile[PROMISIFY_CUSTOM] = promisifyChild(execFile);
  const notAvailable = (name) => () => {
    throw new Error(`child_process.${name} is not available in cellvisor: use execSync, execFileSync, spawnSync, exec or execFile`);
  };
  const childProcess = { execSync, execFileSync, spawnSync, exec, execFile, spawn: notAvailable("spawn"), fork: notAvailable("fork") };

  // ---- events, util, url, crypto, buffer ----------------------------------------------------

  class EventEmitter {
    #events = new Map();
    on(name, listener) {
      const list = this.#events.get(name) ?? [];
      list.push(listener);
      this.#events.set(name, list);
      return this;
    }
    addListener(name, listener) {
      return this.on(name, listener);
    }
    prependListener(name, listener) {
      this.#events.set(name, [listener, ...(this.#events.get(name) ?? [])]);
      return this;
    }
    once(name, listener) {
      const wrapper = (...args) => {
        this.off(name, wrapper);
        listener.apply(this, args);
      };
      wrapper.listener = listener;
      return this.on(name, wrapper);
    }
    off(name, listener) {
      const list = this.#events.get(name);
      if (list) {
        const index = list.findIndex((l) => l === listener || l.listener === listener);
        if (index !== -1) list.splice(index, 1);
      }
      return this;
    }
    removeListener(name, listener) {
      return this.off(name, listener);
    }
    removeAllListeners(name) {
      if (name === undefined) this.#events.clear();
      else this.#events.delete(name);
      return this;
    }
    emit(name, ...args) {
      const list = this.#events.get(name);
      if (!list || list.length === 0) {
        if (name === "error") throw args[0] instanceof Error ? args[0] : new Error(`Unhandled error: ${args[0]}`);
        return false;
      }
      for (const listener of [...list]) listener.apply(this, args);
      return true;
    }
    listeners(name) {
      return (this.#events.get(name) ?? []).map((l) => l.listener ?? l);
    }
    listenerCount(name) {
      return (this.#events.get(name) ?? []).length;
    }
    eventNames() {
      return [...this.#events.keys()];
    }
    setMaxListeners() {
      return this;
    }
  }
  EventEmitter.EventEmitter = EventEmitter;
  EventEmitter.once = (emitter, name) => new Promise((resolve) => emitter.once(name, (...args) => resolve(args)));

  const format = (value) => (typeof value === "string" ? value : native.formatValue(value));
  function formatString(template, ...args) {
    if (typeof template !== "string") return [template, ...args].map(format).join(" ");
    let index = 0;
    const text = template.replace(/%[sdifjoO%]/g, (spec) => {
      if (spec === "%%") return "%";
      if (index >= args.length) return spec;
      const value = args[index++];
      switch (spec) {
        case "%s": return typeof value === "string" ? value : format(value);
        case "%d": return String(Number(value));
        case "%i": return String(parseInt(value, 10));
        case "%f": return String(parseFloat(value));
        case "%j": return JSON.stringify(value);
        default: return format(value);
      }
    });
    return [text, ...args.slice(index).map(format)].join(" ");
  }
  function promisify(original) {
    if (typeof original !== "function") throw new TypeError('The "original" argument must be of type function');
    if (typeof original[PROMISIFY_CUSTOM] === "function") return original[PROMISIFY_CUSTOM];
    return (...args) =>
      new Promise((resolve, reject) => {
        original(...args, (error, value) => (error ? reject(error) : resolve(value)));
      });
  }
  promisify.custom = PROMISIFY_CUSTOM;
  const util = {
    promisify,
    format: formatString,
    inspect: format,
    inherits(constructor, superConstructor) {
      Object.setPrototypeOf(constructor.prototype, superConstructor.prototype);
      Object.setPrototypeOf(constructor, superConstructor);
    },
    deprecate: (fn) => fn,
    isDeepStrictEqual: (a, b) => JSON.stringify(a) === JSON.stringify(b),
    types: {
      isPromise: (value) => value instanceof Promise,
      isDate: (value) => value instanceof Date,
      isRegExp: (value) => value instanceof RegExp,
      isUint8Array: (value) => value instanceof Uint8Array,
    },
    TextEncoder,
    TextDecoder,
  };

  const url = {
    URL,
    URLSearchParams,
    fileURLToPath(value) {
      const parsed = value instanceof URL ? value : new URL(String(value));
      if (parsed.protocol !== "file:") throw new TypeError(`The URL must be of scheme file, got ${parsed.protocol}`);
      return decodeURIComponent(parsed.pathname);
    },
    pathToFileURL(p) {
      const absolute = path.resolve(checkPath(p));
      const encoded = absolute.split("/").map(encodeURIComponent).join("/");
      return new URL(`file://${encoded}${p.endsWith("/") && absolute !== "/" ? "/" : ""}`);
    },
  };

  function createHash(algorithm) {
    const chunks = [];
    native.digest(String(algorithm), new Uint8Array(0)); // rejects unknown algorithms now
    const hash = {
      update(data, encoding) {
        chunks.push(typeof data === "string" ? Buffer.from(data, encoding) : toBytes(data, "hash.update: data"));
        return hash;
      },
      digest(encoding) {
        const bytes = new Buffer(native.digest(String(algorithm), Buffer.concat(chunks)));
        return encoding && encoding !== "buffer" ? bytes.toString(encoding) : bytes;
      },
    };
    return hash;
  }
  const webcrypto = globalThis.crypto;
  const cryptoModule = {
    webcrypto,
    subtle: webcrypto.subtle,
    getRandomValues: (array) => webcrypto.getRandomValues(array),
    randomUUID: () => webcrypto.randomUUID(),
    randomBytes(size, callback) {
      const bytes = new Buffer(native.randomBytes(Number(size)));
      if (typeof callback === "function") queueMicrotask(() => callback(null, bytes));
      else return bytes;
    },
    randomInt(min, max) {
      if (max === undefined) [min, max] = [0, min];
      const range = max - min;
      const [value] = new Uint32Array(native.randomBytes(4));
      return min + (value % range);
    },
    createHash,
    getHashes: () => ["sha1", "sha256", "sha384", "sha512"],
  };

  const bufferModule = { Buffer, atob, btoa, constants: { MAX_LENGTH: 2 ** 32 - 1 } };

  // ---- require and the module table ----------------------------------------------------------

  const BUILTINS = {
    fs,
    "fs/promises": promises,
    path,
    "path/posix": path,
    os,
    child_process: childProcess,
    buffer: bufferModule,
    crypto: cryptoModule,
    url,
    util,
    events: EventEmitter,
    process,
  };
  const builtinName = (name) => (name.startsWith("node:") ? name.slice(5) : name);
  const loaded = (name) => Object.prototype.hasOwnProperty.call(BUILTINS, name) ? BUILTINS[name] : undefined;

  // Names a module can export: identifiers, not the reserved word `default`.
  const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;
  const RESERVED = new Set(["default", "class", "delete", "new", "function", "import", "export", "return", "var", "let", "const"]);
  hidden(globalThis, "__cellvisor_builtins", {
    names: () => Object.keys(BUILTINS),
    has: (name) => loaded(builtinName(name)) !== undefined,
    load: (name) => loaded(builtinName(name)),
    exportNames: (name) => Object.keys(loaded(builtinName(name)) ?? {}).filter((key) => IDENTIFIER.test(key) && !RESERVED.has(key)),
  });

  const moduleCache = Object.create(null);
  // CommonJS files and JSON next to the cell (or the requiring file): enough for local
  // helpers; packages in node_modules are loaded with import().
  function requireFrom(dir) {
    const require = (specifier) => {
      const name = checkPath(specifier, "id");
      const builtin = loaded(builtinName(name));
      if (builtin !== undefined) return builtin;
      if (name.startsWith("node:")) throw moduleNotFound(name, `node:${builtinName(name)} is not one of cellvisor's built-in modules (${Object.keys(BUILTINS).join(", ")})`);
      const isPath = name.startsWith("./") || name.startsWith("../") || name.startsWith("/") || name === "." || name === "..";
      if (!isPath) {
        throw moduleNotFound(name, `require() loads the built-in modules (${Object.keys(BUILTINS).join(", ")}) and local files; load packages with import()`);
      }
      const base = path.resolve(dir ?? native.cwd(), name);
      const file = [base, `${base}.js`, `${base}.cjs`, `${base}.json`, `${base}/index.js`].find((candidate) => {
        try {
          return native.fsStat(candidate, true)[0] === "file";
        } catch (_) {
          return false;
        }
      });
      if (file === undefined) throw moduleNotFound(name, `looked for ${base}(.js|.cjs|.json|/index.js)`);
      if (moduleCache[file]) return moduleCache[file].exports;
      const module = { id: file, filename: file, loaded: false, exports: {}, children: [], paths: [] };
      moduleCache[file] = module;
      try {
        const source = native.fsReadText(file);
        if (file.endsWith(".json")) module.exports = JSON.parse(source);
        else {
          const wrapper = new Function("exports", "require", "module", "__filename", "__dirname", source);
          wrapper.call(module.exports, module.exports, requireFrom(path.dirname(file)), module, file, path.dirname(file));
        }
      } catch (error) {
        delete moduleCache[file];
        throw error;
      }
      module.loaded = true;
      return module.exports;
    };
    require.cache = moduleCache;
    require.resolve = (name) => (loaded(builtinName(name)) !== undefined ? name : path.resolve(dir ?? native.cwd(), name));
    return require;
  }
  function moduleNotFound(name, why) {
    const error = new Error(`Cannot find module '${name}': ${why}`);
    error.code = "MODULE_NOT_FOUND";
    return error;
  }
  defineGlobal("require", requireFrom(null));
  // As in the anchor's VM: node:fs is also a global.
  defineGlobal("fs", fs);
});
