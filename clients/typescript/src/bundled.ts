/**
 * The daemon shipped as an npm package, the way packages that carry native programs do: the
 * main package names one package per platform as an optional dependency
 * (`@cellvisor/linux-x64`, `@cellvisor/linux-arm64`), npm installs the one whose `os` and
 * `cpu` match, and its `bin/` holds `cellvisor` and `cellvisor-py-worker`.
 */

import { accessSync, constants } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** The platform package for this process's platform and architecture. */
export function platformPackage(platform: string = process.platform, arch: string = process.arch): string {
  return `@cellvisor/${platform}-${arch}`;
}

/**
 * The `cellvisor` program of the installed platform package, or `undefined` when none is
 * installed (another platform, or the client installed on its own).
 */
export function bundledProgram(): string | undefined {
  const require = createRequire(import.meta.url);
  let manifest: string;
  try {
    manifest = require.resolve(`${platformPackage()}/package.json`);
  } catch {
    return undefined;
  }
  const program = join(dirname(manifest), "bin", "cellvisor");
  try {
    accessSync(program, constants.X_OK);
    return program;
  } catch {
    return undefined;
  }
}
