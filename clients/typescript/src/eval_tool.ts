/**
 * The agent harness's `eval` tool on cellvisor (docs in the anchors): its input,
 * `{cells: [{language, code, title?, timeout?, reset?}]}`, run as one request, and its
 * output: one text block (`[i/n] title` headers, placeholders, the failed cell named) then
 * the images, plus the details the harness's renderer reads.
 */

import type { Cellvisor, HostTool } from "./client.js";
import type { CellResult, CellSpec, EvalResult, Language } from "./protocol.js";
import { renderResult } from "./render.js";

/** One cell of the tool's input. */
export interface EvalToolCell {
  language: Language;
  code: string;
  title?: string;
  /** Seconds, 1..600 (default 30). */
  timeout?: number;
  /** Wipe this language's state before the cell. */
  reset?: boolean;
}

/** The tool's input. */
export interface EvalToolInput {
  cells: EvalToolCell[];
}

/** A content block of the tool's output. */
export type EvalToolContent =
  | { type: "text"; text: string }
  | { type: "image"; data: string; mimeType: string }
  | { type: "audio"; data: string; mimeType: string };

/** The tool's output. */
export interface EvalToolOutput {
  /** One text block, then the cells' images and audio in order. */
  content: EvalToolContent[];
  /** The text block's text. */
  text: string;
  /** Whether a cell failed or was cancelled. */
  isError: boolean;
  /** What the harness's renderer reads: the cells, languages in first-use order, totals. */
  details: {
    cells: CellResult[];
    languages: Language[];
    jsonOutputs: number;
    images: number;
    statusEvents: number;
    failedCell?: EvalResult["failed_cell"];
  };
}

/** JSON Schema of the tool's input, for registering the tool with a model. */
export const EVAL_TOOL_INPUT_SCHEMA = {
  type: "object",
  properties: {
    cells: {
      type: "array",
      minItems: 1,
      items: {
        type: "object",
        properties: {
          language: { type: "string", enum: ["py", "js", "lua"] },
          code: { type: "string" },
          title: { type: "string" },
          timeout: { type: "integer", minimum: 1, maximum: 600 },
          reset: { type: "boolean" },
        },
        required: ["language", "code"],
        additionalProperties: false,
      },
    },
  },
  required: ["cells"],
  additionalProperties: false,
} as const;

const CELL_SHAPE = '{language: "py"|"js"|"lua", code: string, title?: string, timeout?: 1..600, reset?: boolean}';

/** The input checked as the tool's schema checks it; a TypeError says what was wrong and what is allowed. */
export function checkEvalToolInput(input: unknown): CellSpec[] {
  const cells = (input as { cells?: unknown } | null)?.cells;
  if (!Array.isArray(cells) || cells.length === 0) {
    throw new TypeError(`eval takes {cells: [...]} with at least one cell, each ${CELL_SHAPE}`);
  }
  return cells.map((cell: unknown, i) => {
    const where = `cells[${i}]`;
    if (typeof cell !== "object" || cell === null) throw new TypeError(`${where} is not an object; each cell is ${CELL_SHAPE}`);
    const { language, code, title, timeout, reset, ...rest } = cell as Record<string, unknown>;
    const unknown = Object.keys(rest);
    if (unknown.length > 0) throw new TypeError(`${where} has unknown field ${unknown[0]}; each cell is ${CELL_SHAPE}`);
    if (language !== "py" && language !== "js" && language !== "lua") {
      throw new TypeError(`${where}.language is ${JSON.stringify(language)}; allowed: "py", "js", "lua"`);
    }
    if (typeof code !== "string") throw new TypeError(`${where}.code must be a string`);
    if (title !== undefined && typeof title !== "string") throw new TypeError(`${where}.title must be a string`);
    if (timeout !== undefined && (!Number.isInteger(timeout) || (timeout as number) < 1 || (timeout as number) > 600)) {
      throw new TypeError(`${where}.timeout is ${JSON.stringify(timeout)}; allowed: a whole number of seconds from 1 to 600`);
    }
    if (reset !== undefined && typeof reset !== "boolean") throw new TypeError(`${where}.reset must be true or false`);
    const spec: CellSpec = { language, code };
    if (title !== undefined) spec.title = title;
    if (timeout !== undefined) spec.timeout = timeout as number;
    if (reset !== undefined) spec.reset = reset;
    return spec;
  });
}

/** A result as the tool's output (no daemon needed: for results a host already has). */
export function evalToolOutput(result: EvalResult): EvalToolOutput {
  const { texts, media } = renderResult(result);
  const text = texts.join("").trimEnd();
  const content: EvalToolContent[] = [{ type: "text", text }];
  for (const shown of media) {
    if (shown.kind === "image" || shown.kind === "audio") {
      content.push({ type: shown.kind, data: shown.data, mimeType: shown.mimeType });
    }
  }
  const details: EvalToolOutput["details"] = {
    cells: result.cells,
    languages: result.summary.languages,
    jsonOutputs: result.summary.json_outputs,
    images: result.summary.images,
    statusEvents: result.summary.status_events,
  };
  if (result.failed_cell !== undefined) details.failedCell = result.failed_cell;
  return { content, text, isError: result.is_error, details };
}

/** Where and how the tool runs its cells. */
export interface EvalToolOptions {
  session?: string;
  cwd?: string | null;
  tools?: HostTool[];
  signal?: AbortSignal;
}

/** Runs the `eval` tool's input on `cv` and answers what the tool shows the model. */
export async function evalTool(cv: Cellvisor, input: EvalToolInput, options: EvalToolOptions = {}): Promise<EvalToolOutput> {
  const cells = checkEvalToolInput(input);
  const result = await cv.eval({ ...options, cells });
  return evalToolOutput(result);
}
