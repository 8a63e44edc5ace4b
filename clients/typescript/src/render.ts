/**
 * A result as text for a text host, in the words of the CLI and the MCP server
 * (`cli/src/render.rs`, `cli/src/mcp/content.rs`): `[i/n] title` headers, `(no text output)` /
 * `(no output)` placeholders, status lines, and the line naming the failed cell.
 */

import type { CellResult, DisplayBundle, EvalResult, FailedCell, JsonValue } from "./protocol.js";

/** What a display bundle becomes on a text host. */
export type Shown =
  | { kind: "image" | "audio"; mimeType: string; data: string }
  | { kind: "text"; text: string }
  | { kind: "nothing" };

const IMAGES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/** `[2/3] title` (the language when untitled) above each cell of a request of several; undefined for a lone cell. */
export function cellHeader(cell: CellResult, total: number): string | undefined {
  return total > 1 ? `[${cell.index + 1}/${total}] ${cell.title ?? cell.language}` : undefined;
}

/** The displays that add to the output (not a value's JSON and text the output already ends with). */
export function displaysBeyondOutput(cell: CellResult): DisplayBundle[] {
  const printed = cell.output.endsWith("\n") ? cell.output.slice(0, -1) : "";
  return cell.displays.filter((bundle) => {
    const keys = Object.keys(bundle);
    const onlyJsonAndText = keys.every((key) => key === "application/json" || key === "text/plain");
    const text = bundle["text/plain"];
    const repeats = typeof text === "string" && text !== "" && printed.endsWith(text);
    return !(onlyJsonAndText && repeats);
  });
}

