// `node:fs` with the `globSync` of Node 22 added, for Node 20 (see node20-preload.mjs). The
// suite calls it as `globSync(pattern, { cwd })` (to collect results/**/checks.json) and
// expects paths relative to `cwd`, which is what the `glob` package's `globSync` returns.
// `glob` is loaded on first use, with require (its CommonJS build, whose own `fs` is the
// built-in one), from the module that imported this one.
import fs from 'node:fs';
import { createRequire } from 'node:module';

export * from 'node:fs';
export default fs;

const importer = new URL(import.meta.url).searchParams.get('importer');
let glob;

export function globSync(pattern, options = {}) {
  glob ??= createRequire(importer)('glob').globSync;
  return glob(pattern, { cwd: options.cwd, dot: true });
}
