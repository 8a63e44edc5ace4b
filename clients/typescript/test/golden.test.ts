// The protocol's golden fixtures against this package: every line type-checks as the declared
// wire types (generated/golden.ts, compiled with the tests), and at run time every error line
// becomes its typed error class.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import * as cellvisor from "cellvisor";
import { CellvisorError, errorFromRpc, PROTOCOL_VERSION, type ErrorMessage } from "cellvisor";
import { GOLDEN, protocolVersion } from "../generated/golden.js";

test("every golden line is typed, and the version is this client's", () => {
  const fixtures = readFileSync(new URL("../../../../supervisor/tests/golden/jsonrpc.jsonl", import.meta.url), "utf8");
  const lines = fixtures.split("\n").filter((line) => line.includes("\t"));
  assert.equal(GOLDEN.length, lines.length, "one typed constant per golden line");
  assert.ok(GOLDEN.length >= 40, `the fixtures hold the whole protocol (${GOLDEN.length} lines)`);
  assert.equal(protocolVersion, PROTOCOL_VERSION);
  for (const kind of ["request", "result", "event", "answer", "error"]) {
    assert.ok(GOLDEN.some((entry) => entry.kind === kind), `a golden ${kind}`);
  }
});

test("every golden error becomes its typed error class, carrying the code", () => {
  const errors = GOLDEN.filter((entry) => entry.kind === "error");
  assert.ok(errors.length >= 8);
  for (const entry of errors) {
    const wire = (entry.message as ErrorMessage).error;
    const error = errorFromRpc(wire);
    const Class = (cellvisor as unknown as Record<string, unknown>)[entry.errorClass ?? ""] as typeof CellvisorError;
    assert.ok(error instanceof Class, `${entry.label} is a ${entry.errorClass}, got ${error.name}`);
    assert.ok(error instanceof CellvisorError);
    assert.equal(error.code, wire.code);
    assert.equal(error.message, wire.message);
    assert.equal(error.name, entry.errorClass);
  }
  const unknown = errorFromRpc({ code: -32099, message: "new" });
  assert.equal(unknown.constructor, CellvisorError, "an undocumented code is the base class");
  assert.equal(unknown.code, -32099);
});
