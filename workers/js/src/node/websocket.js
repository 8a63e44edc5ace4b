// WebSocket (a client, as browsers and Node define it), MessageEvent and CloseEvent. Loaded
// after web.js, the first time a cell touches one of them (lazy.js); called with the native
// functions (node/mod.rs, node/websocket.rs). The connection runs on its own thread; an open
// socket keeps its cell running (as it keeps Node running) until it closes.
(function (native) {
  "use strict";
  const hidden = (target, name, value) =>
    Object.defineProperty(target, name, { value, writable: true, configurable: true, enumerable: false });
  const defineGlobal = (name, value) => hidden(globalThis, name, value);
  const DOMException = globalThis.DOMException;
  const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

  class MessageEvent extends Event {
    #data;
    #origin;
    constructor(type, init = {}) {
      super(type, init);
      this.#data = init.data ?? null;
      this.#origin = String(init.origin ?? "");
    }
    get data() { return this.#data; }
    get origin() { return this.#origin; }
    get lastEventId() { return ""; }
    get source() { return null; }
    get ports() { return []; }
  }

  class CloseEvent extends Event {
    #code;
    #reason;
    #wasClean;
    constructor(type, init = {}) {
      super(type, init);
      this.#code = Number(init.code ?? 0);
      this.#reason = String(init.reason ?? "");
      this.#wasClean = Boolean(init.wasClean);
    }
    get code() { return this.#code; }
    get reason() { return this.#reason; }
    get wasClean() { return this.#wasClean; }
  }

  const STATES = { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 };

  class WebSocket extends EventTarget {
    #id;
    #url;
    #state = STATES.CONNECTING;
    #protocol = "";
    #binaryType = "blob";
    constructor(url, protocols = []) {
      super();
      if (arguments.length === 0) throw new TypeError("WebSocket: 1 argument required, but only 0 present");
      let parsed;
      try {
        parsed = new URL(String(url));
      } catch (error) {
        throw new DOMException(`WebSocket: invalid URL ${JSON.stringify(String(url))}`, "SyntaxError");
      }
      if (parsed.protocol === "http:") parsed.protocol = "ws:";
      else if (parsed.protocol === "https:") parsed.protocol = "wss:";
      if (parsed.protocol !== "ws:" && parsed.protocol !== "wss:") {
        throw new DOMException(`WebSocket: the URL's scheme must be ws: or wss:, got ${parsed.protocol}`, "SyntaxError");
      }
      if (parsed.hash !== "" || String(url).includes("#")) {
        throw new DOMException("WebSocket: the URL must not have a fragment", "SyntaxError");
      }
      const list = typeof protocols === "string" ? [protocols] : [...(protocols ?? [])].map(String);
      for (const [i, protocol] of list.entries()) {
        if (!TOKEN.test(protocol) || list.indexOf(protocol) !== i) {
          throw new DOMException(`WebSocket: invalid or repeated subprotocol ${JSON.stringify(protocol)}`, "SyntaxError");
        }
      }
      this.#url = parsed.href;
      this.onopen = null;
      this.onmessage = null;
      this.onerror = null;
      this.onclose = null;
      this.#id = native.wsOpen(this.#url, list);
      this.#pump();
    }
    async #pump() {
      for (;;) {
        const [ok, text] = await native.wsNext(this.#id);
        const event = ok ? JSON.parse(text) : { type: "close", code: 1006, reason: "", wasClean: false };
        if (event.type === "open") {
          if (this.#state !== STATES.CONNECTING) continue;
          this.#state = STATES.OPEN;
          this.#protocol = event.protocol;
          this.dispatchEvent(new Event("open"));
        } else if (event.type === "message") {
          if (this.#state !== STATES.OPEN) continue;
          this.dispatchEvent(new MessageEvent("message", { data: this.#data(event), origin: new URL(this.#url).origin }));
        } else if (event.type === "error") {
          const error = new Event("error");
          error.message = `WebSocket connection to '${this.#url}' failed: ${event.message}`;
          error.error = new TypeError(error.message);
          this.dispatchEvent(error);
        } else if (event.type === "close") {
          this.#state = STATES.CLOSED;
          native.wsForget(this.#id);
          this.dispatchEvent(new CloseEvent("close", event));
          return;
        }
      }
    }
    #data(event) {
      if (event.text !== undefined) return event.text;
      const bytes = new Uint8Array(native.bytesEncode(event.binary, "base64"));
      if (this.#binaryType === "arraybuffer") return bytes.buffer;
      native.loadOnce("files");
      return native.makeBlob(bytes, "");
    }
    get url() { return this.#url; }
    get readyState() { return this.#state; }
    get protocol() { return this.#protocol; }
    get extensions() { return ""; }
    get bufferedAmount() { return 0; }
    get binaryType() { return this.#binaryType; }
    set binaryType(type) {
      if (type === "blob" || type === "arraybuffer") this.#binaryType = type;
    }
    send(data) {
      if (this.#state === STATES.CONNECTING) throw new DOMException("WebSocket.send: still connecting", "InvalidStateError");
      if (this.#state !== STATES.OPEN) return;
      if (typeof data === "string") native.wsSend(this.#id, data);
      else if (data instanceof ArrayBuffer || ArrayBuffer.isView(data)) native.wsSend(this.#id, native.toBytes(data).slice());
      else {
        const blob = native.extraBody ? native.extraBody(data) : null;
        if (blob !== null && typeof globalThis.Blob === "function" && data instanceof globalThis.Blob) native.wsSend(this.#id, blob[0]);
        else native.wsSend(this.#id, String(data));
      }
    }
    close(code = undefined, reason = undefined) {
      if (code !== undefined && (!Number.isInteger(Number(code)) || (Number(code) !== 1000 && (Number(code) < 3000 || Number(code) > 4999)))) {
        throw new DOMException(`WebSocket.close: the code must be 1000 or from 3000 to 4999, got ${code}`, "InvalidAccessError");
      }
      const text = reason === undefined ? "" : String(reason).toWellFormed();
      if (native.utf8(text).length > 123) throw new DOMException("WebSocket.close: the reason is longer than 123 bytes", "SyntaxError");
      if (this.#state === STATES.CLOSING || this.#state === STATES.CLOSED) return;
      this.#state = STATES.CLOSING;
      native.wsClose(this.#id, code === undefined ? (reason === undefined ? undefined : 1000) : Number(code), text);
    }
    get [Symbol.toStringTag]() {
      return "WebSocket";
    }
  }
  for (const [name, value] of Object.entries(STATES)) {
    Object.defineProperty(WebSocket, name, { value, enumerable: true });
    Object.defineProperty(WebSocket.prototype, name, { value, enumerable: true });
  }

  defineGlobal("MessageEvent", MessageEvent);
  defineGlobal("CloseEvent", CloseEvent);
  defineGlobal("WebSocket", WebSocket);
});
