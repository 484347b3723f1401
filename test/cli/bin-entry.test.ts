// bin/tickler.js picks what it runs: in a checkout, the build in dist/ when its stamp is newer
// than every file under src/, the TypeScript sources through tsx otherwise (or when
// TICKLER_FROM_SOURCE=1), and dist/ where tsx is not installed; in an installed package (no
// src/), dist/. Checked with a real process on copies of the bin beside stand-in entry points
// that say which one ran.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';

const repoRoot = resolve(import.meta.dirname, '..', '..');
const roots: string[] = [];
after(() => {
  for (const root of roots) rmSync(root, { recursive: true, force: true });
});

/** A package root with the real bin, a stand-in dist/ and src/, and tsx only when `withTsx`. */
function packageRoot(options: { withTsx: boolean; withSources: boolean; withBuild: boolean }): string {
  const root = mkdtempSync(join(tmpdir(), 'tickler-bin-'));
  roots.push(root);
  mkdirSync(join(root, 'bin'));
  for (const file of ['tickler.js', 'build-fresh.js']) copyFileSync(join(repoRoot, 'bin', file), join(root, 'bin', file));
  if (options.withTsx) symlinkSync(join(repoRoot, 'node_modules'), join(root, 'node_modules'));
  writeFileSync(join(root, 'package.json'), '{"type": "module"}\n');
  if (options.withBuild) {
    mkdirSync(join(root, 'dist', 'cli'), { recursive: true });
    writeFileSync(join(root, 'dist', 'cli', 'main.js'), "console.log('dist');\n");
    writeFileSync(join(root, 'dist', '.built'), 'built\n');
  }
  if (options.withSources) {
    mkdirSync(join(root, 'src', 'cli'), { recursive: true });
    writeFileSync(join(root, 'src', 'cli', 'main.ts'), "const from: string = 'source';\nconsole.log(from);\n");
  }
  return root;
}

function ranFrom(root: string, env: Record<string, string> = {}): { code: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [join(root, 'bin', 'tickler.js')], {
    env: { PATH: process.env['PATH'] ?? '', ...env }, encoding: 'utf8', timeout: 30_000,
  });
  return { code: result.status, stdout: result.stdout.trim(), stderr: result.stderr };
}

const at = (seconds: number): Date => new Date(Date.UTC(2026, 10, 30, 12, 0, seconds));
const checkout = packageRoot({ withTsx: true, withSources: true, withBuild: true });
const source = join(checkout, 'src', 'cli', 'main.ts');
const stamp = join(checkout, 'dist', '.built');

test('a checkout runs the sources through tsx when there is no build stamp', () => {
  rmSync(stamp, { force: true });
  assert.equal(ranFrom(checkout).stdout, 'source');
});

test('a checkout runs dist/ when its stamp is newer than every source file', () => {
  writeFileSync(stamp, 'built\n');
  utimesSync(source, at(0), at(0));
  utimesSync(stamp, at(10), at(10));
  assert.equal(ranFrom(checkout).stdout, 'dist');
});

test('a checkout runs the sources when one was changed after the build', () => {
  utimesSync(stamp, at(10), at(10));
  utimesSync(source, at(20), at(20));
  assert.equal(ranFrom(checkout).stdout, 'source');
});

test('TICKLER_FROM_SOURCE=1 runs the sources even with a fresh build', () => {
  utimesSync(source, at(0), at(0));
  utimesSync(stamp, at(10), at(10));
  assert.equal(ranFrom(checkout, { TICKLER_FROM_SOURCE: '1' }).stdout, 'source');
  assert.equal(ranFrom(checkout).stdout, 'dist');
});

test('an installed package (dist/, no src/, no tsx) runs dist/ with plain node', () => {
  const installed = packageRoot({ withTsx: false, withSources: false, withBuild: true });
  assert.deepEqual(ranFrom(installed), { code: 0, stdout: 'dist', stderr: '' });
});

test('without tsx a checkout runs even a stale dist/, and says so', () => {
  const noTsx = packageRoot({ withTsx: false, withSources: true, withBuild: true });
  utimesSync(join(noTsx, 'dist', '.built'), at(0), at(0));
  const outcome = ranFrom(noTsx);
  assert.equal(outcome.stdout, 'dist');
  assert.match(outcome.stderr, /dist\/ is older than src\/ and tsx is not installed/);
});

test('without tsx and without a build it exits 1 and says what to run', () => {
  const neither = packageRoot({ withTsx: false, withSources: true, withBuild: false });
  const outcome = ranFrom(neither);
  assert.equal(outcome.code, 1);
  assert.match(outcome.stderr, /run `npm run build`/);
});
