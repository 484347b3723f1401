// Runs the test files under test/ with node's test runner. On Node 20, `node --test` given a
// folder runs nothing and exits 0 (STACK.md), so the files are listed here explicitly.
// Usage: node scripts/run-tests.mjs [--list] [substring ...]   (only files whose path contains
// one; --list prints them and runs nothing)
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

function collect(dir) {
  const files = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) files.push(...collect(path));
    else if (name.endsWith('.test.ts')) files.push(path);
  }
  return files;
}

const listOnly = process.argv.includes('--list');
const filters = process.argv.slice(2).filter((arg) => arg !== '--list');
const files = collect('test').filter((file) => filters.length === 0 || filters.some((f) => file.includes(f)));
if (files.length === 0) {
  console.error(`no test files matched ${filters.join(' ')}`);
  process.exit(1);
}
if (listOnly) {
  console.log(files.join('\n'));
  process.exit(0);
}
// The chaos run starts eleven processes and judges fire lag against tight bounds: it runs
// after the others, alone, so that it measures the system rather than the other test files.
const isolated = files.filter((file) => file.includes('chaos-smoke'));
const shared = files.filter((file) => !isolated.includes(file));
// A test that awaits an event that never comes (an assertion failed in a callback, say)
// would otherwise hang the run until CI's own limit, with no word of which file. On Node 20
// the runner's timeout bounds each file as a whole (measured: a file of two 1.5 s tests fails
// at 2 s), so it is generous: the slowest files take 81–96 s here (bench-smoke, e2e/engine).
const fileTimeoutMs = 600_000;
let status = 0;
for (const [group, concurrency] of [[shared, 2], [isolated, 1]]) {
  if (group.length === 0) continue;
  const result = spawnSync(process.execPath,
    ['--import', 'tsx', '--test', `--test-concurrency=${concurrency}`, `--test-timeout=${fileTimeoutMs}`,
      '--test-reporter=spec', ...group],
    { stdio: 'inherit' });
  if ((result.status ?? 1) !== 0) status = result.status ?? 1;
}
process.exit(status);
