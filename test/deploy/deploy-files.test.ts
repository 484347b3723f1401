// The deployment examples beside the Dockerfile: the systemd units pass `systemd-analyze
// verify` (no unknown keys, ExecStart's program exists), and every TICKLER_* setting that
// they, docker-compose.yml and the env examples use is one tickler reads, resolved into the
// options a server would start with.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { connectionOf } from '../../src/cli/api-commands.js';
import { resolveServeOptions } from '../../src/cli/serve-options.js';

const repoRoot = resolve(import.meta.dirname, '..', '..');
const deploy = join(repoRoot, 'deploy');
const read = (path: string): string => readFileSync(join(repoRoot, path), 'utf8');
const hasVerify = spawnSync('systemd-analyze', ['--version']).status === 0;

test('the systemd units verify cleanly', { skip: hasVerify ? false : 'systemd-analyze is not installed' }, () => {
  const directory = mkdtempSync(join(tmpdir(), 'tickler-units-'));
  after(() => rmSync(directory, { recursive: true, force: true }));
  const units = readdirSync(deploy).filter((file) => file.endsWith('.service'));
  assert.deepEqual(units.sort(), ['tickler-worker@.service', 'tickler.service']);
  for (const unit of units) copyFileSync(join(deploy, unit), join(directory, unit));
  for (const unit of ['tickler.service', 'tickler-worker@demo.service']) {
    const result = spawnSync('systemd-analyze', ['verify', join(directory, unit)], { encoding: 'utf8' });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stderr.trim(), '', `${unit}: ${result.stderr}`);
  }
  // `tickler serve` exits within 10 s of SIGTERM (src/cli/serve-command.ts): the unit waits longer.
  assert.match(read('deploy/tickler.service'), /^TimeoutStopSec=(1[1-9]|[2-9]\d)$/m);
  assert.match(read('deploy/tickler.service'), /^User=(?!root$)\S+$/m);
});

/** NAME=value lines, comments and blank lines skipped. */
function envFile(text: string): Record<string, string> {
  return Object.fromEntries(text.split('\n').filter((line) => /^[A-Z_]+=/.test(line)).map((line) => {
    const equals = line.indexOf('=');
    return [line.slice(0, equals), line.slice(equals + 1)];
  }));
}

/** `KEY: value` lines under a compose service's `environment:`, ${VAR:?...} replaced by `values`. */
function composeEnvironment(service: string, values: Record<string, string>): Record<string, string> {
  const block = new RegExp(`^  ${service}:\\n([\\s\\S]*?)(?=^  \\S|^\\S)`, 'm').exec(read('docker-compose.yml'))?.[1] ?? '';
  const environment = /^ {4}environment:\n((?: {6}.*\n)+)/m.exec(block)?.[1] ?? '';
  assert.notEqual(environment, '', `no environment for ${service}`);
  return Object.fromEntries(environment.split('\n').filter(Boolean).map((line) => {
    const [, name = '', value = ''] = /^\s+([A-Z_]+): (.*)$/.exec(line) ?? [];
    return [name, value.replace(/\$\{([A-Z_]+)(?::[?-][^}]*)?\}/g, (_, variable: string) => values[variable] ?? '')];
  }));
}

const knownSettings = new Set(['NODE_ENV', 'TICKLER_API_KEYS', 'TICKLER_API_KEYS_FILE', 'TICKLER_URL', 'TICKLER_API_KEY']);
const readKeys = (): string => 'demo=deploy-key';

test('the env example and the compose nodes resolve into the servers they describe', () => {
  const example = envFile(read('deploy/tickler.env.example'));
  const options = resolveServeOptions({}, example, readKeys);
  assert.deepEqual([options.host, options.port, options.logLevel, options.apiKeys?.get('deploy-key')], ['0.0.0.0', 7070, 'info', 'demo']);
  const values = { TICKLER_API_KEYS: 'demo=deploy-key', TICKLER_API_KEY: 'deploy-key' };
  const nodes = ['tickler-1', 'tickler-2'].map((service) => resolveServeOptions({}, {
    TICKLER_HOST: '0.0.0.0', ...composeEnvironment(service, values),
  }, readKeys));
  for (const node of nodes) assert.match(node.storeUrl ?? '', /^postgres:\/\/tickler:tickler@postgres:5432\/tickler$/);
  assert.deepEqual(nodes.map((node) => node.nodeId), ['tickler-1', 'tickler-2']);
  const worker = composeEnvironment('worker', values);
  assert.deepEqual(connectionOf({}, worker), { baseUrl: 'http://tickler-1:7070', apiKey: 'deploy-key' });
});

test('every TICKLER_* setting the deployment files name is one tickler reads', () => {
  // The settings `tickler serve --help` lists; a misspelt one would be ignored without a word.
  const serveSettings = ['HOST', 'PORT', 'DATA_DIR', 'STORE', 'ROLES', 'NODE_ID', 'LOG_LEVEL'];
  const known = new Set([...knownSettings, ...serveSettings.map((name) => `TICKLER_${name}`)]);
  const files = ['Dockerfile', 'docker-compose.yml', ...readdirSync(deploy).map((file) => `deploy/${file}`)];
  for (const file of files) {
    for (const [name] of read(file).matchAll(/TICKLER_[A-Z0-9_]+/g)) assert.ok(known.has(name), `${file}: ${name} is not a setting tickler reads`);
  }
});
