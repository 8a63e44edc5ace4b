// Installed once per worker. Called with the worker's native hooks (see `install_prelude` in
// prelude.rs) and returns the hooks the worker drives cells with:
//   { format(value), show(value), beginCell(toolsJson), takeReturn() }
// Every global defined here is a non-enumerable, writable property of globalThis, so cells
// may shadow any of them.
(function (native) {
  "use strict";
  const hidden = (target, name, value) =>
    Object.defineProperty(target, name, { value, writable: true, configurable: true, enumerable: false });

  function format(value) {
    if (typeof value === "string") return value;
    if (value !== null && typeof value === "object") {
      if (value instanceof Error) {
        const head = `${value.name}: ${value.message}`;
        return typeof value.stack === "string" && value.stack ? `${head}\n${value.stack.trimEnd()}` : head;
      }
      try {
        const json = JSON.stringify(value);
        if (json !== undefined) return json;
      } catch (_) {
        // Cycles and BigInts: fall through to String().
      }
      try {
        return String(value);
      } catch (_) {
        return Object.prototype.toString.call(value);
      }
    }
    return String(value);
  }

  // After exit(), code that still runs (rare: exit's throw is uncatchable, but an executor may
  // turn it into a rejection) has no effects until the worker stops it: output is dropped by
  // the worker, and these refuse.
  for (const name of ["writeFile", "envSet", "storeWrite", "setTimer", "callTool"]) {
    const effect = native[name];
    native[name] = (...args) => {
      if (native.stopping()) throw new Error("exit() was called: the cell is ending");
      return effect(...args);
    };
  }

  // Lone surrogates cannot be UTF-8: they become U+FFFD, as invalid UTF-8 does elsewhere.
  const write = (stream, text) => void native.write(stream, String(text).toWellFormed());
  const sendDisplay = (bundleJson, quiet = false) => void native.display(bundleJson, quiet);

  const line = (values) => values.map(format).join(" ") + "\n";
  const toStdout = (...values) => write(0, line(values));
  const toStderr = (...values) => write(1, line(values));

  hidden(globalThis, "console", {
    log: toStdout,
    info: toStdout,
    debug: toStdout,
    error: toStderr,
    warn: toStderr,
  });
  hidden(globalThis, "print", toStdout);

  // ---- rich display -------------------------------------------------------------------

  const isImage = (value) =>
    value !== null &&
    typeof value === "object" &&
    value.type === "image" &&
    typeof value.data === "string" &&
    typeof value.mimeType === "string";

  const stripDataUrl = (data) => {
    const match = /^data:[^,]*;base64,/.exec(data);
    return match ? data.slice(match[0].length) : data;
  };

  const imageBundle = (mimeType, data) => JSON.stringify({ [mimeType]: stripDataUrl(data), "text/plain": `<image ${mimeType}>` });

  // The bundle of an object or array, or null when it has no rich form.
  function richBundle(value) {
    if (value === null || typeof value !== "object" || value instanceof Error) return null;
    if (isImage(value)) return imageBundle(value.mimeType, value.data);
    try {
      const json = JSON.stringify({ "application/json": value, "text/plain": format(value) });
      if (json !== undefined) return json;
    } catch (_) {
      // Not JSON-able (cycles, BigInts): no rich form.
    }
    return null;
  }

  const bundle = (value) => richBundle(value) ?? JSON.stringify({ "text/plain": format(value) });
  hidden(globalThis, "display", (value) => void sendDisplay(bundle(value)));

  // The trailing value of a cell: its text on stdout, and its rich form as a display. First,
  // once a host asked for them (Jupyter's gateway sets VALUES_WANTED on the global object),
  // its whole bundle under VALUE, which the host keeps for `execute_result` alone.
  const VALUE = "application/x-cellvisor-value";
  const VALUES_WANTED = "__cellvisorSendValues";
  function show(value) {
    if (value === undefined) return;
    const text = format(value);
    const rich = richBundle(value);
    if (globalThis[VALUES_WANTED] === true) {
      sendDisplay(`{"${VALUE}":${rich ?? JSON.stringify({ "text/plain": text })}}`, true);
    }
    write(0, text + "\n");
    if (rich !== null) sendDisplay(rich, true);
  }

  // ---- argument checks ----------------------------------------------------------------

  const STATUS = "application/x-cellvisor-status";
  const status = (op, details) => sendDisplay(JSON.stringify({ [STATUS]: { op, ...details } }));

  const describe = (value) => (value === null ? "null" : Array.isArray(value) ? "an array" : typeof value);

  function needString(helper, name, value) {
    if (typeof value !== "string") throw new TypeError(`${helper}: ${name} must be a string, got ${describe(value)}`);
    return value;
  }

  function optionalInteger(helper, name, value, min, fallback) {
    if (value === undefined || value === null) return fallback;
    if (!Number.isInteger(value) || value < min) {
      throw new TypeError(`${helper}: ${name} must be an integer >= ${min}, got ${format(value)}`);
    }
    return value;
  }

  function optionalBoolean(helper, name, value) {
    if (value === undefined || value === null) return false;
    if (typeof value !== "boolean") throw new TypeError(`${helper}: ${name} must be true or false, got ${format(value)}`);
    return value;
  }

  const isPlainObject = (value) =>
    value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype;

  // Optional arguments may also come as one options object: read(path, {offset: 2, limit: 5}).
  // Names are accepted in snake_case and camelCase.
  function options(args, names) {
    if (args.length === 1 && isPlainObject(args[0])) {
      const given = args[0];
      return names.map((name) => {
        const camel = name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
        return given[name] !== undefined ? given[name] : given[camel];
      });
    }
    return names.map((_, i) => args[i]);
  }

  // ---- preludes (async, like the rest of JS I/O) --------------------------------------

  async function read(path, ...rest) {
    needString("read", "path", path);
    const [offsetArg, limitArg, numberedArg] = options(rest, ["offset", "limit", "numbered"]);
    const offset = optionalInteger("read", "offset", offsetArg, 1, 1);
    const limit = optionalInteger("read", "limit", limitArg, 0, -1);
    const numbered = optionalBoolean("read", "numbered", numberedArg);
    const [text, lines] = native.read(path, offset, limit, numbered);
    status("read", { path, lines, offset });
    return text;
  }

  function writer(op) {
    return async function (path, content) {
      needString(op, "path", path);
      needString(op, "content", content);
      const bytes = native.writeFile(path, content, op === "append");
      status(op, { path, bytes });
    };
  }

  async function sort(text, ...rest) {
    needString("sort", "text", text);
    const [reverseArg, uniqueArg] = options(rest, ["reverse", "unique"]);
    const reverse = optionalBoolean("sort", "reverse", reverseArg);
    const unique = optionalBoolean("sort", "unique", uniqueArg);
    const [sorted, lines] = native.sort(text, reverse, unique);
    status("sort", { lines });
    return sorted;
  }

  const splitLines = (text) => {
    if (text === "") return [[], false];
    const trailing = text.endsWith("\n");
    return [(trailing ? text.slice(0, -1) : text).split("\n"), trailing];
  };

  async function uniq(text, ...rest) {
    needString("uniq", "text", text);
    const [countArg] = options(rest, ["count"]);
    const count = optionalBoolean("uniq", "count", countArg);
    const [lines, trailing] = splitLines(text);
    const runs = [];
    for (const item of lines) {
      const last = runs[runs.length - 1];
      if (last !== undefined && last[0] === item) last[1] += 1;
      else runs.push([item, 1]);
    }
    const out = runs.map(([item, n]) => (count ? `${String(n).padStart(7)} ${item}` : item));
    status("uniq", { lines: out.length });
    return out.join("\n") + (trailing && out.length ? "\n" : "");
  }

  async function counter(items, ...rest) {
    let list;
    if (typeof items === "string") list = splitLines(items)[0];
    else if (Array.isArray(items)) list = items;
    else if (items !== null && typeof items === "object" && typeof items[Symbol.iterator] === "function") list = [...items];
    else throw new TypeError(`counter: items must be an array or a string, got ${describe(items)}`);
    for (const item of list) {
      if (typeof item !== "string" && typeof item !== "number") {
        throw new TypeError(`counter: items must be strings or numbers, got ${describe(item)}`);
      }
    }
    const [limitArg, reverseArg] = options(rest, ["limit", "reverse"]);
    const limit = optionalInteger("counter", "limit", limitArg, 0, undefined);
    const reverse = optionalBoolean("counter", "reverse", reverseArg);
    const counts = new Map();
    for (const item of list) counts.set(item, (counts.get(item) ?? 0) + 1);
    // Map keeps first-appearance order and sort is stable: ties stay in that order.
    const pairs = [...counts.entries()].sort((a, b) => (reverse ? a[1] - b[1] : b[1] - a[1]));
    status("counter", { items: counts.size });
    return limit === undefined ? pairs : pairs.slice(0, limit);
  }

  async function diff(a, b) {
    needString("diff", "a", a);
    needString("diff", "b", b);
    const [text, added, removed] = native.diff(a, b);
    status("diff", { added, removed });
    return text;
  }

  async function tree(...args) {
    const [pathArg, depthArg, hiddenArg] =
      args.length === 2 && isPlainObject(args[1])
        ? [args[0], ...options([args[1]], ["max_depth", "show_hidden"])]
        : options(args, ["path", "max_depth", "show_hidden"]);
    const path = pathArg === undefined || pathArg === null ? "." : needString("tree", "path", pathArg);
    const maxDepth = optionalInteger("tree", "max_depth", depthArg, 1, 3);
    const showHidden = optionalBoolean("tree", "show_hidden", hiddenArg);
    const [text, entries] = native.tree(path, maxDepth, showHidden);
    status("tree", { path, entries });
    return text;
  }

  async function env(...args) {
    if (args.length === 0 || (args.length === 1 && args[0] === undefined)) {
      const all = native.envAll();
      status("env", {});
      return all;
    }
    const key = needString("env", "key", args[0]);
    if (key === "" || key.includes("=") || key.includes("\0")) throw new TypeError(`env: invalid variable name ${JSON.stringify(key)}`);
    if (args.length === 1) {
      const value = native.envGet(key);
      status("env", { key });
      return value;
    }
    const value = typeof args[1] === "number" ? String(args[1]) : args[1];
    if (value !== null && typeof value !== "string") {
      throw new TypeError(`env: value must be a string (or null to unset), got ${describe(value)}`);
    }
    if (typeof value === "string" && value.includes("\0")) throw new TypeError("env: value must not contain NUL");
    native.envSet(key, value);
    status("env", { key });
  }

  async function output(...ids) {
    const flat = ids.flat().map((id) => (typeof id === "number" ? String(id) : id));
    flat.forEach((id) => needString("output", "id", id));
    const [text, bytes] = native.output(flat);
    status("output", { ids: flat, bytes });
    return text;
  }

  hidden(globalThis, "read", read);
  hidden(globalThis, "write", writer("write"));
  hidden(globalThis, "append", writer("append"));
  hidden(globalThis, "sort", sort);
  hidden(globalThis, "uniq", uniq);
  hidden(globalThis, "counter", counter);
  hidden(globalThis, "diff", diff);
  hidden(globalThis, "tree", tree);
  hidden(globalThis, "env", env);
  hidden(globalThis, "output", output);

  // ---- code mode ----------------------------------------------------------------------

  // Strings as they are, anything else as JSON (text() and notify() agree).
  function asText(value) {
    if (typeof value === "string") return value;
    let out;
    try {
      out = JSON.stringify(value);
    } catch (_) {
      out = undefined;
    }
    return out === undefined ? format(value) : out;
  }

  // text(value): adds to the output; a newline is added when missing.
  hidden(globalThis, "text", (value) => {
    const out = asText(value);
    write(0, out.endsWith("\n") ? out : out + "\n");
  });

  // The MIME type and base64 data of a `data:<kind>/...;base64,` URL, or a TypeError.
  // An MCP content block ({type: "image", data, mimeType}) is taken as it is, so a tool's
  // image can be forwarded: image(result.content[0]).
  function dataUrl(helper, kind, example, value) {
    if (
      value !== null &&
      typeof value === "object" &&
      value.type === kind &&
      typeof value.data === "string" &&
      typeof value.mimeType === "string" &&
      value.mimeType.startsWith(`${kind}/`)
    ) {
      return [value.mimeType, value.data.replace(/\s/g, "")];
    }
    const pattern = new RegExp(`^data:(${kind}/[A-Za-z0-9.+-]+);base64,([A-Za-z0-9+/\\s]*=*)$`);
    const match = typeof value === "string" ? pattern.exec(value) : null;
    if (match === null) {
      throw new TypeError(
        `${helper}: expected a data URL like "${example}", got ${
          typeof value === "string" ? JSON.stringify(value.slice(0, 40)) : describe(value)
        }`,
      );
    }
    return [match[1], match[2].replace(/\s/g, "")];
  }

  const IMAGE_DETAILS = ["auto", "low", "high", "original"];
  const DETAIL_MIME = "application/x-cellvisor-image-detail";

  // image(dataUrl, detail?): an image display; `detail` (auto, low, high, original) rides
  // along in the bundle for hosts that pass it to a model.
  hidden(globalThis, "image", (url, detail) => {
    const [mimeType, data] = dataUrl("image", "image", "data:image/png;base64,iVBOR...", url);
    if (detail !== undefined && detail !== null && !IMAGE_DETAILS.includes(detail)) {
      throw new TypeError(`image: detail must be one of ${IMAGE_DETAILS.join(", ")}, got ${format(detail)}`);
    }
    const bundle = { [mimeType]: data, "text/plain": `<image ${mimeType}>` };
    if (detail !== undefined && detail !== null) bundle[DETAIL_MIME] = detail;
    sendDisplay(JSON.stringify(bundle));
  });

  hidden(globalThis, "audio", (url) => {
    const [mimeType, data] = dataUrl("audio", "audio", "data:audio/wav;base64,UklGR...", url);
    sendDisplay(JSON.stringify({ [mimeType]: data, "text/plain": `<audio ${mimeType}>` }));
  });

  // notify(value): a progress note, sent to the host at once as a status event.
  hidden(globalThis, "notify", (value) => {
    const message = asText(value);
    if (message.trim() === "") throw new TypeError("notify: the message must not be empty");
    status("notify", { message });
  });

  // store/load: JSON values persisted per session on disk. Only what survives a JSON round
  // trip unchanged is accepted, so load() gives back what store() was given.
  function checkStorable(value, path, seen) {
    const where = path === "" ? "the value" : `value${path}`;
    const refuse = (what) => {
      throw new TypeError(`store: ${where} is ${what}, which JSON cannot hold`);
    };
    switch (typeof value) {
      case "string":
      case "boolean":
        return;
      case "number":
        if (!Number.isFinite(value)) refuse(String(value));
        return;
      case "undefined":
        refuse("undefined");
      case "function":
        refuse("a function");
      case "bigint":
        refuse("a BigInt");
      case "symbol":
        refuse("a symbol");
    }
    if (value === null) return;
    if (typeof value.toJSON === "function") return; // Dates and the like choose their JSON.
    if (seen.has(value)) refuse("a cycle (it contains itself)");
    if (value instanceof Map || value instanceof Set || value instanceof WeakMap || value instanceof WeakSet) {
      refuse(`a ${value.constructor.name} (convert it to an object or array first)`);
    }
    if (value instanceof Promise) refuse("a Promise (await it first)");
    seen.add(value);
    if (Array.isArray(value)) value.forEach((item, i) => checkStorable(item, `${path}[${i}]`, seen));
    else for (const key of Object.keys(value)) checkStorable(value[key], `${path}.${key}`, seen);
    seen.delete(value);
  }

  // Synchronous, as in the code-mode API: `store("c", (load("c") ?? 0) + 1)` works.
  hidden(globalThis, "store", (key, value) => {
    needString("store", "key", key);
    checkStorable(value, "", new Set());
    const json = JSON.stringify(value);
    const bytes = native.storeWrite(key, json);
    status("store", { key, bytes });
  });

  hidden(globalThis, "load", (key) => {
    needString("load", "key", key);
    const json = native.storeRead(key);
    status("load", { key, found: json !== undefined });
    if (json === undefined) return undefined;
    let value;
    try {
      // Only a number with 309 digits or a 3-digit exponent can overflow a double: the check of
      // every number runs only when the text has one (or a string that looks like one).
      value = /\d{309}|[eE][+-]?\d{3}/.test(json) ? JSON.parse(json, finiteNumbers) : JSON.parse(json);
    } catch (error) {
      throw new Error(`load: the stored value of "${key}" is not valid JSON (${error.message})`);
    }
    return value;
  });

  // JSON.parse reads a number beyond a double (a 5000-digit integer from Python, 1e400) as
  // Infinity; Python and Lua refuse to load such a value, and so does this.
  function finiteNumbers(_, value) {
    if (typeof value === "number" && !Number.isFinite(value)) {
      throw new RangeError("number out of range: beyond what a JavaScript number holds");
    }
    return value;
  }

  // exit(): ends the cell successfully. The native side throws an error no catch or finally
  // block sees, so nothing after it runs; values stored before it are on disk already.
  hidden(globalThis, "exit", () => void native.exit());

  // yield_control(): the request returns now with the output so far (status "running"); the
  // cell goes on, and the host collects the rest with `wait`.
  hidden(globalThis, "yield_control", () => void native.yieldControl());

  // ---- timers -------------------------------------------------------------------------

  function timer(repeat) {
    return (callback, delay, ...args) => {
      if (typeof callback !== "function") {
        throw new TypeError(`${repeat ? "setInterval" : "setTimeout"}: the callback must be a function, got ${describe(callback)}`);
      }
      const ms = Number(delay);
      const run = args.length ? () => callback(...args) : callback;
      return native.setTimer(run, Number.isFinite(ms) && ms > 0 ? ms : 0, repeat);
    };
  }
  const clearTimer = (id) => {
    if (typeof id === "number") native.clearTimer(id);
  };
  hidden(globalThis, "setTimeout", timer(false));
  hidden(globalThis, "setInterval", timer(true));
  hidden(globalThis, "clearTimeout", clearTimer);
  hidden(globalThis, "clearInterval", clearTimer);
  if (typeof globalThis.queueMicrotask !== "function") {
    hidden(globalThis, "queueMicrotask", (callback) => void Promise.resolve().then(callback));
  }

  // ---- host tools ---------------------------------------------------------------------

  // What `tools.<key>` reaches, for the tools the current request declared: each tool under
  // its name and under its identifier (`list-dir` also as `list_dir`), plus `tool_search`
  // when there are tools to search. Rebuilt by beginCell.
  const declared = Object.create(null);
  let declaredNames = [];

  async function callTool(name, args) {
    if (!declaredNames.includes(name)) {
      const known = declaredNames.length ? `the declared tools are: ${declaredNames.join(", ")}` : "this request declares no tools";
      throw new Error(`unknown tool "${name}": ${known}`);
    }
    let argsJson;
    try {
      argsJson = JSON.stringify(args === undefined ? {} : args);
    } catch (error) {
      throw new TypeError(`tool "${name}": arguments must be JSON-serializable (${error.message})`);
    }
    if (argsJson === undefined) throw new TypeError(`tool "${name}": arguments must be JSON-serializable`);
    const [ok, text] = await native.callTool(name, argsJson);
    if (!ok) {
      const error = new Error(`tool "${name}" failed: ${text}`);
      error.tool = name;
      error.hostMessage = text;
      throw error;
    }
    try {
      return JSON.parse(text);
    } catch (_) {
      return text;
    }
  }

  // tools.tool_search({query, limit?}): the declared tools ranked for `query` (exact
  // identifiers first, then words in names and descriptions), as {tools: [{name, description}]}.
  async function toolSearch(args) {
    const { query, limit } = args !== null && typeof args === "object" ? args : { query: args };
    if (typeof query !== "string") throw new Error("query must not be empty");
    if (limit !== undefined && limit !== null && typeof limit !== "number") {
      throw new Error("limit must be greater than zero");
    }
    const found = JSON.parse(native.searchTools(query, limit ?? undefined));
    return { tools: found.tools.map(({ name, description }) => ({ name, description })) };
  }

  const toolbox = new Proxy(declared, {
    get(target, name) {
      if (typeof name !== "string" || name === "then") return undefined;
      // `tool_search` exists only when the request declares tools (as in Python and Lua).
      if (name === "tool_search") return target[name];
      return target[name] ?? ((args) => callTool(name, args));
    },
    set() {
      return false;
    },
  });
  hidden(globalThis, "tool", toolbox);
  hidden(globalThis, "tools", toolbox);

  // ---- per cell -----------------------------------------------------------------------

  let returned = null;
  hidden(globalThis, "__cellvisor_return", (value) => {
    returned = { value };
  });

  function beginCell(toolsJson) {
    returned = null;
    for (const name of Object.keys(declared)) delete declared[name];
    let list = [];
    try {
      list = JSON.parse(toolsJson);
    } catch (_) {
      list = [];
    }
    declaredNames = list.map((t) => t.name);
    for (const { name } of list) declared[name] = (args) => callTool(name, args);
    // Identifiers after names, so a tool's own name always wins; the first tool claims an
    // identifier two names share.
    for (const { name, declaration } of list) {
      const identifier = /^declare function ([A-Za-z0-9_$]+)\(/.exec(declaration ?? "")?.[1];
      if (identifier !== undefined && !(identifier in declared)) declared[identifier] = declared[name];
    }
    if (list.length > 0 && !("tool_search" in declared)) declared.tool_search = toolSearch;
    const all = list.map(({ name, description, declaration, input_schema }) =>
      Object.freeze({ name, description, declaration, input_schema }),
    );
    hidden(globalThis, "ALL_TOOLS", Object.freeze(all));
  }

  // [true, value] when the cell ran a top-level `return`.
  function takeReturn() {
    const taken = returned;
    returned = null;
    return taken === null ? [false, undefined] : [true, taken.value];
  }

  return { format, show, beginCell, takeReturn };
});