/** HTML as plain text: scripts and styles dropped, tags removed, common entities decoded. */
function htmlToText(html: string): string | undefined {
  const entities: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', "#39": "'", nbsp: " " };
  const text = html
    .replace(/<(script|style|head|template|noscript)\b[\s\S]*?<\/\1\s*>/gi, "")
    .replace(/<br\s*\/?>/gi, "\n")
    .replace(/<\/(p|div|li|tr|h[1-6])\s*>/gi, "\n")
    .replace(/<[^>]*>/g, "")
    .replace(/&(amp|lt|gt|quot|#39|nbsp);/g, (_, name: string) => entities[name] ?? "")
    .replace(/\n{3,}/g, "\n\n")
    .trim();
  return text === "" ? undefined : text;
}

/**
 * The best form of a bundle for a text host: an image, then audio, then JSON (pretty), Markdown,
 * plain text, HTML as text, SVG or LaTeX source; else a note naming its MIME types.
 */
export function display(bundle: DisplayBundle): Shown {
  const media = IMAGES.find((mime) => typeof bundle[mime] === "string");
  const audio = Object.keys(bundle).find((mime) => mime.startsWith("audio/") && typeof bundle[mime] === "string");
  const mime = media ?? audio;
  if (mime !== undefined) {
    return { kind: media ? "image" : "audio", mimeType: mime, data: String(bundle[mime]).replace(/\s/g, "") };
  }
  if ("application/json" in bundle) return { kind: "text", text: JSON.stringify(bundle["application/json"], null, 2) };
  const text = (mime: string): string | undefined => {
    const value: JsonValue | undefined = bundle[mime];
    return typeof value === "string" ? value : undefined;
  };
  // The anchors' ranking of text forms: Markdown, then plain text, then HTML converted.
  const markdown = text("text/markdown");
  if (markdown !== undefined) return { kind: "text", text: markdown };
  // A plain form that is only an object's default repr (`<__main__.Page at 0x7f...>`) gives way to the HTML.
  const plain = text("text/plain");
  const defaultRepr = plain !== undefined && /^<[^\n]* at 0x[^\n]*>$/.test(plain.trim()) && text("text/html") !== undefined;
  if (plain !== undefined && !defaultRepr) return { kind: "text", text: plain };
  const html = text("text/html");
  const fromHtml = html === undefined ? undefined : htmlToText(html);
  if (fromHtml !== undefined) return { kind: "text", text: fromHtml };
  for (const mime of ["image/svg+xml", "text/html", "text/latex"]) {
    const value = text(mime);
    if (value !== undefined) return { kind: "text", text: value };
  }
  const kinds = Object.keys(bundle).filter((mime) => !mime.startsWith("application/x-cellvisor"));
  return kinds.length === 0 ? { kind: "nothing" } : { kind: "text", text: `[display: ${kinds.join(", ")}]` };
}

/** How long a cell ran, for a person: `12 ms` under a second, else `1.5 s` (as the CLI and MCP say it). */
export function durationText(ms: number): string {
  return ms < 1000 ? `${Math.max(0, ms).toFixed(0)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** `(no text output)` for a quiet complete cell with displays to show, `(no output)` with nothing; else undefined. */
export function placeholder(cell: CellResult): string | undefined {
  if (cell.status !== "complete" || cell.output.trim() !== "") return undefined;
  const shown = displaysBeyondOutput(cell).some((bundle) => display(bundle).kind !== "nothing");
  return shown ? "(no text output)" : "(no output)";
}

/** `(output truncated: ...)` for a cell whose output was cut, saying where the whole is. */
export function truncationNote(cell: CellResult): string | undefined {
  const truncation = cell.truncation;
  if (!truncation.truncated) return undefined;
  let whole = "";
  if (truncation.artifact_path !== null) {
    const file = truncation.artifact_path.split("/").pop() ?? "";
    const dot = file.lastIndexOf(".");
    whole = `; the whole output is in ${truncation.artifact_path} (artifact://${dot > 0 ? file.slice(0, dot) : file})`;
  }
  return `(output truncated: ${truncation.total_bytes} bytes, ${truncation.total_lines} lines in all${whole})`;
}

/** Bytes in binary units, whole when exact (`512 MiB`), else to one decimal; under a KiB as bytes. */
export function humanBytes(bytes: number): string {
  const units = ["KiB", "MiB", "GiB", "TiB"];
  if (bytes < 1024) return `${bytes} bytes`;
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit + 1 < units.length) {
    value /= 1024;
    unit += 1;
  }
  const rounded = Math.round(value * 10) / 10;
  return `${Number.isInteger(rounded) ? rounded : rounded.toFixed(1)} ${units[unit]}`;
}

const LIMIT_SETTINGS: Record<string, string> = {
  max_rss: "[limits] max-rss",
  js_heap: "[js] memory-limit",
  lua_heap: "[lua] memory-limit",
  kernel_oom: "the memory cgroup's limit",
};

/** `(out of memory: 512 MiB limit ([limits] max-rss), 530 MiB used)` for a cell memory ended. */
export function outOfMemoryNote(cell: CellResult): string | undefined {
  const verdict = cell.out_of_memory;
  if (verdict === undefined) return undefined;
  const setting = LIMIT_SETTINGS[verdict.limit] ?? verdict.limit;
  if (verdict.limit === "kernel_oom") {
    const at = verdict.limit_bytes > 0 ? ` at ${humanBytes(verdict.limit_bytes)} (${setting})` : "";
    const used = verdict.used_bytes > 0 ? `, ${humanBytes(verdict.used_bytes)} used when last measured` : "";
    return `(out of memory: killed by the kernel's OOM killer${at}${used})`;
  }
  return `(out of memory: ${humanBytes(verdict.limit_bytes)} limit (${setting}), ${humanBytes(verdict.used_bytes)} used)`;
}

/** The line a text host ends a failed request of several cells with: `cell 2 of 3 ("load") failed with an error; the cell after it was skipped`. */
export function failedLine(failed: FailedCell, cells: CellResult[]): string {
  const title = failed.title === null ? "" : ` (${JSON.stringify(failed.title)})`;
  const how = failed.status === "cancelled" ? "was cancelled" : "failed with an error";
  const skipped = cells.filter((cell) => cell.index > failed.index && cell.status === "skipped").length;
  const after = skipped === 0 ? "" : skipped === 1 ? "; the cell after it was skipped" : `; the ${skipped} cells after it were skipped`;
  return `cell ${failed.index + 1} of ${cells.length}${title} ${how}${after}`;
}

/** One cell as text (every line ended), and its images and audio. */
export function renderCell(cell: CellResult, total: number): { text: string; media: Shown[] } {
  let text = "";
  const line = (piece: string) => {
    text += piece;
    if (piece !== "" && !piece.endsWith("\n")) text += "\n";
  };
  const header = cellHeader(cell, total);
  if (header !== undefined) line(header);
  if (cell.notice !== null) line(`(${cell.notice.trimEnd()})`);
  line(cell.output);
  const quiet = placeholder(cell);
  if (quiet !== undefined) line(quiet);
  const cut = truncationNote(cell);
  if (cut !== undefined) line(cut);
  const memory = outOfMemoryNote(cell);
  if (memory !== undefined) line(memory);
  const media: Shown[] = [];
  for (const bundle of displaysBeyondOutput(cell)) {
    const shown = display(bundle);
    if (shown.kind === "text") line(shown.text);
    else if (shown.kind !== "nothing") media.push(shown);
  }
  // Every cell ends with its status and how long it ran, as the anchor's result view shows them.
  const took = durationText(cell.duration_ms);
  switch (cell.status) {
    case "complete":
      line(`(complete in ${took})`);
      break;
    case "skipped":
      line(cell.output === "" ? "(skipped: an earlier cell failed)" : "(skipped)");
      break;
    case "running":
      line(
        `(still running in the background after ${took} as cell ${cell.cell_id}: call \`wait\` with cell_id ${cell.cell_id} for the rest, or \`terminate\` to stop it)`,
      );
      break;
    default:
      line(`(${cell.status} after ${took})`);
  }
  return { text, media };
}

/** Each cell's text and media, then the failed-cell line (for a request of several). */
export function renderResult(result: EvalResult): { texts: string[]; media: Shown[] } {
  const total = result.cells.length;
  const texts: string[] = [];
  const media: Shown[] = [];
  for (const cell of result.cells) {
    const rendered = renderCell(cell, total);
    texts.push(rendered.text);
    media.push(...rendered.media);
  }
  if (result.failed_cell !== undefined && total > 1) texts.push(failedLine(result.failed_cell, result.cells));
  return { texts, media };
}
