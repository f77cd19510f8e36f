// Loaded with `node --import` before the conformance suite. The suite's bundle does
// `import { globSync } from "fs"`, which Node 22 has and Node 20 does not: there the import
// fails before the suite starts. Node has no flag that adds it, and assigning `fs.globSync`
// from a preload is not enough (the named exports of a built-in ES module are fixed when it
// is first loaded, which is before any preload runs). So on a Node without it, this registers
// a resolve hook (node20-hooks.mjs) that hands ES-module importers of `fs` a module
// re-exporting all of `node:fs` plus a `globSync` built on the npm `glob` package
// (node20-fs.mjs). On Node 22 and later it does nothing.
import * as fs from 'node:fs';
import { register } from 'node:module';

if (typeof fs.globSync !== 'function') {
  register('./node20-hooks.mjs', import.meta.url);
}
