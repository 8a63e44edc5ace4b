// The Node peer for JS cells: a `node` child keeping one `vm` context, driven by NDJSON.
//
// Protocol (the same as scripts/bench_floor.py):
//   stdin   one JSON object per line: {"code": "..."}
//   stdout  the cell's output as raw text, then "\x1e" + {"status": ...} + "\n" when it ends.
// The completion value of a cell is printed with util.inspect; SIGINT interrupts a running
// cell (breakOnSigint) and is ignored while idle.
"use strict";
const vm = require("vm");
const util = require("util");
const readline = require("readline");

const write = (text) => process.stdout.write(text); // synchronous for pipes on Linux
const show = (args) => args.map((a) => (typeof a === "string" ? a : util.inspect(a))).join(" ") + "\n";
const context = vm.createContext({
  console: {
    log: (...a) => { write(show(a)); },
    error: (...a) => { write(show(a)); },
  },
});
process.on("SIGINT", () => {});

readline.createInterface({ input: process.stdin, terminal: false }).on("line", (line) => {
  let status = "complete";
  try {
    const value = vm.runInContext(JSON.parse(line).code, context, { breakOnSigint: true });
    if (value !== undefined) write(util.inspect(value) + "\n");
  } catch (error) {
    if (error && error.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED") status = "cancelled";
    else {
      status = "error";
      write(String(error && error.stack ? error.stack : error) + "\n");
    }
  }
  write("\x1e" + JSON.stringify({ status }) + "\n");
});
