// Placeholders for the globals of web.js and node.js: the first time a cell touches one of
// them (reads, writes or `typeof`s it), its script is evaluated and the real globals replace
// the placeholders. Parsing those ~80 KB at every worker start would cost more than the rest
// of the start; this way only cells that use them pay, once per worker. node.js, files.js and
// websocket.js need web.js, so they load it first. `self` costs nothing and is defined at once.
(function (native) {
  "use strict";
  const SCRIPTS = {
    web: [
      "DOMException", "Event", "EventTarget", "AbortController", "AbortSignal", "TextEncoder", "TextDecoder",
      "atob", "btoa", "URL", "URLSearchParams", "structuredClone", "crypto", "Headers", "Request", "Response", "fetch",
    ],
    files: ["Blob", "File", "FormData", "Navigator", "navigator"],
    websocket: ["WebSocket", "MessageEvent", "CloseEvent"],
    node: ["Buffer", "global", "process", "require", "fs", native.builtinsGlobal],
  };
  const loaded = { web: false, files: false, websocket: false, node: false };
  function load(script) {
    if (script !== "web") load("web");
    if (loaded[script]) return;
    loaded[script] = true;
    for (const name of SCRIPTS[script]) delete globalThis[name];
    native.loadScript(script, native);
  }
  // web.js's Body.blob() and formData() need files.js.
  Object.defineProperty(native, "loadOnce", { value: load });
  Object.defineProperty(globalThis, "self", { value: globalThis, writable: true, configurable: true, enumerable: false });
  for (const [script, names] of Object.entries(SCRIPTS)) {
    for (const name of names) {
      Object.defineProperty(globalThis, name, {
        configurable: true,
        enumerable: false,
        get() {
          load(script);
          return globalThis[name];
        },
        set(value) {
          load(script);
          globalThis[name] = value;
        },
      });
    }
  }
});
