// Web globals for binary data and forms: Blob, File, FormData (and their bodies for fetch,
// Request and Response), and navigator. Loaded after web.js, the first time a cell touches
// one of them (lazy.js); called with the native functions (node/mod.rs).
// Every global is a non-enumerable, writable property of globalThis, so cells may shadow it.
(function (native) {
  "use strict";
  const hidden = (target, name, value) =>
    Object.defineProperty(target, name, { value, writable: true, configurable: true, enumerable: false });
  const defineGlobal = (name, value) => hidden(globalThis, name, value);
  const toBytes = native.toBytes;
  const utf8 = native.utf8;
  const decode = (bytes) => native.utf8Decode(bytes, false, false);

  // ---- navigator ------------------------------------------------------------------------------

  // "de_DE.UTF-8" -> "de-DE"; the C/POSIX locale (or none) -> "en-US".
  function locale() {
    const raw = native.envGet("LC_ALL") || native.envGet("LC_MESSAGES") || native.envGet("LANG") || "";
    const tag = raw.split(/[.@]/)[0].replace(/_/g, "-");
    return /^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$/.test(tag) ? tag : "en-US";
  }

  class Navigator {
    constructor(key) {
      if (key !== navigatorKey) throw new TypeError("Illegal constructor");
    }
    get userAgent() {
      return native.userAgent;
    }
    // The CPUs this worker may run on (its affinity and cgroup quota), as os.availableParallelism().
    get hardwareConcurrency() {
      return native.cpuCount();
    }
    get language() {
      return locale();
    }
    get languages() {
      return Object.freeze([locale()]);
    }
    get platform() {
      return native.platform === "linux" ? "Linux" : native.platform;
    }
    get [Symbol.toStringTag]() {
      return "Navigator";
    }
  }
  const navigatorKey = Symbol("Navigator");
  defineGlobal("Navigator", Navigator);
  defineGlobal("navigator", new Navigator(navigatorKey));

  // ---- Blob, File -------------------------------------------------------------------------------

  // A content type as the File API keeps it: lowercased, or "" if it has a character outside
  // U+0020-U+007E.
  const contentType = (type) => (type === undefined ? "" : /^[\x20-\x7e]*$/.test(String(type)) ? String(type).toLowerCase() : "");

  let bytesOf;

  class Blob {
    #bytes;
    #type;
    constructor(parts = undefined, options = undefined) {
      if (parts !== undefined && (parts === null || typeof parts !== "object" || typeof parts[Symbol.iterator] !== "function")) {
        throw new TypeError("Blob: the parts must be a sequence (an array of strings, buffers, views or Blobs)");
      }
      const nativeEndings = options !== undefined && options !== null && options.endings === "native";
      if (options !== undefined && options !== null && options.endings !== undefined && !["native", "transparent"].includes(options.endings)) {
        throw new TypeError(`Blob: endings must be "transparent" or "native", got ${JSON.stringify(String(options.endings))}`);
      }
      const chunks = [];
      for (const part of parts ?? []) {
        if (part instanceof Blob) chunks.push(part.#bytes);
        else if (part instanceof ArrayBuffer || ArrayBuffer.isView(part)) chunks.push(toBytes(part).slice());
        else {
          const text = nativeEndings ? String(part).replace(/\r\n?/g, "\n") : String(part);
          chunks.push(utf8(text));
        }
      }
      this.#bytes = concat(chunks);
      this.#type = contentType(options === undefined || options === null ? undefined : options.type);
    }
    static {
      bytesOf = (blob) => blob.#bytes;
    }
    get size() {
      return this.#bytes.byteLength;
    }
    get type() {
      return this.#type;
    }
    slice(start = 0, end = undefined, type = undefined) {
      const size = this.#bytes.byteLength;
      const clamp = (value, otherwise) => {
        if (value === undefined) return otherwise;
        const n = Math.trunc(Number(value)) || 0;
        return n < 0 ? Math.max(size + n, 0) : Math.min(n, size);
      };
      const from = clamp(start, 0);
      const to = clamp(end, size);
      const blob = new Blob([], { type });
      blob.#bytes = this.#bytes.slice(from, Math.max(from, to));
      return blob;
    }
    async text() {
      return decode(this.#bytes);
    }
    async arrayBuffer() {
      return this.#bytes.slice().buffer;
    }
    async bytes() {
      return this.#bytes.slice();
    }
    get [Symbol.toStringTag]() {
      return "Blob";
    }
  }

  class File extends Blob {
    #name;
    #lastModified;
    constructor(bits, name, options = undefined) {
      if (arguments.length < 2) throw new TypeError(`File: 2 arguments required, but only ${arguments.length} present`);
      super(bits, options);
      this.#name = String(name).toWellFormed();
      const modified = options === undefined || options === null ? undefined : options.lastModified;
      this.#lastModified = modified === undefined ? Date.now() : Math.trunc(Number(modified)) || 0;
    }
    get name() {
      return this.#name;
    }
    get lastModified() {
      return this.#lastModified;
    }
    get webkitRelativePath() {
      return "";
    }
    get [Symbol.toStringTag]() {
      return "File";
    }
  }

  function concat(chunks) {
    const out = new Uint8Array(chunks.reduce((total, chunk) => total + chunk.byteLength, 0));
    let at = 0;
    for (const chunk of chunks) {
      out.set(chunk, at);
      at += chunk.byteLength;
    }
    return out;
  }

  defineGlobal("Blob", Blob);
  defineGlobal("File", File);

  // ---- FormData ---------------------------------------------------------------------------------

  // A value as FormData keeps it: a string, or a File (a Blob becomes a File named "blob").
  function entryValue(value, filename, method, count) {
    if (!(value instanceof Blob)) {
      if (count > 2) throw new TypeError(`FormData.${method}: parameter 2 is not of type 'Blob'`);
      return String(value).toWellFormed();
    }
    if (value instanceof File && filename === undefined) return value;
    const options = { type: value.type, lastModified: value instanceof File ? value.lastModified : undefined };
    return new File([value], filename === undefined ? "blob" : String(filename), options);
  }

  class FormData {
    #list = [];
    constructor(form = undefined) {
      if (form !== undefined) throw new TypeError("FormData: there are no HTML forms here; construct it empty and append()");
    }
    append(name, value, filename = undefined) {
      if (arguments.length < 2) throw new TypeError(`FormData.append: 2 arguments required, but only ${arguments.length} present`);
      this.#list.push([String(name).toWellFormed(), entryValue(value, filename, "append", arguments.length)]);
    }
    set(name, value, filename = undefined) {
      if (arguments.length < 2) throw new TypeError(`FormData.set: 2 arguments required, but only ${arguments.length} present`);
      const key = String(name).toWellFormed();
      const entry = [key, entryValue(value, filename, "set", arguments.length)];
      const index = this.#list.findIndex(([n]) => n === key);
      if (index === -1) this.#list.push(entry);
      else this.#list = this.#list.filter(([n], i) => n !== key || i === index).map((e) => (e[0] === key ? entry : e));
    }
    get(name) {
      const key = String(name).toWellFormed();
      const found = this.#list.find(([n]) => n === key);
      return found === undefined ? null : found[1];
    }
    getAll(name) {
      const key = String(name).toWellFormed();
      return this.#list.filter(([n]) => n === key).map(([, v]) => v);
    }
    has(name) {
      const key = String(name).toWellFormed();
      return this.#list.some(([n]) => n === key);
    }
    delete(name) {
      const key = String(name).toWellFormed();
      this.#list = this.#list.filter(([n]) => n !== key);
    }
    *entries() {
      for (let i = 0; i < this.#list.length; i++) yield [this.#list[i][0], this.#list[i][1]];
    }
    *keys() {
      for (const [name] of this.entries()) yield name;
    }
    *values() {
      for (const [, value] of this.entries()) yield value;
    }
    forEach(callback, thisArg = undefined) {
      if (typeof callback !== "function") throw new TypeError("FormData.forEach: the callback must be a function");
      for (const [name, value] of this.entries()) callback.call(thisArg, value, name, this);
    }
    [Symbol.iterator]() {
      return this.entries();
    }
    get [Symbol.toStringTag]() {
      return "FormData";
    }
  }
  defineGlobal("FormData", FormData);

  // ---- bodies -----------------------------------------------------------------------------------

  // multipart/form-data as the HTML standard (and undici) write it.
  const escapeName = (text) => text.replace(/\n/g, "%0A").replace(/\r/g, "%0D").replace(/"/g, "%22");
  const crlf = (text) => text.replace(/\r?\n|\r/g, "\r\n");
  function multipart(form) {
    const random = Array.from(new Uint8Array(native.randomBytes(12)), (b) => b.toString(16).padStart(2, "0")).join("");
    const boundary = `----cellvisor-formdata-${random}`;
    const chunks = [];
    for (const [name, value] of form) {
      let head = `--${boundary}\r\nContent-Disposition: form-data; name="${escapeName(crlf(name))}"`;
      if (typeof value === "string") {
        chunks.push(utf8(`${head}\r\n\r\n${crlf(value)}\r\n`));
      } else {
        head += `; filename="${escapeName(value.name)}"\r\nContent-Type: ${value.type || "application/octet-stream"}\r\n\r\n`;
        chunks.push(utf8(head), bytesOf(value), utf8("\r\n"));
      }
    }
    chunks.push(utf8(`--${boundary}--\r\n`));
    return [concat(chunks), `multipart/form-data; boundary=${boundary}`];
  }

  // web.js's extractBody asks here for the bodies it does not know: [bytes, content type].
  hidden(native, "extraBody", (body) => {
    if (body instanceof Blob) return [bytesOf(body).slice(), body.type === "" ? null : body.type];
    if (body instanceof FormData) return multipart(body);
    return null;
  });

  // Body.blob() and Body.formData() of web.js.
  hidden(native, "makeBlob", (bytes, type) => new Blob([bytes], { type: type ?? "" }));
  hidden(native, "parseFormData", (bytes, type) => {
    const mime = String(type ?? "").split(";")[0].trim().toLowerCase();
    const form = new FormData();
    if (mime === "application/x-www-form-urlencoded") {
      for (const [name, value] of new URLSearchParams(decode(bytes))) form.append(name, value);
      return form;
    }
    const boundary = /;\s*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(String(type ?? ""));
    if (mime !== "multipart/form-data" || boundary === null) {
      throw new TypeError(`formData: the body's Content-Type must be multipart/form-data (with a boundary) or application/x-www-form-urlencoded, got ${JSON.stringify(String(type ?? ""))}`);
    }
    const failed = (why) => new TypeError(`formData: the multipart body is malformed: ${why}`);
    // Byte offsets are character offsets in the latin1 reading of the body.
    const text = native.bytesDecode(bytes, "latin1");
    const delimiter = `--${boundary[1] ?? boundary[2]}`;
    let at = text.indexOf(delimiter);
    if (at === -1) throw failed("no boundary line");
    for (;;) {
      at += delimiter.length;
      if (text.startsWith("--", at)) return form;
      if (!text.startsWith("\r\n", at)) throw failed("a boundary is not followed by a line break");
      at += 2;
      const headEnd = text.indexOf("\r\n\r\n", at);
      if (headEnd === -1) throw failed("a part has no end of its headers");
      const headers = new Map();
      for (const line of text.slice(at, headEnd).split("\r\n")) {
        const colon = line.indexOf(":");
        if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
      }
      const next = text.indexOf(`\r\n${delimiter}`, headEnd + 4);
      if (next === -1) throw failed("a part is not closed by a boundary");
      const content = bytes.subarray(headEnd + 4, next);
      const disposition = headers.get("content-disposition") ?? "";
      const param = (key) => {
        const found = new RegExp(`;\\s*${key}="((?:[^"\\\\]|\\\\.)*)"`, "i").exec(disposition) ?? new RegExp(`;\\s*${key}=([^;\\s]+)`, "i").exec(disposition);
        return found === null ? null : decodeURIComponentSafe(native.utf8Decode(new Uint8Array(native.bytesEncode(found[1], "latin1")), false, false));
      };
      const name = param("name");
      if (name === null) throw failed("a part has no name in its Content-Disposition");
      const filename = param("filename");
      if (filename === null) form.append(name, decode(content));
      else form.append(name, new File([content], filename, { type: headers.get("content-type") ?? "application/octet-stream" }));
      at = next + 2;
    }
  });
  // The %0A, %0D and %22 a multipart writer escapes in names; anything else is kept.
  const decodeURIComponentSafe = (text) => text.replace(/%(0A|0D|22)/gi, (_, hex) => String.fromCharCode(parseInt(hex, 16)));
});
