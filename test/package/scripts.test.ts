// Every script in package.json starts: each is run through npm, as the README tells people to,
// in a copy of the checkout (bench and bench:peers rebuild dist/ first, which must not disturb
// the repository's build while other test files run it). Long-running ones are asked for
// --help, --list or --version, or started and stopped. typecheck, lint, test and build are
// what CI runs (`npm test`; test/package/pack.test.ts and test/deploy run the build), so they
// are only named here: a new script fails this test until it says how it is checked.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { cleanEnvironment, run, whenListening } from './npm.js';

const repoRoot = resolve(import.meta.dirname, '..', '..');
const { scripts } = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
const checkout = mkdtempSync(join(tmpdir(), 'tickler-scripts-'));
after(() => rmSync(checkout, { recursive: true, force: true }));

before(() => {
  for (const entry of ['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json', 'bin', 'src', 'scripts', 'bench',
    'chaos', 'sim', 'test']) {
    cpSync(join(repoRoot, entry), join(checkout, entry), { recursive: true });
  }
  symlinkSync(join(repoRoot, 'node_modules'), join(checkout, 'node_modules'));
});

const npm = (args: string[]): string => run('npm', ['run', '--silent', ...args], checkout).stdout;

const checks: Record<string, (() => void | Promise<void>) | string> = {
  typecheck: 'run by npm test', lint: 'run by npm test', test: 'what CI runs', build: 'run by test/deploy/dockerfile.test.ts',
  prepare: 'run by npm pack in test/package/pack.test.ts',
  'build:web': 'run by test/ui/web-build.test.ts, which checks web/dist is its output',
  sim: () => assert.match(npm(['sim', '--', '--seeds', '1', '--steps', '5']), /no violation/),
  'test:unit': () => {
    const files = npm(['test:unit', '--', '--list']).trim().split('\n');
    assert.ok(files.length >= 5, files.join(', '));
    for (const file of files) assert.match(file, /^test\/(domain|worker)\/.*\.test\.ts$/);
  },
  tickler: () => assert.match(npm(['tickler', '--', '--version']), /^\d+\.\d+\.\d+\n$/),
  chaos: () => assert.match(npm(['chaos', '--', '--help']), /^Usage: npm run chaos/),
  bench: () => assert.match(npm(['bench', '--', '--list']), /\t/),
  'bench:peers': () => assert.match(npm(['bench:peers', '--', '--help']), /Usage: bench:peers/),
  start: async () => {
    const data = join(checkout, 'data');
    mkdirSync(data);
    // A process group of its own, signalled as a whole, as a terminal's Ctrl-C signals npm, its
    // shell and the server alike (npm does not pass a SIGTERM of its own on to the server).
    const child = spawn('npm', ['start', '--silent', '--', '--port', '0', '--data-dir', data], {
      cwd: checkout, env: cleanEnvironment({ TICKLER_LOG_LEVEL: 'warn' }), stdio: ['ignore', 'pipe', 'pipe'], detached: true,
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    // 'close': every process holding the pipes (the server included) has ended.
    const exited = new Promise<string>((resolveExit) => child.on('close', (code, signal) => resolveExit(signal ?? `exit ${code}`)));
    await whenListening(child, exited, () => stderr);
    process.kill(-child.pid!, 'SIGINT');
    assert.match(await exited, /^(exit 0|SIGINT)$/, stderr);
    assert.doesNotMatch(stderr, /shutdown (failed|took longer)/);
  },
};

test('every script is checked here', () => {
  assert.deepEqual(Object.keys(scripts).sort(), Object.keys(checks).sort());
});

for (const [name, check] of Object.entries(checks)) {
  if (typeof check === 'string') continue;
  test(`npm run ${name} starts`, check);
}
