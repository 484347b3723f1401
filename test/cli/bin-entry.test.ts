// bin/tickler.js picks what it runs: the build in dist/ when its stamp is newer than every
// file under src/, the TypeScript sources through tsx otherwise, or when TICKLER_FROM_SOURCE=1.
// Checked with a real process on a copy of the bin beside stand-in entry points that say which
// one ran.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';

const repoRoot = resolve(import.meta.dirname, '..', '..');
const root = mkdtempSync(join(tmpdir(), 'tickler-bin-'));
after(() => rmSync(root, { recursive: true, force: true }));

mkdirSync(join(root, 'bin'));
mkdirSync(join(root, 'dist', 'cli'), { recursive: true });
mkdirSync(join(root, 'src', 'cli'), { recursive: true });
for (const file of ['tickler.js', 'build-fresh.js']) copyFileSync(join(repoRoot, 'bin', file), join(root, 'bin', file));
symlinkSync(join(repoRoot, 'node_modules'), join(root, 'node_modules'));
writeFileSync(join(root, 'package.json'), '{"type": "module"}\n');
writeFileSync(join(root, 'dist', 'cli', 'main.js'), "console.log('dist');\n");
writeFileSync(join(root, 'src', 'cli', 'main.ts'), "const from: string = 'source';\nconsole.log(from);\n");
const source = join(root, 'src', 'cli', 'main.ts');
const stamp = join(root, 'dist', '.built');

function ranFrom(env: Record<string, string> = {}): string {
  return execFileSync(process.execPath, [join(root, 'bin', 'tickler.js')], {
    env: { PATH: process.env['PATH'] ?? '', ...env }, encoding: 'utf8', timeout: 30_000,
  }).trim();
}

const at = (seconds: number): Date => new Date(Date.UTC(2026, 10, 30, 12, 0, seconds));

test('runs the sources through tsx when there is no build stamp', () => {
  rmSync(stamp, { force: true });
  assert.equal(ranFrom(), 'source');
});

test('runs dist/ when its stamp is newer than every source file', () => {
  writeFileSync(stamp, 'built\n');
  utimesSync(source, at(0), at(0));
  utimesSync(stamp, at(10), at(10));
  assert.equal(ranFrom(), 'dist');
});

test('runs the sources when one was changed after the build', () => {
  utimesSync(stamp, at(10), at(10));
  utimesSync(source, at(20), at(20));
  assert.equal(ranFrom(), 'source');
});

test('TICKLER_FROM_SOURCE=1 runs the sources even with a fresh build', () => {
  utimesSync(source, at(0), at(0));
  utimesSync(stamp, at(10), at(10));
  assert.equal(ranFrom({ TICKLER_FROM_SOURCE: '1' }), 'source');
  assert.equal(ranFrom(), 'dist');
});
