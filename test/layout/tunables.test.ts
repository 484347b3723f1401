// Tunable numbers live in src/limits.ts (STYLE.md §8). In the folders kept that way (the worker
// SDK, the server's wiring, the API, the services, observability, the CLI), every `const` whose
// value is a number written out (`= 5_000`, `= 3 * 3_600_000`) is flagged unless it is in the
// allow-list below, each entry saying why it is no tunable: a unit conversion, a fact, a
// contract. The store and the scheduler keep their own constants for now, and are not scanned.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { test } from 'node:test';

const root = join(import.meta.dirname, '..', '..');
const scanned = ['src/worker', 'src/server', 'src/server.ts', 'src/api', 'src/service', 'src/obs', 'src/cli'];

/** `file: name`, with why the number is not a tunable. */
const allowed = new Map<string, string>([
  ['src/api/routes-ui-data.ts: dayMs', 'a unit conversion'],
  ['src/service/overview.ts: minuteMs', 'a unit conversion'],
  ['src/service/overview.ts: hourMs', 'a unit conversion'],
  ['src/service/job-spec.ts: maxInstantMs', 'the last instant of the year 9999, the API\'s bound on times (API.md)'],
  ['src/cli/schedule-preview.ts: transitionReachMs', 'a fact about time zones: no offset changes by more at once'],
  ['src/cli/exec-handler.ts: exitCodeSucceeded', 'the exit-code contract of `tickler worker --exec` (sysexits)'],
  ['src/cli/exec-handler.ts: exitCodePermanent', 'the exit-code contract of `tickler worker --exec` (sysexits)'],
  ['src/cli/exec-handler.ts: exitCodeTemporary', 'the exit-code contract of `tickler worker --exec` (sysexits)'],
]);

/** A `const` (exported or not, at any depth) whose whole value is arithmetic on number literals. */
const numericConst = /^\s*(?:export\s+)?const\s+([A-Za-z_$][\w$]*)\s*(?::\s*number\s*)?=\s*([-+(\s]*\d[\d_.eE]*(?:\s*[-+*/]\s*[(\s]*\d[\d_.eE]*\)*)*)\s*;/gm;

function files(path: string): string[] {
  if (!statSync(path).isDirectory()) return path.endsWith('.ts') ? [path] : [];
  return readdirSync(path).flatMap((name) => files(join(path, name)));
}

function numericConstants(text: string): { name: string; value: string }[] {
  return [...text.matchAll(numericConst)].map((match) => ({ name: match[1]!, value: match[2]!.trim() }));
}

test('the scan finds the constants it is meant to flag, and leaves other constants alone', () => {
  const found = numericConstants([
    'const retryDelayMs = 500;',
    'export const batchItemsMax = 1_000;',
    '  const reachMs = 3 * 3_600_000;',
    'const ratio: number = 0.25;',
    'const name = "x";',
    'const delayMs = Math.min(a, 5);',
    'const list = [1, 2];',
  ].join('\n'));
  assert.deepEqual(found.map((constant) => constant.name), ['retryDelayMs', 'batchItemsMax', 'reachMs', 'ratio']);
});

test('tunable numbers in the scanned folders live in src/limits.ts', () => {
  const flagged: string[] = [];
  const seen = new Set<string>();
  for (const file of scanned.flatMap((path) => files(join(root, path)))) {
    for (const { name, value } of numericConstants(readFileSync(file, 'utf8'))) {
      const key = `${relative(root, file)}: ${name}`;
      seen.add(key);
      if (!allowed.has(key)) flagged.push(`${key} = ${value}`);
    }
  }
  assert.deepEqual(flagged, [], 'move these to src/limits.ts (a unit in the name), or allow them here saying why');
  const stale = [...allowed.keys()].filter((key) => !seen.has(key));
  assert.deepEqual(stale, [], 'allow-list entries that no longer match a constant');
});
