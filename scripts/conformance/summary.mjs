// The summary table of scripts/conformance.sh: for each revision, the scenarios its requirement
// set scores (passed / total) and those it runs without scoring, then every failing scenario
// with the first failing check's message.
//
// Usage: node summary.mjs REVISION LOG RESULTS [REVISION LOG RESULTS ...]
// LOG is the suite's output for `server --requirements REVISION`, RESULTS its --output-dir.
// The verdicts are the suite's own (its SUMMARY lines: a scenario passes with no failed
// check); the messages come from each scenario's checks.json. Exits 1 when a requirement set
// did not run, 3 when a scored scenario failed or a scenario of the tasks extension
// (`tasks-*`, which the host implements) failed that KNOWN_FAILING (space-separated names, from
// scripts/conformance.sh) does not list; other unscored ones are reported only.
import fs from 'node:fs';
import path from 'node:path';

const args = process.argv.slice(2);
if (args.length === 0 || args.length % 3 !== 0) {
  console.error('usage: node summary.mjs REVISION LOG RESULTS [...]');
  process.exit(2);
}

const firstFailure = (results, scenario) => {
  // Results are saved as server-<scenario>-<timestamp>/checks.json.
  const stamp = /^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$/;
  for (const entry of fs.existsSync(results) ? fs.readdirSync(results) : []) {
    if (entry.match(stamp)?.[1] !== scenario) continue;
    try {
      const checks = JSON.parse(fs.readFileSync(path.join(results, entry, 'checks.json'), 'utf8'));
      const failed = checks.find((check) => check.status === 'FAILURE');
      if (failed) {
        const message = `${failed.id}: ${failed.errorMessage ?? failed.description ?? ''}`;
        return message.replace(/\s+/g, ' ').slice(0, 140);
      }
    } catch {
      // No checks.json: the suite says why in its log.
    }
  }
  return '';
};

// Scenarios of an extension the host implements: held to passing although the suite does
// not score them, but for the ones known to fail (docs/conformance.md says why).
const held = (name) => name.startsWith('tasks-');
const knownFailing = new Set((process.env.KNOWN_FAILING ?? '').split(/\s+/).filter(Boolean));

const rows = [];
const failures = [];
let broken = false;
let scoredFailures = 0;
for (let i = 0; i < args.length; i += 3) {
  const [revision, log, results] = args.slice(i, i + 3);
  const text = fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '';
  const summary = text.split('=== SUMMARY ===')[1];
  if (summary === undefined) {
    rows.push({ revision, scored: 'did not run', other: '-' });
    broken = true;
    continue;
  }
  const [scoredPart, notScoredPart = ''] = summary.split(/^Not scored for .*$/m);
  const verdicts = new Map();
  for (const [, mark, name] of scoredPart.matchAll(/^([✓✗]) (\S+): \d+ passed, \d+ failed/gm)) {
    verdicts.set(name, mark === '✓');
  }
  const notScored = new Map();
  for (const [, name, reason] of notScoredPart.matchAll(/^\s+[✓✗] (\S+) \(([^)]*)\)/gm)) {
    notScored.set(name, reason);
  }
  const count = (names) => `${names.filter((name) => verdicts.get(name)).length}/${names.length}`;
  const scored = [...verdicts.keys()].filter((name) => !notScored.has(name));
  const other = [...verdicts.keys()].filter((name) => notScored.has(name));
  rows.push({ revision, scored: count(scored), other: count(other) });
  for (const name of [...scored, ...other]) {
    if (verdicts.get(name)) continue;
    let kind = notScored.has(name) ? `not scored: ${notScored.get(name)}` : 'scored';
    if (!notScored.has(name)) scoredFailures += 1;
    else if (held(name) && knownFailing.has(name)) kind += '; known, see docs/conformance.md';
    else if (held(name)) {
      kind += '; held to passing';
      scoredFailures += 1;
    }
    failures.push({ revision, name, kind, why: firstFailure(results, name) });
  }
}

console.log('revision     required (passed/total)   not scored (passed/total)');
for (const row of rows) {
  console.log(`${row.revision.padEnd(12)} ${row.scored.padEnd(25)} ${row.other}`);
}
console.log('');
console.log(failures.length ? 'failing scenarios:' : 'no failing scenario');
for (const failure of failures) {
  console.log(`  ${failure.revision}  ${failure.name} (${failure.kind})`);
  if (failure.why) console.log(`      ${failure.why}`);
}
// 1: the suite did not run; 3: a scenario a requirement set scores (or a held one) failed.
process.exit(broken ? 1 : scoredFailures > 0 ? 3 : 0);
