// Web platform globals for cells, as browsers and Node define them: DOMException, Event and
// EventTarget, AbortController/AbortSignal, TextEncoder/TextDecoder, atob/btoa, URL,
// URLSearchParams, structuredClone, crypto, Headers/Request/Response and fetch (Blob, File,
// FormData and navigator are in files.js).
// Installed once per worker after prelude.js; called with the native functions (node/mod.rs).
// Every global is a non-enumerable, writable property of globalThis, so cells may shadow it.
(function (native) {
  "use strict";
  const hidden = (target, name, value) =>
    Object.defineProperty(target, name, { value, writable: true, configurable: true, enumerable: false });
  const defineGlobal = (name, value) => hidden(globalThis, name, value);

  // ---- DOMException, Event, EventTarget ---------------------------------------------------

  const DOM_CODES = {
    IndexSizeError: 1, NotFoundError: 8, NotSupportedError: 9, InvalidStateError: 11, SyntaxError: 12,
    InvalidCharacterError: 5, TypeMismatchError: 17, NetworkError: 19, AbortError: 20, TimeoutError: 23,
    QuotaExceededError: 22, DataCloneError: 25,
  };

  class DOMException extends Error {
    constructor(message = "", name = "Error") {
      super(String(message));
      Object.defineProperty(this, "name", { value: String(name), writable: true, configurable: true });
    }
    get code() {
      return DOM_CODES[this.name] ?? 0;
    }
  }
  if (typeof globalThis.DOMException !== "function") defineGlobal("DOMException", DOMException);

  class Event {
    #type;
    constructor(type, init = {}) {
      if (arguments.length === 0) throw new TypeError("Event: the event type is required");
      this.#type = String(type);
      this.bubbles = Boolean(init.bubbles);
      this.cancelable = Boolean(init.cancelable);
      this.defaultPrevented = false;
      this.target = null;
      this.currentTarget = null;
      this.timeStamp = performance.now();
    }
    get type() {
      return this.#type;
    }
    preventDefault() {
      if (this.cancelable) this.defaultPrevented = true;
    }
    stopPropagation() {}
    stopImmediatePropagation() {
      this.immediateStopped = true;
    }
  }

  class EventTarget {
    #listeners = new Map();
    addEventListener(type, listener, options = {}) {
      if (listener === null || listener === undefined) return;
      const once = typeof options === "object" && options !== null && Boolean(options.once);
      const list = this.#listeners.get(type) ?? [];
      if (!list.some((entry) => entry.listener === listener)) list.push({ listener, once });
      this.#listeners.set(type, list);
      const signal = typeof options === "object" && options !== null ? options.signal : undefined;
      if (signal) signal.addEventListener("abort", () => this.removeEventListener(type, listener), { once: true });
    }
    removeEventListener(type, listener) {
      const list = this.#listeners.get(type);
      if (list) this.#listeners.set(type, list.filter((entry) => entry.listener !== listener));
    }
    dispatchEvent(event) {
      if (!(event instanceof Event)) throw new TypeError("dispatchEvent: the argument must be an Event");
      event.target = this;
      event.currentTarget = this;
      const handler = this[`on${event.type}`];
      if (typeof handler === "function") handler.call(this, event);
      for (const entry of [...(this.#listeners.get(event.type) ?? [])]) {
        if (entry.once) this.removeEventListener(event.type, entry.listener);
        if (typeof entry.listener === "function") entry.listener.call(this, event);
        else if (entry.listener && typeof entry.listener.handleEvent === "function") entry.listener.handleEvent(event);
        if (event.immediateStopped) break;
      }
      return !event.defaultPrevented;
    }
  }
  defineGlobal("Event", Event);
  defineGlobal("EventTarget", EventTarget);

  // ---- AbortController, AbortSignal ---------------------------------------------------

  const abortError = () => new globalThis.DOMException("This operation was aborted", "AbortError");
  const timeoutError = () => new globalThis.DOMException("The operation was aborted due to timeout", "TimeoutError");
  const signalKey = Symbol("AbortSignal internal");
  const remainingKey = Symbol("AbortSignal time left");

  class AbortSignal extends EventTarget {
    #aborted = false;
    #reason = undefined;
    // AbortSignal.timeout(): when it aborts. Its timer starts only once someone listens
    // (a pending timer keeps a cell alive; fetch passes the time left to the request instead).
    #deadline = null;
    #timer = null;
    constructor(key) {
      if (key !== signalKey) throw new TypeError("AbortSignal cannot be constructed: use new AbortController().signal");
      super();
      this.onabort = null;
    }
    #checkDeadline() {
      if (this.#deadline !== null && !this.#aborted && performance.now() >= this.#deadline) this[signalKey](timeoutError());
    }
    get aborted() {
      this.#checkDeadline();
      return this.#aborted;
    }
    get reason() {
      this.#checkDeadline();
      return this.#reason;
    }
    throwIfAborted() {
      this.#checkDeadline();
      if (this.#aborted) throw this.#reason;
    }
    addEventListener(type, listener, options) {
      super.addEventListener(type, listener, options);
      if (type === "abort" && this.#deadline !== null && this.#timer === null && !this.#aborted) {
        this.#timer = setTimeout(() => this.#checkDeadline(), Math.max(0, this.#deadline - performance.now()));
      }
    }
    // Milliseconds until an AbortSignal.timeout() aborts, or undefined.
    [remainingKey]() {
      return this.#deadline === null ? undefined : Math.max(0, this.#deadline - performance.now());
    }
    [signalKey](reason) {
      if (this.#aborted) return;
      this.#aborted = true;
      this.#reason = reason === undefined ? abortError() : reason;
      if (this.#timer !== null) clearTimeout(this.#timer);
      this.dispatchEvent(new Event("abort"));
    }
    static abort(reason) {
      const signal = new AbortSignal(signalKey);
      signal[signalKey](reason);
      return signal;
    }
    static timeout(ms) {
      const delay = Number(ms);
      if (!(delay >= 0)) throw new RangeError(`AbortSignal.timeout: ms must be a number >= 0, got ${ms}`);
      const signal = new AbortSignal(signalKey);
      signal.#deadline = performance.now() + delay;
      return signal;
    }
    static any(signals) {
      const signal = new AbortSignal(signalKey);
      for (const source of signals) {
        if (source.aborted) {
          signal[signalKey](source.reason);
          break;
        }
        source.addEventListener("abort", () => signal[signalKey](source.reason), { once: true });
      }
      return signal;
    }
  }

  class AbortController {
    #signal = new AbortSignal(signalKey);
    get signal() {
      return this.#signal;
    }
    abort(reason) {
      this.#signal[signalKey](reason);
    }
  }
  defineGlobal("AbortSignal", AbortSignal);
  defineGlobal("AbortController", AbortController);

  // ---- bytes ------------------------------------------------------------------------------

  // Any binary value as a Uint8Array over the same memory.
  function toBytes(data, what) {
    if (data instanceof Uint8Array) return data;
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (data instanceof ArrayBuffer || (typeof SharedArrayBuffer === "function" && data instanceof SharedArrayBuffer)) {
      return new Uint8Array(data);
    }
    throw new TypeError(`${what} must be an ArrayBuffer, a TypedArray or a DataView, got ${data === null ? "null" : typeof data}`);
  }
  hidden(native, "toBytes", toBytes);
  const utf8 = (text) => new Uint8Array(native.bytesEncode(String(text).toWellFormed(), "utf8"));
  hidden(native, "utf8", utf8);

  class TextEncoder {
    get encoding() {
      return "utf-8";
    }
    encode(input = "") {
      return utf8(input);
    }
    encodeInto(source, destination) {
      const text = String(source).toWellFormed();
      let read = 0;
      let written = 0;
      for (const char of text) {
        const code = char.codePointAt(0);
        const size = code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
        if (written + size > destination.length) break;
        destination.set(utf8(char), written);
        written += size;
        read += char.length;
      }
      return { read, written };
    }
  }

  const DECODER_LABELS = {
    "utf-8": "utf-8", utf8: "utf-8", "unicode-1-1-utf-8": "utf-8",
    "utf-16le": "utf-16le", "utf-16": "utf-16le",
  };

  // How many bytes at the end of `bytes` start a UTF-8 sequence that is not complete yet.
  function incompleteTail(bytes) {
    for (let back = 1; back <= Math.min(3, bytes.length); back++) {
      const byte = bytes[bytes.length - back];
      if ((byte & 0xc0) === 0x80) continue;
      const need = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
      return need > back ? back : 0;
    }
    return 0;
  }

  class TextDecoder {
    #encoding;
    #fatal;
    #ignoreBOM;
    #pending = new Uint8Array(0);
    constructor(label = "utf-8", options = {}) {
      const encoding = DECODER_LABELS[String(label).trim().toLowerCase()];
      if (encoding === undefined) {
        throw new RangeError(`TextDecoder: the encoding "${label}" is not supported (supported: utf-8, utf-16le)`);
      }
      this.#encoding = encoding;
      this.#fatal = Boolean(options.fatal);
      this.#ignoreBOM = Boolean(options.ignoreBOM);
    }
    get encoding() {
      return this.#encoding;
    }
    get fatal() {
      return this.#fatal;
    }
    get ignoreBOM() {
      return this.#ignoreBOM;
    }
    decode(input, options = {}) {
      let bytes = input === undefined ? new Uint8Array(0) : toBytes(input, "TextDecoder.decode: input");
      if (this.#encoding === "utf-16le") {
        const text = native.bytesDecode(bytes, "utf16le");
        return !this.#ignoreBOM && text.startsWith("\ufeff") ? text.slice(1) : text;
      }
      if (this.#pending.length) {
        const joined = new Uint8Array(this.#pending.length + bytes.length);
        joined.set(this.#pending);
        joined.set(bytes, this.#pending.length);
        bytes = joined;
      }
      const tail = options.stream ? incompleteTail(bytes) : 0;
      this.#pending = bytes.slice(bytes.length - tail);
      try {
        return native.utf8Decode(bytes.subarray(0, bytes.length - tail), this.#fatal, this.#ignoreBOM);
      } catch (error) {
        throw new TypeError(`TextDecoder.decode: ${error.message}`);
      }
    }
  }
  defineGlobal("TextEncoder", TextEncoder);
  defineGlobal("TextDecoder", TextDecoder);

  const invalidCharacter = (call) => (text) => {
    try {
      return call(text);
    } catch (error) {
      throw new globalThis.DOMException(error.message, "InvalidCharacterError");
    }
  };
  defineGlobal("atob", function atob(data) {
    if (arguments.length === 0) throw new TypeError("atob: 1 argument required, but only 0 present");
    return invalidCharacter(native.atob)(String(data));
  });
  defineGlobal("btoa", function btoa(data) {
    if (arguments.length === 0) throw new TypeError("btoa: 1 argument required, but only 0 present");
    return invalidCharacter(native.btoa)(String(data));
  });

  // ---- URL, URLSearchParams -------------------------------------------------------------

  const PARTS = ["href", "origin", "protocol", "username", "password", "host", "hostname", "port", "pathname", "search", "hash"];
  const urlUpdate = Symbol("URLSearchParams owner update");

  class URLSearchParams {
    #list = [];
    #owner = null;
    constructor(init = "") {
      if (typeof init === "object" && init !== null) {
        if (typeof init[Symbol.iterator] === "function") {
          for (const pair of init) {
            const entry = [...pair];
            if (entry.length !== 2) throw new TypeError("URLSearchParams: each pair must have exactly two items (name, value)");
            this.#list.push([String(entry[0]).toWellFormed(), String(entry[1]).toWellFormed()]);
          }
        } else {
          for (const key of Object.keys(init)) this.#list.push([key.toWellFormed(), String(init[key]).toWellFormed()]);
        }
      } else {
        this.#parse(String(init));
      }
    }
    #parse(query) {
      const [names, values] = native.queryParse(query.toWellFormed());
      this.#list = names.map((name, i) => [name, values[i]]);
    }
    [urlUpdate](owner, query) {
      this.#owner = owner;
      this.#parse(query);
    }
    #changed() {
      if (this.#owner) this.#owner[urlUpdate](this.toString());
    }
    get size() {
      return this.#list.length;
    }
    append(name, value) {
      this.#list.push([String(name).toWellFormed(), String(value).toWellFormed()]);
      this.#changed();
    }
    delete(name, value) {
      name = String(name);
      this.#list = this.#list.filter(([n, v]) => n !== name || (value !== undefined && v !== String(value)));
      this.#changed();
    }
    get(name) {
      const found = this.#list.find(([n]) => n === String(name));
      return found ? found[1] : null;
    }
    getAll(name) {
      return this.#list.filter(([n]) => n === String(name)).map(([, v]) => v);
    }
    has(name, value) {
      return this.#list.some(([n, v]) => n === String(name) && (value === undefined || v === String(value)));
    }
    set(name, value) {
      name = String(name).toWellFormed();
      value = String(value).toWellFormed();
      const first = this.#list.findIndex(([n]) => n === name);
      if (first === -1) this.#list.push([name, value]);
      else {
        this.#list[first][1] = value;
        this.#list = this.#list.filter(([n], i) => n !== name || i === first);
      }
      this.#changed();
    }
    sort() {
      this.#list = this.#list
        .map((entry, i) => [entry, i])
        .sort(([a, i], [b, j]) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : i - j))
        .map(([entry]) => entry);
      this.#changed();
    }
    forEach(callback, thisArg) {
      for (const [name, value] of this.#list) callback.call(thisArg, value, name, this);
    }
    *entries() {
      for (const [name, value] of this.#list) yield [name, value];
    }
    *keys() {
      for (const [name] of this.#list) yield name;
    }
    *values() {
      for (const [, value] of this.#list) yield value;
    }
    [Symbol.iterator]() {
      return this.entries();
    }
    toString() {
      return native.querySerialize(this.#list.map(([n]) => n), this.#list.map(([, v]) => v));
    }
  }

  class URL {
    #parts;
    #searchParams = new URLSearchParams();
    constructor(url, base) {
      if (arguments.length === 0) throw new TypeError("URL: 1 argument required, but only 0 present");
      const input = String(url).toWellFormed();
      this.#load(native.urlParse(input, base === undefined ? undefined : String(base).toWellFormed()));
    }
    #load(parts) {
      this.#parts = parts;
      this.#searchParams[urlUpdate](this, parts[9]);
    }
    #set(part, value) {
      this.#load(native.urlParse(native.urlSet(this.#parts[0], part, String(value).toWellFormed()), undefined));
    }
    // URLSearchParams changed: the query follows, the params object stays the same.
    [urlUpdate](query) {
      this.#parts = native.urlParse(native.urlSet(this.#parts[0], "search", query), undefined);
    }
    static canParse(url, base) {
      try {
        native.urlParse(String(url), base === undefined ? undefined : String(base));
        return true;
      } catch (_) {
        return false;
      }
    }
    static parse(url, base) {
      try {
        return new URL(url, base);
      } catch (_) {
        return null;
      }
    }
    get href() { return this.#parts[0]; }
    set href(value) { this.#load(native.urlParse(String(value).toWellFormed(), undefined)); }
    get origin() { return this.#parts[1]; }
    get protocol() { return this.#parts[2]; }
    set protocol(value) { this.#set("protocol", value); }
    get username() { return this.#parts[3]; }
    set username(value) { this.#set("username", value); }
    get password() { return this.#parts[4]; }
    set password(value) { this.#set("password", value); }
    get host() { return this.#parts[5]; }
    set host(value) { this.#set("host", value); }
    get hostname() { return this.#parts[6]; }
    set hostname(value) { this.#set("hostname", value); }
    get port() { return this.#parts[7]; }
    set port(value) { this.#set("port", value); }
    get pathname() { return this.#parts[8]; }
    set pathname(value) { this.#set("pathname", value); }
    get search() { return this.#parts[9]; }
    set search(value) { this.#set("search", value); }
    get hash() { return this.#parts[10]; }
    set hash(value) { this.#set("hash", value); }
    get searchParams() { return this.#searchParams; }
    toString() { return this.#parts[0]; }
    toJSON() { return this.#parts[0]; }
  }
  defineGlobal("URL", URL);
  defineGlobal("URLSearchParams", URLSearchParams);

  // ---- structuredClone ----------------------------------------------------------------------

  const TYPED_ARRAYS = [
    Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
    Float32Array, Float64Array, BigInt64Array, BigUint64Array,
  ];
  const ERRORS = { Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError };

  function structuredClone(value, options = {}) {
    if (arguments.length === 0) throw new TypeError("structuredClone: 1 argument required, but only 0 present");
    if (options && options.transfer && options.transfer.length) {
      throw new globalThis.DOMException("structuredClone: transfer is not supported", "DataCloneError");
    }
    const seen = new Map();
    const uncloneable = (what) => new globalThis.DOMException(`${what} could not be cloned.`, "DataCloneError");
    function clone(input) {
      if (typeof input === "symbol") throw uncloneable(String(input));
      if (typeof input === "function") throw uncloneable(`${input.name ? `function ${input.name}` : "A function"}`);
      if (input === null || typeof input !== "object") return input;
      if (seen.has(input)) return seen.get(input);
      const remember = (copy) => (seen.set(input, copy), copy);
      if (input instanceof Date) return remember(new Date(input.getTime()));
      if (input instanceof RegExp) return remember(new RegExp(input.source, input.flags));
      if (input instanceof Boolean || input instanceof Number || input instanceof String) return remember(Object(input.valueOf()));
      if (input instanceof ArrayBuffer) return remember(input.slice(0));
      if (input instanceof DataView) {
        return remember(new DataView(clone(input.buffer), input.byteOffset, input.byteLength));
      }
      const typed = TYPED_ARRAYS.find((Type) => input instanceof Type);
      if (typed) {
        return remember(new typed(clone(input.buffer), input.byteOffset, input.length));
      }
      if (input instanceof Map) {
        const copy = remember(new Map());
        for (const [k, v] of input) copy.set(clone(k), clone(v));
        return copy;
      }
      if (input instanceof Set) {
        const copy = remember(new Set());
        for (const v of input) copy.add(clone(v));
        return copy;
      }
      if (input instanceof Error) {
        const Type = ERRORS[input.name] ?? Error;
        const copy = remember(new Type(input.message));
        if (typeof input.stack === "string") copy.stack = input.stack;
        if ("cause" in input) copy.cause = clone(input.cause);
        return copy;
      }
      if (input instanceof Promise || input instanceof WeakMap || input instanceof WeakSet) {
        throw uncloneable(`#<${input.constructor.name}>`);
      }
      if (Array.isArray(input)) {
        const copy = remember(new Array(input.length));
        for (const key of Object.keys(input)) copy[key] = clone(input[key]);
        return copy;
      }
      const copy = remember({});
      for (const key of Object.keys(input)) copy[key] = clone(input[key]);
      return copy;
    }
    return clone(value);
  }
  defineGlobal("structuredClone", structuredClone);

  // ---- crypto -------------------------------------------------------------------------------

  const INTEGER_ARRAYS = [Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array, BigInt64Array, BigUint64Array];
  function getRandomValues(array) {
    if (!INTEGER_ARRAYS.some((Type) => array instanceof Type)) {
      throw new globalThis.DOMException("getRandomValues: the argument must be an integer TypedArray", "TypeMismatchError");
    }
    if (array.byteLength > native.maxRandomValues) {
      throw new globalThis.DOMException(
        `getRandomValues: ${array.byteLength} bytes were asked for; the limit is ${native.maxRandomValues}`,
        "QuotaExceededError",
      );
    }
    toBytes(array).set(new Uint8Array(native.randomBytes(array.byteLength)));
    return array;
  }
  const subtle = {
    async digest(algorithm, data) {
      const name = typeof algorithm === "string" ? algorithm : algorithm && algorithm.name;
      if (typeof name !== "string") throw new TypeError("subtle.digest: algorithm must be a name like \"SHA-256\"");
      try {
        return native.digest(name, toBytes(data, "subtle.digest: data"));
      } catch (error) {
        throw new globalThis.DOMException(error.message, "NotSupportedError");
      }
    },
  };
  const webCrypto = { getRandomValues, randomUUID: () => native.randomUUID(), subtle };
  defineGlobal("crypto", webCrypto);

  // ---- Headers, Request, Response, fetch -------------------------------------------------

  const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
  const headerName = (name) => {
    name = String(name);
    if (!TOKEN.test(name)) throw new TypeError(`Headers: invalid header name ${JSON.stringify(name)}`);
    return name.toLowerCase();
  };
  const headerValue = (value) => {
    value = String(value).replace(/^[\t\n\r ]+|[\t\n\r ]+$/g, "");
    if (/[\0\r\n]/.test(value)) throw new TypeError(`Headers: invalid header value ${JSON.stringify(value)}`);
    return value;
  };

  class Headers {
    #list = [];
    constructor(init) {
      if (init === undefined || init === null) return;
      if (init instanceof Headers) {
        for (const [name, value] of init.#list) this.#list.push([name, value]);
      } else if (typeof init[Symbol.iterator] === "function") {
        for (const pair of init) {
          const entry = [...pair];
          if (entry.length !== 2) throw new TypeError("Headers: each header must be a [name, value] pair");
          this.append(entry[0], entry[1]);
        }
      } else if (typeof init === "object") {
        for (const key of Object.keys(init)) this.append(key, init[key]);
      } else {
        throw new TypeError("Headers: init must be an object, an array of pairs or a Headers");
      }
    }
    append(name, value) {
      this.#list.push([headerName(name), headerValue(value)]);
    }
    delete(name) {
      const key = headerName(name);
      this.#list = this.#list.filter(([n]) => n !== key);
    }
    get(name) {
      const key = headerName(name);
      const values = this.#list.filter(([n]) => n === key).map(([, v]) => v);
      return values.length ? values.join(", ") : null;
    }
    getSetCookie() {
      return this.#list.filter(([n]) => n === "set-cookie").map(([, v]) => v);
    }
    has(name) {
      const key = headerName(name);
      return this.#list.some(([n]) => n === key);
    }
    set(name, value) {
      const key = headerName(name);
      const index = this.#list.findIndex(([n]) => n === key);
      const entry = [key, headerValue(value)];
      if (index === -1) this.#list.push(entry);
      else this.#list = this.#list.filter(([n], i) => n !== key || i === index).map((e) => (e[0] === key ? entry : e));
    }
    *entries() {
      const names = [...new Set(this.#list.map(([n]) => n))].sort();
      for (const name of names) {
        if (name === "set-cookie") for (const value of this.getSetCookie()) yield [name, value];
        else yield [name, this.get(name)];
      }
    }
    *keys() {
      for (const [name] of this.entries()) yield name;
    }
    *values() {
      for (const [, value] of this.entries()) yield value;
    }
    forEach(callback, thisArg) {
      for (const [name, value] of this.entries()) callback.call(thisArg, value, name, this);
    }
    [Symbol.iterator]() {
      return this.entries();
    }
  }

  // A body as bytes and the content type it implies.
  function extractBody(body) {
    if (body === undefined || body === null) return [null, null];
    if (typeof body === "string") return [utf8(body), "text/plain;charset=UTF-8"];
    if (body instanceof URLSearchParams) return [utf8(body.toString()), "application/x-www-form-urlencoded;charset=UTF-8"];
    if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return [toBytes(body).slice(), null];
    // Blob and FormData (files.js, loaded once either exists).
    const extra = native.extraBody ? native.extraBody(body) : null;
    if (extra) return extra;
    return [utf8(String(body)), "text/plain;charset=UTF-8"];
  }

  const bodyKey = Symbol("body bytes");

  // What Request and Response share: the body read once, as text, JSON or bytes.
  class Body {
    #used = false;
    get bodyUsed() {
      return this.#used;
    }
    #take() {
      if (this.#used) throw new TypeError("Body is unusable: the body has already been read");
      this.#used = true;
      return this[bodyKey] ?? new Uint8Array(0);
    }
    async arrayBuffer() {
      const bytes = this.#take();
      return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    }
    async bytes() {
      return this.#take().slice();
    }
    async text() {
      return native.utf8Decode(this.#take(), false, false);
    }
    async json() {
      return JSON.parse(await this.text());
    }
    async blob() {
      const bytes = this.#take();
      native.loadOnce("files");
      return native.makeBlob(bytes, this.headers.get("content-type") ?? "");
    }
    async formData() {
      const bytes = this.#take();
      native.loadOnce("files");
      return native.parseFormData(bytes, this.headers.get("content-type"));
    }
  }

  const METHODS = ["DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT"];

  class Request extends Body {
    #url;
    #method;
    #headers;
    #signal;
    #redirect;
    constructor(input, init = {}) {
      super();
      const from = input instanceof Request ? input : null;
      this.#url = from ? from.url : new URL(String(input)).href;
      const method = String(init.method ?? (from ? from.method : "GET"));
      this.#method = METHODS.includes(method.toUpperCase()) ? method.toUpperCase() : method;
      this.#headers = new Headers(init.headers ?? (from ? from.headers : undefined));
      this.#signal = init.signal ?? (from ? from.signal : null) ?? new AbortController().signal;
      this.#redirect = String(init.redirect ?? (from ? from.redirect : "follow"));
      if (!["follow", "manual", "error"].includes(this.#redirect)) {
        throw new TypeError(`Request: redirect must be "follow", "manual" or "error", got ${JSON.stringify(this.#redirect)}`);
      }
      let bytes = from ? from[bodyKey] : null;
      if (init.body !== undefined && init.body !== null) {
        const [body, type] = extractBody(init.body);
        bytes = body;
        if (type && !this.#headers.has("content-type")) this.#headers.set("content-type", type);
      }
      if (bytes !== null && (this.#method === "GET" || this.#method === "HEAD")) {
        throw new TypeError("Request with GET/HEAD method cannot have body.");
      }
      this[bodyKey] = bytes;
    }
    get url() { return this.#url; }
    get method() { return this.#method; }
    get headers() { return this.#headers; }
    get signal() { return this.#signal; }
    get redirect() { return this.#redirect; }
    clone() {
      if (this.bodyUsed) throw new TypeError("Request.clone: the body has already been read");
      return new Request(this);
    }
  }

  class Response extends Body {
    #status;
    #statusText;
    #headers;
    #url;
    #redirected;
    constructor(body = null, init = {}) {
      super();
      this.#status = init.status === undefined ? 200 : Number(init.status);
      if (!Number.isInteger(this.#status) || this.#status < 200 || this.#status > 599) {
        throw new RangeError(`Response: status must be an integer from 200 to 599, got ${init.status}`);
      }
      this.#statusText = String(init.statusText ?? "");
      this.#headers = new Headers(init.headers);
      const [bytes, type] = extractBody(body);
      if (type && !this.#headers.has("content-type")) this.#headers.set("content-type", type);
      this[bodyKey] = bytes;
      this.#url = "";
      this.#redirected = false;
    }
    static fromNetwork(head, bytes) {
      // Statuses outside 200-599 (a 1xx, a manual 3xx) come from the network only.
      const response = new Response(null, { status: 200, headers: head.headers });
      response.#status = head.status;
      response.#statusText = head.statusText;
      response.#url = head.url;
      response.#redirected = head.redirected;
      response[bodyKey] = bytes;
      return response;
    }
    static json(data, init = {}) {
      const headers = new Headers(init.headers);
      if (!headers.has("content-type")) headers.set("content-type", "application/json");
      return new Response(JSON.stringify(data), { ...init, headers });
    }
    static error() {
      const response = new Response(null, { status: 200 });
      response.#status = 0;
      return response;
    }
    static redirect(url, status = 302) {
      return new Response(null, { status, headers: { location: new URL(String(url)).href } });
    }
    get status() { return this.#status; }
    get ok() { return this.#status >= 200 && this.#status <= 299; }
    get statusText() { return this.#statusText; }
    get headers() { return this.#headers; }
    get url() { return this.#url; }
    get redirected() { return this.#redirected; }
    get type() { return this.#status === 0 ? "error" : "basic"; }
    clone() {
      if (this.bodyUsed) throw new TypeError("Response.clone: the body has already been read");
      return fromNetwork(
        { status: this.#status, statusText: this.#statusText, headers: this.#headers, url: this.#url, redirected: this.#redirected },
        this[bodyKey],
      );
    }
  }
  const fromNetwork = Response.fromNetwork;
  delete Response.fromNetwork;

  async function fetch(input, init = {}) {
    const request = new Request(input, init);
    const signal = request.signal;
    signal.throwIfAborted();
    const protocol = new URL(request.url).protocol;
    if (protocol !== "http:" && protocol !== "https:") {
      throw new TypeError(`fetch failed: the ${protocol} scheme is not supported (only http: and https:)`);
    }
    const names = [];
    const values = [];
    for (const [name, value] of request.headers) {
      names.push(name);
      values.push(value);
    }
    const timeoutMs = signal[remainingKey]();
    const [answer, id] = native.fetch({
      method: request.method,
      url: request.url,
      headerNames: names,
      headerValues: values,
      body: request[bodyKey] ?? undefined,
      redirect: request.redirect,
      timeoutMs,
    });
    const onAbort = () => native.fetchSettled(id, true);
    if (timeoutMs === undefined) signal.addEventListener("abort", onAbort, { once: true });
    let ok;
    let text;
    try {
      [ok, text] = await answer;
    } finally {
      signal.removeEventListener("abort", onAbort);
      native.fetchSettled(id, false);
    }
    signal.throwIfAborted();
    if (!ok && timeoutMs !== undefined && /timed? ?out/i.test(text)) throw timeoutError();
    if (!ok) throw new TypeError(text);
    const head = JSON.parse(text);
    return fromNetwork(head, new Uint8Array(native.bytesEncode(head.body, "base64")));
  }

  defineGlobal("Headers", Headers);
  defineGlobal("Request", Request);
  defineGlobal("Response", Response);
  defineGlobal("fetch", fetch);
});
