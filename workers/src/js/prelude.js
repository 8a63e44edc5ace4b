// Installed once per worker. Called with the worker's two native hooks:
//   write(stream, text)  stream 0 = stdout, 1 = stderr
//   sendDisplay(bundleJson)
// and returns the formatter the worker uses for a cell's trailing value.
(function (write, sendDisplay) {
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

  const line = (values) => values.map(format).join(" ") + "\n";
  const toStdout = (...values) => void write(0, line(values));
  const toStderr = (...values) => void write(1, line(values));

  hidden(globalThis, "console", {
    log: toStdout,
    info: toStdout,
    debug: toStdout,
    error: toStderr,
    warn: toStderr,
  });
  hidden(globalThis, "print", toStdout);

  function bundle(value) {
    if (value !== null && typeof value === "object") {
      if (value.type === "image" && typeof value.data === "string" && typeof value.mimeType === "string") {
        return JSON.stringify({ [value.mimeType]: value.data, "text/plain": `<image ${value.mimeType}>` });
      }
      try {
        const json = JSON.stringify({ "application/json": value, "text/plain": format(value) });
        if (json !== undefined) return json;
      } catch (_) {
        // Not JSON-able (cycles, BigInts): text only.
      }
    }
    return JSON.stringify({ "text/plain": format(value) });
  }
  hidden(globalThis, "display", (value) => void sendDisplay(bundle(value)));

  return format;
})
