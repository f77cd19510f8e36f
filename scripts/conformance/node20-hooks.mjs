// Module resolve hook (registered by node20-preload.mjs on a Node without `fs.globSync`):
// an ES-module import of `fs` or `node:fs` gets node20-fs.mjs instead (except from that module
// itself), told which module imported it so that it can find the `glob` package as that
// module's dependency: the suite's bundle, installed beside `glob` by scripts/conformance.sh.
const shim = new URL('./node20-fs.mjs', import.meta.url);

export async function resolve(specifier, context, nextResolve) {
  const importer = context.parentURL;
  if ((specifier === 'fs' || specifier === 'node:fs') && importer
      && !importer.startsWith(shim.href)) {
    const url = new URL(shim);
    url.searchParams.set('importer', importer);
    return { url: url.href, format: 'module', shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
