// The package a stranger installs: `npm pack` (which builds dist/ through `prepare`) makes a
// tarball of bin/ and dist/; installed into a fresh project it imports from plain `node` (no
// tsx: `exports` points at the compiled JavaScript), its declarations type-check a consumer,
// and its bin answers `--version` and works offline. Dependencies come from the npm cache
// (--prefer-offline). Install scripts are skipped: better-sqlite3's compile takes over a
// minute, and the SDK and the bin's offline commands never load it (test/deploy runs a
// server from a production install).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { run } from './npm.js';

const repoRoot = resolve(import.meta.dirname, '..', '..');
const work = mkdtempSync(join(tmpdir(), 'tickler-pack-'));
after(() => rmSync(work, { recursive: true, force: true }));
const { version } = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string };

const source = join(work, 'source');
const app = join(work, 'app');
let tarball = '';
let tarballFiles: string[] = [];
let installLog = '';

before(() => {
  // A copy of what a checkout has, so that the build `npm pack` runs cannot disturb the
  // repository's own dist/ while other test files run the bin from it.
  mkdirSync(source);
  for (const entry of ['package.json', 'package-lock.json', 'README.md', 'tsconfig.json', 'tsconfig.build.json', 'bin', 'src', 'scripts']) {
    cpSync(join(repoRoot, entry), join(source, entry), { recursive: true });
  }
  symlinkSync(join(repoRoot, 'node_modules'), join(source, 'node_modules'));
  run('npm', ['pack', '--pack-destination', work, '--silent'], source);
  const name = readdirSync(work).find((file) => file.endsWith('.tgz'));
  assert.ok(name !== undefined, 'npm pack made no tarball');
  tarball = join(work, name);
  tarballFiles = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).split('\n').filter(Boolean);

  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'stranger', private: true, type: 'module' }));
  const install = run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--no-package-lock', '--ignore-scripts', tarball], app);
  installLog = install.stdout + install.stderr;
});

test('the tarball holds the bin and the build, declarations included, and no sources or tests', () => {
  for (const file of ['package/package.json', 'package/bin/tickler.js', 'package/bin/build-fresh.js', 'package/dist/index.js',
    'package/dist/index.d.ts', 'package/dist/cli/main.js', 'package/dist/worker/client.d.ts', 'package/README.md']) {
    assert.ok(tarballFiles.includes(file), `${file} missing from ${tarballFiles.length} files`);
  }
  assert.deepEqual(tarballFiles.filter((file) => /^package\/(src|test|bench|chaos|scripts)\//.test(file)), []);
});

test('it installs with no engine warning (cookie@2 wanted Node 22) and without tsx', () => {
  assert.doesNotMatch(installLog, /EBADENGINE/);
  const cookie = JSON.parse(readFileSync(join(app, 'node_modules', 'cookie', 'package.json'), 'utf8')) as { version: string };
  assert.match(cookie.version, /^1\./);
  assert.equal(existsSync(join(app, 'node_modules', 'tsx')), false, 'tsx is a development dependency');
  assert.equal(existsSync(join(app, 'node_modules', 'typescript')), false);
});

test('plain node imports the SDK from dist/ and creates a client', () => {
  writeFileSync(join(app, 'app.mjs'), `
import { TicklerClient, createWorker, PermanentError } from 'tickler';
const client = new TicklerClient({ baseUrl: 'http://127.0.0.1:7070', apiKey: 'k' });
console.log(JSON.stringify({
  resolved: import.meta.resolve('tickler'),
  createJob: typeof client.createJob,
  createWorker: typeof createWorker,
  permanent: new PermanentError('x') instanceof Error,
}));
`);
  const answer = JSON.parse(run(process.execPath, ['app.mjs'], app).stdout) as Record<string, unknown>;
  assert.match(String(answer['resolved']), /node_modules\/tickler\/dist\/index\.js$/);
  assert.deepEqual({ ...answer, resolved: undefined }, { resolved: undefined, createJob: 'function', createWorker: 'function', permanent: true });
});

test('its declarations type-check a consumer, and reject a wrong call', () => {
  writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      module: 'nodenext', moduleResolution: 'nodenext', target: 'ES2022', strict: true, noEmit: true, skipLibCheck: true,
      types: ['node'], typeRoots: [join(repoRoot, 'node_modules', '@types')],
    },
    include: ['consumer.ts'],
  }));
  writeFileSync(join(app, 'consumer.ts'), `
import { TicklerClient, type Job, type JobCreateRequest } from 'tickler';
const client = new TicklerClient({ baseUrl: 'http://127.0.0.1:7070' });
const body: JobCreateRequest = { schedule: { cron: '30 2 * * *', tz: 'America/New_York' }, pool: 'reports' };
export const created: Promise<Job> = client.createJob(body);
// @ts-expect-error: pool is a string (were the types missing, this line would not be an error, and tsc would say so)
export const wrong = client.createJob({ schedule: { delay_s: 5 }, pool: 5 });
`);
  run(process.execPath, [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', app], app);
});

test('the installed bin answers --version and previews a schedule with plain node', () => {
  const bin = join(app, 'node_modules', '.bin', 'tickler');
  assert.equal(run(bin, ['--version'], app).stdout, `${version}\n`);
  const preview = run(bin, ['schedules', 'preview', '0 9 * * *', '--tz', 'Europe/Paris', '--from', '2027-01-01T00:00:00Z',
    '--count', '1', '--json'], app);
  assert.equal((JSON.parse(preview.stdout) as { items: { local: string }[] }).items[0]?.local, '2027-01-01T09:00:00.000+01:00');
});
