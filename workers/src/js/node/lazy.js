// Placeholders for the globals of web.js and node.js: the first time a cell touches one of
// them (reads, writes or `typeof`s it), its script is evaluated and the real globals replace
// the placeholders. Parsing those ~70 KB at every worker start would cost more than the rest
// of the start; this way only cells that use them pay, once per worker. node.js needs web.js,
// so it loads that first.
(function (native) {
  "use strict";
  const SCRIPTS = {
    web: [
      "DOMException", "Event", "EventTarget", "AbortController", "AbortSignal", "TextEncoder", "TextDecoder",
      "atob", "btoa", "URL", "URLSearchParams", "structuredClone", "crypto", "Headers", "Request", "Response", "fetch",
    ],
    node: ["Buffer", "global", "process", "require", native.builtinsGlobal],
  };
  const loaded = { web: false, node: false };
  function load(script) {
    if (script === "node") load("web");
    if (loaded[script]) return;
    loaded[script] = true;
    for (const name of SCRIPTS[script]) delete globalThis[name];
    native.loadScript(script, native);
  }
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
